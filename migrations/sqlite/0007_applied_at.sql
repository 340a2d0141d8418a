-- When ClueCDC last wrote a connector's config to Connect (unix ms): a connector missing from
-- Connect's list right after that is still being registered, not deleted.
ALTER TABLE connector_status ADD COLUMN applied_at INTEGER;
