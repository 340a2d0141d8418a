-- Encrypted secret fields, grouped by a stable reference that connector configs name as
-- ${cluecdc:<secret_ref>:<field>}.
CREATE TABLE secret_values (
    secret_ref TEXT NOT NULL,
    field      TEXT NOT NULL,
    envelope   TEXT NOT NULL,      -- v1:<key fingerprint>:<base64 nonce+ciphertext>
    updated_at TEXT NOT NULL,
    PRIMARY KEY (secret_ref, field)
);

CREATE TABLE connections (
    id            TEXT PRIMARY KEY NOT NULL,
    name          TEXT NOT NULL UNIQUE,
    provider      TEXT NOT NULL CHECK (provider IN ('POSTGRESQL', 'MYSQL', 'MARIADB', 'AWS_S3', 'MINIO')),
    capabilities  TEXT NOT NULL,   -- JSON array of SOURCE / DESTINATION
    settings      TEXT NOT NULL,   -- JSON object, never a secret
    secret_ref    TEXT NOT NULL UNIQUE,
    generation    INTEGER NOT NULL DEFAULT 1,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    last_test_at  TEXT,
    last_test_ok  INTEGER,
    last_test     TEXT             -- JSON report of the last test (sanitized)
);

-- Connect clusters (extended by the reconciler work): here for the config provider token,
-- which authenticates a Connect cluster's secret look-ups. Only its hash is stored.
CREATE TABLE connect_clusters (
    id                  TEXT PRIMARY KEY NOT NULL,
    name                TEXT NOT NULL UNIQUE,
    url                 TEXT NOT NULL,
    kafka_cluster_id    TEXT,
    managed_by          TEXT NOT NULL DEFAULT 'cluecdc' CHECK (managed_by IN ('cluecdc', 'strimzi')),
    provider_token_hash TEXT,
    provider_token_at   TEXT,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL
);

-- Visible problems. The monitoring work adds rules, history and notification.
CREATE TABLE alerts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL,          -- e.g. secret_leak, connect_exposes_secrets
    subject     TEXT NOT NULL,          -- what it is about, e.g. connector name
    severity    TEXT NOT NULL CHECK (severity IN ('critical', 'warning', 'info')),
    message     TEXT NOT NULL,          -- says what to check next; never a secret
    state       TEXT NOT NULL CHECK (state IN ('firing', 'resolved')),
    first_seen  TEXT NOT NULL,
    last_seen   TEXT NOT NULL,
    resolved_at TEXT,
    UNIQUE (kind, subject, first_seen)
);
CREATE INDEX alerts_open ON alerts(state, kind, subject);
