//! Timestamps: RFC 3339 UTC strings with second precision everywhere (SQLite compares them
//! as text, which orders correctly for this fixed format).

use chrono::{DateTime, SecondsFormat, Utc};

pub fn now() -> String {
    format(Utc::now())
}

pub fn format(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub fn parse(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

pub fn in_secs(secs: i64) -> String {
    format(Utc::now() + chrono::Duration::seconds(secs))
}

/// Durations as people type them: `90s`, `15m`, `12h`, `30d`, `8w`.
pub fn parse_duration_secs(s: &str) -> Option<i64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: i64 = num.parse().ok()?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return None,
    };
    (n > 0).then(|| n.checked_mul(mult)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_a_unit_and_refuse_the_rest() {
        assert_eq!(parse_duration_secs("90s"), Some(90));
        assert_eq!(parse_duration_secs("30d"), Some(2_592_000));
        assert_eq!(parse_duration_secs("12"), None);
        assert_eq!(parse_duration_secs("0h"), None);
        assert_eq!(parse_duration_secs("5y"), None);
    }
}
