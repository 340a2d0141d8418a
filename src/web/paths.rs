//! Route paths, in one place, so links in templates and handlers cannot drift apart.

pub const HOME: &str = "/";
pub const SYSTEM_STATUS: &str = "/system/status";
pub const HEALTHZ: &str = "/healthz";
pub const READYZ: &str = "/readyz";
pub const STATIC: &str = "/static/*path";
pub const API_DOCS: &str = "/api/docs";
pub const OPENAPI: &str = "/api/v1/openapi.json";
pub const LOGIN: &str = "/login";
pub const LOGOUT: &str = "/logout";
pub const SETUP: &str = "/setup";
pub const AUDIT: &str = "/audit";
pub const USERS: &str = "/settings/users";
pub const TOKENS: &str = "/settings/tokens";
pub const CONFIGURATION: &str = "/settings/configuration";
pub const CONNECTIONS: &str = "/connections";
pub const ALERTS: &str = "/alerts";
pub const CONNECTORS: &str = "/connectors";
pub const CLUSTERS: &str = "/clusters";
pub const TOPICS: &str = "/topics";
pub const PIPELINES: &str = "/pipelines";
pub const DELIVERIES: &str = "/deliveries";
pub const REPLICATIONS: &str = "/replications";
