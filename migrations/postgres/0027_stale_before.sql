-- PostgreSQL dialect of migrations/sqlite/0027_stale_before.sql (same version, same schema).
-- The instant before which a connector observation is stale (connectors::STALE_AFTER_SECS,
-- 60 s), as the RFC 3339 text every timestamp column holds. A view, so that the one query
-- defining a connector's phase reads the same on both engines; each engine's migration says
-- "now" in its own words.
CREATE VIEW stale_before AS
    SELECT to_char((now() - interval '60 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS at;
