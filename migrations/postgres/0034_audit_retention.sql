-- PostgreSQL dialect of migrations/sqlite/0034_audit_retention.sql (same version, same schema).
-- The audit trail gets a retention: a row may be deleted only when it is older than the cut in
-- `audit_retention` (moved by the trim in the same transaction); updates and TRUNCATE stay refused.
CREATE TABLE audit_retention (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    before         TEXT NOT NULL,
    retention_secs BIGINT
);
INSERT INTO audit_retention (id, before, retention_secs) VALUES (1, '', NULL);

CREATE FUNCTION audit_log_delete_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.at >= COALESCE((SELECT before FROM audit_retention WHERE id = 1), '') THEN
        RAISE EXCEPTION 'audit_log is append-only: only rows older than the audit retention may be removed';
    END IF;
    RETURN OLD;
END $$;
DROP TRIGGER audit_log_no_delete ON audit_log;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
FOR EACH ROW EXECUTE FUNCTION audit_log_delete_guard();
