//! What an object-storage delivery wrote: the newest objects under its topics' key scopes
//! (metadata only) and the newest heartbeat inside them. Reads through the connection's own
//! credentials; never writes or deletes (deleting a delivery never deletes objects).

use std::collections::BTreeMap;
use std::io::Read;

use serde::Serialize;

use crate::connections::s3::{client, describe};
use crate::connections::Connection;
use crate::error::{Error, Result};
use crate::secrets::store::SecretStore;
use crate::secrets::Secret;

#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct StoredObject {
    pub key: String,
    pub size: i64,
    /// RFC 3339 UTC with milliseconds.
    #[schemars(extend("format" = "date-time"))]
    pub last_modified: String,
    #[serde(skip)]
    modified_ms: i64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ObjectList {
    /// Newest first.
    pub items: Vec<StoredObject>,
    /// The key prefixes that were listed (one per topic).
    pub prefixes: Vec<String>,
    /// More objects exist than one listing reads (`MAX_LISTED` per prefix): the newest are
    /// chosen from those read.
    pub truncated: bool,
}

/// Keys read per prefix at most (ten pages of a thousand): the listing stays bounded however
/// long a delivery has run. S3 lists in key order, so with the default template (dated
/// folders) the newest objects are among the last keys anyway.
pub const MAX_LISTED: usize = 10_000;

async fn secrets(
    store: &SecretStore,
    dest: &Connection,
) -> Result<BTreeMap<String, Secret<String>>> {
    Ok(store.get_all(&dest.secret_ref).await?)
}

/// The newest `limit` objects under the given prefixes. Connection-test probes are not shown.
pub async fn newest(
    store: &SecretStore,
    dest: &Connection,
    prefixes: &[String],
    limit: usize,
) -> Result<ObjectList> {
    let Some(s) = dest.object_storage() else {
        return Err(Error::Conflict(format!(
            "{} is not object storage",
            dest.name
        )));
    };
    let secrets = secrets(store, dest).await?;
    let s3 = client(s, &secrets).map_err(Error::Unavailable)?;
    let mut items = Vec::new();
    let mut truncated = false;
    for prefix in prefixes {
        let mut token: Option<String> = None;
        let mut read = 0usize;
        loop {
            let page = s3
                .list_objects_v2()
                .bucket(&s.bucket)
                .prefix(prefix)
                .set_continuation_token(token.clone())
                .send()
                .await
                .map_err(|e| {
                    let (_, msg) = describe(&e, &secrets);
                    Error::Unavailable(format!("listing s3://{}/{prefix}: {msg}", s.bucket))
                })?;
            for o in page.contents() {
                let key = o.key().unwrap_or_default();
                if key.contains(crate::connections::s3::PROBE_DIR) {
                    continue;
                }
                let modified_ms = o
                    .last_modified()
                    .and_then(|t| t.to_millis().ok())
                    .unwrap_or(0);
                items.push(StoredObject {
                    key: key.to_string(),
                    size: o.size().unwrap_or(0),
                    last_modified: chrono::DateTime::from_timestamp_millis(modified_ms)
                        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                        .unwrap_or_default(),
                    modified_ms,
                });
            }
            read += page.contents().len();
            token = page.next_continuation_token().map(String::from);
            if token.is_none() {
                break;
            }
            if read >= MAX_LISTED {
                truncated = true;
                break;
            }
        }
    }
    // The key breaks ties (a later start offset sorts later).
    items.sort_by(|a, b| (b.modified_ms, &b.key).cmp(&(a.modified_ms, &a.key)));
    items.truncate(limit);
    Ok(ObjectList {
        items,
        prefixes: prefixes.to_vec(),
        truncated,
    })
}

/// Objects read when looking for the newest heartbeat: a heartbeat topic gets one record per
/// heartbeat interval, so its newest few objects hold the newest heartbeat.
const HEARTBEAT_OBJECTS: usize = 3;
/// An object larger than this is not downloaded for a heartbeat (heartbeat files are tiny).
const HEARTBEAT_OBJECT_MAX_BYTES: i64 = 8 * 1024 * 1024;

/// The source time (ms) of the newest heartbeat row in the newest objects under `prefix`:
/// the largest `value.after.ts_ms` of their lines. None when nothing was written yet.
pub async fn newest_heartbeat(
    store: &SecretStore,
    dest: &Connection,
    prefix: &str,
) -> Result<Option<i64>> {
    let Some(s) = dest.object_storage() else {
        return Ok(None);
    };
    let list = newest(store, dest, &[prefix.to_string()], HEARTBEAT_OBJECTS).await?;
    let secrets = secrets(store, dest).await?;
    let s3 = client(s, &secrets).map_err(Error::Unavailable)?;
    let mut newest_ms: Option<i64> = None;
    for o in list
        .items
        .iter()
        .filter(|o| o.size <= HEARTBEAT_OBJECT_MAX_BYTES)
    {
        let out = s3
            .get_object()
            .bucket(&s.bucket)
            .key(&o.key)
            .send()
            .await
            .map_err(|e| {
                let (_, msg) = describe(&e, &secrets);
                Error::Unavailable(format!("reading s3://{}/{}: {msg}", s.bucket, o.key))
            })?;
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| Error::Unavailable(format!("reading {}: {e}", o.key)))?
            .into_bytes();
        if let Some(ms) = heartbeat_in(&o.key, &bytes) {
            newest_ms = Some(newest_ms.map_or(ms, |n| n.max(ms)));
        }
    }
    Ok(newest_ms)
}

/// The largest `value.after.ts_ms` among an object's JSON lines (gunzipped when the key says
/// gzip). Lines that are not heartbeat rows are passed over.
pub fn heartbeat_in(key: &str, bytes: &[u8]) -> Option<i64> {
    let mut text = String::new();
    if key.ends_with(".gz") {
        flate2::read::MultiGzDecoder::new(bytes)
            .take(64 * 1024 * 1024)
            .read_to_string(&mut text)
            .ok()?;
    } else {
        text = String::from_utf8_lossy(bytes).into_owned();
    }
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["value"]["after"]["ts_ms"].as_i64())
        .max()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_newest_heartbeat_is_read_from_gzip_and_plain_json_lines() {
        // The sink separates records with \n and ends without one; a tombstone has value null.
        let lines = [
            r#"{"key":{"id":1},"value":{"op":"u","after":{"id":1,"ts_ms":1700000000000}},"offset":4,"timestamp":"2026-12-01T00:00:00Z"}"#,
            r#"{"key":{"id":1},"value":{"op":"u","after":{"id":1,"ts_ms":1700000010000}},"offset":5,"timestamp":"2026-12-01T00:00:10Z"}"#,
            r#"{"key":{"id":1},"value":null,"offset":6,"timestamp":"2026-12-01T00:00:11Z"}"#,
        ]
        .join("\n");
        assert_eq!(
            heartbeat_in("a/b.jsonl", lines.as_bytes()),
            Some(1_700_000_010_000)
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(lines.as_bytes()).unwrap();
        let bytes = gz.finish().unwrap();
        assert_eq!(
            heartbeat_in("a/b.jsonl.gz", &bytes),
            Some(1_700_000_010_000)
        );
        assert_eq!(heartbeat_in("a/b.jsonl.gz", b"not gzip"), None);
        assert_eq!(heartbeat_in("a/b.jsonl", br#"{"value":null}"#), None);
    }
}
