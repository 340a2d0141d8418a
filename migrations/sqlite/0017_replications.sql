-- Replications: MirrorMaker 2 on Kafka Connect, from one Kafka cluster to another. Three
-- connectors each (source, checkpoint, heartbeat), owned like a pipeline's or a delivery's.
CREATE TABLE replications (
    id                      TEXT PRIMARY KEY NOT NULL,
    name                    TEXT NOT NULL UNIQUE,
    source_kafka_cluster_id TEXT NOT NULL REFERENCES kafka_clusters(id),
    target_kafka_cluster_id TEXT NOT NULL REFERENCES kafka_clusters(id),
    connect_cluster_id      TEXT NOT NULL REFERENCES connect_clusters(id),
    topics                  TEXT NOT NULL,             -- MirrorMaker's `topics`: regular expressions
    pipeline_ids            TEXT NOT NULL DEFAULT '[]', -- JSON: when chosen as pipelines' topics
    groups                  TEXT NOT NULL,
    replication_policy      TEXT NOT NULL CHECK (replication_policy IN ('default', 'identity')),
    separator               TEXT NOT NULL,
    offset_syncs_location   TEXT NOT NULL CHECK (offset_syncs_location IN ('target', 'source')),
    sync_group_offsets      INTEGER NOT NULL DEFAULT 0,
    source_alias            TEXT NOT NULL,
    target_alias            TEXT NOT NULL,
    connector_ids           TEXT NOT NULL,             -- JSON [source, checkpoint, heartbeat]
    created_at              TEXT NOT NULL,
    updated_at              TEXT NOT NULL,
    CHECK (source_kafka_cluster_id <> target_kafka_cluster_id)
);

-- What a replication is measured against: records and time not copied yet, and how long a
-- consumer group has committed past its newest checkpoint (a failover would resume it further
-- back). MirrorMaker checkpoints only changes, so an idle group's old checkpoint is current.
INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('replication_lag_records', 10000, 300, 'a replication''s target is more than N records behind its source'),
  ('replication_lag_seconds', 600, 300, 'the oldest record a replication has not copied yet is older than N seconds'),
  ('replication_checkpoint_age_seconds', 600, 300, 'a consumer group has committed on the source past its newest checkpoint, and that checkpoint is older than N seconds');
-- Off by default: MirrorMaker writes a checkpoint only when the translated offset changes, and
-- with sparse offset syncs a moving group can keep the same translation (and checkpoint) for long.
UPDATE alert_rules SET enabled = 0 WHERE kind = 'replication_checkpoint_age_seconds';
