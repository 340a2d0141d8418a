-- Monitoring: alert rules with thresholds and durations, samples (bounded history),
-- conditions waiting out their duration, acknowledgement, and webhooks.

CREATE TABLE alert_rules (
    kind        TEXT PRIMARY KEY NOT NULL,
    threshold   REAL NOT NULL,
    for_secs    INTEGER NOT NULL,
    enabled     INTEGER NOT NULL DEFAULT 1,
    description TEXT NOT NULL
);
INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('delivery_lag_records', 10000, 300, 'a delivery''s consumer group is more than N records behind'),
  ('slot_retained_wal_bytes', 1073741824, 300, 'a PostgreSQL replication slot retains more than N bytes of WAL'),
  ('slot_inactive', 0, 300, 'a pipeline''s replication slot has no connection reading it'),
  ('connector_failed', 0, 60, 'a connector or one of its tasks is FAILED'),
  ('connect_unreachable', 0, 60, 'a Kafka Connect cluster does not answer');

CREATE TABLE samples (
    kind    TEXT NOT NULL,      -- delivery_lag_records | slot_retained_wal_bytes
    subject TEXT NOT NULL,      -- delivery or pipeline name
    value   REAL NOT NULL,
    at      INTEGER NOT NULL    -- unix ms
);
CREATE INDEX samples_by ON samples(kind, subject, at);

CREATE TABLE alert_pending (
    kind    TEXT NOT NULL,
    subject TEXT NOT NULL,
    since   INTEGER NOT NULL,   -- unix ms the condition became true
    PRIMARY KEY (kind, subject)
);

ALTER TABLE alerts ADD COLUMN acknowledged_by TEXT;
ALTER TABLE alerts ADD COLUMN acknowledged_at TEXT;

CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY NOT NULL,
    url        TEXT NOT NULL,
    secret_ref TEXT NOT NULL,   -- signing_secret
    created_at TEXT NOT NULL
);
