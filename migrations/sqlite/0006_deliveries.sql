-- Deliveries: a pipeline's topics into a destination through one sink connector.
CREATE TABLE deliveries (
    id                        TEXT PRIMARY KEY NOT NULL,
    name                      TEXT NOT NULL UNIQUE,
    pipeline_id               TEXT NOT NULL REFERENCES pipelines(id),
    destination_connection_id TEXT NOT NULL REFERENCES connections(id),
    connect_cluster_id        TEXT NOT NULL REFERENCES connect_clusters(id),
    kind                      TEXT NOT NULL CHECK (kind IN ('jdbc', 'object_storage')),
    topics                    TEXT NOT NULL,     -- JSON array
    options                   TEXT NOT NULL,     -- JSON: the kind's settings as given
    connector_id              TEXT NOT NULL,
    created_at                TEXT NOT NULL,
    updated_at                TEXT NOT NULL
);
