//! A stored JSON text compared with a value as the value serializes, without building the text:
//! an unchanged pass compares every connector's live config and tasks with what it stored.

use serde::Serialize;
use std::io::{self, Write};

/// Whether `value` serializes to exactly `stored` (`None` matches only `None`).
///
/// Invariant: the stored text was written as `json!(value).to_string()` of the same type. That
/// is the same bytes as serializing the value directly for maps with sorted keys (`Config`) and
/// for structs whose fields are declared in alphabetical order (`json!` sorts an object's keys,
/// a struct serializes in declaration order), which is why `LiveTask` declares them so. A type
/// that broke this would only be written again each pass, never read wrong.
pub fn same<T: Serialize + ?Sized>(stored: Option<&str>, value: Option<&T>) -> bool {
    match (stored, value) {
        (None, None) => true,
        (Some(stored), Some(value)) => {
            let mut rest = Rest(stored.as_bytes());
            serde_json::to_writer(&mut rest, value).is_ok() && rest.0.is_empty()
        }
        _ => false,
    }
}

/// What is left of the stored text; a write that does not continue it fails, which ends the
/// serialization at the first difference.
struct Rest<'a>(&'a [u8]);

impl Write for Rest<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0.strip_prefix(buf) {
            Some(rest) => {
                self.0 = rest;
                Ok(buf.len())
            }
            None => Err(io::Error::other("differs from the stored text")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::same;
    use crate::reconcile::plan::{Config, LiveTask};
    use serde_json::json;

    fn task(trace: Option<&str>) -> LiveTask {
        LiveTask {
            id: 0,
            state: "RUNNING".into(),
            trace: trace.map(String::from),
            worker_id: "10.0.0.1:8083".into(),
        }
    }

    #[test]
    fn what_the_pass_stored_is_the_same_and_any_change_is_not() {
        let config: Config = [("b", "2"), ("a", "1 \"quoted\" é")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let tasks = vec![task(None), task(Some("boom\nat line 2"))];
        // The stored text as the pass writes it.
        let stored_config = json!(config).to_string();
        let stored_tasks = json!(tasks).to_string();
        assert!(same(Some(&stored_config), Some(&config)));
        assert!(same(Some(&stored_tasks), Some(&tasks)));
        assert!(same::<Config>(None, None));

        let mut changed = config.clone();
        changed.insert("a".into(), "1".into());
        assert!(!same(Some(&stored_config), Some(&changed)));
        let mut more = config.clone();
        more.insert("c".into(), "3".into());
        assert!(!same(Some(&stored_config), Some(&more)), "a longer value");
        assert!(
            !same(Some(&stored_tasks), Some(&tasks[..1])),
            "a shorter value"
        );
        assert!(!same(
            Some(&stored_tasks),
            Some(&vec![task(None), task(None)])
        ));
        assert!(!same(None, Some(&config)));
        assert!(!same::<Config>(Some(&stored_config), None));
    }
}
