-- PostgreSQL dialect of migrations/sqlite/0032_series_compacted.sql (same version, same schema).
-- Monitoring history in two resolutions: points newer than the raw window (an hour) as the
-- monitor wrote them, older ones one per series per 5 minutes (the last of each 5 minutes).
-- `compacted_before`: unix ms up to which this series' points are thinned already (a 5-minute
-- boundary; 0 until its first maintenance), so each pass only thins what aged since.
ALTER TABLE series ADD COLUMN compacted_before BIGINT NOT NULL DEFAULT 0;
-- The upkeep's question each cycle (which series are due), without reading every series.
CREATE INDEX series_upkeep ON series (compacted_before, id);
