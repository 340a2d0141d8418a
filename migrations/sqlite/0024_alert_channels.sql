-- Alert channels (issue 30): Slack, Microsoft Teams, PagerDuty and e-mail, beside the signed
-- webhooks. Non-secret settings are JSON; the secret (Slack/Teams URL, PagerDuty routing key,
-- SMTP password) is in secret_values under secret_ref.
CREATE TABLE alert_channels (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL CHECK (kind IN ('slack', 'teams', 'pagerduty', 'email')),
  settings TEXT NOT NULL DEFAULT '{}',
  -- JSON list of alert rule kinds; empty: every rule.
  rules TEXT NOT NULL DEFAULT '[]',
  severities TEXT NOT NULL DEFAULT '["critical","warning"]',
  group_wait_secs INTEGER NOT NULL DEFAULT 10,
  tls_ca_certificate TEXT,
  enabled INTEGER NOT NULL DEFAULT 1,
  secret_ref TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);

-- Every attempt to send to a channel (the last 200 per channel are kept).
CREATE TABLE alert_channel_deliveries (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  channel_id TEXT NOT NULL REFERENCES alert_channels (id) ON DELETE CASCADE,
  at TEXT NOT NULL,
  event TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  status_code INTEGER,
  ok INTEGER NOT NULL,
  error TEXT
);
CREATE INDEX alert_channel_deliveries_by_channel ON alert_channel_deliveries (channel_id, id);

-- PagerDuty: the open incident (dedup key) each alert is part of; a grouped trigger puts many
-- alerts under one key, resolved when none of them fires any more.
CREATE TABLE alert_channel_incidents (
  channel_id TEXT NOT NULL REFERENCES alert_channels (id) ON DELETE CASCADE,
  dedup_key TEXT NOT NULL,
  alert_kind TEXT NOT NULL,
  alert_subject TEXT NOT NULL,
  firing INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (channel_id, alert_kind, alert_subject)
);
