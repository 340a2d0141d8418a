//! The "last used" mark of an API token and the "last seen" mark of a session, written beside
//! the request that earned them, not in its way.
//!
//! Invariants:
//! - A request never waits for its mark. SQLite has one writer, and a mark awaited in the
//!   request waited behind whatever write transaction was open (the monitor's upkeep, a pass's
//!   records), and held the request, and every request of that credential that waited for the
//!   same resolution, with it; on PostgreSQL, behind a lock on the row.
//! - At most one write per row is in flight in this process: the requests that all read the
//!   old mark meanwhile start one write, not one each.
//! - A write that fails is logged and dropped. The marks are kept to the minute and a later
//!   request past the interval writes again; a session's idle limit is exact to that margin.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use crate::db::{self, Pool};

/// `UPDATE … SET <mark> = $1 WHERE <key> = $2`, with $1 now and $2 `key`.
pub type Mark = &'static str;

pub const TOKEN_USED: Mark = "UPDATE api_tokens SET last_used_at = $1 WHERE id = $2";
pub const SESSION_SEEN: Mark = "UPDATE sessions SET last_seen_at = $1 WHERE id_hash = $2";

/// Writes `mark` for the row `key` in a task of its own; nothing when a write of it is in
/// flight already.
pub fn later(pool: &Pool, mark: Mark, key: &str) {
    static IN_FLIGHT: OnceLock<Mutex<HashSet<(Mark, String)>>> = OnceLock::new();
    let in_flight = IN_FLIGHT.get_or_init(Default::default);
    let entry = (mark, key.to_string());
    if !in_flight
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(entry.clone())
    {
        return;
    }
    let pool = pool.clone();
    tokio::spawn(async move {
        let written = db::query(mark)
            .bind(crate::time::now())
            .bind(&entry.1)
            .execute(&pool)
            .await;
        in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&entry);
        if let Err(e) = written {
            tracing::warn!(error = %e, "a last-used mark was not written; the next request tries again");
        }
    });
}
