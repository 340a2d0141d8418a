-- More signals: lag in time, topic growth and the newest record, MySQL/MariaDB binlog distance,
-- connectors missing from Connect or drifted. And counters that only grow, so that the
-- Prometheus `_total` series stay monotonic after old pass records are trimmed.

INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('delivery_lag_seconds', 600, 300, 'the oldest record a delivery has not written yet is older than N seconds'),
  ('pipeline_no_new_data_seconds', 3600, 0, 'no new record reached a pipeline''s topics for N seconds (heartbeats count)'),
  ('binlog_behind_bytes', 1073741824, 300, 'a MySQL/MariaDB pipeline is more than N bytes of binlog behind the server'),
  ('binlog_position_lost', 0, 0, 'the binlog file a MySQL/MariaDB pipeline was reading has been purged from the server'),
  ('connector_missing_or_drifted', 0, 120, 'a connector ClueCDC wants is missing from Connect or differs from its desired config');

CREATE TABLE counters (
    name  TEXT PRIMARY KEY NOT NULL,
    value INTEGER NOT NULL
);
INSERT INTO counters (name, value) SELECT 'reconcile_passes', COUNT(*) FROM reconcile_passes;
INSERT INTO counters (name, value) SELECT 'reconcile_actions', COALESCE(SUM(actions), 0) FROM reconcile_passes;
INSERT INTO counters (name, value) SELECT 'reconcile_errors', COALESCE(SUM(errors), 0) FROM reconcile_passes;
