-- Short grants that let a Connect cluster resolve a secret reference while it validates a
-- config ClueCDC sent it (before any connector of ClueCDC's uses that reference).
CREATE TABLE provider_grants (
    connect_cluster_id TEXT NOT NULL,
    secret_ref         TEXT NOT NULL,
    expires_at         INTEGER NOT NULL,   -- unix ms
    PRIMARY KEY (connect_cluster_id, secret_ref)
);
