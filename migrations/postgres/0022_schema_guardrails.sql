-- PostgreSQL dialect of migrations/sqlite/0022_schema_guardrails.sql (same version, same schema).
-- Schema-change guardrails (src/tables/schema.rs): each captured table's versions on the source
-- (owner: its pipeline) and each database delivery's destination tables (owner: the delivery),
-- a new version only when the definition (columns with type, nullability and default; primary
-- key) changes; per delivery and table the version it is known to be fine with (its baseline);
-- and the verdicts on each change, written once.

CREATE TABLE schema_versions (
    side        TEXT NOT NULL CHECK (side IN ('source', 'destination')),
    owner_id    TEXT NOT NULL,
    table_name  TEXT NOT NULL,
    version     BIGINT NOT NULL,
    -- JSON {columns: [{name, data_type, nullable, default}], primary_key: [...]}, or null when
    -- the table is gone.
    definition  TEXT NOT NULL,
    first_seen  TEXT NOT NULL,
    PRIMARY KEY (side, owner_id, table_name, version)
);

CREATE TABLE schema_baselines (
    delivery_id TEXT NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
    table_name  TEXT NOT NULL,
    version     BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, table_name)
);

CREATE TABLE schema_verdicts (
    delivery_id  TEXT NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
    table_name   TEXT NOT NULL,
    from_version BIGINT NOT NULL,
    to_version   BIGINT NOT NULL,
    severity     TEXT NOT NULL CHECK (severity IN ('info', 'breaking')),
    -- JSON lists of sentences: the changes, and what the sink does with each.
    changes      TEXT NOT NULL,
    says         TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('open', 'accepted', 'superseded')),
    paused       BIGINT NOT NULL DEFAULT 0,
    seen_at      TEXT NOT NULL,
    PRIMARY KEY (delivery_id, table_name, to_version)
);
CREATE INDEX schema_verdicts_open ON schema_verdicts (delivery_id, state);

INSERT INTO alert_rules (kind, threshold, for_secs, description) VALUES
  ('schema_change', 0, 0, 'a breaking schema change of a table a delivery takes is open: what the sink will do with it is in the message (the delivery is paused when its schema_policy is pause)');

-- Every delivery has a schema policy; the stored options say so (export and apply compare them).
UPDATE deliveries SET options = jsonb_set(options::jsonb, '{schema_policy}', '"warn"')::text
 WHERE options::jsonb->>'schema_policy' IS NULL;
