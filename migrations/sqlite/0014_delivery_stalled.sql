-- A sink whose task reports RUNNING while it commits nothing: the Aiven S3 sink keeps its task
-- RUNNING when the object store refuses writes (Connect rewinds and retries at each offset
-- commit), so Connect's state alone never shows it.
INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('delivery_stalled_seconds', 300, 0, 'a running delivery with records waiting has committed nothing for more than N seconds (its connector may still report RUNNING)');
