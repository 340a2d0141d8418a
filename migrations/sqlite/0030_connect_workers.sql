-- Lost Connect workers (issue 34): a worker Connect's statuses named that stopped answering,
-- written by the reconciler (reconcile::workers); the monitor raises one alert per row. `tasks`:
-- the most tasks Connect showed on it since it was lost; `moved_at`: when no status named it
-- any more (its tasks run elsewhere). A row goes when the worker answers again, or an hour after
-- its tasks moved. Times in unix ms.
CREATE TABLE connect_workers (
    cluster_id  TEXT NOT NULL REFERENCES connect_clusters(id) ON DELETE CASCADE,
    worker_id   TEXT NOT NULL,
    tasks       INTEGER NOT NULL,
    lost_at     INTEGER NOT NULL,
    moved_at    INTEGER,
    PRIMARY KEY (cluster_id, worker_id)
);

INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('connect_worker_lost', 0, 0, 'a Kafka Connect worker that ran connectors or tasks stopped answering (one alert per worker, not per connector; Connect moves its tasks to the survivors)');
