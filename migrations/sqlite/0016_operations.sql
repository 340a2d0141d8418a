-- Durable multi-step operations: each row is carried forward, step by step, by whichever
-- process holds the `operations` lease, so a workflow outlives the request (and the process)
-- that started it.
CREATE TABLE operations (
    id              TEXT PRIMARY KEY NOT NULL,
    kind            TEXT NOT NULL,         -- replay | snapshot_signal | pipeline_delete | delivery_delete
    target_kind     TEXT NOT NULL,         -- delivery | pipeline
    target_id       TEXT NOT NULL,
    target_name     TEXT NOT NULL,
    step            TEXT NOT NULL,         -- the step to run next (or the one that failed)
    state           TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed', 'interrupted')),
    params          TEXT NOT NULL,         -- JSON: what the steps need, fixed at the start
    error           TEXT,                  -- the last problem: while running, what it waits on
    actor           TEXT NOT NULL,
    actor_kind      TEXT NOT NULL,
    started_at      TEXT NOT NULL,
    step_started_at INTEGER NOT NULL,      -- unix ms: a step that waits too long fails
    finished_at     TEXT
);
-- One open connector-holding operation per target: a second replay cannot start beside one.
CREATE UNIQUE INDEX operations_one_open ON operations(target_id)
    WHERE state = 'running' AND kind <> 'snapshot_signal';
CREATE INDEX operations_by_target ON operations(target_kind, target_id, started_at);
CREATE INDEX operations_open ON operations(state) WHERE state = 'running';

-- While an operation holds a connector, its desired state is the operation's (STOPPED for an
-- offset change) and no other route may change it.
ALTER TABLE connectors ADD COLUMN operation_id TEXT;

-- Every offset change a delivery or pipeline went through: what Connect held before, and after.
CREATE TABLE offset_history (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id    TEXT NOT NULL,            -- a delivery (sink offsets) or a pipeline (source offsets)
    operation_id TEXT NOT NULL UNIQUE,
    at           TEXT NOT NULL,
    actor        TEXT NOT NULL,
    reason       TEXT NOT NULL,
    before       TEXT NOT NULL,            -- JSON [{topic, partition, offset}]
    after        TEXT                      -- NULL until the change is made
);
CREATE INDEX offset_history_by ON offset_history(target_id, id);
