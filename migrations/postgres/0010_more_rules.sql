-- PostgreSQL dialect of migrations/sqlite/0010_more_rules.sql (same version, same schema).
INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('kafka_unreachable', 0, 60, 'a Kafka cluster does not answer metadata requests'),
  ('orphan_slot', 0, 300, 'a logical replication slot on a source that no pipeline owns');
