//! Small SVG charts rendered on the server: no chart framework, no client build step.

/// A sparkline of `values` (oldest first) as inline SVG with a text alternative.
pub fn sparkline(values: &[f64], label: &str) -> String {
    const W: f64 = 120.0;
    const H: f64 = 28.0;
    let title = askama_escape(label);
    if values.len() < 2 {
        return format!(
            r#"<svg class="spark" viewBox="0 0 {W} {H}" role="img" aria-label="{title}: not enough data yet"><title>{title}: not enough data yet</title></svg>"#
        );
    }
    let max = values.iter().cloned().fold(f64::MIN, f64::max);
    let min = values.iter().cloned().fold(f64::MAX, f64::min);
    let span = if (max - min).abs() < f64::EPSILON {
        1.0
    } else {
        max - min
    };
    let step = W / (values.len() - 1) as f64;
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "{:.1},{:.1}",
                i as f64 * step,
                H - 2.0 - (v - min) / span * (H - 4.0)
            )
        })
        .collect();
    let last = values.last().copied().unwrap_or(0.0);
    format!(
        r#"<svg class="spark" viewBox="0 0 {W} {H}" role="img" aria-label="{title}: last {last}, range {min} to {max}"><title>{title}: last {last}, range {min} to {max}</title><polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{}"/></svg>"#,
        points.join(" ")
    )
}

fn askama_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::sparkline;

    #[test]
    fn a_sparkline_spans_the_box_and_says_what_it_shows() {
        let svg = sparkline(&[0.0, 5.0, 10.0], "lag <records>");
        assert!(
            svg.contains(r#"points="0.0,26.0 60.0,14.0 120.0,2.0""#),
            "{svg}"
        );
        assert!(svg.contains("lag &lt;records&gt;: last 10, range 0 to 10"));
        assert!(sparkline(&[1.0], "x").contains("not enough data"));
        assert!(sparkline(&[3.0, 3.0], "flat").contains("points="));
    }
}
