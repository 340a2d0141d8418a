//! `plan`: what applying a declared document would create, change (field by field) and delete,
//! checked the way the API checks each resource before anything changes.
//!
//! Every declared resource is normalized by its domain's own validation (defaults filled in),
//! so it compares equal to the stored one exactly when applying it would change nothing; the
//! stored side is the export (`export::current`). Secrets are compared by value (read from
//! their variable or file, decrypted on the stored side) and reported only as set or replaced.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::doc::{self, Loaded, Problem, SecretSource};
use super::export::{self, Current};
use crate::auth::Principal;
use crate::error::{Error, FieldErrors, Result};
use crate::secrets::Secret;

/// What plan and apply act with: the service functions' own arguments.
pub struct Ctx<'a> {
    /// The service context (which this derefs to).
    pub svc: &'a crate::ctx::Ctx,
    pub who: &'a Principal,
    /// Where the document's secret references get their values.
    pub values: &'a Values,
}

impl std::ops::Deref for Ctx<'_> {
    type Target = crate::ctx::Ctx;
    fn deref(&self) -> &crate::ctx::Ctx {
        self.svc
    }
}

/// Where a document's `{env}` and `{file}` references are read.
///
/// Invariant: only the caller's own side resolves references. The `cluecdc` CLI reads its own
/// environment and files (`Local`); a document sent over HTTP gets values only from the
/// request (`Given`, keyed by the reference as written: the variable's name or the file's
/// path), and the server never reads a variable or file of its own for it: otherwise whoever
/// may apply a document could have the server put its master key, or any file it can read,
/// into a secret and send it to an address of their choosing.
pub enum Values {
    Local,
    Given(BTreeMap<String, Secret<String>>),
}

impl Values {
    /// The CLI's: references are read where `cluecdc` runs.
    pub const LOCAL: &'static Values = &Values::Local;

    fn read(&self, src: &SecretSource) -> std::result::Result<Secret<String>, String> {
        let Values::Given(given) = self else {
            return src.read();
        };
        let key = src.key();
        let written = match src {
            SecretSource::Env(n) => format!("{{env: {n}}}"),
            SecretSource::File(p) => format!("{{file: {p}}}"),
        };
        match given.get(key) {
            Some(v) if !v.expose().is_empty() => Ok(v.clone()),
            _ => Err(format!(
                "the server never reads {written} itself: give its value in the request's secrets under {key:?} (on the Configuration page, in its field), or apply from a shell with `cluecdc apply`, which reads it where it runs"
            )),
        }
    }
}

/// A declared secret's value: read (given) now, or the stored one, kept because its reference
/// could not be read here.
enum Declared {
    Given(Secret<String>),
    Kept(Secret<String>),
}

impl Declared {
    fn value(&self) -> &Secret<String> {
        match self {
            Declared::Given(v) | Declared::Kept(v) => v,
        }
    }
    fn is_given(&self) -> bool {
        matches!(self, Declared::Given(_))
    }
}

/// Refuses, by path, each stored secret whose binding the change moves (`changed` holds the
/// changed settings) unless its value was given: a kept value never follows a resource to a new
/// address. True when nothing was refused.
fn check_rebound(
    p: &mut Problems,
    path: &str,
    prefix: &str,
    rebound: &[crate::secrets::binding::Rebound],
    given: impl Fn(&str) -> bool,
) -> bool {
    let refused = crate::secrets::binding::refusals(rebound, given, prefix);
    for (field, why) in &refused {
        p.at(path, field, format!("{why}; the document's reference could not be read here, so the stored value cannot be used"));
    }
    refused.is_empty()
}

/// A resource a plan creates or deletes.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
#[schemars(rename = "PlannedResource")]
pub struct Named {
    #[schemars(with = "ResourceKind")]
    pub kind: &'static str,
    pub name: String,
}

/// The kinds of resource a configuration document declares (documents the plan's `kind`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum ResourceKind {
    KafkaCluster,
    ConnectCluster,
    Connection,
    Pipeline,
    Delivery,
    Webhook,
    AlertChannel,
    AlertRule,
}

/// One field's value before and after (secrets appear as markers, never values).
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct FieldChange {
    /// The current value (any JSON).
    pub from: Value,
    /// The declared value (any JSON).
    pub to: Value,
}

/// A resource a plan changes in place, field by field.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
#[schemars(rename = "PlannedChange")]
pub struct Changed {
    #[schemars(with = "ResourceKind")]
    pub kind: &'static str,
    pub name: String,
    /// Path within the resource (`tables`, `options.insert_mode`, `secrets.password`) → values.
    pub fields: BTreeMap<String, FieldChange>,
}

/// What applying a configuration document changes: resources to create, change and delete
/// (delete only with `prune=true`), in the order they are applied.
#[derive(Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Plan {
    pub create: Vec<Named>,
    pub change: Vec<Changed>,
    pub delete: Vec<Named>,
    /// What could not be checked before anything is applied, and when apply checks it.
    pub notes: Vec<String>,
    #[serde(skip)]
    pub(super) steps: Vec<Step>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.change.is_empty() && self.delete.is_empty()
    }

    /// The plan as a person at a shell reads it.
    pub fn text(&self) -> String {
        if self.is_empty() {
            return "No changes: ClueCDC already matches the document.\n".into();
        }
        let mut out = String::new();
        for n in &self.create {
            out.push_str(&format!("+ create {} {:?}\n", n.kind, n.name));
        }
        for c in &self.change {
            out.push_str(&format!("~ change {} {:?}\n", c.kind, c.name));
            for (path, f) in &c.fields {
                out.push_str(&format!(
                    "    {path}: {} → {}\n",
                    compact(&f.from),
                    compact(&f.to)
                ));
            }
        }
        for n in &self.delete {
            out.push_str(&format!("- delete {} {:?}\n", n.kind, n.name));
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out.push_str(&format!(
            "Plan: {} to create, {} to change, {} to delete.\n",
            self.create.len(),
            self.change.len(),
            self.delete.len()
        ));
        out
    }
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// One service call of an apply, in the order apply makes them. Secret values read at plan
/// time travel here, never into the plan's printed form.
#[derive(Debug)]
pub(super) enum Step {
    CreateKafka(crate::clusters::kafka::KafkaClusterInput),
    ChangeKafka(String, crate::clusters::kafka::KafkaClusterInput),
    CreateConnect {
        input: crate::clusters::ConnectClusterInput,
        kafka: Option<String>,
    },
    ChangeConnect {
        name: String,
        patch: crate::clusters::ConnectClusterInput,
        kafka: Option<String>,
        token: Option<Secret<String>>,
    },
    CreateConnection(crate::connections::ConnectionInput),
    ChangeConnection {
        name: String,
        patch: crate::connections::ConnectionInput,
        secrets: Option<Map<String, Value>>,
    },
    SetRule(String, crate::monitor::signals::RulePatch),
    CreateWebhook(crate::monitor::webhooks::WebhookInput),
    DeleteWebhook(String),
    CreateChannel(crate::monitor::channels::ChannelInput),
    ChangeChannel(String, crate::monitor::channels::ChannelInput),
    CreatePipeline(doc::Pipeline),
    SetTables(String, Vec<String>),
    SetPipelineState(String, String),
    CreateDelivery(doc::Delivery),
    ChangeDelivery(String, crate::deliveries::DeliveryInput),
    SetDeliveryState(String, String),
    Delete(&'static str, String),
}

impl Step {
    /// What the step does, in words (apply's report of what is done and what is left).
    pub fn label(&self) -> String {
        match self {
            Step::CreateKafka(i) => format!("create kafka_cluster {:?}", name(&i.name)),
            Step::ChangeKafka(n, _) => format!("change kafka_cluster {n:?}"),
            Step::CreateConnect { input, .. } => {
                format!("create connect_cluster {:?}", name(&input.name))
            }
            Step::ChangeConnect { name, .. } => format!("change connect_cluster {name:?}"),
            Step::CreateConnection(i) => format!("create connection {:?}", name(&i.name)),
            Step::ChangeConnection { name, .. } => format!("change connection {name:?}"),
            Step::SetRule(k, _) => format!("change alert_rule {k:?}"),
            Step::CreateWebhook(i) => format!("create webhook {:?}", name(&i.url)),
            Step::DeleteWebhook(u) => format!("delete webhook {u:?}"),
            Step::CreateChannel(i) => format!("create alert_channel {:?}", name(&i.name)),
            Step::ChangeChannel(n, _) => format!("change alert_channel {n:?}"),
            Step::CreatePipeline(p) => format!("create pipeline {:?}", p.name),
            Step::SetTables(n, _) => format!("change the tables of pipeline {n:?}"),
            Step::SetPipelineState(n, s) => format!("set pipeline {n:?} {s}"),
            Step::CreateDelivery(d) => format!("create delivery {:?}", d.name),
            Step::ChangeDelivery(n, _) => format!("change delivery {n:?}"),
            Step::SetDeliveryState(n, s) => format!("set delivery {n:?} {s}"),
            Step::Delete(kind, n) => format!("delete {kind} {n:?}"),
        }
    }
}

fn name(n: &Option<String>) -> &str {
    n.as_deref().unwrap_or("")
}

/// The singular kind a plan reports, for a document section.
fn singular(section: &str) -> &'static str {
    match section {
        "kafka_clusters" => "kafka_cluster",
        "connect_clusters" => "connect_cluster",
        "connections" => "connection",
        "pipelines" => "pipeline",
        "deliveries" => "delivery",
        "alert_rules" => "alert_rule",
        "alert_channels" => "alert_channel",
        _ => "webhook",
    }
}

/// Field-by-field difference of two resources (objects recurse into dotted paths; lists and
/// scalars compare whole). `skip`: top-level fields compared elsewhere (secrets).
pub fn diff<T: Serialize>(from: &T, to: &T, skip: &[&str]) -> BTreeMap<String, FieldChange> {
    fn walk(
        prefix: &str,
        a: &Value,
        b: &Value,
        skip: &[&str],
        out: &mut BTreeMap<String, FieldChange>,
    ) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    if prefix.is_empty() && skip.contains(&k.as_str()) {
                        continue;
                    }
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(
                        &path,
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        &[],
                        out,
                    );
                }
            }
            _ if a == b => {}
            _ => {
                out.insert(
                    prefix.to_string(),
                    FieldChange {
                        from: a.clone(),
                        to: b.clone(),
                    },
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", &json!(from), &json!(to), skip, &mut out);
    out
}

/// Records a secret field's change, in words only.
fn secret_change(
    fields: &mut BTreeMap<String, FieldChange>,
    key: &str,
    stored: Option<&Secret<String>>,
    declared: Option<&Secret<String>>,
    source: Option<&SecretSource>,
) {
    let whence = |s: Option<&SecretSource>| match s {
        Some(SecretSource::Env(n)) => format!("(new value from env {n})"),
        Some(SecretSource::File(p)) => format!("(new value from file {p})"),
        None => "(new value)".into(),
    };
    let change = match (stored, declared) {
        (None, None) => None,
        (Some(_), None) => Some(("(set)".to_string(), "(not set)".to_string())),
        (None, Some(_)) => Some(("(not set)".to_string(), whence(source))),
        (Some(a), Some(b)) if a.expose() != b.expose() => {
            Some(("(set)".to_string(), whence(source)))
        }
        _ => None,
    };
    if let Some((from, to)) = change {
        fields.insert(
            key.to_string(),
            FieldChange {
                from: Value::String(from),
                to: Value::String(to),
            },
        );
    }
}

/// A pipeline or delivery to create, then (declared paused or stopped) to put in its state.
fn plan_create(
    plan: &mut Plan,
    kind: &'static str,
    name: &str,
    state: &str,
    create: Step,
    set_state: fn(String, String) -> Step,
) {
    plan.create.push(Named {
        kind,
        name: name.to_string(),
    });
    plan.steps.push(create);
    if state != "running" {
        plan.steps
            .push(set_state(name.to_string(), state.to_string()));
    }
}

/// Refuses, by path, each changed field of an existing `what` that cannot change in place;
/// true when there was one.
fn refuse_fixed(
    p: &mut Problems,
    path: &str,
    fields: &BTreeMap<String, FieldChange>,
    changeable: impl Fn(&str) -> bool,
    what: &str,
    why: &str,
) -> bool {
    let mut any = false;
    for (k, f) in fields.iter().filter(|(k, _)| !changeable(k)) {
        any = true;
        p.at(path, k, format!("cannot change on an existing {what} (from {} to {}){why}; create a {what} under another name instead", compact(&f.from), compact(&f.to)));
    }
    any
}

/// Problems collected across the whole document; plan refuses with all of them at once.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn at(&mut self, path: &str, field: &str, message: impl Into<String>) {
        let path = if field.is_empty() {
            path.to_string()
        } else {
            format!("{path}.{field}")
        };
        self.0.push(Problem::new(path, message));
    }
    /// A service's field errors, under the resource's path (`config.x` becomes `options.x`).
    fn fields(&mut self, path: &str, errors: &FieldErrors) {
        for (k, v) in errors {
            self.at(path, k, v.clone());
        }
    }
    fn error(&mut self, path: &str, e: Error) {
        match e {
            Error::Invalid { fields, message } if fields.is_empty() => self.at(path, "", message),
            Error::Invalid { fields, .. } => self.fields(path, &fields),
            other => self.at(path, "", other.to_string()),
        }
    }
}

/// Refuses the plan with every problem, each keyed by its path.
pub fn refusal(problems: Vec<Problem>) -> Error {
    let fields: FieldErrors = problems
        .iter()
        .map(|p| (p.path.clone(), p.message.clone()))
        .collect();
    Error::Invalid {
        message: format!(
            "the document was refused, nothing changed: {}",
            problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ),
        fields,
    }
}

/// A declared secret's value. When its reference cannot be read where the plan runs (over
/// HTTP: the request gave no value for it), a resource that has the secret stored keeps it,
/// and the plan says so, unless the change moves the secret's binding (`check_rebound`); a
/// resource being created needs it.
fn declared_secret(
    ctx: &Ctx<'_>,
    p: &mut Problems,
    notes: &mut Vec<String>,
    path: &str,
    field: &str,
    src: Option<&SecretSource>,
    stored: Option<&Secret<String>>,
) -> Option<Declared> {
    match (ctx.values.read(src?), stored) {
        (Ok(v), _) => Some(Declared::Given(v)),
        (Err(why), Some(kept)) => {
            notes.push(format!("{path}.{field}: {why}; the stored value is kept"));
            Some(Declared::Kept(kept.clone()))
        }
        (Err(why), None) => {
            p.at(path, field, why);
            None
        }
    }
}

async fn stored_secret(
    ctx: &Ctx<'_>,
    secret_ref: Option<&String>,
    field: &str,
) -> Result<Option<Secret<String>>> {
    match secret_ref {
        Some(r) => ctx.secrets.get(r, field).await.map_err(Error::Unexpected),
        None => Ok(None),
    }
}

/// A name of `section` that a reference may use: declared, or stored and not about to be
/// deleted by `--prune`.
struct Names<'a> {
    cur: &'a Current,
    declared: HashMap<&'static str, HashSet<String>>,
    prune: bool,
}

impl Names<'_> {
    fn check(&self, section: &'static str, name: &str) -> std::result::Result<(), String> {
        let what = singular(section).replace('_', " ");
        if self.declared.get(section).is_some_and(|s| s.contains(name)) {
            return Ok(());
        }
        match (self.cur.id(section, name), self.prune) {
            (Some(_), false) => Ok(()),
            (Some(_), true) => Err(format!(
                "{what} {name:?} is not in the document, so --prune would delete it; add it to the document or apply without --prune"
            )),
            (None, _) => Err(format!(
                "no {what} named {name:?} in the document or in ClueCDC"
            )),
        }
    }
    fn is_new(&self, section: &str, name: &str) -> bool {
        self.cur.id(section, name).is_none()
    }
}

/// Plans `loaded` against what is stored. Refuses (422, every problem by path) when anything
/// in the document is wrong; then nothing has changed.
pub async fn plan(ctx: &Ctx<'_>, loaded: &Loaded, prune: bool) -> Result<Plan> {
    let cur = export::current(ctx, ctx.who).await?;
    let d = &loaded.doc;
    let mut p = Problems::default();
    let mut plan = Plan::default();

    // Names are identities: one resource per name and kind.
    let mut declared: HashMap<&'static str, HashSet<String>> = HashMap::new();
    let sections: [(&'static str, Vec<&str>); 8] = [
        (
            "kafka_clusters",
            d.kafka_clusters.iter().map(|x| x.name.as_str()).collect(),
        ),
        (
            "connect_clusters",
            d.connect_clusters.iter().map(|x| x.name.as_str()).collect(),
        ),
        (
            "connections",
            d.connections.iter().map(|x| x.name.as_str()).collect(),
        ),
        (
            "pipelines",
            d.pipelines.iter().map(|x| x.name.as_str()).collect(),
        ),
        (
            "deliveries",
            d.deliveries.iter().map(|x| x.name.as_str()).collect(),
        ),
        (
            "alert_rules",
            d.alert_rules.iter().map(|x| x.kind.as_str()).collect(),
        ),
        (
            "webhooks",
            d.webhooks.iter().map(|x| x.url.as_str()).collect(),
        ),
        (
            "alert_channels",
            d.alert_channels.iter().map(|x| x.name.as_str()).collect(),
        ),
    ];
    for (section, names) in &sections {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, n) in names.iter().enumerate() {
            let key = if *section == "webhooks" {
                "url"
            } else if *section == "alert_rules" {
                "kind"
            } else {
                "name"
            };
            if let Some(first) = seen.insert(n, i) {
                p.at(
                    &loaded.path(section, i),
                    key,
                    format!("{n:?} is already used by {}", loaded.path(section, first)),
                );
            }
            declared.entry(section).or_default().insert(n.to_string());
        }
    }
    let names = Names {
        cur: &cur,
        declared,
        prune,
    };

    // ---- Kafka clusters ----
    for (i, k) in d.kafka_clusters.iter().enumerate() {
        let path = loaded.path("kafka_clusters", i);
        let old = stored_secret(
            ctx,
            cur.secret_ref("kafka_clusters", k.name.trim()),
            "sasl_password",
        )
        .await?;
        let declared = declared_secret(
            ctx,
            &mut p,
            &mut plan.notes,
            &path,
            "sasl_password",
            k.sasl_password.as_ref(),
            old.as_ref(),
        );
        let password = declared.as_ref().map(|d| d.value().clone());
        let mut input = crate::clusters::kafka::KafkaClusterInput {
            name: Some(k.name.clone()),
            bootstrap_servers: Some(k.bootstrap_servers.clone()),
            security_protocol: Some(k.security_protocol.clone()),
            sasl_mechanism: k.sasl_mechanism.clone(),
            sasl_username: k.sasl_username.clone(),
            tls_ca_certificate: k
                .tls_ca_certificate
                .clone()
                .filter(|c| !c.trim().is_empty()),
            // An unreadable secret is reported above; it still counts as given here.
            sasl_password: password
                .clone()
                .or_else(|| k.sasl_password.as_ref().map(|_| Secret::new(String::new()))),
        };
        let (kname, bootstrap, protocol, mechanism) = match crate::clusters::kafka::validate(&input)
        {
            Ok(v) => v,
            Err(e) => {
                p.error(&path, e);
                continue;
            }
        };
        let sasl = protocol.starts_with("SASL");
        let canon = doc::KafkaCluster {
            name: kname.clone(),
            bootstrap_servers: bootstrap,
            security_protocol: protocol,
            sasl_mechanism: mechanism,
            sasl_username: k
                .sasl_username
                .as_deref()
                .map(|u| u.trim().to_string())
                .filter(|_| sasl),
            sasl_password: None,
            tls_ca_certificate: input.tls_ca_certificate.clone(),
        };
        match cur.doc.kafka_clusters.iter().find(|c| c.name == kname) {
            None => {
                plan.create.push(Named {
                    kind: "kafka_cluster",
                    name: kname,
                });
                plan.steps.push(Step::CreateKafka(input));
            }
            Some(stored) => {
                let mut fields = diff(stored, &canon, &["sasl_password"]);
                let before = fields.len();
                secret_change(
                    &mut fields,
                    "sasl_password",
                    old.as_ref(),
                    password.as_ref(),
                    k.sasl_password.as_ref(),
                );
                let password_changed = fields.len() > before;
                let changed: Vec<&str> = fields.keys().map(String::as_str).collect();
                let rebound = crate::secrets::binding::rebound(
                    crate::clusters::kafka::BINDINGS,
                    &changed,
                    &if sasl && old.is_some() {
                        vec!["sasl_password".to_string()]
                    } else {
                        vec![]
                    },
                );
                let given = declared.as_ref().is_some_and(Declared::is_given);
                if !check_rebound(&mut p, &path, "", &rebound, |_| given) {
                    continue;
                }
                if !fields.is_empty() {
                    if !password_changed && rebound.is_empty() {
                        input.sasl_password = None;
                    }
                    if stored.tls_ca_certificate.is_some() && canon.tls_ca_certificate.is_none() {
                        input.tls_ca_certificate = Some(String::new());
                    }
                    plan.change.push(Changed {
                        kind: "kafka_cluster",
                        name: kname.clone(),
                        fields,
                    });
                    plan.steps.push(Step::ChangeKafka(kname, input));
                }
            }
        }
    }

    // ---- Connect clusters ----
    for (i, c) in d.connect_clusters.iter().enumerate() {
        let path = loaded.path("connect_clusters", i);
        let old = stored_secret(
            ctx,
            cur.secret_ref("connect_clusters", c.name.trim()),
            "basic_auth_password",
        )
        .await?;
        let declared = declared_secret(
            ctx,
            &mut p,
            &mut plan.notes,
            &path,
            "basic_auth_password",
            c.basic_auth_password.as_ref(),
            old.as_ref(),
        );
        let password = declared.as_ref().map(|d| d.value().clone());
        // Only the token's hash is stored: an existing cluster whose token is not readable here
        // keeps its token; a new one needs it.
        let token = match c.provider_token.as_ref().map(|t| ctx.values.read(t)) {
            None => None,
            Some(Ok(t)) => Some(t),
            Some(Err(why)) if cur.provider_token_hashes.contains_key(c.name.trim()) => {
                plan.notes.push(format!(
                    "{path}.provider_token: {why}; the token stays as it is"
                ));
                None
            }
            Some(Err(why)) => {
                p.at(&path, "provider_token", why);
                None
            }
        };
        if let Some(k) = &c.kafka_cluster {
            if let Err(why) = names.check("kafka_clusters", k) {
                p.at(&path, "kafka_cluster", why);
            }
        }
        let user = c
            .basic_auth_user
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string);
        if user.is_some() != c.basic_auth_password.is_some() {
            p.at(
                &path,
                "basic_auth_password",
                "basic auth needs both basic_auth_user and basic_auth_password",
            );
        }
        let mut input = crate::clusters::ConnectClusterInput {
            name: Some(c.name.clone()),
            url: Some(c.url.clone()),
            kafka_cluster_id: None,
            managed_by: Some(c.managed_by.clone()),
            basic_auth_user: user.clone(),
            basic_auth_password: password.clone(),
            tls_ca_certificate: c
                .tls_ca_certificate
                .clone()
                .filter(|p| !p.trim().is_empty()),
            provider_token: token.clone(),
        };
        let (cname, url, managed_by) = match crate::clusters::connect::validate(&input) {
            Ok(v) => v,
            Err(e) => {
                p.error(&path, e);
                continue;
            }
        };
        let canon = doc::ConnectCluster {
            name: cname.clone(),
            url,
            kafka_cluster: c.kafka_cluster.clone(),
            managed_by,
            basic_auth_user: user.clone(),
            basic_auth_password: None,
            tls_ca_certificate: input.tls_ca_certificate.clone(),
            provider_token: None,
        };
        match cur.doc.connect_clusters.iter().find(|x| x.name == cname) {
            None => {
                plan.create.push(Named {
                    kind: "connect_cluster",
                    name: cname,
                });
                plan.steps.push(Step::CreateConnect {
                    input,
                    kafka: c.kafka_cluster.clone(),
                });
            }
            Some(stored) => {
                let mut fields = diff(stored, &canon, &["basic_auth_password", "provider_token"]);
                let before = fields.len();
                secret_change(
                    &mut fields,
                    "basic_auth_password",
                    old.as_ref(),
                    password.as_ref(),
                    c.basic_auth_password.as_ref(),
                );
                let changed: Vec<&str> = fields.keys().map(String::as_str).collect();
                let rebound = crate::secrets::binding::rebound(
                    crate::clusters::connect::BINDINGS,
                    &changed,
                    &if user.is_some() && old.is_some() {
                        vec!["basic_auth_password".to_string()]
                    } else {
                        vec![]
                    },
                );
                let given = declared.as_ref().is_some_and(Declared::is_given);
                if !check_rebound(&mut p, &path, "", &rebound, |_| given) {
                    continue;
                }
                if fields.len() == before && rebound.is_empty() {
                    input.basic_auth_password = None;
                }
                let mut new_token = None;
                if let Some(t) = &token {
                    let same = cur
                        .provider_token_hashes
                        .get(&cname)
                        .is_some_and(|h| *h == crate::auth::token_hash(t.expose().trim()));
                    if !same {
                        secret_change(
                            &mut fields,
                            "provider_token",
                            None,
                            Some(t),
                            c.provider_token.as_ref(),
                        );
                        if let Some(f) = fields.get_mut("provider_token") {
                            f.from = Value::String("(set)".into());
                        }
                        new_token = Some(t.clone());
                    }
                }
                if !fields.is_empty() {
                    if stored.basic_auth_user.is_some() && user.is_none() {
                        input.basic_auth_user = Some(String::new());
                    }
                    if stored.tls_ca_certificate.is_some() && canon.tls_ca_certificate.is_none() {
                        input.tls_ca_certificate = Some(String::new());
                    }
                    input.provider_token = None;
                    plan.change.push(Changed {
                        kind: "connect_cluster",
                        name: cname.clone(),
                        fields,
                    });
                    plan.steps.push(Step::ChangeConnect {
                        name: cname,
                        patch: input,
                        kafka: c.kafka_cluster.clone(),
                        token: new_token,
                    });
                }
            }
        }
    }

    // ---- Connections ----
    let mut canon_connections: HashMap<String, doc::Connection> = HashMap::new();
    for (i, c) in d.connections.iter().enumerate() {
        let path = loaded.path("connections", i);
        let fields_set: BTreeMap<String, Secret<String>> =
            match cur.secret_ref("connections", c.name.trim()) {
                Some(r) => ctx.secrets.get_all(r).await.map_err(Error::Unexpected)?,
                None => BTreeMap::new(),
            };
        let mut secret_values = Map::new();
        let mut read: BTreeMap<String, Secret<String>> = BTreeMap::new();
        let mut given: HashSet<String> = HashSet::new();
        for (field, src) in &c.secrets {
            if let Some(d) = declared_secret(
                ctx,
                &mut p,
                &mut plan.notes,
                &path,
                &format!("secrets.{field}"),
                Some(src),
                fields_set.get(field),
            ) {
                if d.is_given() {
                    given.insert(field.clone());
                }
                let v = d.value().clone();
                secret_values.insert(field.clone(), Value::String(v.expose().clone()));
                read.insert(field.clone(), v);
            }
        }
        let input = crate::connections::ConnectionInput {
            name: Some(c.name.clone()),
            provider: Some(c.provider.clone()),
            capabilities: c.capabilities.clone(),
            settings: Some(c.settings.clone().into_iter().collect()),
            secrets: Some(secret_values.clone()),
        };
        let (v, _) = match crate::connections::normalize(&input) {
            Ok(v) => v,
            Err(errors) => {
                // A secret that could not be read is reported once, as unreadable.
                let errors: FieldErrors = errors
                    .into_iter()
                    .filter(|(k, _)| {
                        !(k.starts_with("secrets.")
                            && c.secrets.contains_key(&k["secrets.".len()..]))
                    })
                    .collect();
                p.fields(&path, &errors);
                continue;
            }
        };
        let canon = doc::Connection {
            name: v.name.clone(),
            provider: v.provider.as_str().to_string(),
            capabilities: Some(
                v.capabilities
                    .iter()
                    .map(|k| k.as_str().to_string())
                    .collect(),
            ),
            settings: match serde_json::to_value(&v.settings) {
                Ok(Value::Object(m)) => m.into_iter().collect(),
                _ => BTreeMap::new(),
            },
            secrets: BTreeMap::new(),
        };
        canon_connections.insert(v.name.clone(), canon.clone());
        match cur.doc.connections.iter().find(|x| x.name == v.name) {
            None => {
                plan.create.push(Named {
                    kind: "connection",
                    name: v.name.clone(),
                });
                plan.steps.push(Step::CreateConnection(input));
            }
            Some(stored) => {
                if stored.provider != canon.provider {
                    p.at(
                        &path,
                        "provider",
                        format!(
                            "cannot change (from {} to {}); give the new connection another name",
                            stored.provider, canon.provider
                        ),
                    );
                    continue;
                }
                let mut fields = diff(stored, &canon, &["secrets"]);
                let before = fields.len();
                let keys: std::collections::BTreeSet<&String> =
                    fields_set.keys().chain(read.keys()).collect();
                for k in keys {
                    secret_change(
                        &mut fields,
                        &format!("secrets.{k}"),
                        fields_set.get(k),
                        read.get(k),
                        c.secrets.get(k),
                    );
                }
                let secrets_changed = fields.len() > before;
                let rebound = crate::connections::rebound(
                    v.provider,
                    &json!(stored.settings),
                    &json!(canon.settings),
                    &fields_set.keys().cloned().collect::<Vec<_>>(),
                );
                if !check_rebound(&mut p, &path, "secrets.", &rebound, |f| given.contains(f)) {
                    continue;
                }
                if !fields.is_empty() {
                    // Settings merge key by key on update: a key no longer declared is removed.
                    let mut settings: Map<String, Value> =
                        canon.settings.clone().into_iter().collect();
                    for k in stored.settings.keys() {
                        settings.entry(k.clone()).or_insert(Value::Null);
                    }
                    // A secret given again for a moved binding travels with the move itself.
                    let patch = crate::connections::ConnectionInput {
                        name: Some(v.name.clone()),
                        provider: None,
                        capabilities: canon.capabilities.clone(),
                        settings: Some(settings),
                        secrets: (!rebound.is_empty()).then(|| {
                            secret_values
                                .iter()
                                .filter(|(k, _)| given.contains(*k))
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect()
                        }),
                    };
                    plan.change.push(Changed {
                        kind: "connection",
                        name: v.name.clone(),
                        fields,
                    });
                    plan.steps.push(Step::ChangeConnection {
                        name: v.name.clone(),
                        patch,
                        secrets: secrets_changed.then_some(secret_values),
                    });
                }
            }
        }
    }
    let connection = |n: &str| -> Option<doc::Connection> {
        canon_connections
            .get(n)
            .cloned()
            .or_else(|| cur.doc.connections.iter().find(|c| c.name == n).cloned())
    };

    // ---- Alert rules (never created or deleted: every kind always exists) ----
    for (i, r) in d.alert_rules.iter().enumerate() {
        let path = loaded.path("alert_rules", i);
        let Some(stored) = cur.doc.alert_rules.iter().find(|x| x.kind == r.kind) else {
            let kinds: Vec<&str> = cur
                .doc
                .alert_rules
                .iter()
                .map(|x| x.kind.as_str())
                .collect();
            p.at(
                &path,
                "kind",
                format!(
                    "no alert rule of this kind; the kinds are {}",
                    kinds.join(", ")
                ),
            );
            continue;
        };
        let patch = crate::monitor::signals::RulePatch {
            threshold: Some(r.threshold),
            for_secs: Some(r.for_secs),
            enabled: Some(r.enabled),
        };
        let errors = crate::monitor::signals::check_rule(&patch);
        if !errors.is_empty() {
            p.fields(&path, &errors);
            continue;
        }
        let fields = diff(stored, r, &[]);
        if !fields.is_empty() {
            plan.change.push(Changed {
                kind: "alert_rule",
                name: r.kind.clone(),
                fields,
            });
            plan.steps.push(Step::SetRule(r.kind.clone(), patch));
        }
    }

    // ---- Webhooks (identified by URL; a new secret replaces the webhook) ----
    for (i, w) in d.webhooks.iter().enumerate() {
        let path = loaded.path("webhooks", i);
        let existing = crate::clusters::validate_url(&w.url)
            .ok()
            .and_then(|u| cur.secret_ref("webhooks", &u).cloned());
        let old = stored_secret(ctx, existing.as_ref(), "signing_secret").await?;
        // A webhook is its URL: another URL is another webhook, which needs its secret.
        let Some(secret) = declared_secret(
            ctx,
            &mut p,
            &mut plan.notes,
            &path,
            "secret",
            Some(&w.secret),
            old.as_ref(),
        )
        .map(|d| d.value().clone()) else {
            continue;
        };
        let input = crate::monitor::webhooks::WebhookInput {
            url: Some(w.url.clone()),
            secret: Some(secret.clone()),
            tls_ca_certificate: w.tls_ca_certificate.clone(),
        };
        let url = match crate::monitor::webhooks::check(&input) {
            Ok((url, _, _)) => url,
            Err(e) => {
                p.error(&path, e);
                continue;
            }
        };
        match cur.id("webhooks", &url) {
            None => {
                plan.create.push(Named {
                    kind: "webhook",
                    name: url.clone(),
                });
                plan.steps.push(Step::CreateWebhook(input));
            }
            Some(_) => {
                // Webhooks have no update: a new secret or CA replaces the webhook.
                let mut fields = BTreeMap::new();
                let ca = w
                    .tls_ca_certificate
                    .clone()
                    .filter(|p| !p.trim().is_empty());
                if let Some(stored) = cur.doc.webhooks.iter().find(|x| {
                    x.url == url
                        && x.tls_ca_certificate.as_deref().map(str::trim)
                            != ca.as_deref().map(str::trim)
                }) {
                    fields.insert(
                        "tls_ca_certificate".to_string(),
                        FieldChange {
                            from: json!(stored.tls_ca_certificate),
                            to: json!(ca),
                        },
                    );
                }
                secret_change(
                    &mut fields,
                    "secret",
                    old.as_ref(),
                    Some(&secret),
                    Some(&w.secret),
                );
                if !fields.is_empty() {
                    plan.change.push(Changed {
                        kind: "webhook",
                        name: url.clone(),
                        fields,
                    });
                    plan.steps.push(Step::DeleteWebhook(url.clone()));
                    plan.steps.push(Step::CreateWebhook(input));
                }
            }
        }
    }

    // ---- Alert channels (identified by name; a new host, port, login or endpoint needs the
    // secret again, as through the API) ----
    let known_rules: Vec<String> = cur.doc.alert_rules.iter().map(|r| r.kind.clone()).collect();
    for (i, c) in d.alert_channels.iter().enumerate() {
        let path = loaded.path("alert_channels", i);
        let field = crate::monitor::channels::bindings(&c.kind)
            .first()
            .map_or("secret", |b| b.secret);
        let existing = cur.secret_ref("alert_channels", &c.name).cloned();
        let old = stored_secret(ctx, existing.as_ref(), field).await?;
        let Some(declared) = declared_secret(
            ctx,
            &mut p,
            &mut plan.notes,
            &path,
            "secret",
            Some(&c.secret),
            old.as_ref(),
        ) else {
            continue;
        };
        let secret = declared.value().clone();
        // Given (read where the plan runs): passed on, so a moved binding is accepted; kept:
        // not passed, so a moved binding is refused as through the API.
        let secret_changed = declared.is_given();
        let input = crate::monitor::channels::ChannelInput {
            name: Some(c.name.clone()),
            kind: Some(c.kind.clone()),
            settings: Some(
                c.settings
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            ),
            secrets: secret_changed.then(|| [(field.to_string(), secret.clone())].into()),
            rules: Some(c.rules.clone()),
            severities: (!c.severities.is_empty()).then(|| c.severities.clone()),
            group_wait_secs: c.group_wait_secs,
            tls_ca_certificate: Some(c.tls_ca_certificate.clone().unwrap_or_default()),
            enabled: Some(c.enabled),
        };
        let stored_doc = cur.doc.alert_channels.iter().find(|x| x.name == c.name);
        let current = stored_doc.map(|x| crate::monitor::channels::Checked {
            name: x.name.clone(),
            kind: x.kind.clone(),
            settings: x.settings.clone(),
            rules: x.rules.clone(),
            severities: x.severities.clone(),
            group_wait_secs: x.group_wait_secs.unwrap_or(0),
            tls_ca_certificate: x.tls_ca_certificate.clone(),
            enabled: x.enabled,
        });
        let stored_fields: Vec<String> = old.iter().map(|_| field.to_string()).collect();
        let checked = match crate::monitor::channels::check(
            &input,
            current.as_ref(),
            &known_rules,
            &stored_fields,
        ) {
            Ok(c) => c,
            Err(fields) => {
                p.fields(&path, &fields);
                continue;
            }
        };
        match stored_doc {
            None => {
                plan.create.push(Named {
                    kind: "alert_channel",
                    name: c.name.clone(),
                });
                plan.steps.push(Step::CreateChannel(input));
            }
            Some(stored) => {
                let wanted = doc::AlertChannel {
                    name: checked.name,
                    kind: checked.kind,
                    settings: checked.settings,
                    secret: stored.secret.clone(),
                    rules: checked.rules,
                    severities: checked.severities,
                    group_wait_secs: Some(checked.group_wait_secs),
                    tls_ca_certificate: checked.tls_ca_certificate,
                    enabled: checked.enabled,
                };
                let mut fields = diff(stored, &wanted, &["secret"]);
                secret_change(
                    &mut fields,
                    "secret",
                    old.as_ref(),
                    Some(&secret),
                    Some(&c.secret),
                );
                if !fields.is_empty() {
                    plan.change.push(Changed {
                        kind: "alert_channel",
                        name: c.name.clone(),
                        fields,
                    });
                    plan.steps.push(Step::ChangeChannel(c.name.clone(), input));
                }
            }
        }
    }

    // ---- Pipelines ----
    let mut canon_pipelines: HashMap<String, doc::Pipeline> = HashMap::new();
    let mut prefixes: HashMap<String, String> = HashMap::new();
    for (i, pl) in d.pipelines.iter().enumerate() {
        let path = loaded.path("pipelines", i);
        let mut ok = true;
        for (field, section, n) in [
            ("source", "connections", &pl.source),
            ("kafka_cluster", "kafka_clusters", &pl.kafka_cluster),
            ("connect_cluster", "connect_clusters", &pl.connect_cluster),
        ] {
            if let Err(why) = names.check(section, n) {
                p.at(&path, field, why);
                ok = false;
            }
        }
        if let Some(src) = connection(&pl.source) {
            if !src
                .capabilities
                .as_ref()
                .is_some_and(|c| c.iter().any(|k| k == "SOURCE"))
                || !["POSTGRESQL", "MYSQL", "MARIADB"].contains(&src.provider.as_str())
            {
                p.at(
                    &path,
                    "source",
                    format!("{} is not a SOURCE database connection", pl.source),
                );
                ok = false;
            }
        }
        if let Err(why) = crate::connections::validate_name(pl.name.trim()) {
            p.at(&path, "name", why);
            ok = false;
        }
        if !["running", "paused", "stopped"].contains(&pl.state.as_str()) {
            p.at(&path, "state", "running, paused or stopped");
            ok = false;
        }
        let input = crate::pipelines::PipelineInput {
            name: Some(pl.name.trim().to_string()),
            tables: Some(pl.tables.clone()),
            topic_prefix: pl.topic_prefix.clone(),
            partitions: pl.partitions,
            replication_factor: pl.replication_factor,
            retention_ms: pl.retention_ms,
            snapshot_mode: pl.snapshot_mode.clone(),
            publication_mode: pl.publication_mode.clone(),
            options: Some(pl.options.clone().into_iter().collect()),
            heartbeat: pl.heartbeat,
            ..Default::default()
        };
        let mut errors = FieldErrors::new();
        let f = crate::pipelines::check_fields(&input, &mut errors);
        if !errors.is_empty() {
            p.fields(&path, &errors);
            continue;
        }
        if let Some(other) = prefixes.insert(f.prefix.clone(), pl.name.clone()) {
            p.at(
                &path,
                "topic_prefix",
                format!("pipeline {other:?} uses it too; topics would collide"),
            );
            ok = false;
        }
        if !ok {
            continue;
        }
        let canon = doc::Pipeline {
            name: pl.name.trim().to_string(),
            source: pl.source.clone(),
            kafka_cluster: pl.kafka_cluster.clone(),
            connect_cluster: pl.connect_cluster.clone(),
            tables: f.tables,
            topic_prefix: Some(f.prefix),
            partitions: Some(i64::from(f.partitions)),
            replication_factor: Some(i64::from(f.rf)),
            retention_ms: f.retention_ms,
            snapshot_mode: Some(f.snapshot_mode),
            publication_mode: Some(f.publication_mode),
            heartbeat: Some(f.heartbeat),
            options: f
                .options
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
            state: pl.state.clone(),
        };
        canon_pipelines.insert(canon.name.clone(), canon.clone());
        match cur.doc.pipelines.iter().find(|x| x.name == canon.name) {
            None => plan_create(
                &mut plan,
                "pipeline",
                &canon.name,
                &canon.state,
                Step::CreatePipeline(canon.clone()),
                Step::SetPipelineState,
            ),
            Some(stored) => {
                let fields = diff(stored, &canon, &[]);
                let fixed = refuse_fixed(
                    &mut p,
                    &path,
                    &fields,
                    |k| k == "tables" || k == "state",
                    "pipeline",
                    ": it decides the pipeline's topics, slot or connector",
                );
                if fixed || fields.is_empty() {
                    continue;
                }
                if fields.contains_key("tables") {
                    plan.steps
                        .push(Step::SetTables(canon.name.clone(), canon.tables.clone()));
                }
                if fields.contains_key("state") {
                    plan.steps.push(Step::SetPipelineState(
                        canon.name.clone(),
                        canon.state.clone(),
                    ));
                }
                plan.change.push(Changed {
                    kind: "pipeline",
                    name: canon.name.clone(),
                    fields,
                });
            }
        }
    }
    let pipeline = |n: &str| -> Option<doc::Pipeline> {
        canon_pipelines
            .get(n)
            .cloned()
            .or_else(|| cur.doc.pipelines.iter().find(|x| x.name == n).cloned())
    };

    // ---- Deliveries ----
    for (i, dl) in d.deliveries.iter().enumerate() {
        let path = loaded.path("deliveries", i);
        let mut ok = true;
        if let Err(why) = names.check("pipelines", &dl.pipeline) {
            p.at(&path, "pipeline", why);
            ok = false;
        }
        if let Err(why) = names.check("connections", &dl.destination) {
            p.at(&path, "destination", why);
            ok = false;
        }
        if let Some(c) = &dl.connect_cluster {
            if let Err(why) = names.check("connect_clusters", c) {
                p.at(&path, "connect_cluster", why);
                ok = false;
            }
        }
        if let Err(why) = crate::connections::validate_name(dl.name.trim()) {
            p.at(&path, "name", why);
            ok = false;
        }
        if !["running", "paused", "stopped"].contains(&dl.state.as_str()) {
            p.at(&path, "state", "running, paused or stopped");
            ok = false;
        }
        let (Some(pl), Some(dest)) = (pipeline(&dl.pipeline), connection(&dl.destination)) else {
            continue;
        };
        if !dest
            .capabilities
            .as_ref()
            .is_some_and(|c| c.iter().any(|k| k == "DESTINATION"))
        {
            p.at(
                &path,
                "destination",
                format!("{} is not a DESTINATION connection", dest.name),
            );
            ok = false;
        }
        let kind = if ["AWS_S3", "MINIO"].contains(&dest.provider.as_str()) {
            crate::deliveries::Kind::ObjectStorage
        } else {
            crate::deliveries::Kind::Database
        };
        let o = &dl.options;
        let input = crate::deliveries::DeliveryInput {
            name: Some(dl.name.trim().to_string()),
            topics: dl.topics.clone(),
            insert_mode: o.insert_mode.clone(),
            delete_enabled: o.delete_enabled,
            table_name_format: o.table_name_format.clone(),
            schema_evolution: o.schema_evolution.clone(),
            format: o.format.clone(),
            compression: o.compression.clone(),
            records_per_file: o.records_per_file,
            tasks: o.tasks,
            key_template: o.key_template.clone(),
            error_policy: o.error_policy.clone(),
            dead_letter_topic: o.dead_letter_topic.clone(),
            schema_policy: o.schema_policy.clone(),
            ..Default::default()
        };
        let options = match crate::deliveries::normalize_options(kind, &input) {
            Ok(v) => serde_json::from_value::<doc::DeliveryOptions>(v).unwrap_or_default(),
            Err(errors) => {
                p.fields(&format!("{path}.options"), &errors);
                continue;
            }
        };
        let available = pipeline_topics(&pl, connection(&pl.source).as_ref());
        let topics = dl.topics.clone().unwrap_or_else(|| available.clone());
        if topics.is_empty() {
            p.at(
                &path,
                "topics",
                "choose at least one of the pipeline's topics",
            );
            ok = false;
        } else if let Some(t) = topics.iter().find(|t| !available.contains(t)) {
            p.at(
                &path,
                "topics",
                format!(
                    "{t} is not a table topic of pipeline {}; choose from {}",
                    pl.name,
                    available.join(", ")
                ),
            );
            ok = false;
        }
        if !ok {
            continue;
        }
        let canon = doc::Delivery {
            name: dl.name.trim().to_string(),
            pipeline: dl.pipeline.clone(),
            destination: dl.destination.clone(),
            connect_cluster: Some(
                dl.connect_cluster
                    .clone()
                    .unwrap_or_else(|| pl.connect_cluster.clone()),
            ),
            topics: Some(topics),
            options,
            state: dl.state.clone(),
        };
        match cur.doc.deliveries.iter().find(|x| x.name == canon.name) {
            None => plan_create(
                &mut plan,
                "delivery",
                &canon.name,
                &canon.state,
                Step::CreateDelivery(canon.clone()),
                Step::SetDeliveryState,
            ),
            Some(stored) => {
                let fields = diff(stored, &canon, &[]);
                let fixed = refuse_fixed(
                    &mut p,
                    &path,
                    &fields,
                    |k| !["pipeline", "destination", "connect_cluster"].contains(&k),
                    "delivery",
                    "",
                );
                if fixed || fields.is_empty() {
                    continue;
                }
                if fields
                    .keys()
                    .any(|k| k == "topics" || k.starts_with("options."))
                {
                    let mut patch = input.clone();
                    patch.name = None;
                    patch.topics = canon.topics.clone();
                    plan.steps
                        .push(Step::ChangeDelivery(canon.name.clone(), patch));
                }
                if fields.contains_key("state") {
                    plan.steps.push(Step::SetDeliveryState(
                        canon.name.clone(),
                        canon.state.clone(),
                    ));
                }
                plan.change.push(Changed {
                    kind: "delivery",
                    name: canon.name.clone(),
                    fields,
                });
            }
        }
    }

    // ---- Deletes (only with --prune; dependents first) ----
    if prune {
        for (section, kind) in [
            ("deliveries", "delivery"),
            ("pipelines", "pipeline"),
            ("webhooks", "webhook"),
            ("alert_channels", "alert_channel"),
            ("connections", "connection"),
            ("connect_clusters", "connect_cluster"),
            ("kafka_clusters", "kafka_cluster"),
        ] {
            let mut gone: Vec<&String> = cur
                .ids
                .get(section)
                .map(|m| {
                    m.keys()
                        .filter(|n| !names.declared.get(section).is_some_and(|s| s.contains(*n)))
                        .collect()
                })
                .unwrap_or_default();
            gone.sort();
            for n in gone {
                plan.delete.push(Named {
                    kind,
                    name: n.clone(),
                });
                plan.steps.push(Step::Delete(kind, n.clone()));
            }
        }
    }

    if !p.0.is_empty() {
        return Err(refusal(p.0));
    }

    // ---- The plugins' own validation, for what exists already ----
    check_with_plugins(ctx, &cur, loaded, &names, &mut plan).await?;
    Ok(plan)
}

/// Every table topic (and the heartbeat topic) of a pipeline, from its declared or stored form.
fn pipeline_topics(pl: &doc::Pipeline, source: Option<&doc::Connection>) -> Vec<String> {
    let prefix = pl.topic_prefix.clone().unwrap_or_default();
    let mut out: Vec<String> = pl
        .tables
        .iter()
        .map(|t| crate::pipelines::config::table_topic(&prefix, t))
        .collect();
    if pl.heartbeat == Some(true) {
        let provider = source.and_then(|s| crate::connections::Provider::parse(&s.provider));
        let settings = source.and_then(|s| {
            serde_json::from_value::<crate::connections::settings::DatabaseSettings>(Value::Object(
                s.settings.clone().into_iter().collect(),
            ))
            .ok()
        });
        if let (Some(provider), Some(d)) = (provider, settings) {
            out.push(crate::pipelines::config::table_topic(
                &prefix,
                &crate::pipelines::config::heartbeat_collection(provider, &d, &pl.tables),
            ));
        }
    }
    out
}

/// Sends the config of each pipeline and delivery to be created or changed to its plugin
/// (through the services' previews, which also check the source tables and the destination)
/// when everything it depends on exists already; the rest is checked by apply, right before
/// it is created, and the plan says so.
async fn check_with_plugins(
    ctx: &Ctx<'_>,
    cur: &Current,
    loaded: &Loaded,
    names: &Names<'_>,
    plan: &mut Plan,
) -> Result<()> {
    let mut p = Problems::default();
    let path_of = |section: &'static str, name: &str| -> String {
        let list: Vec<&str> = match section {
            "pipelines" => loaded
                .doc
                .pipelines
                .iter()
                .map(|x| x.name.as_str())
                .collect(),
            _ => loaded
                .doc
                .deliveries
                .iter()
                .map(|x| x.name.as_str())
                .collect(),
        };
        list.iter()
            .position(|n| n.trim() == name)
            .map(|i| loaded.path(section, i))
            .unwrap_or_else(|| format!("{section}[{name}]"))
    };
    for step in &plan.steps {
        match step {
            Step::CreatePipeline(pl) => {
                let new: Vec<String> = [
                    ("connections", &pl.source),
                    ("kafka_clusters", &pl.kafka_cluster),
                    ("connect_clusters", &pl.connect_cluster),
                ]
                .iter()
                .filter(|(s, n)| names.is_new(s, n))
                .map(|(s, n)| format!("{} {n:?}", singular(s).replace('_', " ")))
                .collect();
                if !new.is_empty() {
                    plan.notes.push(format!(
                        "pipeline {:?} is checked against its plugin and its source when applied, after {} exist{}",
                        pl.name,
                        new.join(" and "),
                        if new.len() == 1 { "s" } else { "" }
                    ));
                    continue;
                }
                let input = pipeline_input(cur, pl);
                match crate::pipelines::preview(ctx, ctx.who, &input).await {
                    Ok(preview) if preview.validation_errors.is_empty() => {}
                    Ok(preview) => {
                        for (k, v) in preview.validation_errors {
                            p.at(
                                &path_of("pipelines", &pl.name),
                                &format!("config.{k}"),
                                v.join("; "),
                            );
                        }
                    }
                    Err(e) => p.error(&path_of("pipelines", &pl.name), ids_to_names(e)),
                }
            }
            Step::SetTables(name, tables) => {
                let id = cur.id("pipelines", name).cloned().unwrap_or_default();
                if let Err(e) = crate::pipelines::preview_tables(
                    &ctx.pool,
                    &ctx.secrets,
                    ctx.who,
                    &id,
                    tables.clone(),
                )
                .await
                {
                    p.error(&path_of("pipelines", name), ids_to_names(e));
                }
            }
            Step::CreateDelivery(dl) => {
                let cluster = dl.connect_cluster.clone().unwrap_or_default();
                let new: Vec<String> = [
                    ("pipelines", &dl.pipeline),
                    ("connections", &dl.destination),
                    ("connect_clusters", &cluster),
                ]
                .iter()
                .filter(|(s, n)| names.is_new(s, n))
                .map(|(s, n)| format!("{} {n:?}", singular(s).replace('_', " ")))
                .collect();
                if !new.is_empty() {
                    plan.notes.push(format!(
                        "delivery {:?} is checked against its plugin and its destination when applied, after {} exist{}",
                        dl.name,
                        new.join(" and "),
                        if new.len() == 1 { "s" } else { "" }
                    ));
                    continue;
                }
                let input = delivery_input(cur, dl);
                match crate::deliveries::preview(ctx, ctx.who, &input).await {
                    Ok(preview) if preview.ok() => {}
                    Ok(preview) => {
                        for (k, v) in &preview.validation_errors {
                            p.at(
                                &path_of("deliveries", &dl.name),
                                &format!("config.{k}"),
                                v.join("; "),
                            );
                        }
                        for c in preview
                            .destination_checks
                            .iter()
                            .filter(|c| c.status == crate::connections::CheckStatus::Fail)
                        {
                            p.at(
                                &path_of("deliveries", &dl.name),
                                "destination",
                                format!("the destination check {} failed: {}", c.name, c.message),
                            );
                        }
                    }
                    Err(e) => p.error(&path_of("deliveries", &dl.name), ids_to_names(e)),
                }
            }
            Step::ChangeDelivery(name, patch) => {
                let id = cur.id("deliveries", name).cloned().unwrap_or_default();
                if let Err(e) =
                    crate::deliveries::preview_update(&ctx.pool, &ctx.secrets, ctx.who, &id, patch)
                        .await
                {
                    p.error(&path_of("deliveries", name), ids_to_names(e));
                }
            }
            _ => {}
        }
    }
    if p.0.is_empty() {
        Ok(())
    } else {
        Err(refusal(p.0))
    }
}

/// The services name id fields (`source_connection_id`); the document names resources.
fn ids_to_names(e: Error) -> Error {
    let rename = |k: &str| -> String {
        match k {
            "source_connection_id" => "source".into(),
            "kafka_cluster_id" => "kafka_cluster".into(),
            "connect_cluster_id" => "connect_cluster".into(),
            "destination_connection_id" => "destination".into(),
            "pipeline_id" => "pipeline".into(),
            other => other.to_string(),
        }
    };
    match e {
        Error::Invalid { message, fields } => Error::Invalid {
            message,
            fields: fields.into_iter().map(|(k, v)| (rename(&k), v)).collect(),
        },
        other => other,
    }
}

/// A declared pipeline as the API's create input, its references as the ids they have now.
pub(super) fn pipeline_input(cur: &Current, pl: &doc::Pipeline) -> crate::pipelines::PipelineInput {
    crate::pipelines::PipelineInput {
        name: Some(pl.name.clone()),
        source_connection_id: cur.id("connections", &pl.source).cloned(),
        kafka_cluster_id: cur.id("kafka_clusters", &pl.kafka_cluster).cloned(),
        connect_cluster_id: cur.id("connect_clusters", &pl.connect_cluster).cloned(),
        tables: Some(pl.tables.clone()),
        topic_prefix: pl.topic_prefix.clone(),
        partitions: pl.partitions,
        replication_factor: pl.replication_factor,
        retention_ms: pl.retention_ms,
        snapshot_mode: pl.snapshot_mode.clone(),
        publication_mode: pl.publication_mode.clone(),
        options: Some(pl.options.clone().into_iter().collect()),
        heartbeat: pl.heartbeat,
    }
}

/// A declared delivery as the API's create input, its references as the ids they have now.
pub(super) fn delivery_input(
    cur: &Current,
    dl: &doc::Delivery,
) -> crate::deliveries::DeliveryInput {
    let o = &dl.options;
    crate::deliveries::DeliveryInput {
        name: Some(dl.name.clone()),
        pipeline_id: cur.id("pipelines", &dl.pipeline).cloned(),
        destination_connection_id: cur.id("connections", &dl.destination).cloned(),
        connect_cluster_id: dl
            .connect_cluster
            .as_ref()
            .and_then(|c| cur.id("connect_clusters", c).cloned()),
        topics: dl.topics.clone(),
        insert_mode: o.insert_mode.clone(),
        delete_enabled: o.delete_enabled,
        table_name_format: o.table_name_format.clone(),
        schema_evolution: o.schema_evolution.clone(),
        format: o.format.clone(),
        compression: o.compression.clone(),
        records_per_file: o.records_per_file,
        flush_interval_ms: None,
        tasks: o.tasks,
        key_template: o.key_template.clone(),
        error_policy: o.error_policy.clone(),
        dead_letter_topic: o.dead_letter_topic.clone(),
        schema_policy: o.schema_policy.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_each_changed_field_by_its_dotted_path() {
        let a = json!({"name": "x", "tables": ["a.b"], "options": {"k": "1", "j": "2"}, "n": 1});
        let b = json!({"name": "x", "tables": ["a.b", "a.c"], "options": {"k": "1", "j": "3", "new": "4"}, "n": 1});
        let d = diff(&a, &b, &[]);
        assert_eq!(
            d.keys().collect::<Vec<_>>(),
            vec!["options.j", "options.new", "tables"]
        );
        assert_eq!(d["tables"].to, json!(["a.b", "a.c"]));
        assert_eq!(d["options.new"].from, Value::Null);
        assert!(diff(&a, &a, &[]).is_empty());
        assert!(diff(
            &a,
            &json!({"name": "y", "tables": ["a.b"], "options": {"k": "1", "j": "2"}, "n": 1}),
            &["name"]
        )
        .is_empty());
    }

    #[test]
    fn over_http_a_reference_is_never_read_from_the_servers_environment_or_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "from-the-file\n").unwrap();
        let file = file.to_string_lossy().to_string();
        // PATH is set wherever tests run: the server's own environment.
        let env = SecretSource::Env("PATH".into());
        let path = SecretSource::File(file.clone());
        let http = Values::Given(BTreeMap::new());
        let e = http.read(&env).unwrap_err();
        assert!(
            e.contains("never reads {env: PATH}") && e.contains("\"PATH\""),
            "{e}"
        );
        let e = http.read(&path).unwrap_err();
        assert!(e.contains(&format!("never reads {{file: {file}}}")), "{e}");
        let given = Values::Given(
            [
                ("PATH".to_string(), Secret::new("given".to_string())),
                (file.clone(), Secret::new("given too".to_string())),
            ]
            .into(),
        );
        assert_eq!(given.read(&env).unwrap().expose(), "given");
        assert_eq!(given.read(&path).unwrap().expose(), "given too");
        // The CLI reads where it runs.
        assert_eq!(Values::LOCAL.read(&path).unwrap().expose(), "from-the-file");
        assert!(!Values::LOCAL.read(&env).unwrap().expose().is_empty());
    }

    #[test]
    fn a_secret_change_is_reported_in_words_never_values() {
        let mut f = BTreeMap::new();
        let a = Secret::new("old-value-123".to_string());
        let b = Secret::new("new-value-456".to_string());
        let src = SecretSource::Env("PW".into());
        secret_change(&mut f, "password", Some(&a), Some(&a), Some(&src));
        assert!(f.is_empty(), "the same value is no change");
        secret_change(&mut f, "password", Some(&a), Some(&b), Some(&src));
        assert_eq!(f["password"].to, json!("(new value from env PW)"));
        secret_change(&mut f, "token", Some(&a), None, None);
        assert_eq!(f["token"].to, json!("(not set)"));
        let text = format!("{f:?}");
        assert!(!text.contains("old-value") && !text.contains("new-value"));
    }

    #[test]
    fn the_plan_text_lists_creates_changes_with_fields_and_deletes() {
        let mut plan = Plan::default();
        assert_eq!(
            plan.text(),
            "No changes: ClueCDC already matches the document.\n"
        );
        plan.create.push(Named {
            kind: "pipeline",
            name: "shop".into(),
        });
        plan.change.push(Changed {
            kind: "delivery",
            name: "lake".into(),
            fields: [(
                "options.records_per_file".to_string(),
                FieldChange {
                    from: json!(100),
                    to: json!(200),
                },
            )]
            .into(),
        });
        plan.delete.push(Named {
            kind: "webhook",
            name: "https://h/x".into(),
        });
        let t = plan.text();
        assert!(t.contains("+ create pipeline \"shop\""), "{t}");
        assert!(t.contains("    options.records_per_file: 100 → 200"), "{t}");
        assert!(t.contains("- delete webhook \"https://h/x\""), "{t}");
        assert!(
            t.ends_with("Plan: 1 to create, 1 to change, 1 to delete.\n"),
            "{t}"
        );
    }
}
