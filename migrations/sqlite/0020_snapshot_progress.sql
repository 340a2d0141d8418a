-- Snapshot progress per table, from Debezium's notifications (its sink channel, into the
-- pipeline's __debezium-notification.<prefix> topic) and the source's row estimates. Written by
-- the monitor (src/tables/progress.rs); a re-snapshot request adds a waiting run.

-- One snapshot of a pipeline: the initial one (again after a reset) or an incremental one.
CREATE TABLE snapshot_runs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline_id    TEXT NOT NULL REFERENCES pipelines(id) ON DELETE CASCADE,
    kind           TEXT NOT NULL CHECK (kind IN ('initial', 'incremental')),
    state          TEXT NOT NULL CHECK (state IN ('waiting', 'running', 'paused', 'completed', 'aborted')),
    -- Incremental: the signal's id, which Debezium carries as every notification's id.
    correlation_id TEXT,
    started_at     TEXT,
    finished_at    TEXT,
    -- The source's row estimates were asked for (once, when the snapshot starts).
    estimated      INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT NOT NULL
);
CREATE INDEX snapshot_runs_pipeline ON snapshot_runs (pipeline_id, id);

CREATE TABLE snapshot_tables (
    run_id        INTEGER NOT NULL REFERENCES snapshot_runs(id) ON DELETE CASCADE,
    table_name    TEXT NOT NULL,
    position      INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('waiting', 'scanning', 'done', 'aborted')),
    started_at    TEXT,
    -- Debezium's time for the scan's start (unix ms), and the table topic's offsets then
    -- (summed over partitions): live rows scanned = the topic's end now minus this.
    started_ms    INTEGER,
    baseline      INTEGER,
    finished_at   TEXT,
    -- Final: Debezium's own count (TABLE_SCAN_COMPLETED's total_rows_scanned).
    rows_scanned  INTEGER,
    -- The source's estimate (pg_class.reltuples, information_schema.tables.table_rows); NULL unknown.
    rows_expected INTEGER,
    -- Debezium's completion status (SUCCEEDED, EMPTY, SQL_EXCEPTION, NO_PRIMARY_KEY...).
    status        TEXT,
    -- Two readings of the live count by the monitor (the rate's window), and when it last moved.
    sample_rows   INTEGER,
    sample_ms     INTEGER,
    prev_rows     INTEGER,
    prev_ms       INTEGER,
    moved_rows    INTEGER,
    moved_ms      INTEGER,
    PRIMARY KEY (run_id, table_name)
);

-- Where the monitor goes on reading each pipeline's notification topic (partition → offset).
CREATE TABLE snapshot_notification_offsets (
    pipeline_id TEXT PRIMARY KEY NOT NULL REFERENCES pipelines(id) ON DELETE CASCADE,
    offsets     TEXT NOT NULL,
    read_at     TEXT NOT NULL
);

INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('snapshot_stalled', 600, 0, 'a table of a running snapshot has scanned no new row for more than N seconds (its connector may still report RUNNING)');
