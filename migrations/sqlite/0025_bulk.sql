-- Bulk actions: one `operations` row (kind 'bulk') per request, and one row per item it acts
-- on, each with its own state, so a failure of one item is shown beside it and stops nothing.
CREATE TABLE bulk_items (
    operation_id      TEXT NOT NULL,      -- the bulk operation
    position          INTEGER NOT NULL,   -- order shown (the order given)
    kind              TEXT NOT NULL CHECK (kind IN ('pipeline', 'delivery', 'replication', 'connector')),
    target_id         TEXT NOT NULL,
    name              TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('pending', 'running', 'done', 'refused', 'failed')),
    detail            TEXT NOT NULL,      -- what will happen or happened; for refused/failed, why
    connector_ids     TEXT NOT NULL,      -- JSON: the connectors it acts through (progress shows them)
    updated_at        TEXT NOT NULL,
    PRIMARY KEY (operation_id, position)
);

-- A restart a person asked for may be of the failed tasks only (Connect's onlyFailed=true).
ALTER TABLE connectors ADD COLUMN restart_only_failed INTEGER NOT NULL DEFAULT 0;
