-- Kafka clusters, Connect cluster health, desired connectors (spec), their observed status
-- (written only by the reconciler), drift and restart history, and the reconciler lease.

CREATE TABLE kafka_clusters (
    id                TEXT PRIMARY KEY NOT NULL,
    name              TEXT NOT NULL UNIQUE,
    bootstrap_servers TEXT NOT NULL,
    security_protocol TEXT NOT NULL DEFAULT 'PLAINTEXT' CHECK (security_protocol IN ('PLAINTEXT', 'SSL', 'SASL_PLAINTEXT', 'SASL_SSL')),
    sasl_mechanism    TEXT CHECK (sasl_mechanism IN ('PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512')),
    sasl_username     TEXT,
    tls_ca_certificate TEXT,
    secret_ref        TEXT NOT NULL UNIQUE,   -- sasl_password
    health            TEXT,                   -- JSON, last observation
    health_at         TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);

ALTER TABLE connect_clusters ADD COLUMN basic_auth_user TEXT;
ALTER TABLE connect_clusters ADD COLUMN secret_ref TEXT;          -- basic_auth_password
ALTER TABLE connect_clusters ADD COLUMN health TEXT;              -- JSON: version, workers, plugins
ALTER TABLE connect_clusters ADD COLUMN health_at TEXT;
ALTER TABLE connect_clusters ADD COLUMN observed_at TEXT;         -- last successful list call
ALTER TABLE connect_clusters ADD COLUMN last_error TEXT;
ALTER TABLE connect_clusters ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE connect_clusters ADD COLUMN next_attempt_at INTEGER;  -- unix ms; backoff while unreachable

-- Spec: what should run. `generation` grows with every change a person or ClueCDC makes.
CREATE TABLE connectors (
    id                TEXT PRIMARY KEY NOT NULL,
    name              TEXT NOT NULL,
    connect_cluster_id TEXT NOT NULL REFERENCES connect_clusters(id),
    config            TEXT NOT NULL,      -- JSON object of strings; secrets only as ${cluecdc:…}
    desired_state     TEXT NOT NULL CHECK (desired_state IN ('running', 'paused', 'stopped', 'deleted')),
    generation        INTEGER NOT NULL DEFAULT 1,
    owner_kind        TEXT NOT NULL DEFAULT 'manual',   -- manual | pipeline | delivery | adopted
    owner_id          TEXT,
    restart_requested_by TEXT,            -- a person asked for a restart; the reconciler does it
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    UNIQUE (connect_cluster_id, name)
);

-- Status: what was seen and done. Only the reconciler writes here.
CREATE TABLE connector_status (
    connector_id        TEXT PRIMARY KEY NOT NULL REFERENCES connectors(id) ON DELETE CASCADE,
    observed_generation INTEGER NOT NULL DEFAULT 0,
    applied_config      TEXT,          -- what ClueCDC last wrote to Connect
    live_config         TEXT,          -- what Connect had at the last observation
    phase               TEXT NOT NULL DEFAULT 'PENDING',
    connector_state     TEXT,          -- Connect's own: RUNNING, PAUSED, STOPPED, FAILED, UNASSIGNED
    tasks               TEXT,          -- JSON [{id, state, worker_id, trace}]
    trace               TEXT,
    message             TEXT,          -- what ClueCDC concluded, in words
    observed_at         TEXT,
    restart_attempts    INTEGER NOT NULL DEFAULT 0,
    next_restart_at     INTEGER,       -- unix ms
    healthy_since       INTEGER,       -- unix ms, RUNNING without failures since
    offsets             TEXT,          -- JSON from GET /connectors/{name}/offsets
    offsets_at          TEXT
);

CREATE TABLE connector_restarts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    connector_id TEXT NOT NULL,
    at           TEXT NOT NULL,
    reason       TEXT NOT NULL,
    triggered_by TEXT NOT NULL,       -- reconciler | user:<name>
    attempt      INTEGER NOT NULL,
    outcome      TEXT NOT NULL
);
CREATE INDEX connector_restarts_by ON connector_restarts(connector_id, id);

CREATE TABLE drift_events (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    connect_cluster_id TEXT NOT NULL,
    connector_name    TEXT NOT NULL,
    connector_id      TEXT,                -- NULL for connectors ClueCDC does not manage
    kind              TEXT NOT NULL CHECK (kind IN ('config_changed', 'deleted', 'unknown_added', 'state_changed')),
    diff              TEXT NOT NULL,        -- JSON [{key, desired, applied, live}]
    detected_at       TEXT NOT NULL,
    action            TEXT NOT NULL CHECK (action IN ('repaired', 'adopted', 'reported', 'pending'))
);
CREATE INDEX drift_events_by ON drift_events(connect_cluster_id, connector_name, id);

-- Connectors present in Connect that ClueCDC does not manage.
CREATE TABLE unmanaged_connectors (
    connect_cluster_id TEXT NOT NULL,
    name               TEXT NOT NULL,
    state              TEXT,
    config             TEXT,
    first_seen         TEXT NOT NULL,
    last_seen          TEXT NOT NULL,
    PRIMARY KEY (connect_cluster_id, name)
);

-- One row per lease; the holder renews before expiry, a crashed holder's lease runs out.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY NOT NULL,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL,      -- unix ms
    acquired_at INTEGER NOT NULL
);

-- Bumped on every desired-state change so another process's reconciler wakes promptly.
INSERT INTO instance_meta (key, value) VALUES ('desired_version', '0');

CREATE TABLE reconcile_passes (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    holder       TEXT NOT NULL,
    started_at   TEXT NOT NULL,
    duration_ms  INTEGER NOT NULL,
    clusters     INTEGER NOT NULL,
    actions      INTEGER NOT NULL,
    errors       INTEGER NOT NULL
);
