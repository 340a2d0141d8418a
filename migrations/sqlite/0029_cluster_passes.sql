-- Per Connect cluster, its last completed reconcile pass (issue 34, isolation): when it ended and
-- how long it took, so a slow cluster shows as slow with the age of its last pass. Written with
-- observed_at (at least every 10 s) and after every slow pass.
ALTER TABLE connect_clusters ADD COLUMN last_pass_at TEXT;
ALTER TABLE connect_clusters ADD COLUMN last_pass_ms INTEGER;
