-- PostgreSQL dialect of migrations/sqlite/0018_connect_cluster_ca.sql (same version, same schema).
-- A private CA (PEM) for the https endpoints ClueCDC calls itself: a Connect cluster's REST URL
-- and a webhook's URL. When set, that client trusts only this CA; otherwise the built-in roots.
ALTER TABLE connect_clusters ADD COLUMN tls_ca_certificate TEXT;
ALTER TABLE webhooks ADD COLUMN tls_ca_certificate TEXT;

-- A permanent reason a source connector cannot work although Connect shows it RUNNING:
-- Debezium retries a connection that fails when its task starts without end (errors.max.retries
-- does not bound it; debezium/dbz#2009), so Connect never fails such a task. The monitor writes
-- it once ClueCDC's own check of the source and the connector's plugin on the worker both fail
-- for a permanent cause (a certificate the CA did not sign, a refused password), and removes it
-- once the plugin accepts the config again; the reconciler reports the connector FAILED with
-- it as the trace and does not restart it.
CREATE TABLE connector_verdicts (
    connector_id TEXT PRIMARY KEY NOT NULL REFERENCES connectors(id) ON DELETE CASCADE,
    trace        TEXT NOT NULL,
    checked_at   TEXT NOT NULL
);
