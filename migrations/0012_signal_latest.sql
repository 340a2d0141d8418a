-- The newest value of every sampled signal: /metrics reads one row per series here instead of
-- searching the history, whose size grows with the retention setting.
CREATE TABLE signal_latest (
    kind    TEXT NOT NULL,
    subject TEXT NOT NULL,
    value   REAL NOT NULL,
    at      INTEGER NOT NULL,   -- unix ms of the monitor cycle that measured it
    PRIMARY KEY (kind, subject)
);
-- SQLite takes the bare column `value` from the row with MAX(at).
INSERT INTO signal_latest (kind, subject, value, at)
    SELECT kind, subject, value, MAX(at) FROM samples GROUP BY kind, subject;
