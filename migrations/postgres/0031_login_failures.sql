-- PostgreSQL dialect of migrations/sqlite/0031_login_failures.sql (same version, same schema).
-- Failed sign-ins in the metadata store (issue 33), so that every `serve` replica on one store
-- counts the same sliding window (auth::ratelimit). One row per failure and key: `a:<name>` for
-- the account, `ip:<address>` for the client address. Times in unix ms. Rows older than the
-- window are pruned as failures arrive; a successful sign-in removes its account's rows.
CREATE TABLE login_failures (
    key    TEXT NOT NULL,
    at_ms  BIGINT NOT NULL
);

-- The check counts one key's rows inside the window; the pruning deletes by time alone.
CREATE INDEX login_failures_key_at ON login_failures (key, at_ms);
CREATE INDEX login_failures_at ON login_failures (at_ms);
