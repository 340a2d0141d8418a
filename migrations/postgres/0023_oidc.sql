-- PostgreSQL dialect of migrations/sqlite/0023_oidc.sql (same version, same schema).
-- Single sign-on (OpenID Connect): a user created at first sign-in is keyed by the provider's
-- issuer and subject, never by e-mail; role_source says where the role came from
-- ('local': set by an admin or the CLI; 'groups': the IdP groups at the last sign-in;
-- 'default': no mapped group, the configured default role).
ALTER TABLE users ADD COLUMN oidc_issuer TEXT;
ALTER TABLE users ADD COLUMN oidc_subject TEXT;
ALTER TABLE users ADD COLUMN role_source TEXT NOT NULL DEFAULT 'local'
    CHECK (role_source IN ('local', 'groups', 'default'));
CREATE UNIQUE INDEX users_oidc_identity ON users(oidc_issuer, oidc_subject)
    WHERE oidc_issuer IS NOT NULL;
