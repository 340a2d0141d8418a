-- The audit trail gets a retention (CLUECDC_AUDIT_RETENTION): rows older than it may go, and no
-- other. `audit_retention` is one row: `before`, the cut the monitor last trimmed up to (RFC 3339,
-- '' before any trim: every timestamp sorts after it), and the retention in force (seconds).
-- The delete trigger now refuses a row at or after that cut, so a stray DELETE still fails and
-- a trim must first move the cut, in the same transaction, and records itself in the trail
-- (src/monitor/history.rs). Updates and TRUNCATE stay refused.
CREATE TABLE audit_retention (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    before         TEXT NOT NULL,
    retention_secs INTEGER
);
INSERT INTO audit_retention (id, before, retention_secs) VALUES (1, '', NULL);

DROP TRIGGER audit_log_no_delete;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
WHEN old.at >= COALESCE((SELECT before FROM audit_retention WHERE id = 1), '')
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only: only rows older than the audit retention may be removed'); END;
