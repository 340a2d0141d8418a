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
