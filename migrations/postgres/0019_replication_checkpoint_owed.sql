-- PostgreSQL dialect of migrations/sqlite/0019_replication_checkpoint_owed.sql (same version, same schema).
-- The checkpoint rule measures how long MirrorMaker has owed a consumer group a newer
-- checkpoint: the group committed at or past the newest offset sync (where MirrorMaker's
-- translation is exact) and no checkpoint carries that translation yet. A group behind the
-- newest sync is never owed one (MirrorMaker translates it from sparse older syncs), so the
-- rule no longer fires for a group whose checkpoint cannot improve, and is on by default.
UPDATE alert_rules
   SET description = 'MirrorMaker has owed a consumer group a newer checkpoint for more than N seconds: the group committed past the newest offset sync and no checkpoint carries it (is the checkpoint connector running?)',
       enabled = 1
 WHERE kind = 'replication_checkpoint_age_seconds';
