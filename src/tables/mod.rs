//! Per-table truth: how far each table's snapshot is (`progress`), whether each captured
//! table is current (`freshness`), and what a change of its columns does to each delivery
//! (`schema`). All from metadata: Debezium's operational notifications, broker watermarks, the
//! source's catalog and statistics views; never from change records.

pub mod freshness;
pub mod progress;
pub mod schema;
