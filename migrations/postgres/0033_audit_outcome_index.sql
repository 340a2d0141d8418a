-- PostgreSQL dialect of migrations/sqlite/0033_audit_outcome_index.sql (same version, same schema).
-- The audit page counts rows by outcome once a second while it is viewed, and the audit trail
-- is never trimmed: an index on the outcome lets that count scan one narrow index.
CREATE INDEX audit_log_outcome ON audit_log(outcome);
