-- PostgreSQL dialect of migrations/sqlite/0021_table_freshness.sql (same version, same schema).
-- Per captured table, what the monitor saw of its topic and of its source's change counter:
-- broker watermarks and the source's statistics views only, never a record. Times are unix ms
-- of the monitor cycle that saw them (the precision of "last change" is one monitor interval).
CREATE TABLE table_freshness (
    pipeline_id       TEXT NOT NULL REFERENCES pipelines(id) ON DELETE CASCADE,
    table_name        TEXT NOT NULL,
    end_offset        BIGINT NOT NULL,  -- sum of the table topic's high watermarks
    changed_at        BIGINT,           -- end offset first seen larger than before (NULL: not since first seen)
    first_seen_at     BIGINT NOT NULL,
    source_changes    BIGINT,           -- inserts + updates + deletes as the source counts them (NULL: no counter)
    source_checked_at BIGINT,           -- when that counter was sampled
    source_changed_at BIGINT,           -- counter last seen increasing
    pending_since     BIGINT,           -- first source change after the topic last moved (NULL: followed)
    confirmed_at      BIGINT,           -- a later change proved it beyond trailing statistics (NULL: a candidate)
    no_counter        TEXT,              -- why the source keeps no per-table counter
    cause             TEXT,              -- a stalled table's likely causes, as last looked up
    cause_at          BIGINT,
    PRIMARY KEY (pipeline_id, table_name)
);
-- The end offset each time it grew, thinned to about a hundred marks per table: when the end
-- first passed a delivery's committed offset is its lag in time, without reading records.
CREATE TABLE table_end_marks (
    pipeline_id TEXT NOT NULL REFERENCES pipelines(id) ON DELETE CASCADE,
    table_name  TEXT NOT NULL,
    end_offset  BIGINT NOT NULL,
    seen_at     BIGINT NOT NULL,
    PRIMARY KEY (pipeline_id, table_name, seen_at)
);
INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('table_stalled', 300, 0, 'a captured table changed on the source (its change counter rose) and its topic has not moved for more than N seconds since; tables quiet on the source, and sources without per-table counters, never raise it');
