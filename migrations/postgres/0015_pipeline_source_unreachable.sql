-- PostgreSQL dialect of migrations/sqlite/0015_pipeline_source_unreachable.sql (same version, same schema).
-- A pipeline whose source ClueCDC cannot reach: Debezium retries a failing source connection
-- forever with its task RUNNING (a wrong CA, a revoked grant, a dead host look alike in
-- Connect), so ClueCDC's own read of the source is what shows it, with the cause classified.
INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('pipeline_source_unreachable', 0, 60, 'ClueCDC cannot reach a running pipeline''s source, so its connector most likely cannot either (it may still report RUNNING)');
