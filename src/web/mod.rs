//! HTTP: routes, middleware and the mapping from domain results to pages and JSON.
//!
//! The route table below is the single list of what the server answers: the router is built
//! from it, `cluecdc routes` prints it, the OpenAPI document is derived from it, and the
//! access tests walk it. Each route declares who may call it; the guard enforces sign-in and
//! CSRF, the service layer enforces the role.

/// The pages' connector actions (`POST /<collection>/{id}/<action>`) of a collection that
/// implements [`api::resource::Control`]: each asks through `Control::act`, as the API's
/// generic action operations do, and returns to the member's page with a note.
macro_rules! connector_actions {
    ($page_prefix:literal, $resource:ty; $($page:ident, $action:ident);* $(;)?) => {$(
        #[handler]
        pub async fn $page(req: &Request, state: Data<&AppState>, who: Data<&Principal>, jar: &CookieJar, Path(id): Path<String>) -> PageResult<Response> {
            use $crate::web::api::resource::{Action, Control};
            <$resource as Control>::act(state.ctx(), &who, &id, Action::$action).await?;
            let note = format!("{} requested; the reconciler applies it within seconds.", Action::$action.as_str());
            set_flash(jar, &note);
            Ok(redirect(req, &format!(concat!($page_prefix, "/{}"), id)))
        }
    )*};
}

mod alerts;
pub mod api;
mod api_docs;
mod assets;
mod audit;
mod auth;
mod bulk;
mod channels;
mod charts;
mod clusters;
mod configuration;
mod connections;
mod connectors;
mod deliveries;
pub mod error;
pub mod forwarded;
mod getting_started;
mod health;
mod home;
mod middleware;
mod openapi;
mod pages;
pub mod paths;
mod pipelines;
mod replay;
mod replications;
mod tokens;
mod users;

use std::collections::BTreeMap;

use askama::Template;
use poem::endpoint::BoxEndpoint;
use poem::http::Method;
use poem::web::Html;
use poem::{Endpoint, EndpointExt, IntoEndpoint, Response, Route, RouteMethod};
use serde::Serialize;

use crate::app::AppState;

/// Who may call a route. `Viewer` means any signed-in user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Public,
    /// A Connect cluster's config provider token (the secret-resolution endpoint only).
    ConnectProvider,
    Viewer,
    Operator,
    Admin,
}

pub struct RouteSpec {
    pub method: Method,
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    /// The handler's path (`cluecdc::web::pipelines::api_get`): the operation id comes from it.
    pub handler: &'static str,
    /// How a typed API operation describes itself in the OpenAPI document.
    describe: Option<fn(&mut api::OpDoc<'_>)>,
    endpoint: BoxEndpoint<'static, Response>,
}

/// What `cluecdc routes` prints and the tests read.
#[derive(Debug, Clone, Serialize)]
pub struct RouteInfo {
    pub method: String,
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
}

fn r<E>(
    method: Method,
    path: &'static str,
    access: Access,
    summary: &'static str,
    ep: E,
) -> RouteSpec
where
    E: IntoEndpoint,
    E::Endpoint: 'static,
{
    RouteSpec {
        method,
        path,
        access,
        summary,
        handler: std::any::type_name::<E>(),
        describe: None,
        endpoint: ep.into_endpoint().map_to_response().boxed(),
    }
}

/// A typed JSON API operation (see [`api`]): the handler's argument and reply types are the
/// document's description of it.
fn op<H, Args>(
    method: Method,
    path: &'static str,
    access: Access,
    summary: &'static str,
    handler: H,
) -> RouteSpec
where
    H: api::Handler<Args>,
    Args: 'static,
{
    RouteSpec {
        method,
        path,
        access,
        summary,
        handler: std::any::type_name::<H>(),
        describe: Some(<H as api::Handler<Args>>::describe),
        endpoint: api::Operation::new(handler).boxed(),
    }
}

/// The OpenAPI 3.1 document of the JSON API (`GET /api/v1/openapi.json`, `cluecdc openapi`).
pub fn openapi_document() -> serde_json::Value {
    api::doc::build(&route_table())
}

/// Every route the server answers.
pub fn route_table() -> Vec<RouteSpec> {
    use paths::*;
    use Access::*;
    use Method as M;
    vec![
        r(M::GET, HEALTHZ, Public, "liveness probe", health::healthz),
        r(
            M::GET,
            READYZ,
            Public,
            "readiness probe: database migrated",
            health::readyz,
        ),
        r(
            M::GET,
            STATIC,
            Public,
            "embedded static assets",
            assets::asset,
        ),
        r(
            M::GET,
            API_DOCS,
            Viewer,
            "the browsable API reference (Swagger UI over the OpenAPI document)",
            api_docs::page,
        ),
        r(
            M::GET,
            crate::clusters::provider_jar::URL_PATH,
            Public,
            "the config provider jar for Connect workers (404 when --provider-jar is not set)",
            clusters::download_provider_jar,
        ),
        r(
            M::GET,
            crate::clusters::provider_jar::SHA512_URL_PATH,
            Public,
            "the config provider jar's SHA-512, as sha512sum prints it",
            clusters::download_provider_jar_sha512,
        ),
        r(M::GET, LOGIN, Public, "sign-in page", auth::login_page),
        r(M::POST, LOGIN, Public, "sign in", auth::login_submit),
        // Single sign-on (OpenID Connect): public like the sign-in form; 404 when not configured.
        r(
            M::GET,
            "/login/oidc",
            Public,
            "single sign-on: leave for the identity provider (PKCE, state, nonce)",
            auth::sso_start,
        ),
        r(
            M::GET,
            "/login/oidc/callback",
            Public,
            "single sign-on: the identity provider's answer (code exchanged, ID token checked)",
            auth::sso_callback,
        ),
        r(
            M::GET,
            SETUP,
            Public,
            "first-run setup page (needs the one-time token)",
            auth::setup_page,
        ),
        r(
            M::POST,
            SETUP,
            Public,
            "create the first admin (needs the one-time token)",
            auth::setup_submit,
        ),
        r(M::POST, LOGOUT, Viewer, "sign out", auth::logout),
        r(M::GET, HOME, Viewer, "overview page", home::page),
        r(
            M::GET,
            SYSTEM_STATUS,
            Viewer,
            "server status fragment",
            home::system_status,
        ),
        r(M::GET, AUDIT, Viewer, "audit trail page", audit::page),
        r(
            M::GET,
            "/connections/:id/slots",
            Viewer,
            "replication slots fragment",
            connections::slots_partial,
        ),
        r(
            M::POST,
            "/connections/:id/slots/:name/drop",
            Admin,
            "drop an orphan replication slot",
            connections::drop_slot_form,
        ),
        r(M::GET, ALERTS, Viewer, "alerts page", alerts::page),
        r(
            M::POST,
            "/alerts/:id/ack",
            Operator,
            "acknowledge an alert",
            alerts::ack_form,
        ),
        r(
            M::POST,
            "/alerts/rules/:kind",
            Admin,
            "change an alert rule",
            alerts::save_rule_form,
        ),
        r(
            M::POST,
            "/alerts/webhooks",
            Admin,
            "add a webhook",
            alerts::add_webhook_form,
        ),
        r(
            M::POST,
            "/alerts/webhooks/:id/delete",
            Admin,
            "remove a webhook",
            alerts::webhook_delete_form,
        ),
        r(
            M::GET,
            "/alerts/badge",
            Viewer,
            "firing-alerts badge fragment",
            alerts::badge,
        ),
        // ---- Alert channels (issue 30): pages, then /api/v1/alert-channels ----
        r(M::GET, channels::CHANNELS, Admin, "alert channels page", channels::page),
        r(
            M::POST,
            channels::CHANNELS,
            Admin,
            "add an alert channel",
            channels::create_form,
        ),
        r(
            M::GET,
            "/alerts/channels/new",
            Admin,
            "new alert channel form (kind=slack|teams|pagerduty|email)",
            channels::new_page,
        ),
        r(
            M::GET,
            "/alerts/channels/:id",
            Admin,
            "alert channel page: settings, send test, delivery log",
            channels::detail_page,
        ),
        r(
            M::POST,
            "/alerts/channels/:id",
            Admin,
            "change an alert channel",
            channels::update_form,
        ),
        r(
            M::POST,
            "/alerts/channels/:id/delete",
            Admin,
            "remove an alert channel",
            channels::delete_form,
        ),
        r(
            M::POST,
            "/alerts/channels/:id/test",
            Admin,
            "send a test through an alert channel",
            channels::test_form,
        ),
        r(
            M::GET,
            "/alerts/channels/:id/log",
            Admin,
            "an alert channel's delivery log fragment",
            channels::log_fragment,
        ),
        op(
            M::GET,
            "/api/v1/alert-channels",
            Admin,
            "alert channels (Slack, Teams, PagerDuty, e-mail); secrets shown as set/not set",
            api::resource::list::<channels::Channels>,
        ),
        op(
            M::POST,
            "/api/v1/alert-channels",
            Admin,
            "add an alert channel (name, kind, settings, secrets, rules, severities, group_wait_secs, tls_ca_certificate)",
            api::resource::create::<channels::Channels>,
        ),
        op(
            M::GET,
            "/api/v1/alert-channels/:id",
            Admin,
            "one alert channel",
            api::resource::get::<channels::Channels>,
        ),
        op(
            M::PATCH,
            "/api/v1/alert-channels/:id",
            Admin,
            "change an alert channel (a new host, port, login or endpoint needs its secret again)",
            api::resource::patch::<channels::Channels>,
        ),
        op(
            M::DELETE,
            "/api/v1/alert-channels/:id",
            Admin,
            "remove an alert channel",
            api::resource::delete::<channels::Channels>,
        ),
        op(
            M::POST,
            "/api/v1/alert-channels/:id/test",
            Admin,
            "send a test now and answer what the channel said",
            channels::api_test,
        ),
        op(
            M::GET,
            "/api/v1/alert-channels/:id/deliveries",
            Admin,
            "an alert channel's last delivery attempts (limit, default 50)",
            channels::api_deliveries,
        ),
        // ---- end of alert channels ----
        r(M::GET, USERS, Admin, "users page", users::page),
        r(M::POST, USERS, Admin, "create a user", users::create_form),
        r(
            M::POST,
            "/settings/users/:id/role",
            Admin,
            "change a user's role",
            users::set_role_form,
        ),
        r(
            M::POST,
            "/settings/users/:id/disable",
            Admin,
            "disable a user",
            users::disable_form,
        ),
        r(
            M::POST,
            "/settings/users/:id/enable",
            Admin,
            "enable a user",
            users::enable_form,
        ),
        r(
            M::POST,
            "/settings/sessions/:id/revoke",
            Admin,
            "revoke a session",
            users::revoke_session_form,
        ),
        r(M::GET, TOKENS, Admin, "API tokens page", tokens::page),
        r(
            M::POST,
            TOKENS,
            Admin,
            "create an API token",
            tokens::create_form,
        ),
        r(
            M::POST,
            "/settings/tokens/:id/revoke",
            Admin,
            "revoke an API token",
            tokens::revoke_form,
        ),
        r(
            M::GET,
            CONFIGURATION,
            Admin,
            "configuration as code: export, plan and apply (page)",
            configuration::page,
        ),
        r(
            M::GET,
            "/settings/configuration/export",
            Admin,
            "download the export (?format=strimzi&namespace=&connect_cluster=)",
            configuration::download,
        ),
        r(
            M::POST,
            "/settings/configuration/plan",
            Admin,
            "plan a pasted document (changes nothing)",
            configuration::plan_form,
        ),
        r(
            M::POST,
            "/settings/configuration/apply",
            Admin,
            "apply a pasted document",
            configuration::apply_form,
        ),
        op(
            M::GET,
            "/api/v1/export",
            Admin,
            "the setup as YAML (apiVersion cluecdc/v1, or ?format=strimzi&namespace=&connect_cluster=)",
            configuration::api_export,
        ),
        op(
            M::POST,
            "/api/v1/apply",
            Admin,
            "plan (?dry_run=true) or apply a YAML document (?prune=true deletes what it leaves out)",
            configuration::api_apply,
        ),
        r(
            M::GET,
            CONNECTIONS,
            Viewer,
            "connections page",
            connections::page_list,
        ),
        r(
            M::GET,
            "/connections/new",
            Admin,
            "new connection form",
            connections::page_new,
        ),
        r(
            M::POST,
            CONNECTIONS,
            Admin,
            "create a connection",
            connections::page_create,
        ),
        r(
            M::GET,
            "/connections/:id",
            Viewer,
            "connection page",
            connections::page_detail,
        ),
        r(
            M::GET,
            "/connections/:id/edit",
            Admin,
            "edit connection form",
            connections::page_edit,
        ),
        r(
            M::POST,
            "/connections/:id",
            Admin,
            "update a connection",
            connections::page_update,
        ),
        r(
            M::POST,
            "/connections/:id/test",
            Operator,
            "test a connection (results fragment)",
            connections::page_test,
        ),
        r(
            M::POST,
            "/connections/:id/rotate",
            Admin,
            "replace a connection's credentials",
            connections::page_rotate,
        ),
        r(
            M::GET,
            "/connections/:id/delete",
            Admin,
            "confirm deleting a connection",
            connections::page_delete_confirm,
        ),
        r(
            M::POST,
            "/connections/:id/delete",
            Admin,
            "delete a connection",
            connections::page_delete,
        ),
        r(
            M::GET,
            CONNECTORS,
            Viewer,
            "connectors page (rows fragment for htmx)",
            connectors::page_list,
        ),
        r(
            M::GET,
            "/connectors/new",
            Admin,
            "add a connector by hand (form)",
            connectors::page_new,
        ),
        r(
            M::POST,
            CONNECTORS,
            Admin,
            "add a connector by hand (step=add_row|cluster re-renders; step=create checks with the plugin, then stores)",
            connectors::page_create,
        ),
        r(
            M::GET,
            "/connectors/:id",
            Viewer,
            "connector page (status fragment for htmx)",
            connectors::page_detail,
        ),
        r(
            M::POST,
            "/connectors/:id/pause",
            Operator,
            "pause a connector",
            connectors::page_pause,
        ),
        r(
            M::POST,
            "/connectors/:id/resume",
            Operator,
            "resume a connector",
            connectors::page_resume,
        ),
        r(
            M::POST,
            "/connectors/:id/stop",
            Operator,
            "stop a connector",
            connectors::page_stop,
        ),
        r(
            M::POST,
            "/connectors/:id/restart",
            Operator,
            "restart a connector and its tasks",
            connectors::page_restart,
        ),
        r(
            M::POST,
            "/connectors/:id/adopt",
            Admin,
            "take Connect's live config as the desired one",
            connectors::page_adopt,
        ),
        r(
            M::POST,
            "/connectors/:id/delete",
            Admin,
            "delete a connector (confirmed by name)",
            connectors::page_delete,
        ),
        r(
            M::GET,
            PIPELINES,
            Viewer,
            "pipelines page",
            pipelines::page_list,
        ),
        r(
            M::GET,
            "/pipelines/new",
            Operator,
            "create pipeline wizard",
            pipelines::page_new,
        ),
        r(
            M::POST,
            PIPELINES,
            Operator,
            "review or create a pipeline (step=review|create)",
            pipelines::page_submit,
        ),
        r(
            M::GET,
            "/pipelines/:id",
            Viewer,
            "pipeline page",
            pipelines::page_detail,
        ),
        r(
            M::POST,
            "/pipelines/:id/pause",
            Operator,
            "pause a pipeline",
            pipelines::page_pause,
        ),
        r(
            M::POST,
            "/pipelines/:id/resume",
            Operator,
            "resume a pipeline",
            pipelines::page_resume,
        ),
        r(
            M::POST,
            "/pipelines/:id/restart",
            Operator,
            "restart a pipeline's connector",
            pipelines::page_restart,
        ),
        r(
            M::GET,
            "/deliveries/:id/replay",
            Operator,
            "replay or skip a delivery's records (form)",
            replay::page_replay,
        ),
        r(
            M::POST,
            "/deliveries/:id/replay",
            Operator,
            "preview, then start, a delivery's offset change",
            replay::page_replay_submit,
        ),
        r(
            M::GET,
            "/deliveries/:id/offset-history/:entry/restore",
            Operator,
            "restore a delivery's saved offsets (preview)",
            replay::page_restore,
        ),
        r(
            M::GET,
            "/replications",
            Viewer,
            "replications (MirrorMaker 2) and their connectors",
            replications::page_list,
        ),
        r(
            M::GET,
            "/replications/new",
            Operator,
            "create a replication (form)",
            replications::page_new,
        ),
        r(
            M::POST,
            "/replications/new",
            Operator,
            "preview, then create, a replication",
            replications::page_submit,
        ),
        r(
            M::GET,
            "/replications/:id",
            Viewer,
            "a replication: what is copied and how far behind the target is",
            replications::page_detail,
        ),
        r(
            M::GET,
            "/replications/:id/edit",
            Operator,
            "change a replication's topics, groups or group-offset sync (form)",
            replications::page_edit,
        ),
        r(
            M::POST,
            "/replications/:id/edit",
            Operator,
            "preview, then save, a change to a replication",
            replications::page_update,
        ),
        r(
            M::GET,
            "/replications/:id/readiness",
            Viewer,
            "failover readiness of a consumer group: where it would resume, what it would replay",
            replications::page_readiness,
        ),
        r(
            M::POST,
            "/replications/:id/:action",
            Operator,
            "pause, resume, restart or delete a replication",
            replications::page_act,
        ),
        r(
            M::GET,
            "/operations/:id",
            Viewer,
            "an operation's steps and state",
            replay::page_operation,
        ),
        r(
            M::POST,
            "/pipelines/:id/resnapshot",
            Operator,
            "re-snapshot some of a pipeline's tables",
            pipelines::page_resnapshot,
        ),
        r(
            M::GET,
            "/pipelines/:id/reset",
            Operator,
            "confirm a pipeline's reset and re-snapshot",
            pipelines::page_reset_confirm,
        ),
        r(
            M::POST,
            "/pipelines/:id/reset",
            Operator,
            "reset a pipeline and snapshot it again",
            pipelines::page_reset,
        ),
        r(
            M::GET,
            "/pipelines/:id/tables",
            Operator,
            "change a pipeline's tables (form)",
            pipelines::page_tables,
        ),
        r(
            M::POST,
            "/pipelines/:id/tables",
            Operator,
            "change a pipeline's tables",
            pipelines::page_tables_submit,
        ),
        r(
            M::GET,
            "/pipelines/:id/delete",
            Operator,
            "confirm deleting a pipeline",
            pipelines::page_delete_confirm,
        ),
        r(
            M::POST,
            "/pipelines/:id/delete",
            Operator,
            "delete a pipeline (drop_slot=true also drops the slot)",
            pipelines::page_delete,
        ),
        r(
            M::GET,
            DELIVERIES,
            Viewer,
            "deliveries page",
            deliveries::page_list,
        ),
        r(
            M::GET,
            "/deliveries/new",
            Operator,
            "create delivery form (database or object storage)",
            deliveries::page_new,
        ),
        r(
            M::POST,
            DELIVERIES,
            Operator,
            "review or create a delivery (step=review|create)",
            deliveries::page_submit,
        ),
        r(
            M::GET,
            "/deliveries/:id",
            Viewer,
            "delivery page with lag",
            deliveries::page_detail,
        ),
        r(
            M::GET,
            "/deliveries/:id/edit",
            Operator,
            "change a delivery's topics and options (form)",
            deliveries::page_edit,
        ),
        r(
            M::POST,
            "/deliveries/:id/edit",
            Operator,
            "change a delivery's topics and options",
            deliveries::page_update,
        ),
        r(
            M::GET,
            "/deliveries/:id/delete",
            Operator,
            "confirm deleting a delivery",
            deliveries::page_delete_confirm,
        ),
        r(
            M::POST,
            "/deliveries/:id/delete",
            Operator,
            "delete a delivery (waits until its connector is gone from Connect)",
            deliveries::page_delete,
        ),
        r(
            M::GET,
            "/deliveries/:id/objects",
            Viewer,
            "an object-storage delivery's newest objects (fragment of its page)",
            deliveries::page_objects,
        ),
        r(
            M::POST,
            "/deliveries/:id/pause",
            Operator,
            "pause a delivery",
            deliveries::page_pause,
        ),
        r(
            M::POST,
            "/deliveries/:id/resume",
            Operator,
            "resume a delivery",
            deliveries::page_resume,
        ),
        r(
            M::POST,
            "/deliveries/:id/restart",
            Operator,
            "restart a delivery's connector",
            deliveries::page_restart,
        ),
        r(
            M::POST,
            "/clusters/kafka",
            Admin,
            "register a Kafka cluster",
            connectors::kafka_cluster_form,
        ),
        r(
            M::POST,
            "/clusters/connect",
            Admin,
            "register a Kafka Connect cluster",
            connectors::connect_cluster_form,
        ),
        r(
            M::GET,
            CLUSTERS,
            Viewer,
            "clusters page",
            connectors::page_clusters,
        ),
        r(
            M::GET,
            "/clusters/kafka/:id/edit",
            Admin,
            "edit a Kafka cluster (form)",
            clusters::page_kafka_edit,
        ),
        r(
            M::POST,
            "/clusters/kafka/:id",
            Admin,
            "change a Kafka cluster's settings",
            clusters::page_kafka_update,
        ),
        r(
            M::GET,
            "/clusters/kafka/:id/delete",
            Admin,
            "confirm forgetting a Kafka cluster",
            clusters::page_kafka_forget_confirm,
        ),
        r(
            M::POST,
            "/clusters/kafka/:id/delete",
            Admin,
            "forget a Kafka cluster",
            clusters::page_kafka_forget,
        ),
        r(
            M::GET,
            "/clusters/connect/:id/edit",
            Admin,
            "edit a Connect cluster (form)",
            clusters::page_connect_edit,
        ),
        r(
            M::POST,
            "/clusters/connect/:id",
            Admin,
            "change a Connect cluster's settings (an empty tls_ca_certificate removes it)",
            clusters::page_connect_update,
        ),
        r(
            M::GET,
            "/clusters/connect/:id/delete",
            Admin,
            "confirm forgetting a Connect cluster",
            clusters::page_connect_forget_confirm,
        ),
        r(
            M::POST,
            "/clusters/connect/:id/delete",
            Admin,
            "forget a Connect cluster",
            clusters::page_connect_forget,
        ),
        r(
            M::GET,
            "/getting-started",
            Viewer,
            "the first-hour checklist, each step checked now (the overview loads it until a delivery runs)",
            getting_started::page,
        ),
        r(
            M::GET,
            "/clusters/connect/:id",
            Viewer,
            "a Connect cluster: its settings and the config provider check per worker",
            clusters::page_connect,
        ),
        r(
            M::GET,
            "/clusters/connect/:id/provider-check",
            Viewer,
            "the config provider check section (fresh=true: run it now)",
            clusters::page_provider_check,
        ),
        r(
            M::POST,
            "/clusters/connect/:id/provider-token",
            Admin,
            "issue a new config provider token (shown once)",
            clusters::page_provider_token,
        ),
        r(
            M::GET,
            TOPICS,
            Viewer,
            "topics page",
            connectors::page_topics,
        ),
        r(
            M::POST,
            TOPICS,
            Operator,
            "create a topic",
            connectors::page_topic_create,
        ),
        r(
            M::GET,
            "/topics/:cluster/:name/delete",
            Admin,
            "confirm deleting a topic (the name typed again)",
            connectors::page_topic_delete_confirm,
        ),
        r(
            M::POST,
            "/topics/:cluster/:name/delete",
            Admin,
            "delete a topic (confirmed by name)",
            connectors::page_topic_delete,
        ),
        // JSON API
        op(
            M::GET,
            OPENAPI,
            Viewer,
            "this API's OpenAPI 3.1 document",
            openapi::document,
        ),
        op(
            M::GET,
            "/api/v1/me",
            Viewer,
            "the caller's name and role",
            auth::api_me,
        ),
        op(
            M::GET,
            "/api/v1/users",
            Admin,
            "list users",
            users::api_list,
        ),
        op(
            M::POST,
            "/api/v1/users",
            Admin,
            "create a user",
            users::api_create,
        ),
        op(
            M::PATCH,
            "/api/v1/users/:id",
            Admin,
            "change a user's role or disable them",
            users::api_patch,
        ),
        op(
            M::GET,
            "/api/v1/sessions",
            Admin,
            "list live sessions",
            users::api_sessions,
        ),
        op(
            M::DELETE,
            "/api/v1/sessions/:id",
            Admin,
            "revoke a session",
            users::api_revoke_session,
        ),
        op(
            M::GET,
            "/api/v1/tokens",
            Admin,
            "list API tokens",
            tokens::api_list,
        ),
        op(
            M::POST,
            "/api/v1/tokens",
            Admin,
            "create an API token (shown once)",
            tokens::api_create,
        ),
        op(
            M::DELETE,
            "/api/v1/tokens/:id",
            Admin,
            "revoke an API token",
            tokens::api_revoke,
        ),
        op(
            M::GET,
            "/api/v1/connections",
            Viewer,
            "list connections",
            api::resource::paged::list::<connections::Connections>,
        ),
        op(
            M::POST,
            "/api/v1/connections",
            Admin,
            "create a connection",
            api::resource::create::<connections::Connections>,
        ),
        op(
            M::GET,
            "/api/v1/connections/:id",
            Viewer,
            "a connection (secret fields are never returned)",
            api::resource::get::<connections::Connections>,
        ),
        op(
            M::PATCH,
            "/api/v1/connections/:id",
            Admin,
            "change a connection (settings merged key by key)",
            api::resource::patch::<connections::Connections>,
        ),
        op(
            M::DELETE,
            "/api/v1/connections/:id",
            Admin,
            "delete an unused connection",
            api::resource::delete::<connections::Connections>,
        ),
        op(
            M::POST,
            "/api/v1/connections/:id/test",
            Operator,
            "test a connection",
            connections::api_test,
        ),
        op(
            M::POST,
            "/api/v1/connections/:id/rotate",
            Admin,
            "replace every secret field, keeping secret_ref",
            connections::api_rotate,
        ),
        op(
            M::GET,
            "/api/v1/connections/:id/tables",
            Operator,
            "discover a source's tables",
            connections::api_tables,
        ),
        op(
            M::GET,
            "/api/v1/connections/:id/slots",
            Viewer,
            "a PostgreSQL source's logical slots and the pipelines owning them",
            connections::api_slots,
        ),
        op(
            M::DELETE,
            "/api/v1/connections/:id/slots/:name",
            Admin,
            "drop an orphan slot (?confirm=<name>)",
            connections::api_drop_slot,
        ),
        op(
            M::GET,
            "/api/v1/connect-clusters",
            Viewer,
            "list Connect clusters",
            api::resource::list::<clusters::Clusters>,
        ),
        op(
            M::POST,
            "/api/v1/connect-clusters",
            Admin,
            "register a Connect cluster (url, basic auth, tls_ca_certificate for a private CA; returns its provider token once)",
            clusters::api_create,
        ),
        op(
            M::GET,
            "/api/v1/connect-clusters/:id",
            Viewer,
            "a Connect cluster",
            api::resource::get::<clusters::Clusters>,
        ),
        op(
            M::PATCH,
            "/api/v1/connect-clusters/:id",
            Admin,
            "change a Connect cluster's settings (an empty tls_ca_certificate removes it)",
            api::resource::patch::<clusters::Clusters>,
        ),
        op(
            M::DELETE,
            "/api/v1/connect-clusters/:id",
            Admin,
            "forget a Connect cluster",
            api::resource::delete::<clusters::Clusters>,
        ),
        op(
            M::POST,
            "/api/v1/connect-clusters/:id/provider-token",
            Admin,
            "issue a new config provider token (shown once)",
            clusters::api_provider_token,
        ),
        op(
            M::GET,
            "/api/v1/connect-clusters/:id/provider-check",
            Viewer,
            "whether every worker resolves ${cluecdc:…} references here (stored for a minute; fresh=true runs it now)",
            clusters::api_provider_check,
        ),
        r(
            M::POST,
            "/internal/v1/config-provider/resolve",
            ConnectProvider,
            "resolve ${cluecdc:ref:field} for a Connect worker",
            clusters::resolve,
        ),
        op(
            M::GET,
            "/api/v1/connect-clusters/:id/plugins",
            Viewer,
            "a Connect cluster's plugins, version and workers (live)",
            connectors::api_connect_plugins,
        ),
        op(
            M::GET,
            "/api/v1/kafka-clusters",
            Viewer,
            "list Kafka clusters",
            api::resource::list::<clusters::KafkaClusters>,
        ),
        op(
            M::POST,
            "/api/v1/kafka-clusters",
            Admin,
            "register a Kafka cluster",
            api::resource::create::<clusters::KafkaClusters>,
        ),
        op(
            M::GET,
            "/api/v1/kafka-clusters/:id",
            Viewer,
            "a Kafka cluster with live health",
            api::resource::get::<clusters::KafkaClusters>,
        ),
        op(
            M::PATCH,
            "/api/v1/kafka-clusters/:id",
            Admin,
            "change a Kafka cluster's settings",
            api::resource::patch::<clusters::KafkaClusters>,
        ),
        op(
            M::DELETE,
            "/api/v1/kafka-clusters/:id",
            Admin,
            "forget a Kafka cluster",
            api::resource::delete::<clusters::KafkaClusters>,
        ),
        op(
            M::GET,
            "/api/v1/kafka-clusters/:id/topics",
            Viewer,
            "topics with partitions and watermarks",
            connectors::api_topics,
        ),
        op(
            M::POST,
            "/api/v1/kafka-clusters/:id/topics",
            Operator,
            "create a topic with explicit settings",
            connectors::api_topic_create,
        ),
        op(
            M::GET,
            "/api/v1/kafka-clusters/:id/topics/:name",
            Viewer,
            "a topic with partitions, watermarks and configs",
            connectors::api_topic_get,
        ),
        op(
            M::DELETE,
            "/api/v1/kafka-clusters/:id/topics/:name",
            Admin,
            "delete a topic (?confirm=<name>)",
            connectors::api_topic_delete,
        ),
        op(
            M::GET,
            "/api/v1/connectors",
            Viewer,
            "connectors, desired and observed, plus unmanaged ones",
            connectors::api_list,
        ),
        op(
            M::POST,
            "/api/v1/connectors",
            Admin,
            "add a desired connector by hand",
            api::resource::create::<connectors::Connectors>,
        ),
        op(
            M::GET,
            "/api/v1/connectors/:name",
            Viewer,
            "a connector with drift and restart history (by id or name)",
            api::resource::get::<connectors::Connectors>,
        ),
        op(
            M::DELETE,
            "/api/v1/connectors/:name",
            Admin,
            "delete a connector (the reconciler removes it from Connect)",
            connectors::api_delete,
        ),
        op(
            M::POST,
            "/api/v1/connectors/:name/pause",
            Operator,
            "pause",
            api::resource::pause::<connectors::Connectors>,
        ),
        op(
            M::POST,
            "/api/v1/connectors/:name/resume",
            Operator,
            "resume",
            api::resource::resume::<connectors::Connectors>,
        ),
        op(
            M::POST,
            "/api/v1/connectors/:name/stop",
            Operator,
            "stop",
            api::resource::stop::<connectors::Connectors>,
        ),
        op(
            M::POST,
            "/api/v1/connectors/:name/restart",
            Operator,
            "restart the connector and its tasks",
            api::resource::restart::<connectors::Connectors>,
        ),
        op(
            M::POST,
            "/api/v1/connectors/:name/adopt",
            Admin,
            "adopt Connect's live config as desired",
            api::resource::adopt::<connectors::Connectors>,
        ),
        op(
            M::GET,
            "/api/v1/drift",
            Viewer,
            "drift events across clusters",
            connectors::api_drift,
        ),
        op(
            M::GET,
            "/api/v1/reconciler",
            Viewer,
            "the reconciler: lease holder and last pass",
            connectors::api_reconciler,
        ),
        op(
            M::POST,
            "/api/v1/reconciler/pass",
            Operator,
            "reconcile now (in whichever process holds the lease)",
            connectors::api_reconcile_now,
        ),
        op(
            M::GET,
            "/api/v1/pipelines",
            Viewer,
            "list pipelines",
            api::resource::paged::list::<pipelines::Pipelines>,
        ),
        op(
            M::POST,
            "/api/v1/pipelines",
            Operator,
            "create a pipeline (validated by the plugin first)",
            api::resource::create::<pipelines::Pipelines>,
        ),
        op(
            M::POST,
            "/api/v1/pipelines/preview",
            Operator,
            "the exact connector config, topics and plugin verdict; creates nothing",
            api::resource::preview::<pipelines::Pipelines>,
        ),
        op(
            M::GET,
            "/api/v1/pipelines/:id",
            Viewer,
            "a pipeline with connector, topics, slot and snapshot state",
            api::resource::get::<pipelines::Pipelines>,
        ),
        op(
            M::PATCH,
            "/api/v1/pipelines/:id",
            Operator,
            "change the captured tables (added ones get an incremental snapshot)",
            pipelines::api_patch,
        ),
        op(
            M::DELETE,
            "/api/v1/pipelines/:id",
            Operator,
            "delete a pipeline (?drop_slot=true also drops the replication slot)",
            pipelines::api_delete,
        ),
        op(
            M::POST,
            "/api/v1/pipelines/:id/pause",
            Operator,
            "pause",
            api::resource::pause::<pipelines::Pipelines>,
        ),
        op(
            M::POST,
            "/api/v1/pipelines/:id/resume",
            Operator,
            "resume",
            api::resource::resume::<pipelines::Pipelines>,
        ),
        op(
            M::POST,
            "/api/v1/pipelines/:id/restart",
            Operator,
            "restart",
            api::resource::restart::<pipelines::Pipelines>,
        ),
        op(
            M::POST,
            "/api/v1/pipelines/:id/resnapshot",
            Operator,
            "incremental re-snapshot of some of the pipeline's tables (body {tables})",
            pipelines::api_resnapshot,
        ),
        op(
            M::POST,
            "/api/v1/pipelines/:id/reset",
            Operator,
            "reset and re-snapshot: source offsets removed, a full snapshot again (body {confirm})",
            pipelines::api_reset,
        ),
        op(
            M::GET,
            "/api/v1/pipelines/:id/schema",
            Viewer,
            "per captured table: schema versions, the newest change, and each delivery's verdict on it",
            pipelines::api_schema,
        ),
        op(
            M::GET,
            "/api/v1/deliveries",
            Viewer,
            "list deliveries",
            api::resource::paged::list::<deliveries::Deliveries>,
        ),
        op(
            M::POST,
            "/api/v1/deliveries",
            Operator,
            "create a delivery (destination and plugin checked first)",
            api::resource::create::<deliveries::Deliveries>,
        ),
        op(
            M::POST,
            "/api/v1/deliveries/preview",
            Operator,
            "the exact sink config and the plugin's verdict; creates nothing",
            api::resource::preview::<deliveries::Deliveries>,
        ),
        op(
            M::GET,
            "/api/v1/deliveries/:id",
            Viewer,
            "a delivery with connector state and lag per partition",
            api::resource::get::<deliveries::Deliveries>,
        ),
        op(
            M::PATCH,
            "/api/v1/deliveries/:id",
            Operator,
            "change a delivery's topics or settings (database or object storage)",
            api::resource::patch::<deliveries::Deliveries>,
        ),
        op(
            M::POST,
            "/api/v1/deliveries/:id/replay",
            Operator,
            "replay or skip a delivery's records (?dry_run=true: the plan only)",
            replay::api_replay,
        ),
        op(
            M::GET,
            "/api/v1/deliveries/:id/offset-history",
            Viewer,
            "a delivery's offset changes, before and after",
            replay::api_history,
        ),
        op(
            M::POST,
            "/api/v1/deliveries/:id/offset-history/:entry/restore",
            Operator,
            "restore the offsets saved before a change (?dry_run=true: the plan only)",
            replay::api_restore,
        ),
        op(
            M::GET,
            "/api/v1/replications",
            Viewer,
            "list replications",
            api::resource::list::<replications::Replications>,
        ),
        op(
            M::POST,
            "/api/v1/replications",
            Operator,
            "create a replication (pattern checked against the source's topics, connectors validated)",
            api::resource::create::<replications::Replications>,
        ),
        op(
            M::POST,
            "/api/v1/replications/preview",
            Operator,
            "what a replication would copy and its three connector configs; creates nothing",
            api::resource::preview::<replications::Replications>,
        ),
        op(
            M::GET,
            "/api/v1/replications/:id",
            Viewer,
            "a replication with its connectors, lag per partition, checkpoints and heartbeat age",
            api::resource::get::<replications::Replications>,
        ),
        op(
            M::GET,
            "/api/v1/replications/:id/readiness",
            Viewer,
            "failover readiness of a consumer group (?group=G): translated offsets, replay and miss",
            replications::api_readiness,
        ),
        op(
            M::DELETE,
            "/api/v1/replications/:id",
            Operator,
            "delete a replication's connectors (the copied topics stay)",
            api::resource::delete::<replications::Replications>,
        ),
        op(
            M::PATCH,
            "/api/v1/replications/:id",
            Operator,
            "change a replication's topics (or pipelines), groups or group-offset sync in place",
            api::resource::patch::<replications::Replications>,
        ),
        op(
            M::POST,
            "/api/v1/replications/:id/restart",
            Operator,
            "restart the three connectors and their tasks",
            api::resource::restart::<replications::Replications>,
        ),
        op(
            M::POST,
            "/api/v1/replications/:id/pause",
            Operator,
            "pause",
            api::resource::pause::<replications::Replications>,
        ),
        op(
            M::POST,
            "/api/v1/replications/:id/resume",
            Operator,
            "resume",
            api::resource::resume::<replications::Replications>,
        ),
        op(
            M::GET,
            "/api/v1/operations",
            Viewer,
            "a target's operations, newest first (?target=ID)",
            replay::api_operations,
        ),
        op(
            M::GET,
            "/api/v1/operations/:id",
            Viewer,
            "a durable multi-step operation: kind, step, state, error",
            replay::api_operation,
        ),
        // Bulk actions (issue 30): one change set over many pipelines, deliveries,
        // replications or connectors, through the single actions' own services.
        op(
            M::POST,
            "/api/v1/bulk",
            Operator,
            "pause, resume, restart (only_failed) or delete many items: {action, targets: [{kind, id}]} or {action, filter: {kind, q, state, cluster}}; 202 with the operation and its items",
            bulk::api_start,
        ),
        op(
            M::GET,
            "/api/v1/bulk/:id",
            Viewer,
            "a bulk action's operation with each item's state and, for refused or failed items, why",
            bulk::api_get,
        ),
        r(
            M::POST,
            "/bulk/confirm",
            Operator,
            "what a bulk action would do to each selected item (changes nothing)",
            bulk::page_confirm,
        ),
        r(
            M::POST,
            "/bulk",
            Operator,
            "start a confirmed bulk action",
            bulk::page_start,
        ),
        r(
            M::GET,
            "/bulk/:id",
            Viewer,
            "a bulk action's progress page (refreshes itself)",
            bulk::page_progress,
        ),
        op(
            M::GET,
            "/api/v1/deliveries/:id/objects",
            Viewer,
            "an object-storage delivery's newest objects (key, size, time; never contents)",
            deliveries::api_objects,
        ),
        op(
            M::DELETE,
            "/api/v1/deliveries/:id",
            Operator,
            "delete a delivery's connector",
            api::resource::delete::<deliveries::Deliveries>,
        ),
        op(
            M::POST,
            "/api/v1/deliveries/:id/pause",
            Operator,
            "pause",
            api::resource::pause::<deliveries::Deliveries>,
        ),
        op(
            M::POST,
            "/api/v1/deliveries/:id/resume",
            Operator,
            "resume",
            api::resource::resume::<deliveries::Deliveries>,
        ),
        op(
            M::POST,
            "/api/v1/deliveries/:id/restart",
            Operator,
            "restart",
            api::resource::restart::<deliveries::Deliveries>,
        ),
        op(
            M::GET,
            "/api/v1/alerts",
            Viewer,
            "alerts (state=firing for open ones)",
            alerts::api_list,
        ),
        op(
            M::POST,
            "/api/v1/alerts/:id/ack",
            Operator,
            "acknowledge a firing alert",
            alerts::api_ack,
        ),
        op(
            M::GET,
            "/api/v1/alert-rules",
            Viewer,
            "alert rules: thresholds and durations",
            alerts::api_rules,
        ),
        op(
            M::PATCH,
            "/api/v1/alert-rules/:kind",
            Admin,
            "change a rule's threshold, duration or enabled flag",
            alerts::api_rule_patch,
        ),
        op(
            M::GET,
            "/api/v1/webhooks",
            Admin,
            "webhooks notified of alert transitions",
            alerts::api_webhooks,
        ),
        op(
            M::POST,
            "/api/v1/webhooks",
            Admin,
            "add a webhook (url, signing secret, tls_ca_certificate for a private CA)",
            alerts::api_webhook_create,
        ),
        op(
            M::DELETE,
            "/api/v1/webhooks/:id",
            Admin,
            "remove a webhook",
            alerts::api_webhook_delete,
        ),
        op(
            M::GET,
            "/api/v1/samples",
            Viewer,
            "monitoring history (kind, subject)",
            alerts::api_samples,
        ),
        r(
            M::GET,
            "/metrics",
            Viewer,
            "Prometheus metrics (bearer token)",
            alerts::metrics,
        ),
        op(
            M::GET,
            "/api/v1/audit",
            Viewer,
            "audit rows, newest first, filtered and paged",
            audit::api_list,
        ),
        op(
            M::GET,
            "/api/v1/audit/export",
            Viewer,
            "audit rows as CSV or JSON",
            audit::api_export,
        ),
    ]
}

pub fn route_infos() -> Vec<RouteInfo> {
    route_table()
        .into_iter()
        .map(|s| RouteInfo {
            method: s.method.to_string(),
            path: s.path,
            access: s.access,
            summary: s.summary,
        })
        .collect()
}

/// The whole application as one endpoint.
pub fn routes(state: AppState) -> impl Endpoint {
    router()
        .with(poem::middleware::CookieJarManager::new())
        .around(middleware::request_context)
        .data(state)
        .into_endpoint()
}

fn router() -> Route {
    let mut by_path: BTreeMap<&'static str, RouteMethod> = BTreeMap::new();
    for spec in route_table() {
        let endpoint = match spec.access {
            Access::Public => spec.endpoint,
            Access::ConnectProvider => spec.endpoint.with(clusters::RequireProviderToken).boxed(),
            _ => spec.endpoint.with(auth::RequireIdentity).boxed(),
        };
        let methods = by_path.remove(spec.path).unwrap_or_default();
        by_path.insert(spec.path, methods.method(spec.method, endpoint));
    }
    by_path
        .into_iter()
        .fold(Route::new(), |route, (path, methods)| {
            route.at(path, methods)
        })
}

/// Renders a template; a render failure is a server bug, logged once and answered 500.
pub(crate) fn render<T: Template>(template: &T) -> poem::Result<Html<String>> {
    pages::render_sized(template).map(Html).map_err(|error| {
        tracing::error!(%error, "template failed to render");
        poem::Error::from_status(poem::http::StatusCode::INTERNAL_SERVER_ERROR)
    })
}
