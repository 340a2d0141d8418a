-- The instant before which a connector observation is stale (connectors::STALE_AFTER_SECS,
-- 60 s), as the RFC 3339 text every timestamp column holds. A view, so that the one query
-- defining a connector's phase reads the same on both engines; each engine's migration says
-- "now" in its own words.
CREATE VIEW stale_before AS
    SELECT strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-60 seconds') AS at;
