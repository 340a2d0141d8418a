-- PostgreSQL dialect of migrations/sqlite/0001_init.sql (same version, same schema).
-- Instance metadata: one row per key, written once at first start.
CREATE TABLE instance_meta (
    key        TEXT PRIMARY KEY NOT NULL,
    value      TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
);
