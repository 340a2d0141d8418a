-- PostgreSQL dialect of migrations/sqlite/0005_pipelines.sql (same version, same schema).
-- Pipelines: one Debezium source connector capturing selected tables into explicitly created topics.
CREATE TABLE pipelines (
    id                   TEXT PRIMARY KEY NOT NULL,
    name                 TEXT NOT NULL UNIQUE,
    source_connection_id TEXT NOT NULL REFERENCES connections(id),
    kafka_cluster_id     TEXT NOT NULL REFERENCES kafka_clusters(id),
    connect_cluster_id   TEXT NOT NULL REFERENCES connect_clusters(id),
    tables               TEXT NOT NULL,       -- JSON ["schema.table", ...]
    topic_prefix         TEXT NOT NULL UNIQUE,
    partitions           BIGINT NOT NULL,
    replication_factor   BIGINT NOT NULL,
    retention_ms         BIGINT,
    snapshot_mode        TEXT NOT NULL,
    publication_mode     TEXT NOT NULL,       -- PostgreSQL: filtered | disabled
    options              TEXT NOT NULL,       -- JSON: extra Debezium keys, validated by the plugin
    connector_id         TEXT NOT NULL,
    created_at           TEXT NOT NULL,
    updated_at           TEXT NOT NULL
);
