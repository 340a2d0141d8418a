//! The provider check: does every worker of a Connect cluster resolve `${cluecdc:…}` references
//! through this ClueCDC? Connectors receive their credentials only that way, so a worker that
//! cannot is a pipeline that will not start, told before it is deployed.
//!
//! How a worker is checked (each worker at its advertised REST address, and the cluster URL):
//! 1. ClueCDC stores a fresh probe nonce, then asks the worker to validate a config holding
//!    `${cluecdc:cluecdc-probe-<nonce>:value}` (Connect resolves config providers before it
//!    validates, `AbstractHerder.validateConnectorConfig`).
//! 2. The worker's provider calls `/internal/v1/config-provider/resolve`; that endpoint marks the
//!    nonce as arrived, with the cluster whose token the call presented, or with none for a token
//!    ClueCDC does not know (the only write an unauthenticated call can make, and only to a nonce
//!    that exists).
//! 3. Arrived with this cluster's token: passing. Arrived with another token: wrong token.
//!    Nothing arrived: the worker's answer says why (the provider names an unreachable ClueCDC),
//!    or, when validation went through with the reference left as it was, the provider is not
//!    configured; then the marker class `io.cluecdc.connect.ClueCdcInstalled` in the worker's
//!    plugin list tells "configured nowhere" from "jar missing".
//!
//! Invariant: the cluster's basic-auth password goes only to the URL the user registered; a
//! worker's own address (which Connect reports, not the user) is asked without credentials.

use crate::db;
use std::time::Duration;

use crate::db::Pool;
use serde::{Deserialize, Serialize};

use super::connect::{client_for, ConnectCluster};
use crate::auth::Principal;
use crate::connect::{ConnectClient, ConnectError, PluginInfo};
use crate::error::{Error, Result};
use crate::secrets::store::SecretStore;

/// What a probe reference's secret reference starts with.
pub const PROBE_PREFIX: &str = "cluecdc-probe-";
/// The class that shows the provider's jar in a worker's plugin list.
pub const MARKER_CLASS: &str = "io.cluecdc.connect.ClueCdcInstalled";
/// The provider's class, for the worker lines of a fix.
pub const PROVIDER_CLASS: &str = "io.cluecdc.connect.ClueCdcConfigProvider";
/// How old a stored check may be before the monitor runs it again.
pub const RECHECK_AFTER_SECS: i64 = 300;

/// One worker's answer to the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The worker resolved the probe through this ClueCDC with this cluster's token.
    Passing,
    /// The provider's jar is not on the worker's plugin path.
    JarMissing,
    /// The jar is there, but the worker's `config.providers` lacks `cluecdc`.
    NotConfigured,
    /// The worker's provider presents a token that is not this cluster's.
    WrongToken,
    /// The worker's provider cannot reach ClueCDC at the URL it was given.
    ClueCdcUnreachable,
    /// The worker's provider resolved the probe, but not here: its URL names another server.
    WrongServer,
    /// The provider answered with another error (its message says which).
    ProviderError,
    /// ClueCDC cannot reach the worker to ask it (not a verdict on the provider).
    WorkerUnreachable,
}

impl Verdict {
    /// A verdict that stops a deploy: the worker answered, and it cannot resolve references.
    pub fn fails(self) -> bool {
        !matches!(self, Verdict::Passing | Verdict::WorkerUnreachable)
    }

    /// The wire name (`jar_missing`), for pages and tests.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passing => "passing",
            Verdict::JarMissing => "jar_missing",
            Verdict::NotConfigured => "not_configured",
            Verdict::WrongToken => "wrong_token",
            Verdict::ClueCdcUnreachable => "clue_cdc_unreachable",
            Verdict::WrongServer => "wrong_server",
            Verdict::ProviderError => "provider_error",
            Verdict::WorkerUnreachable => "worker_unreachable",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Verdict::Passing => "resolves references",
            Verdict::JarMissing => "provider jar missing",
            Verdict::NotConfigured => "provider not configured",
            Verdict::WrongToken => "wrong token",
            Verdict::ClueCdcUnreachable => "ClueCDC unreachable from the worker",
            Verdict::WrongServer => "provider points at another server",
            Verdict::ProviderError => "provider error",
            Verdict::WorkerUnreachable => "worker not reachable from ClueCDC",
        }
    }
}

/// One worker (or the cluster URL) and what the probe found there.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkerCheck {
    /// The worker's REST address (`host:port`, as Connect reports it), or the cluster URL.
    pub worker: String,
    pub verdict: Verdict,
    /// What was seen, in the worker's or the provider's words (never a secret).
    pub message: String,
    /// What to do about it; empty when passing.
    pub fix: String,
}

/// The overall state of a cluster's check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckState {
    /// Every worker resolved the probe.
    Passing,
    /// A worker answered and cannot resolve references: deploys are refused.
    Failing,
    /// No worker failed, but some could not be asked.
    Unknown,
}

/// A Connect cluster's provider check: per worker, when it ran.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderCheck {
    pub connect_cluster_id: String,
    pub state: CheckState,
    pub workers: Vec<WorkerCheck>,
    pub checked_at: String,
}

impl ProviderCheck {
    fn of(cluster_id: &str, workers: Vec<WorkerCheck>) -> Self {
        let state = if workers.iter().any(|w| w.verdict.fails()) {
            CheckState::Failing
        } else if workers.iter().all(|w| w.verdict == Verdict::Passing) && !workers.is_empty() {
            CheckState::Passing
        } else {
            CheckState::Unknown
        };
        ProviderCheck {
            connect_cluster_id: cluster_id.to_string(),
            state,
            workers,
            checked_at: crate::time::now(),
        }
    }

    /// The first failing worker, as a sentence with its fix (for a refused deploy).
    pub fn refusal(&self, cluster_name: &str) -> Option<String> {
        let w = self.workers.iter().find(|w| w.verdict.fails())?;
        Some(format!(
            "Connect cluster {cluster_name:?} cannot resolve secret references on worker {}: {} ({}). {}",
            w.worker,
            w.verdict.label(),
            w.message,
            w.fix
        ))
    }
}

/// What the probe saw at one address, before it is judged.
#[derive(Debug)]
pub struct Observation {
    /// The plugin list (connectors and the rest); Err: the worker did not answer.
    pub plugins: std::result::Result<Vec<PluginInfo>, String>,
    /// Validation of the probe config: the value the worker validated as the connector's
    /// `name`, which held the probe reference (resolved, or left as it was); or the worker's
    /// error message.
    pub validation: std::result::Result<Option<String>, String>,
    /// The arrival of the probe's call: None, nothing arrived; Some(None), an unknown token;
    /// Some(Some(id)), the token of cluster `id`.
    pub arrival: Option<Option<String>>,
}

/// Judges one worker (pure: the unit tests' subject). `server_url` is this ClueCDC as workers
/// should reach it; `names` maps a cluster id to its name for a token of another cluster.
pub fn judge(
    worker: &str,
    cluster_id: &str,
    server_url: &str,
    seen: &Observation,
    other_cluster: impl Fn(&str) -> Option<String>,
) -> WorkerCheck {
    let check = |verdict: Verdict, message: String, fix: String| WorkerCheck {
        worker: worker.to_string(),
        verdict,
        message,
        fix,
    };
    let plugins = match &seen.plugins {
        Ok(p) => p,
        Err(e) => {
            return check(
                Verdict::WorkerUnreachable,
                e.clone(),
                "ClueCDC asks each worker at the address Connect reports for it \
                 (rest.advertised.host.name and rest.advertised.port): make that address reachable \
                 from ClueCDC, or rely on the check through the cluster URL."
                    .into(),
            )
        }
    };
    let token_fix = "Issue a new provider token on this cluster's Edit page and set it as \
         config.providers.cluecdc.param.token on every worker (a config.file is re-read at once; \
         worker properties need a restart)."
        .to_string();
    match &seen.arrival {
        Some(Some(id)) if id == cluster_id => {
            return check(
                Verdict::Passing,
                "the probe reference was resolved here with this cluster's token".into(),
                String::new(),
            )
        }
        Some(Some(other)) => {
            let name = other_cluster(other).unwrap_or_else(|| other.clone());
            return check(
                Verdict::WrongToken,
                format!("the worker's provider presents the token of Connect cluster {name:?}"),
                token_fix,
            );
        }
        Some(None) => {
            return check(
                Verdict::WrongToken,
                "the worker's provider reached this ClueCDC with a token it does not know \
                 (mistyped, or replaced by a newer one)"
                    .into(),
                token_fix,
            )
        }
        None => {}
    }
    let has_marker = plugins.iter().any(|p| p.class == MARKER_CLASS);
    let lines = format!(
        "config.providers=cluecdc (beside any others), \
         config.providers.cluecdc.class={PROVIDER_CLASS}, \
         config.providers.cluecdc.param.url={server_url}, \
         config.providers.cluecdc.param.token=<this cluster's token>"
    );
    match &seen.validation {
        Err(m) if m.contains("is unreachable") && m.contains("ClueCDC at") => check(
            Verdict::ClueCdcUnreachable,
            m.clone(),
            format!(
                "Set config.providers.cluecdc.param.url to an address of this ClueCDC the worker \
                 can reach ({server_url} here): check DNS, firewalls and TLS from the worker."
            ),
        ),
        Err(m) if m.contains("(HTTP 401") || m.contains("(HTTP 403") => check(
            Verdict::WrongToken,
            format!("{m}; no call arrived here, so the worker asks another server"),
            format!("Point config.providers.cluecdc.param.url at this ClueCDC ({server_url}) and set this cluster's token."),
        ),
        Err(m) => check(
            Verdict::ProviderError,
            m.clone(),
            "Read the message: it names the provider setting or the answer that failed.".into(),
        ),
        Ok(Some(v)) if !v.contains("${cluecdc:") => check(
            Verdict::WrongServer,
            "the worker resolved the probe reference, but its call never reached this ClueCDC: \
             its provider asks another server"
                .into(),
            format!("Set config.providers.cluecdc.param.url to this ClueCDC ({server_url}) and the token to this cluster's."),
        ),
        Ok(_) if has_marker => check(
            Verdict::NotConfigured,
            "the jar is installed, but the worker left the probe reference unresolved: \
             config.providers does not name cluecdc"
                .into(),
            format!("Add to every worker's properties: {lines}; then restart the workers."),
        ),
        Ok(_) => check(
            Verdict::JarMissing,
            format!("{MARKER_CLASS} is not in the worker's plugin list, and the probe reference came back unresolved"),
            format!(
                "Download cluecdc-config-provider.jar from this ClueCDC (Clusters → the config \
                 provider jar, checksum beside it) into a directory of its own on the worker's \
                 plugin.path, add {lines}, and restart the worker. A jar older than this check \
                 lacks the marker: replace it."
            ),
        ),
    }
}

/// The connector class the probe validates with: one every worker of this cluster lists.
fn probe_class(plugins: &[PluginInfo]) -> Option<String> {
    const PREFERRED: &str = "org.apache.kafka.connect.mirror.MirrorHeartbeatConnector";
    plugins
        .iter()
        .find(|p| p.class == PREFERRED)
        .or_else(|| {
            plugins
                .iter()
                .find(|p| p.kind == "source" || p.kind == "sink")
        })
        .map(|p| p.class.clone())
}

/// The addresses to ask: the cluster URL, then each worker Connect reports (the workers
/// running its connectors and tasks), without one that is the URL's own address.
fn targets(c: &ConnectCluster, workers: &[String]) -> Vec<(String, Option<String>)> {
    let scheme = if c.url.starts_with("https://") {
        "https"
    } else {
        "http"
    };
    let own = c
        .url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string();
    let mut out = vec![(c.url.clone(), None)];
    for w in workers {
        if *w != own && !w.contains('/') && !w.contains('@') {
            out.push((w.clone(), Some(format!("{scheme}://{w}"))));
        }
    }
    out
}

/// Runs the check on every worker of cluster `c` now, stores it, and answers it. `server_url`
/// is this ClueCDC as workers should reach it (`--public-url`), for the fixes it names.
pub async fn run(
    pool: &Pool,
    store: &SecretStore,
    c: &ConnectCluster,
    server_url: Option<&str>,
) -> Result<ProviderCheck> {
    let server_url = server_url.unwrap_or("<this ClueCDC's URL>");
    // The workers as Connect reports them now (this also refreshes the stored health).
    let health = super::connect::check_health(pool, store, &Principal::cli(), &c.id).await?;
    let mut workers = Vec::new();
    for (label, direct) in targets(c, &health.workers) {
        let client = match &direct {
            None => client_for(store, c).await?,
            Some(url) => ConnectClient::new(url, None).trusting(c.tls_ca_certificate.as_deref()),
        };
        let seen = observe(pool, &c.id, &client).await?;
        let names = names(pool).await?;
        workers.push(judge(&label, &c.id, server_url, &seen, |id| {
            names.iter().find(|(i, _)| i == id).map(|(_, n)| n.clone())
        }));
    }
    let check = ProviderCheck::of(&c.id, workers);
    // Every write here queues behind the reconciler's transactions (see `db::write_gate`).
    let _gate = crate::db::write_gate(pool).await;
    db::query(
        "UPDATE connect_clusters SET provider_check = $1, provider_check_at = $2 WHERE id = $3",
    )
    .bind(serde_json::to_string(&check).map_err(|e| Error::Unexpected(e.into()))?)
    .bind(&check.checked_at)
    .bind(&c.id)
    .execute(pool)
    .await?;
    Ok(check)
}

async fn names(pool: &Pool) -> Result<Vec<(String, String)>> {
    Ok(db::query_as("SELECT id, name FROM connect_clusters")
        .fetch_all(pool)
        .await?)
}

/// Asks one address: its plugins, then the probe (a nonce stored first, taken after).
async fn observe(pool: &Pool, cluster_id: &str, client: &ConnectClient) -> Result<Observation> {
    let plugins = match tokio::time::timeout(Duration::from_secs(10), client.plugins_all()).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return Ok(unreachable(e.to_string())),
        Err(_) => return Ok(unreachable("no answer within 10 s".into())),
    };
    let Some(class) = probe_class(&plugins) else {
        return Ok(Observation {
            plugins: Ok(plugins),
            validation: Err(
                "the worker lists no connector plugin to validate the probe with".into(),
            ),
            arrival: None,
        });
    };
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    {
        let _gate = crate::db::write_gate(pool).await;
        db::query(
            "INSERT INTO provider_probes (nonce, cluster_id, created_at) VALUES ($1, $2, $3)",
        )
        .bind(&nonce)
        .bind(cluster_id)
        .bind(crate::time::now())
        .execute(pool)
        .await?;
    }
    // The reference is the connector's name: every plugin has one, and the answer shows the
    // value validated, so an unresolved reference is seen as such.
    let config = [
        ("connector.class".to_string(), class.clone()),
        (
            "name".to_string(),
            format!("${{cluecdc:{PROBE_PREFIX}{nonce}:value}}"),
        ),
    ]
    .into_iter()
    .collect();
    let asked = client.validated_value(&class, &config, "name");
    let validation = match tokio::time::timeout(Duration::from_secs(20), asked).await {
        Ok(Ok(v)) => Ok(v),
        // The provider's own words, without Connect's wrapping of them.
        Ok(Err(ConnectError::Status { message, .. })) => Err(message
            .trim_start_matches("org.apache.kafka.common.config.ConfigException: ")
            .to_string()),
        Ok(Err(e)) => return Ok(unreachable(e.to_string())),
        Err(_) => Err("the worker did not answer the probe within 20 s".into()),
    };
    let _gate = crate::db::write_gate(pool).await;
    let arrival: Option<(Option<String>, Option<String>)> = db::query_as(
        "DELETE FROM provider_probes WHERE nonce = $1 RETURNING arrived_at, arrived_cluster_id",
    )
    .bind(&nonce)
    .fetch_optional(pool)
    .await?;
    // Probes of runs that ended without taking theirs (a crash) are not kept.
    db::query("DELETE FROM provider_probes WHERE created_at < $1")
        .bind(crate::time::in_secs(-600))
        .execute(pool)
        .await?;
    Ok(Observation {
        plugins: Ok(plugins),
        validation,
        arrival: arrival.and_then(|(at, cluster)| at.map(|_| cluster)),
    })
}

fn unreachable(why: String) -> Observation {
    Observation {
        plugins: Err(why),
        validation: Ok(None),
        arrival: None,
    }
}

/// The check as a page or the API shows it: the stored one while it is younger than
/// `FRESH_SECS` (a page view does not probe every worker each time), else one run now.
pub async fn current(
    pool: &Pool,
    store: &SecretStore,
    c: &ConnectCluster,
    server_url: Option<&str>,
    fresh: bool,
) -> Result<ProviderCheck> {
    if !fresh {
        if let Some(last) = latest(pool, &c.id).await? {
            let age = crate::time::parse(&last.checked_at)
                .map(|t| (chrono::Utc::now() - t).num_seconds())
                .unwrap_or(i64::MAX);
            if age < FRESH_SECS {
                return Ok(last);
            }
        }
    }
    run(pool, store, c, server_url).await
}

/// How long a stored check stands in for a new one when a page or the API asks.
pub const FRESH_SECS: i64 = 60;

/// Marks a probe as arrived (the resolve endpoint): `cluster_id` None for an unknown token.
/// Only an existing, not yet arrived nonce changes; anything else changes nothing.
pub async fn arrived(pool: &Pool, secret_ref: &str, cluster_id: Option<&str>) -> Result<()> {
    let Some(nonce) = secret_ref.strip_prefix(PROBE_PREFIX) else {
        return Ok(());
    };
    let _gate = crate::db::write_gate(pool).await;
    db::query(
        "UPDATE provider_probes SET arrived_at = $1, arrived_cluster_id = $2 WHERE nonce = $3 AND arrived_at IS NULL",
    )
    .bind(crate::time::now())
    .bind(cluster_id)
    .bind(nonce)
    .execute(pool)
    .await?;
    Ok(())
}

/// The stored check of a cluster, if it ever ran.
pub async fn latest(pool: &Pool, cluster_id: &str) -> Result<Option<ProviderCheck>> {
    let row: Option<Option<String>> =
        db::query_scalar("SELECT provider_check FROM connect_clusters WHERE id = $1")
            .bind(cluster_id)
            .fetch_optional(pool)
            .await?;
    Ok(row
        .flatten()
        .and_then(|s| serde_json::from_str::<ProviderCheck>(&s).ok()))
}

/// Before a deploy onto `c`: a stored failing check is run again, and a deploy is refused while
/// it still fails, naming the worker, what is wrong and the fix. Never checked, or passing:
/// the deploy goes on (the plugin validation that follows resolves references anyway).
pub async fn gate(
    pool: &Pool,
    store: &SecretStore,
    c: &ConnectCluster,
    server_url: Option<&str>,
) -> Result<()> {
    match latest(pool, &c.id).await? {
        Some(last) if last.state == CheckState::Failing => {
            let now = run(pool, store, c, server_url).await?;
            match now.refusal(&c.name) {
                Some(why) => Err(Error::field("connect_cluster_id", why)),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// The clusters whose check is due (the monitor's round): never checked ones too.
pub async fn due(pool: &Pool) -> Result<Vec<String>> {
    Ok(db::query_scalar(
        "SELECT id FROM connect_clusters WHERE provider_check_at IS NULL OR provider_check_at < $1 ORDER BY id",
    )
    .bind(crate::time::in_secs(-RECHECK_AFTER_SECS))
    .fetch_all(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(class: &str, kind: &str) -> PluginInfo {
        PluginInfo {
            class: class.into(),
            kind: kind.into(),
            version: String::new(),
        }
    }

    const UNRESOLVED: &str = "${cluecdc:cluecdc-probe-1:value}";

    fn seen(
        marker: bool,
        validation: std::result::Result<&str, &str>,
        arrival: Option<Option<&str>>,
    ) -> Observation {
        let mut plugins = vec![plugin(
            "org.apache.kafka.connect.mirror.MirrorHeartbeatConnector",
            "source",
        )];
        if marker {
            plugins.push(plugin(MARKER_CLASS, "predicate"));
        }
        Observation {
            plugins: Ok(plugins),
            validation: validation
                .map(|v| Some(v.to_string()))
                .map_err(String::from),
            arrival: arrival.map(|a| a.map(String::from)),
        }
    }

    fn verdict(s: &Observation) -> Verdict {
        judge("w:8083", "c1", "http://cdc:8080", s, |id| {
            (id == "c2").then(|| "other".into())
        })
        .verdict
    }

    #[test]
    fn each_state_is_told_apart() {
        assert_eq!(
            verdict(&seen(true, Ok("probe"), Some(Some("c1")))),
            Verdict::Passing
        );
        assert_eq!(
            verdict(&seen(false, Ok(UNRESOLVED), None)),
            Verdict::JarMissing
        );
        assert_eq!(
            verdict(&seen(true, Ok(UNRESOLVED), None)),
            Verdict::NotConfigured
        );
        assert_eq!(verdict(&seen(true, Err("ClueCDC at http://x could not resolve secret reference 'p' (HTTP 401, unauthenticated): sign in"), Some(None))), Verdict::WrongToken);
        let other = judge(
            "w",
            "c1",
            "u",
            &seen(true, Ok("probe"), Some(Some("c2"))),
            |id| (id == "c2").then(|| "other".into()),
        );
        assert_eq!(other.verdict, Verdict::WrongToken);
        assert!(other.message.contains("\"other\""), "{}", other.message);
        assert_eq!(
            verdict(&seen(true, Err("org.apache.kafka.common.config.ConfigException: ClueCDC at http://10.0.0.9:8080 is unreachable: connection failed"), None)),
            Verdict::ClueCdcUnreachable
        );
        assert_eq!(
            verdict(&seen(
                true,
                Err("ClueCDC at http://x could not resolve secret reference 'p' (HTTP 401): no"),
                None
            )),
            Verdict::WrongToken
        );
        assert_eq!(
            verdict(&seen(true, Err("config file '/x' does not exist"), None)),
            Verdict::ProviderError
        );
        assert_eq!(
            verdict(&seen(true, Ok("probe"), None)),
            Verdict::WrongServer
        );
        let down = unreachable("refused".into());
        assert_eq!(verdict(&down), Verdict::WorkerUnreachable);
    }

    #[test]
    fn wire_names_are_serdes() {
        for v in [
            Verdict::Passing,
            Verdict::JarMissing,
            Verdict::NotConfigured,
            Verdict::WrongToken,
            Verdict::ClueCdcUnreachable,
            Verdict::WrongServer,
            Verdict::ProviderError,
            Verdict::WorkerUnreachable,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
    }

    #[test]
    fn a_failing_worker_fails_the_cluster_and_an_unreachable_one_does_not() {
        let w = |verdict| WorkerCheck {
            worker: "w".into(),
            verdict,
            message: "m".into(),
            fix: "f".into(),
        };
        assert_eq!(
            ProviderCheck::of("c", vec![w(Verdict::Passing)]).state,
            CheckState::Passing
        );
        assert_eq!(
            ProviderCheck::of(
                "c",
                vec![w(Verdict::Passing), w(Verdict::WorkerUnreachable)]
            )
            .state,
            CheckState::Unknown
        );
        let failing = ProviderCheck::of("c", vec![w(Verdict::Passing), w(Verdict::NotConfigured)]);
        assert_eq!(failing.state, CheckState::Failing);
        assert!(failing
            .refusal("prod")
            .unwrap()
            .contains("provider not configured"));
        assert_eq!(ProviderCheck::of("c", vec![]).state, CheckState::Unknown);
    }

    #[test]
    fn workers_are_asked_directly_but_never_twice() {
        let mut c: ConnectCluster = serde_json::from_value(serde_json::json!({
            "id": "c", "name": "n", "url": "http://127.0.0.1:18083", "kafka_cluster_id": null,
            "managed_by": "cluecdc", "provider_token_at": null, "basic_auth_user": null,
            "secret_ref": null, "tls_ca_certificate": null,
            "health": null,
            "health_at": null, "observed_at": null, "last_error": null,
            "created_at": "t", "updated_at": "t"
        }))
        .unwrap();
        let workers = ["127.0.0.1:18083", "10.0.0.2:8083", "evil/x"].map(String::from);
        let t = targets(&c, &workers);
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(t[1].1.as_deref(), Some("http://10.0.0.2:8083"));
        c.url = "https://connect:8083".into();
        let t = targets(&c, &workers);
        assert_eq!(t.len(), 3, "{t:?}");
        assert_eq!(t[2].1.as_deref(), Some("https://10.0.0.2:8083"));
    }
}
