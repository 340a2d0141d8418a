//! Connections: pages (list, create, detail with test/rotate/edit/delete) and
//! `/api/v1/connections`. Both call the same service functions in `crate::connections`.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Json, Path, Query};
use poem::{handler, Body, Request, Response};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::api::resource;
use super::api::{Ctx, NoContent};
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::connections::settings::{secret_fields, Settings, TlsMode};
use crate::connections::{self, ConnectionInput, ConnectionView, Provider, TestReport};
use crate::error::{Error, FieldErrors};
use crate::listing::{self, ListQuery, Nav};
use crate::pipelines::OwnedSlot;
use schemars::JsonSchema;

// ---- JSON API -------------------------------------------------------------------------------

resource::resource! {
    /// `/api/v1/connections`: the standard operations (see [`resource`]); create and patch
    /// first drop the body's nulls (below).
    Connections: ConnectionView, ConnectionInput;
    page("connections", connections::STATES) => connections::page,
    get(ConnectionView) => connections::get,
    delete => connections::delete,
}

impl resource::Create for Connections {
    async fn create(
        cx: &crate::ctx::Ctx,
        who: &Principal,
        mut input: ConnectionInput,
    ) -> crate::error::Result<ConnectionView> {
        drop_nulls(&mut input.settings);
        drop_nulls(&mut input.secrets);
        connections::create(cx, who, &input).await
    }
}

impl resource::Update for Connections {
    async fn update(
        cx: &crate::ctx::Ctx,
        who: &Principal,
        id: &str,
        mut patch: ConnectionInput,
    ) -> crate::error::Result<ConnectionView> {
        drop_nulls(&mut patch.secrets);
        connections::update(cx, who, id, &patch).await
    }
}

/// `null` in a JSON body's settings or secrets means "not given": a client generated from the
/// OpenAPI document sends every optional field, `null` when unset (the other provider's keys
/// included). On `PATCH`, `null` in `settings` keeps its meaning "remove this setting".
fn drop_nulls(map: &mut Option<Map<String, Value>>) {
    if let Some(m) = map {
        m.retain(|_, v| !v.is_null());
    }
}

pub async fn api_test(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<TestReport>> {
    let s = &cx.state;
    Ok(Json(
        connections::test(&s.pool, &s.inner.ctx.secrets, &cx.who, &id).await?,
    ))
}

/// `POST /api/v1/connections/{id}/rotate`: every secret field of the provider, replacing the
/// stored ones (a field left out is removed); `secret_ref` stays.
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "ConnectionRotateInput")]
pub struct RotateBody {
    #[serde(default)]
    #[schemars(with = "connections::settings::SecretsInput")]
    secrets: Map<String, Value>,
}

pub async fn api_rotate(
    cx: Ctx,
    Path(id): Path<String>,
    Json(body): Json<RotateBody>,
) -> ApiResult<Json<ConnectionView>> {
    let mut secrets = Some(body.secrets);
    drop_nulls(&mut secrets);
    let secrets = secrets.unwrap_or_default();
    let s = &cx.state;
    Ok(Json(
        connections::rotate(&s.pool, &s.inner.ctx.secrets, &cx.who, &id, &secrets).await?,
    ))
}

pub async fn api_tables(
    cx: Ctx,
    Path(id): Path<String>,
) -> ApiResult<Json<connections::Discovery>> {
    let s = &cx.state;
    Ok(Json(
        connections::discover(&s.pool, &s.inner.ctx.secrets, &cx.who, &id).await?,
    ))
}

pub async fn api_slots(
    cx: Ctx,
    Path(id): Path<String>,
) -> ApiResult<Json<listing::ListPage<OwnedSlot>>> {
    let s = &cx.state;
    Ok(Json(listing::ListPage::all(
        crate::pipelines::source_slots(&s.pool, &s.inner.ctx.secrets, &cx.who, &id).await?,
    )))
}

/// `DELETE /api/v1/connections/{id}/slots/{name}?confirm=<name>`.
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "SlotDropQuery")]
pub struct SlotConfirm {
    /// The slot's name again: a drop is refused without it.
    #[serde(default)]
    confirm: String,
}

pub async fn api_drop_slot(
    cx: Ctx,
    Path((id, name)): Path<(String, String)>,
    Query(q): Query<SlotConfirm>,
) -> ApiResult<NoContent> {
    let s = &cx.state;
    crate::pipelines::drop_orphan_slot(s.ctx(), &cx.who, &id, &name, &q.confirm).await?;
    Ok(NoContent)
}

// ---- pages ----------------------------------------------------------------------------------

/// A form field as the templates draw it.
pub struct Field {
    pub name: String,
    pub label: &'static str,
    pub value: String,
    pub kind: &'static str,
    pub hint: &'static str,
    pub error: Option<String>,
    pub options: Vec<&'static str>,
}

fn settings_fields(
    provider: Provider,
) -> Vec<(
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Vec<&'static str>,
)> {
    // (key, label, input type, hint, options)
    if provider.is_object_storage() {
        let mut f = vec![
            (
                "bucket",
                "Bucket",
                "text",
                "An existing bucket; ClueCDC never creates buckets.",
                vec![],
            ),
            (
                "region",
                "Region",
                "text",
                if provider == Provider::AwsS3 {
                    "The bucket's region, e.g. eu-central-1."
                } else {
                    "MinIO's default is us-east-1."
                },
                vec![],
            ),
            (
                "prefix",
                "Key prefix",
                "text",
                "Optional, e.g. cdc/. Scopes every object this connection writes.",
                vec![],
            ),
        ];
        if provider == Provider::Minio {
            f.push(("endpoint", "Endpoint", "url", "Reachable from ClueCDC and Kafka Connect, e.g. http://minio:9000. Plain http is for isolated local fixtures only.", vec![]));
            f.push(("ca_certificate", "CA certificate (PEM)", "textarea", "Only for an https endpoint signed by a private CA. The Connect workers must trust it too (their JVM truststore).", vec![]));
        }
        f
    } else {
        vec![
            (
                "host",
                "Host",
                "text",
                "Hostname or IP address only.",
                vec![],
            ),
            (
                "port",
                "Port",
                "number",
                if provider == Provider::Postgresql {
                    "Default 5432."
                } else {
                    "Default 3306."
                },
                vec![],
            ),
            ("database", "Database", "text", "", vec![]),
            (
                "user",
                "User",
                "text",
                "For a source it needs replication rights; the Test button checks them.",
                vec![],
            ),
            (
                "tls_mode",
                "TLS",
                "select",
                "verify-full checks the server's certificate against the CA certificate below and the host name; verify-ca the certificate only; disable is plain text, only for an isolated local fixture. Verification cannot be turned off.",
                // The empty choice first: nothing is chosen for the user.
                std::iter::once("")
                    .chain(TlsMode::CHOICES.map(TlsMode::as_str))
                    .collect(),
            ),
            (
                "ca_certificate",
                "CA certificate (PEM)",
                "textarea",
                "Needed for verify-ca and verify-full.",
                vec![],
            ),
        ]
    }
}

fn secret_labels(key: &str) -> &'static str {
    match key {
        "password" => "Password",
        "access_key_id" => "Access key ID",
        "secret_access_key" => "Secret access key",
        "session_token" => "Session token (optional)",
        _ => "Secret",
    }
}

fn build_fields(
    provider: Provider,
    values: &Map<String, Value>,
    errors: &FieldErrors,
) -> (Vec<Field>, Vec<Field>) {
    let settings = settings_fields(provider)
        .into_iter()
        .map(|(key, label, kind, hint, options)| Field {
            name: format!("settings.{key}"),
            label,
            value: match values.get(key) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(v) => v.to_string(),
            },
            kind,
            hint,
            error: errors.get(&format!("settings.{key}")).cloned(),
            options,
        })
        .collect();
    let secrets = secret_fields(provider)
        .iter()
        .map(|(key, _)| Field {
            name: format!("secrets.{key}"),
            label: secret_labels(key),
            value: String::new(),
            kind: "password",
            hint: "",
            error: errors.get(&format!("secrets.{key}")).cloned(),
            options: vec![],
        })
        .collect();
    (settings, secrets)
}

/// Form bodies: repeated `capabilities`, `settings.<key>` and `secrets.<key>` become a
/// `ConnectionInput`. Empty secret inputs mean "keep".
pub fn input_from_form(body: &[u8]) -> ConnectionInput {
    let mut input = ConnectionInput::default();
    let mut caps = Vec::new();
    let mut settings = Map::new();
    let mut secrets = Map::new();
    for (k, v) in url::form_urlencoded::parse(body) {
        match k.as_ref() {
            "name" => input.name = Some(v.into_owned()),
            "provider" => input.provider = Some(v.into_owned()),
            "capabilities" => caps.push(v.into_owned()),
            key => {
                if let Some(s) = key.strip_prefix("settings.") {
                    if !v.is_empty() {
                        settings.insert(s.to_string(), Value::String(v.into_owned()));
                    }
                } else if let Some(s) = key.strip_prefix("secrets.") {
                    if !v.is_empty() {
                        secrets.insert(s.to_string(), Value::String(v.into_owned()));
                    }
                }
            }
        }
    }
    input.capabilities = Some(caps);
    input.settings = Some(settings);
    input.secrets = Some(secrets);
    input
}

#[derive(Template)]
#[template(path = "connections/index.html")]
struct ListPage<'a> {
    layout: Layout,
    nav: Nav,
    items: &'a [ConnectionView],
    can_edit: bool,
}

#[handler]
pub async fn page_list(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<ListQuery>,
) -> PageResult<Response> {
    let w = q.window(connections::STATES)?;
    let page = listing::cached(&state.inner.snapshots, "connections", &w, || {
        connections::page(state.ctx(), &who, &w)
    })
    .await?;
    let nav = Nav::new(
        paths::CONNECTIONS,
        ("connection", "connections"),
        &w,
        connections::STATES,
        vec![],
        &page,
    );
    page_with_status(
        StatusCode::OK,
        &ListPage {
            layout: Layout::new("Connections", paths::CONNECTIONS, &who, jar),
            nav,
            items: &page.items,
            can_edit: who.role >= Role::Admin,
        },
    )
}

#[derive(Template)]
#[template(path = "connections/form.html")]
struct FormPage {
    layout: Layout,
    /// None for a new connection.
    id: Option<String>,
    name: String,
    provider: Provider,
    providers: [Provider; 5],
    source: bool,
    destination: bool,
    settings: Vec<Field>,
    secrets: Vec<Field>,
    secrets_set: Vec<String>,
    errors: FieldErrors,
    message: Option<String>,
}

impl FormPage {
    fn is_set(&self, field_name: &str) -> bool {
        let key = field_name.trim_start_matches("secrets.");
        self.secrets_set.iter().any(|s| s == key)
    }
}

#[derive(Deserialize)]
pub struct NewQuery {
    provider: Option<String>,
}

#[handler]
pub async fn page_new(
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<NewQuery>,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage connections")?;
    let provider = q
        .provider
        .as_deref()
        .and_then(Provider::parse)
        .unwrap_or(Provider::Postgresql);
    let (settings, secrets) = build_fields(provider, &Map::new(), &FieldErrors::new());
    page_with_status(
        StatusCode::OK,
        &FormPage {
            layout: Layout::new("New connection", paths::CONNECTIONS, &who, jar),
            id: None,
            name: String::new(),
            provider,
            providers: Provider::ALL,
            source: !provider.is_object_storage(),
            destination: provider.is_object_storage(),
            settings,
            secrets,
            secrets_set: vec![],
            errors: FieldErrors::new(),
            message: None,
        },
    )
}

/// The line above a form with errors: the details sit under each field.
fn fields_summary(fields: &FieldErrors) -> String {
    match fields.len() {
        1 => "Fix the field marked below.".into(),
        n => format!("Fix the {n} fields marked below."),
    }
}

#[allow(clippy::too_many_arguments)]
fn form_again(
    who: &Principal,
    jar: &CookieJar,
    id: Option<String>,
    input: &ConnectionInput,
    provider: Provider,
    errors: FieldErrors,
    message: Option<String>,
    secrets_set: Vec<String>,
) -> PageResult<Response> {
    let caps = input.capabilities.clone().unwrap_or_default();
    let (settings, secrets) = build_fields(
        provider,
        input.settings.as_ref().unwrap_or(&Map::new()),
        &errors,
    );
    page_with_status(
        StatusCode::UNPROCESSABLE_ENTITY,
        &FormPage {
            layout: Layout::new(
                if id.is_some() {
                    "Edit connection"
                } else {
                    "New connection"
                },
                paths::CONNECTIONS,
                who,
                jar,
            ),
            id,
            name: input.name.clone().unwrap_or_default(),
            provider,
            providers: Provider::ALL,
            source: caps.iter().any(|c| c == "SOURCE"),
            destination: caps.iter().any(|c| c == "DESTINATION"),
            settings,
            secrets,
            secrets_set,
            errors,
            message,
        },
    )
}

#[handler]
pub async fn page_create(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    body: Body,
) -> PageResult<Response> {
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let input = input_from_form(&bytes);
    let provider = input
        .provider
        .as_deref()
        .and_then(Provider::parse)
        .unwrap_or(Provider::Postgresql);
    match connections::create(state.ctx(), &who, &input).await {
        Ok(c) => {
            set_flash(
                jar,
                &format!(
                    "Connection {} saved. Run Test to check it.",
                    c.connection.name
                ),
            );
            Ok(redirect(req, &format!("/connections/{}", c.connection.id)))
        }
        Err(Error::Invalid { fields, .. }) => {
            let message = fields_summary(&fields);
            form_again(
                &who,
                jar,
                None,
                &input,
                provider,
                fields,
                Some(message),
                vec![],
            )
        }
        Err(Error::Conflict(message)) => form_again(
            &who,
            jar,
            None,
            &input,
            provider,
            [("name".to_string(), message.clone())].into(),
            Some(message),
            vec![],
        ),
        Err(e) => Err(e.into()),
    }
}

#[derive(Template)]
#[template(path = "connections/detail.html")]
struct DetailPage {
    layout: Layout,
    c: ConnectionView,
    settings: Vec<(String, String)>,
    can_edit: bool,
    can_test: bool,
    /// A PostgreSQL source: its replication slots are listed (loaded after the page).
    has_slots: bool,
    secret_names: Vec<(&'static str, &'static str, bool)>,
}

fn settings_rows(s: &Settings) -> Vec<(String, String)> {
    match serde_json::to_value(s) {
        Ok(Value::Object(m)) => m
            .into_iter()
            .map(|(k, v)| {
                (
                    k,
                    match v {
                        Value::String(s) if s.is_empty() => "—".to_string(),
                        Value::String(s) => s,
                        other => other.to_string(),
                    },
                )
            })
            .collect(),
        _ => vec![],
    }
}

#[handler]
pub async fn page_detail(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let c = connections::get(state.ctx(), &who, &id).await?;
    let secret_names = secret_fields(c.connection.provider)
        .iter()
        .map(|(k, _)| {
            (
                *k,
                secret_labels(k),
                c.secret_fields_set.iter().any(|s| s == k),
            )
        })
        .collect();
    page_with_status(
        StatusCode::OK,
        &DetailPage {
            layout: Layout::new(c.connection.name.clone(), paths::CONNECTIONS, &who, jar),
            settings: settings_rows(&c.connection.settings),
            can_edit: who.role >= Role::Admin,
            can_test: who.role >= Role::Operator,
            has_slots: c.connection.provider == Provider::Postgresql && c.connection.is_source(),
            secret_names,
            c,
        },
    )
}

#[handler]
pub async fn page_edit(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage connections")?;
    let c = connections::get(state.ctx(), &who, &id).await?;
    let values = match serde_json::to_value(&c.connection.settings) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let (settings, secrets) = build_fields(c.connection.provider, &values, &FieldErrors::new());
    page_with_status(
        StatusCode::OK,
        &FormPage {
            layout: Layout::new("Edit connection", paths::CONNECTIONS, &who, jar),
            id: Some(c.connection.id.clone()),
            name: c.connection.name.clone(),
            provider: c.connection.provider,
            providers: Provider::ALL,
            source: c.connection.is_source(),
            destination: c
                .connection
                .capabilities
                .contains(&connections::Capability::Destination),
            settings,
            secrets,
            secrets_set: c.secret_fields_set.clone(),
            errors: FieldErrors::new(),
            message: None,
        },
    )
}

#[handler]
pub async fn page_update(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    body: Body,
) -> PageResult<Response> {
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let mut input = input_from_form(&bytes);
    who.require(Role::Admin, "manage connections")?;
    let current = connections::load(&state.pool, &id).await?;
    input.provider = None;
    // The form sends every setting; blank ones are removed.
    let mut settings = input.settings.take().unwrap_or_default();
    for (key, ..) in settings_fields(current.provider) {
        settings.entry(key.to_string()).or_insert(Value::Null);
    }
    input.settings = Some(settings);
    match connections::update(state.ctx(), &who, &id, &input).await {
        Ok(c) => {
            set_flash(jar, &format!("Connection {} updated.", c.connection.name));
            Ok(redirect(req, &format!("/connections/{id}")))
        }
        Err(Error::Invalid { fields, .. }) => {
            let message = fields_summary(&fields);
            update_again(&state, &who, jar, id, &current, &bytes, fields, message).await
        }
        Err(Error::Conflict(m)) => {
            update_again(
                &state,
                &who,
                jar,
                id,
                &current,
                &bytes,
                [("name".to_string(), m.clone())].into(),
                m,
            )
            .await
        }
        Err(e) => Err(e.into()),
    }
}

#[allow(clippy::too_many_arguments)]
async fn update_again(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    id: String,
    current: &connections::Connection,
    body: &[u8],
    fields: FieldErrors,
    message: String,
) -> PageResult<Response> {
    let set = state
        .inner
        .ctx
        .secrets
        .fields_set(&current.secret_ref)
        .await
        .map_err(Error::Unexpected)?;
    let mut shown = input_from_form(body);
    shown.provider = Some(current.provider.as_str().into());
    form_again(
        who,
        jar,
        Some(id),
        &shown,
        current.provider,
        fields,
        Some(message),
        set,
    )
}

#[derive(Template)]
#[template(path = "connections/test_partial.html")]
struct TestResult {
    report: TestReport,
}

/// The Test button's target: runs the checks and answers the results fragment.
#[handler]
pub async fn page_test(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let report = connections::test(&state.pool, &state.inner.ctx.secrets, &who, &id).await?;
    page_with_status(StatusCode::OK, &TestResult { report })
}

#[handler]
pub async fn page_rotate(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    body: Body,
) -> PageResult<Response> {
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let input = input_from_form(&bytes);
    match connections::rotate(
        &state.pool,
        &state.inner.ctx.secrets,
        &who,
        &id,
        input.secrets.as_ref().unwrap_or(&Map::new()),
    )
    .await
    {
        Ok(_) => {
            set_flash(jar, "Credentials replaced; the secret reference is unchanged. Restart affected connector tasks to pick them up.");
            Ok(redirect(req, &format!("/connections/{id}")))
        }
        Err(Error::Invalid { message, .. }) => {
            set_flash(jar, &format!("Credentials not replaced: {message}"));
            Ok(redirect(req, &format!("/connections/{id}")))
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Template)]
#[template(path = "connections/delete.html")]
struct DeletePage {
    layout: Layout,
    c: ConnectionView,
    used_by: Vec<String>,
}

/// Destructive actions ask first, on a page that says what will be lost.
#[handler]
pub async fn page_delete_confirm(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage connections")?;
    let c = connections::get(state.ctx(), &who, &id).await?;
    let used_by = connections::used_by(&state.pool, &id).await?;
    page_with_status(
        StatusCode::OK,
        &DeletePage {
            layout: Layout::new(
                format!("Delete {}", c.connection.name),
                paths::CONNECTIONS,
                &who,
                jar,
            ),
            c,
            used_by,
        },
    )
}

#[handler]
pub async fn page_delete(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage connections")?;
    let c = connections::load(&state.pool, &id).await?;
    connections::delete(state.ctx(), &who, &id).await?;
    set_flash(jar, &format!("Connection {} deleted.", c.name));
    Ok(redirect(req, paths::CONNECTIONS))
}

/// A PostgreSQL source's replication slots, loaded into its page after it renders (reading
/// the source can take seconds). Orphans can be dropped by an admin who types the name.
#[derive(Template)]
#[template(path = "connections/slots_partial.html")]
struct SlotsFragment {
    connection_id: String,
    slots: Vec<crate::pipelines::OwnedSlot>,
    error: Option<String>,
    /// The outcome of a drop just made, or why it was refused, for one slot.
    notice: Option<String>,
    refused: Option<(String, String)>,
    can_drop: bool,
    csrf_token: String,
}

impl SlotsFragment {
    fn refused_for(&self, slot: &str) -> Option<&String> {
        self.refused
            .as_ref()
            .filter(|(name, _)| name == slot)
            .map(|(_, why)| why)
    }
}

async fn slots_fragment(
    state: &AppState,
    who: &Principal,
    id: &str,
    notice: Option<String>,
    refused: Option<(String, String)>,
) -> SlotsFragment {
    let (slots, error) = match crate::pipelines::source_slots(
        &state.pool,
        &state.inner.ctx.secrets,
        who,
        id,
    )
    .await
    {
        Ok(s) => (s, None),
        Err(e) => (vec![], Some(e.to_string())),
    };
    SlotsFragment {
        connection_id: id.to_string(),
        slots,
        error,
        notice,
        refused,
        can_drop: who.role >= Role::Admin,
        csrf_token: who.csrf_token().unwrap_or_default().to_string(),
    }
}

#[handler]
pub async fn slots_partial(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> PageResult<Response> {
    who.require(Role::Viewer, "see replication slots")?;
    page_with_status(
        StatusCode::OK,
        &slots_fragment(&state, &who, &id, None, None).await,
    )
}

#[handler]
pub async fn drop_slot_form(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path((id, name)): Path<(String, String)>,
    Form(form): Form<SlotConfirm>,
) -> PageResult<Response> {
    who.require(Role::Admin, "drop replication slots")?;
    match crate::pipelines::drop_orphan_slot(state.ctx(), &who, &id, &name, &form.confirm).await {
        Ok(()) => {
            let notice = format!(
                "Replication slot {name} dropped: the WAL it retained can be recycled now."
            );
            page_with_status(
                StatusCode::OK,
                &slots_fragment(&state, &who, &id, Some(notice), None).await,
            )
        }
        // Refusals are shown next to the slot: a wrong confirmation, a slot that is in use or
        // owned by a pipeline, or a source that cannot be reached.
        Err(
            e @ (Error::Invalid { .. }
            | Error::Conflict(_)
            | Error::NotFound(_)
            | Error::Unavailable(_)),
        ) => {
            let why = match &e {
                Error::Invalid { fields, .. } => fields
                    .get("confirm")
                    .cloned()
                    .unwrap_or_else(|| e.to_string()),
                other => other.to_string(),
            };
            page_with_status(
                StatusCode::UNPROCESSABLE_ENTITY,
                &slots_fragment(&state, &who, &id, None, Some((name, why))).await,
            )
        }
        Err(e) => Err(e.into()),
    }
}
