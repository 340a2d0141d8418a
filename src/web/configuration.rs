//! Configuration as code over HTTP: `GET /api/v1/export`, `POST /api/v1/apply`, and the
//! Settings → Configuration page (download an export, paste a document, see its plan, apply).

use std::collections::BTreeMap;

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Query};
use poem::{handler, Request, RequestBody, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::api::{Ctx as ApiCtx, Input, Media, OpDoc, Reply, Text};
use super::error::{public_message, status_of, ApiResult, ErrorDetail, PageResult};
use super::pages::{page_with_status, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::error::{Error, FieldErrors};
use crate::manifest::apply::{self, Report};
use crate::manifest::doc::{self, Problem};
use crate::manifest::plan::{self, Ctx, Plan, Values};
use crate::manifest::{export, strimzi};
use crate::secrets::Secret;

/// Over HTTP, a document's references get their values from the request alone (`Values`).
fn ctx<'a>(state: &'a AppState, who: &'a Principal, values: &'a Values) -> Ctx<'a> {
    Ctx {
        svc: state.ctx(),
        who,
        values,
    }
}

/// `POST /api/v1/apply`'s body as JSON (`Content-Type: application/json`): the document, and
/// values for its secret references. The YAML document alone is also accepted as the body with
/// any other content type (`application/yaml`, `text/yaml`, `text/plain`); its references then
/// have no values.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ApplyDocument")]
struct ApplyBody {
    /// The configuration document (YAML, `apiVersion: cluecdc/v1`), as text.
    document: String,
    /// Values for the document's `{env: NAME}` and `{file: PATH}` references, keyed by the
    /// variable's name or the file's path as written; never echoed back.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, String>", extend("writeOnly" = true))]
    secrets: BTreeMap<String, Secret<String>>,
}

/// `POST /api/v1/apply`'s body as sent: read here, parsed by the handler once the caller's role
/// is checked (a viewer is refused, not told what is wrong with the body).
pub struct ApplyInput {
    text: String,
    json: bool,
}

impl ApplyInput {
    /// The document and the values of its references, from either body form.
    fn document(self) -> Result<(String, Values), Error> {
        if !self.json {
            return Ok((self.text, Values::Given(BTreeMap::new())));
        }
        let b: ApplyBody = serde_json::from_str(&self.text).map_err(|e| {
            // serde's message names the field, never a value.
            Error::field(
                "(body)",
                format!("send {{\"document\": \"<YAML>\", \"secrets\": {{\"<NAME>\": \"<value>\"}}}}, or the YAML alone: {}", e.to_string().split(" at line").next().unwrap_or_default()),
            )
        })?;
        Ok((b.document, Values::Given(b.secrets)))
    }
}

impl Input for ApplyInput {
    async fn extract(req: &Request, body: &mut RequestBody) -> ApiResult<Self> {
        let text = body
            .take()
            .map_err(|_| Error::field("(document)", "send the document once"))?
            .into_string()
            .await
            .map_err(|_| Error::field("(document)", "send the document as UTF-8 YAML"))?;
        let json = req
            .content_type()
            .is_some_and(|t| t.starts_with("application/json"));
        Ok(ApplyInput { text, json })
    }

    fn describe(op: &mut OpDoc) {
        op.body::<ApplyBody>();
    }
}

/// Which form `GET /api/v1/export` answers in.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ExportQuery {
    /// `cluecdc` (the default): the declarative document; `strimzi`: KafkaConnector and
    /// KafkaTopic resources (then `namespace` and `connect_cluster` are required).
    #[schemars(with = "Option<ExportFormat>")]
    format: Option<String>,
    /// The Kubernetes namespace the resources go to (`strimzi`).
    namespace: Option<String>,
    /// The name of the Strimzi KafkaConnect resource that runs the connectors (`strimzi`).
    connect_cluster: Option<String>,
    /// The Strimzi Kafka resource the topics belong to (`strimzi`; optional).
    kafka_cluster: Option<String>,
}

/// Documents `ExportQuery.format`.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum ExportFormat {
    Cluecdc,
    Strimzi,
}

/// YAML, as exported.
pub struct Yaml;

impl Media for Yaml {
    const TYPES: &'static [&'static str] = &["application/yaml"];
}

/// The export as YAML text, in the format asked for.
async fn export_text(state: &AppState, who: &Principal, q: &ExportQuery) -> Result<String, Error> {
    match q.format.as_deref().unwrap_or("cluecdc") {
        "cluecdc" => export::export(state.ctx(), who).await,
        "strimzi" => {
            let given = |v: &Option<String>| v.clone().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
            let mut errors = crate::error::FieldErrors::new();
            let namespace = given(&q.namespace).unwrap_or_else(|| {
                errors.insert("namespace".into(), "the Kubernetes namespace the resources go to".into());
                String::new()
            });
            let connect_cluster = given(&q.connect_cluster).unwrap_or_else(|| {
                errors.insert("connect_cluster".into(), "the name of the Strimzi KafkaConnect resource that runs the connectors".into());
                String::new()
            });
            Error::check(errors)?;
            let target = strimzi::Target { namespace, connect_cluster, kafka_cluster: given(&q.kafka_cluster) };
            let (text, warnings) = strimzi::export(state.ctx(), who, &target).await?;
            // Warnings go on top as YAML comments: they travel with the file.
            let head: String = warnings.iter().map(|w| format!("# NOTE: {w}\n")).collect();
            Ok(format!("{head}{text}"))
        }
        _ => Err(Error::field("format", "cluecdc (the declarative document) or strimzi (KafkaConnector and KafkaTopic resources)")),
    }
}

fn yaml(text: String, file_name: Option<&str>) -> Response {
    let mut r = Response::builder().content_type("application/yaml; charset=utf-8");
    if let Some(name) = file_name {
        r = r.header(
            "content-disposition",
            format!("attachment; filename=\"{name}\""),
        );
    }
    r.body(text)
}

pub async fn api_export(cx: ApiCtx, Query(q): Query<ExportQuery>) -> ApiResult<Text<Yaml>> {
    cx.who.require(Role::Admin, "export the configuration")?;
    Ok(Text {
        content_type: "application/yaml; charset=utf-8",
        body: export_text(&cx.state, &cx.who, &q).await?,
        filename: None,
        media: std::marker::PhantomData,
    })
}

/// How `POST /api/v1/apply` is asked to act.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ApplyQuery {
    /// Plan only: answer what would change; change nothing.
    dry_run: Option<bool>,
    /// Delete what the document leaves out (dependents first).
    prune: Option<bool>,
}

fn parse(text: &str) -> Result<doc::Loaded, Error> {
    doc::parse(text).map_err(plan::refusal)
}

/// `POST /api/v1/apply`'s answer on success.
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "ApplyResult")]
pub enum Applied {
    /// `dry_run=true`: the plan; nothing was changed.
    Planned(Planned),
    /// Every step of the plan was applied.
    Done(Box<Report>),
}

/// The plan of a dry run.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "PlannedApply")]
pub struct Planned {
    #[serde(flatten)]
    plan: Plan,
    /// Always false: a dry run applies nothing.
    applied: bool,
}

/// A failed apply: its report with the error in the API's shape beside it.
#[derive(Serialize)]
struct FailedApply<'a> {
    #[serde(flatten)]
    report: &'a Report,
    error: ErrorDetail,
}

/// The answer: 200 with [`Applied`], or, when a step failed, that step's error status with
/// the error object (`ApiError`) and the report of what was done and what is left beside it.
pub struct ApplyAnswer(Response);

impl Reply for ApplyAnswer {
    fn into_reply(self) -> Response {
        self.0
    }

    fn describe(op: &mut OpDoc) {
        op.json_response::<Applied>(
            StatusCode::OK,
            "The plan (`dry_run=true`) or what was applied",
        );
    }
}

fn json_reply<T: Serialize>(status: StatusCode, body: &T) -> Result<ApplyAnswer, Error> {
    let text = serde_json::to_string(body).map_err(|e| Error::Unexpected(e.into()))?;
    Ok(ApplyAnswer(
        Response::builder()
            .status(status)
            .content_type("application/json")
            .body(text),
    ))
}

fn report_response(r: Report) -> Result<ApplyAnswer, Error> {
    let Some(f) = &r.failed else {
        return json_reply(StatusCode::OK, &Applied::Done(Box::new(r)));
    };
    let (status, message) = match &f.cause {
        Some(e) => (status_of(e), public_message(e)),
        None => (StatusCode::INTERNAL_SERVER_ERROR, f.error.clone()),
    };
    let fields = match &f.cause {
        Some(Error::Invalid { fields, .. }) => fields.clone(),
        _ => FieldErrors::new(),
    };
    let error = ErrorDetail {
        code: f.code,
        message: format!(
            "apply stopped at {}: {message}; {} step(s) done, {} left",
            f.step,
            r.done.len(),
            r.left.len()
        ),
        fields,
        request_id: crate::telemetry::current_request_id(),
    };
    json_reply(status, &FailedApply { report: &r, error })
}

pub async fn api_apply(
    cx: ApiCtx,
    Query(q): Query<ApplyQuery>,
    input: ApplyInput,
) -> ApiResult<ApplyAnswer> {
    cx.who.require(Role::Admin, "apply configuration")?;
    let (text, values) = input.document()?;
    let loaded = parse(&text)?;
    let prune = q.prune.unwrap_or(false);
    let c = ctx(&cx.state, &cx.who, &values);
    let plan = plan::plan(&c, &loaded, prune).await?;
    if q.dry_run.unwrap_or(false) {
        return Ok(json_reply(
            StatusCode::OK,
            &Applied::Planned(Planned {
                plan,
                applied: false,
            }),
        )?);
    }
    Ok(report_response(apply::apply(&c, plan, prune).await)?)
}

// ---- the page -------------------------------------------------------------------------------

/// The form field that carries a reference's value: `value:<NAME or PATH>`.
const VALUE_FIELD: &str = "value:";

#[derive(Debug, Default, Deserialize)]
pub struct DocumentForm {
    #[serde(default)]
    document: String,
    #[serde(default)]
    prune: Option<String>,
    /// The other fields: the CSRF token, and `value:<key>` for each secret reference.
    #[serde(flatten)]
    rest: BTreeMap<String, String>,
}

impl DocumentForm {
    fn prune(&self) -> bool {
        self.prune
            .as_deref()
            .is_some_and(|v| v == "on" || v == "true")
    }

    /// The values typed for the document's references; the form is never rendered with them.
    fn values(&mut self) -> Values {
        let rest = std::mem::take(&mut self.rest);
        Values::Given(
            rest.into_iter()
                .filter_map(|(k, v)| {
                    let key = k.strip_prefix(VALUE_FIELD)?.to_string();
                    (!v.is_empty()).then(|| (key, Secret::new(v)))
                })
                .collect(),
        )
    }
}

/// A reference of the pasted document, as the page offers a password field for it.
struct Reference {
    field: String,
    label: String,
}

fn references(loaded: &Result<doc::Loaded, Error>) -> Vec<Reference> {
    let Ok(l) = loaded else {
        return Vec::new();
    };
    l.references()
        .into_iter()
        .map(|r| Reference {
            field: format!("{VALUE_FIELD}{}", r.key()),
            label: match &r {
                doc::SecretSource::Env(n) => format!("env {n}"),
                doc::SecretSource::File(p) => format!("file {p}"),
            },
        })
        .collect()
}

#[derive(Template)]
#[template(path = "configuration/index.html")]
struct ConfigurationPage {
    layout: Layout,
    form: DocumentForm,
    /// A plan to confirm (after "Plan").
    plan: Option<Plan>,
    /// What apply did (after "Apply").
    report: Option<Report>,
    /// Why the document was refused, by path.
    problems: Vec<Problem>,
    /// A refusal that is not about a place in the document (a service or provider error).
    error: Option<String>,
    connect_clusters: Vec<String>,
    /// The document's secret references, each a password field (empty: values are not kept).
    references: Vec<Reference>,
}

async fn page_of(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    form: DocumentForm,
) -> Result<ConfigurationPage, Error> {
    who.require(Role::Admin, "export or apply the configuration")?;
    Ok(ConfigurationPage {
        layout: Layout::new("Configuration as code", paths::CONFIGURATION, who, jar),
        form,
        plan: None,
        report: None,
        problems: Vec::new(),
        error: None,
        references: Vec::new(),
        connect_clusters: crate::clusters::connect::list(state.ctx(), who)
            .await?
            .into_iter()
            .map(|c| c.name)
            .collect(),
    })
}

fn problems_of(e: Error) -> (Vec<Problem>, Option<String>) {
    match e {
        Error::Invalid { fields, message } if fields.is_empty() => (Vec::new(), Some(message)),
        Error::Invalid { fields, .. } => (
            fields
                .into_iter()
                .map(|(p, m)| Problem::new(p, m))
                .collect(),
            None,
        ),
        other => (Vec::new(), Some(public_message(&other))),
    }
}

#[handler]
pub async fn page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
) -> PageResult<Response> {
    page_with_status(
        StatusCode::OK,
        &page_of(&state, &who, jar, DocumentForm::default()).await?,
    )
}

#[handler]
pub async fn download(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Query(q): Query<ExportQuery>,
) -> PageResult<Response> {
    who.require(Role::Admin, "export the configuration")?;
    let strimzi = q.format.as_deref() == Some("strimzi");
    let text = export_text(&state, &who, &q).await?;
    Ok(yaml(
        text,
        Some(if strimzi {
            "cluecdc-strimzi.yaml"
        } else {
            "cluecdc.yaml"
        }),
    ))
}

/// "Plan": the plan of the pasted document (422 with every problem under its path).
#[handler]
pub async fn plan_form(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Form(mut form): Form<DocumentForm>,
) -> PageResult<Response> {
    let prune = form.prune();
    let values = form.values();
    let loaded = parse(&form.document);
    let mut view = page_of(&state, &who, jar, form).await?;
    view.references = references(&loaded);
    let result = match loaded {
        Ok(l) => plan::plan(&ctx(&state, &who, &values), &l, prune).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(p) => {
            view.plan = Some(p);
            page_with_status(StatusCode::OK, &view)
        }
        Err(e) => {
            let status = status_of(&e);
            (view.problems, view.error) = problems_of(e);
            page_with_status(status, &view)
        }
    }
}

/// "Apply": plans the document again (it may have changed since) and carries the plan out.
#[handler]
pub async fn apply_form(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Form(mut form): Form<DocumentForm>,
) -> PageResult<Response> {
    let prune = form.prune();
    let values = form.values();
    let loaded = parse(&form.document);
    let mut view = page_of(&state, &who, jar, form).await?;
    view.references = references(&loaded);
    let c = ctx(&state, &who, &values);
    let planned = match loaded {
        Ok(l) => plan::plan(&c, &l, prune).await,
        Err(e) => Err(e),
    };
    match planned {
        Ok(p) => {
            let report = apply::apply(&c, p, prune).await;
            let status = match &report.failed {
                Some(f) => f
                    .cause
                    .as_ref()
                    .map(status_of)
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                None => StatusCode::OK,
            };
            view.report = Some(report);
            page_with_status(status, &view)
        }
        Err(e) => {
            let status = status_of(&e);
            (view.problems, view.error) = problems_of(e);
            page_with_status(status, &view)
        }
    }
}
