-- Monitoring history, compact: one row per series (kind, subject) holding its latest value,
-- and the points of each series in a table clustered by (series, time). A point costs about a
-- quarter of a `samples` row (no repeated names, no second index), /metrics reads one row per
-- series, and trimming and charts walk the primary key of one series at a time.
CREATE TABLE series (
    id        INTEGER PRIMARY KEY,
    kind      TEXT NOT NULL,
    subject   TEXT NOT NULL,
    latest    REAL NOT NULL,
    latest_at INTEGER NOT NULL,    -- unix ms of the monitor cycle that measured it last
    UNIQUE (kind, subject)
);
CREATE TABLE points (
    series_id INTEGER NOT NULL REFERENCES series(id) ON DELETE CASCADE,
    at        INTEGER NOT NULL,    -- unix ms
    value     REAL NOT NULL,
    PRIMARY KEY (series_id, at)
) WITHOUT ROWID;
-- SQLite takes the bare column `value` from the row with MAX(at).
INSERT INTO series (kind, subject, latest, latest_at)
    SELECT kind, subject, value, MAX(at) FROM samples GROUP BY kind, subject;
INSERT OR REPLACE INTO points (series_id, at, value)
    SELECT s.id, x.at, x.value FROM samples x JOIN series s ON s.kind = x.kind AND s.subject = x.subject;
DROP TABLE samples;
