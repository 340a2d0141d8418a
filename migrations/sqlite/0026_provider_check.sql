-- The config provider check (issue 32): per Connect cluster, the last verdict of each worker
-- (JSON, clusters::provider_check::ProviderCheck) and when it ran.
ALTER TABLE connect_clusters ADD COLUMN provider_check TEXT;
ALTER TABLE connect_clusters ADD COLUMN provider_check_at TEXT;

-- A probe in flight: the nonce of `${cluecdc:cluecdc-probe-<nonce>:value}` a worker was asked to
-- resolve, and whether its call arrived and with which cluster's token (arrived_at set and
-- arrived_cluster_id NULL: a token ClueCDC does not know). Rows live for one check.
CREATE TABLE provider_probes (
    nonce               TEXT PRIMARY KEY,
    cluster_id          TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    arrived_at          TEXT,
    arrived_cluster_id  TEXT
);
