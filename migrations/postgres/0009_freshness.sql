-- PostgreSQL dialect of migrations/sqlite/0009_freshness.sql (same version, same schema).
-- Opt-in end-to-end freshness: Debezium's heartbeat action writes the time into a small table
-- in the source; deliveries carry it to the destination, where ClueCDC reads its age.
ALTER TABLE pipelines ADD COLUMN heartbeat BIGINT NOT NULL DEFAULT 0;
INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('delivery_freshness_seconds', 600, 60, 'the newest heartbeat a delivery wrote to its destination is older than N seconds');
