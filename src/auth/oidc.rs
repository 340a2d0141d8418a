//! Single sign-on with OpenID Connect: the settings checked at start-up, the relying party
//! (authorization code with PKCE S256, state and nonce; the ID token's signature from the
//! provider's JWKS, issuer, audience, expiry, nonce and algorithm checked, the JWKS fetched again
//! when a token names a key it does not hold), and the provider's groups mapped to a role at
//! every sign-in. Users are keyed by (issuer, subject), never by e-mail.

use crate::db;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::db::Pool;
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreJsonWebKeySet, CoreJwsSigningAlgorithm,
    CoreTokenResponse,
};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken, IdTokenVerifier,
    IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier, ProviderMetadataWithLogout, RedirectUrl,
    RequestTokenError, Scope, SignatureVerificationError, TokenResponse,
};
use serde_json::{json, Value};

use super::users::{self, User};
use super::{token_hash, Role};
use crate::audit::{self, Actor, Entry, Outcome};
use crate::config::OidcSettings;
use crate::secrets::Secret;

/// How long a sign-in may take between leaving for the provider and coming back.
pub const PENDING_TTL: Duration = Duration::from_secs(600);
/// Sign-ins in flight kept at most (the oldest are dropped first).
const PENDING_MAX: usize = 10_000;
/// Provider metadata is read again after this long (and at once when it failed).
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);
pub const CALLBACK_PATH: &str = "/login/oidc/callback";

// ---- settings ---------------------------------------------------------------------------------

/// Where a user's role came from, as stored in `users.role_source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleSource {
    Groups,
    Default,
}

impl RoleSource {
    pub fn as_str(self) -> &'static str {
        match self {
            RoleSource::Groups => "groups",
            RoleSource::Default => "default",
        }
    }
}

/// Provider groups per role; the highest role with a matching group wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleMapping {
    pub admin: Vec<String>,
    pub operator: Vec<String>,
    pub viewer: Vec<String>,
    /// The role of a user in no mapped group; `None` refuses the sign-in.
    pub default: Option<Role>,
}

impl RoleMapping {
    pub fn role_for(&self, groups: &[String]) -> Option<(Role, RoleSource)> {
        let member = |list: &[String]| list.iter().any(|g| groups.contains(g));
        if member(&self.admin) {
            Some((Role::Admin, RoleSource::Groups))
        } else if member(&self.operator) {
            Some((Role::Operator, RoleSource::Groups))
        } else if member(&self.viewer) {
            Some((Role::Viewer, RoleSource::Groups))
        } else {
            self.default.map(|r| (r, RoleSource::Default))
        }
    }
}

/// The groups at a dotted claim path (`groups`, `realm_access.roles`). A key that itself holds
/// dots (`https://example.com/groups`) is found too: longer keys are tried first. An array of
/// strings gives its strings, a single string gives itself, anything else no groups.
pub fn groups_at(claims: &Value, path: &str) -> Vec<String> {
    fn find<'a>(v: &'a Value, segments: &[&str]) -> Option<&'a Value> {
        if segments.is_empty() {
            return Some(v);
        }
        let object = v.as_object()?;
        (1..=segments.len()).rev().find_map(|n| {
            object
                .get(&segments[..n].join("."))
                .and_then(|child| find(child, &segments[n..]))
        })
    }
    let segments: Vec<&str> = path.split('.').collect();
    match find(claims, &segments) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// Checked single sign-on settings.
#[derive(Debug, Clone)]
pub struct OidcConfig {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Secret<String>,
    /// Besides `openid`, which is always asked for.
    pub scopes: Vec<String>,
    pub groups_claim: String,
    pub mapping: RoleMapping,
    pub ca_pem: Option<Vec<u8>>,
    pub name: String,
    pub algorithms: Vec<CoreJwsSigningAlgorithm>,
    pub redirect_url: String,
    pub post_logout_url: String,
    pub local_passwords: bool,
}

fn algorithm(name: &str) -> Option<CoreJwsSigningAlgorithm> {
    use CoreJwsSigningAlgorithm as A;
    Some(match name {
        "RS256" => A::RsaSsaPkcs1V15Sha256,
        "RS384" => A::RsaSsaPkcs1V15Sha384,
        "RS512" => A::RsaSsaPkcs1V15Sha512,
        "PS256" => A::RsaSsaPssSha256,
        "PS384" => A::RsaSsaPssSha384,
        "PS512" => A::RsaSsaPssSha512,
        "ES256" => A::EcdsaP256Sha256,
        "ES384" => A::EcdsaP384Sha384,
        "EdDSA" => A::EdDsa,
        _ => return None,
    })
}

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect()
}

impl OidcConfig {
    /// Reads the secret and CA files and checks everything; `None` when no issuer is set.
    pub fn from_settings(
        s: &OidcSettings,
        public_url: Option<&str>,
        secret_env: Option<String>,
    ) -> anyhow::Result<Option<OidcConfig>> {
        let secret_file = match &s.oidc_client_secret_file {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!(
                    "CLUECDC_OIDC_CLIENT_SECRET_FILE (--oidc-client-secret-file): cannot read {}: {e}",
                    path.display()
                )
            })?),
            None => None,
        };
        let ca = match &s.oidc_ca_file {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                anyhow::anyhow!(
                    "CLUECDC_OIDC_CA_FILE (--oidc-ca-file): cannot read {}: {e}",
                    path.display()
                )
            })?),
            None => None,
        };
        Self::validate(s, public_url, secret_file, secret_env, ca).map_err(|problems| {
            anyhow::anyhow!(
                "single sign-on settings are invalid:\n  {}",
                problems.join("\n  ")
            )
        })
    }

    /// Pure checks; each problem names the setting (environment variable and flag) and the fix.
    pub fn validate(
        s: &OidcSettings,
        public_url: Option<&str>,
        secret_file: Option<String>,
        secret_env: Option<String>,
        ca_pem: Option<Vec<u8>>,
    ) -> Result<Option<OidcConfig>, Vec<String>> {
        let mut problems = Vec::new();
        let Some(issuer) = s
            .oidc_issuer
            .as_deref()
            .map(str::trim)
            .filter(|i| !i.is_empty())
        else {
            if !s.local_passwords {
                problems.push("CLUECDC_LOCAL_PASSWORDS (--local-passwords): false needs single sign-on (CLUECDC_OIDC_ISSUER), or nobody could sign in".to_string());
                return Err(problems);
            }
            return Ok(None);
        };
        match url::Url::parse(issuer) {
            Ok(u) => {
                let loopback = matches!(u.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
                if u.scheme() != "https" && !(u.scheme() == "http" && loopback) {
                    problems.push(format!("CLUECDC_OIDC_ISSUER (--oidc-issuer): {issuer} must be an https:// URL (plain http only on localhost)"));
                }
                if u.query().is_some() || u.fragment().is_some() {
                    problems.push(format!("CLUECDC_OIDC_ISSUER (--oidc-issuer): {issuer} must not carry a query or fragment; give the issuer exactly as the provider's discovery document names it"));
                }
            }
            Err(e) => problems.push(format!("CLUECDC_OIDC_ISSUER (--oidc-issuer): {issuer:?} is not a URL ({e}); give the issuer exactly as the provider's discovery document names it")),
        }
        let client_id = s.oidc_client_id.as_deref().unwrap_or("").trim().to_string();
        if client_id.is_empty() {
            problems.push("CLUECDC_OIDC_CLIENT_ID (--oidc-client-id): set the client id ClueCDC is registered with at the provider".into());
        }
        let secret = match (secret_file, secret_env) {
            (Some(_), Some(_)) => {
                problems.push("CLUECDC_OIDC_CLIENT_SECRET and CLUECDC_OIDC_CLIENT_SECRET_FILE are both set; keep one".into());
                String::new()
            }
            (Some(f), None) => f.trim().to_string(),
            (None, Some(e)) => e.trim().to_string(),
            (None, None) => String::new(),
        };
        if secret.is_empty() && !problems.iter().any(|p| p.contains("both set")) {
            problems.push("CLUECDC_OIDC_CLIENT_SECRET_FILE (--oidc-client-secret-file) or CLUECDC_OIDC_CLIENT_SECRET: set the client secret (never on the command line)".into());
        }
        let scopes: Vec<String> = s
            .oidc_scopes
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect();
        if !scopes.iter().any(|x| x == "openid") {
            problems.push(format!(
                "CLUECDC_OIDC_SCOPES (--oidc-scopes): {:?} must include openid",
                s.oidc_scopes
            ));
        }
        if let Some(bad) = scopes.iter().find(|x| {
            !x.chars()
                .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
        }) {
            problems.push(format!("CLUECDC_OIDC_SCOPES (--oidc-scopes): {bad:?} is not a scope; use printable characters without quotes or backslashes"));
        }
        let claim = s.oidc_groups_claim.trim().to_string();
        if claim.is_empty() || claim.split('.').any(str::is_empty) {
            problems.push(format!("CLUECDC_OIDC_GROUPS_CLAIM (--oidc-groups-claim): {claim:?} is not a claim path; write a claim name or a dotted path such as realm_access.roles"));
        }
        let default = match s.oidc_default_role.trim().to_ascii_lowercase().as_str() {
            "none" | "" => None,
            other => match Role::parse(other) {
                Some(r) => Some(r),
                None => {
                    problems.push(format!("CLUECDC_OIDC_DEFAULT_ROLE (--oidc-default-role): {other:?} is not a role; choose none (refuse the sign-in), viewer, operator or admin"));
                    None
                }
            },
        };
        let mapping = RoleMapping {
            admin: list(&s.oidc_admin_groups),
            operator: list(&s.oidc_operator_groups),
            viewer: list(&s.oidc_viewer_groups),
            default,
        };
        if mapping.admin.is_empty()
            && mapping.operator.is_empty()
            && mapping.viewer.is_empty()
            && mapping.default.is_none()
        {
            problems.push("CLUECDC_OIDC_ADMIN_GROUPS, CLUECDC_OIDC_OPERATOR_GROUPS, CLUECDC_OIDC_VIEWER_GROUPS: map at least one group to a role, or set CLUECDC_OIDC_DEFAULT_ROLE, or nobody could sign in".into());
        }
        let mut algorithms = Vec::new();
        for name in list(&s.oidc_algorithms) {
            match algorithm(&name) {
                Some(a) => algorithms.push(a),
                None => problems.push(format!("CLUECDC_OIDC_ALGORITHMS (--oidc-algorithms): {name:?} is not accepted; choose from RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA (never none or HMAC)")),
            }
        }
        if algorithms.is_empty()
            && !problems
                .iter()
                .any(|p| p.starts_with("CLUECDC_OIDC_ALGORITHMS"))
        {
            problems.push("CLUECDC_OIDC_ALGORITHMS (--oidc-algorithms): name at least one algorithm, e.g. RS256".into());
        }
        let name = s.oidc_name.trim().to_string();
        if name.is_empty() || name.chars().count() > 40 {
            problems.push("CLUECDC_OIDC_NAME (--oidc-name): give the provider's name in 1–40 characters (the button says \"Sign in with <name>\")".into());
        }
        if let Some(pem) = &ca_pem {
            if reqwest::Certificate::from_pem_bundle(pem).map_or(true, |c| c.is_empty()) {
                problems.push("CLUECDC_OIDC_CA_FILE (--oidc-ca-file): the file holds no PEM certificate; give the CA certificate(s) that signed the provider's server certificate".into());
            }
        }
        let base = match public_url.map(str::trim).filter(|u| !u.is_empty()) {
            Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
                u.trim_end_matches('/').to_string()
            }
            Some(u) => {
                problems.push(format!("CLUECDC_PUBLIC_URL (--public-url): {u:?} must be an http(s) URL; single sign-on sends the provider back to <public-url>{CALLBACK_PATH}"));
                String::new()
            }
            None => {
                problems.push(format!("CLUECDC_PUBLIC_URL (--public-url): single sign-on needs the URL people reach ClueCDC at; register <public-url>{CALLBACK_PATH} as the redirect URI at the provider"));
                String::new()
            }
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Some(OidcConfig {
            issuer: issuer.to_string(),
            client_id,
            client_secret: Secret::new(secret),
            scopes: scopes.into_iter().filter(|x| x != "openid").collect(),
            groups_claim: claim,
            mapping,
            ca_pem,
            name,
            algorithms,
            redirect_url: format!("{base}{CALLBACK_PATH}"),
            post_logout_url: format!("{base}/login?signed_out=1"),
            local_passwords: s.local_passwords,
        }))
    }
}

// ---- failures -------------------------------------------------------------------------------

/// Why a sign-in through the provider failed. Messages are for the person signing in and for
/// the log; none carries a code, a token or the client secret.
#[derive(Debug, thiserror::Error)]
pub enum SsoError {
    #[error("this sign-in did not start here or was already used (its state does not match); start again")]
    StateMismatch,
    #[error("this sign-in took longer than {} minutes; start again", PENDING_TTL.as_secs() / 60)]
    Expired,
    #[error("the identity provider cannot be reached: {0}")]
    ProviderDown(String),
    #[error("the identity provider refused the sign-in: {0}")]
    ProviderRefused(String),
    #[error("the identity provider's ID token was refused: {0}")]
    TokenRefused(String),
    #[error("your account is in no group that ClueCDC maps to a role (groups: {groups}); ask an administrator to add you to one")]
    NoMatchingGroup { groups: String },
    #[error("this account is disabled in ClueCDC; ask an administrator")]
    Disabled,
    #[error(transparent)]
    Internal(#[from] crate::error::Error),
}

impl SsoError {
    /// A short code for logs and audit rows.
    pub fn reason(&self) -> &'static str {
        match self {
            SsoError::StateMismatch => "state mismatch",
            SsoError::Expired => "expired",
            SsoError::ProviderDown(_) => "provider unreachable",
            SsoError::ProviderRefused(_) => "provider refused",
            SsoError::TokenRefused(_) => "id token refused",
            SsoError::NoMatchingGroup { .. } => "no mapped group",
            SsoError::Disabled => "disabled",
            SsoError::Internal(_) => "internal",
        }
    }
}

// ---- the relying party ----------------------------------------------------------------------

struct Pending {
    nonce: String,
    verifier: String,
    next: String,
    created: Instant,
}

#[derive(Clone)]
struct Discovered {
    metadata: ProviderMetadataWithLogout,
    jwks: CoreJsonWebKeySet,
    at: Instant,
}

/// Who the provider says signed in (after every ID-token check passed).
#[derive(Debug, Clone)]
pub struct Identity {
    pub issuer: String,
    pub subject: String,
    pub preferred_name: String,
    pub groups: Vec<String>,
}

pub struct Provider {
    pub config: OidcConfig,
    http: reqwest::Client,
    discovered: tokio::sync::RwLock<Option<Discovered>>,
    pending: Mutex<HashMap<String, Pending>>,
}

fn down(e: impl std::fmt::Display) -> SsoError {
    // reqwest's messages name the URL, never a body: no secret is in them.
    SsoError::ProviderDown(format!("{e:#}").chars().take(300).collect())
}

impl Provider {
    pub fn new(config: OidcConfig) -> anyhow::Result<Provider> {
        // Redirects off: a provider's answer that redirects is an error, not something to follow
        // with the client's credentials.
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15))
            .use_rustls_tls();
        if let Some(pem) = &config.ca_pem {
            for cert in reqwest::Certificate::from_pem_bundle(pem)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Provider {
            config,
            http: builder.build()?,
            discovered: tokio::sync::RwLock::new(None),
            pending: Mutex::new(HashMap::new()),
        })
    }

    async fn discovery(&self) -> Result<Discovered, SsoError> {
        if let Some(d) = self.discovered.read().await.as_ref() {
            if d.at.elapsed() < DISCOVERY_TTL {
                return Ok(d.clone());
            }
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone()).map_err(down)?;
        let metadata = ProviderMetadataWithLogout::discover_async(issuer, &self.http)
            .await
            .map_err(down)?;
        let d = Discovered {
            jwks: metadata.jwks().clone(),
            metadata,
            at: Instant::now(),
        };
        *self.discovered.write().await = Some(d.clone());
        Ok(d)
    }

    /// The provider's end-session endpoint, when its discovery document names one.
    pub async fn end_session_url(&self) -> Option<String> {
        let d = self.discovery().await.ok()?;
        let end = d
            .metadata
            .additional_metadata()
            .end_session_endpoint
            .as_ref()?;
        Some(end_session_redirect(
            end.url(),
            &self.config.client_id,
            &self.config.post_logout_url,
        ))
    }

    fn client(
        &self,
        d: &Discovered,
    ) -> Result<
        openidconnect::core::CoreClient<
            openidconnect::EndpointSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointMaybeSet,
            openidconnect::EndpointMaybeSet,
        >,
        SsoError,
    > {
        let redirect = RedirectUrl::new(self.config.redirect_url.clone())
            .map_err(|e| SsoError::Internal(anyhow::anyhow!("redirect URL: {e}").into()))?;
        Ok(CoreClient::from_provider_metadata(
            d.metadata.clone(),
            ClientId::new(self.config.client_id.clone()),
            Some(ClientSecret::new(
                self.config.client_secret.expose().clone(),
            )),
        )
        .set_redirect_uri(redirect))
    }

    /// Starts a sign-in: the provider's authorization URL and the state the browser must bring
    /// back (in its cookie and in the query).
    pub async fn begin(&self, next: &str) -> Result<(String, String), SsoError> {
        let d = self.discovery().await?;
        let client = self.client(&d)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in &self.config.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| SsoError::Internal(anyhow::anyhow!("pending sign-ins lock").into()))?;
        pending.retain(|_, p| p.created.elapsed() < PENDING_TTL);
        if pending.len() >= PENDING_MAX {
            if let Some(oldest) = pending
                .iter()
                .min_by_key(|(_, p)| p.created)
                .map(|(k, _)| k.clone())
            {
                pending.remove(&oldest);
            }
        }
        pending.insert(
            token_hash(state.secret()),
            Pending {
                nonce: nonce.secret().clone(),
                verifier: verifier.secret().clone(),
                next: next.to_string(),
                created: Instant::now(),
            },
        );
        Ok((url.to_string(), state.secret().clone()))
    }

    /// Completes a sign-in: the state from the browser's cookie must equal the one in the
    /// query and be one this server issued (once); the code is exchanged with PKCE; the ID token
    /// is checked. Returns who signed in and where they were going.
    pub async fn finish(
        &self,
        cookie_state: Option<&str>,
        query_state: &str,
        code: &str,
    ) -> Result<(Identity, String), SsoError> {
        let Some(cookie_state) = cookie_state else {
            return Err(SsoError::StateMismatch);
        };
        if query_state.is_empty() || !super::secure_eq(cookie_state, query_state) {
            return Err(SsoError::StateMismatch);
        }
        let pending = self
            .pending
            .lock()
            .map_err(|_| SsoError::Internal(anyhow::anyhow!("pending sign-ins lock").into()))?
            .remove(&token_hash(query_state))
            .ok_or(SsoError::StateMismatch)?;
        if pending.created.elapsed() >= PENDING_TTL {
            return Err(SsoError::Expired);
        }
        let d = self.discovery().await?;
        let client = self.client(&d)?;
        let response: CoreTokenResponse = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| SsoError::ProviderDown(format!("no token endpoint: {e}")))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| match e {
                RequestTokenError::ServerResponse(r) => SsoError::ProviderRefused(format!(
                    "{}{}",
                    r.error(),
                    r.error_description()
                        .map(|d| format!(" ({})", d.chars().take(200).collect::<String>()))
                        .unwrap_or_default()
                )),
                RequestTokenError::Request(e) => down(e),
                RequestTokenError::Parse(e, _) => {
                    SsoError::ProviderRefused(format!("unreadable token response: {e}"))
                }
                RequestTokenError::Other(e) => SsoError::ProviderRefused(e),
            })?;
        let id_token = response
            .id_token()
            .ok_or_else(|| SsoError::TokenRefused("the token response has no ID token".into()))?;
        let nonce = Nonce::new(pending.nonce);
        let issuer = IssuerUrl::new(self.config.issuer.clone())
            .map_err(|e| SsoError::TokenRefused(format!("issuer: {e}")))?;
        let verify = |jwks: CoreJsonWebKeySet| {
            let verifier = IdTokenVerifier::new_confidential_client(
                ClientId::new(self.config.client_id.clone()),
                ClientSecret::new(self.config.client_secret.expose().clone()),
                issuer.clone(),
                jwks,
            )
            .set_allowed_algs(self.config.algorithms.clone());
            id_token
                .claims(&verifier, &nonce)
                .map(|c| c.subject().to_string())
        };
        let subject = match verify(d.jwks.clone()) {
            Ok(s) => s,
            // A key this server has not seen: the provider rotated; read its JWKS again, once.
            Err(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            )) => {
                let jwks = CoreJsonWebKeySet::fetch_async(d.metadata.jwks_uri(), &self.http)
                    .await
                    .map_err(down)?;
                if let Some(cached) = self.discovered.write().await.as_mut() {
                    cached.jwks = jwks.clone();
                }
                tracing::info!(issuer = %self.config.issuer, "ID token signed with an unknown key: fetched the provider's JWKS again");
                verify(jwks).map_err(token_refused)?
            }
            Err(e) => return Err(token_refused(e)),
        };
        // Every check passed: the payload is the provider's, read for the groups claim and a name.
        let payload = jwt_payload(&id_token.to_string())
            .ok_or_else(|| SsoError::TokenRefused("unreadable claims".into()))?;
        let text = |k: &str| {
            payload
                .get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .filter(|s| !s.is_empty())
        };
        let preferred_name = text("preferred_username")
            .or_else(|| text("email").map(|e| e.split('@').next().unwrap_or("").to_string()))
            .or_else(|| text("name"))
            .unwrap_or_else(|| "sso-user".into());
        Ok((
            Identity {
                issuer: self.config.issuer.clone(),
                subject,
                preferred_name,
                groups: groups_at(&payload, &self.config.groups_claim),
            },
            pending.next,
        ))
    }
}

/// RP-initiated logout: the provider's end-session endpoint with the client and where to come
/// back to (no `id_token_hint`: ClueCDC keeps no token). Its own query parameters stay.
pub fn end_session_redirect(end: &url::Url, client_id: &str, post_logout_url: &str) -> String {
    let mut url = end.clone();
    url.query_pairs_mut()
        .append_pair("client_id", client_id)
        .append_pair("post_logout_redirect_uri", post_logout_url);
    url.to_string()
}

fn token_refused(e: ClaimsVerificationError) -> SsoError {
    let why = match &e {
        ClaimsVerificationError::InvalidAudience(_) => {
            "it is addressed to another client (audience)".to_string()
        }
        ClaimsVerificationError::Expired(_) => "it has expired".to_string(),
        ClaimsVerificationError::InvalidIssuer(_) => "it comes from another issuer".to_string(),
        ClaimsVerificationError::InvalidNonce(_) => {
            "its nonce is not this sign-in's (a replayed token)".to_string()
        }
        ClaimsVerificationError::SignatureVerification(s) => format!("its signature: {s}"),
        other => other.to_string(),
    };
    SsoError::TokenRefused(why)
}

/// The claims of a compact JWT, unverified: called only on a token that passed every check.
fn jwt_payload(jwt: &str) -> Option<Value> {
    use base64::Engine;
    let part = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

// ---- the account ----------------------------------------------------------------------------

/// A user name for a new single sign-on account: the provider's name made to fit the local
/// rules (lowercase letters, digits, '.', '_', '-').
pub fn local_name(preferred: &str) -> String {
    let mut name: String = preferred
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(48)
        .collect();
    name = name
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string();
    if name.is_empty() {
        name = "sso-user".into();
    }
    name
}

/// Finds or creates the user for a verified identity and sets its role from the groups; the
/// role change (or the creation) is audited in the same transaction.
pub async fn account(pool: &Pool, mapping: &RoleMapping, who: &Identity) -> Result<User, SsoError> {
    let Some((role, source)) = mapping.role_for(&who.groups) else {
        return Err(SsoError::NoMatchingGroup {
            groups: if who.groups.is_empty() {
                "none".into()
            } else {
                who.groups.join(", ")
            },
        });
    };
    let existing = users::find_by_identity(pool, &who.issuer, &who.subject).await?;
    let mut tx = pool.begin().await.map_err(crate::error::Error::from)?;
    let user = match existing {
        Some(user) => {
            if user.disabled {
                return Err(SsoError::Disabled);
            }
            if user.role != role.as_str() || user.role_source != source.as_str() {
                audit::record(
                    &mut tx,
                    Entry {
                        actor: Actor::system(),
                        action: "user.role_from_groups",
                        target_kind: "user",
                        target_id: &user.id,
                        outcome: Outcome::Success,
                        summary: json!({"name": user.name, "from": user.role, "to": role.as_str(),
                            "source": source.as_str(), "groups": who.groups, "issuer": who.issuer}),
                    },
                )
                .await?;
                db::query(
                    "UPDATE users SET role = $1, role_source = $2, updated_at = $3 WHERE id = $4",
                )
                .bind(role.as_str())
                .bind(source.as_str())
                .bind(crate::time::now())
                .bind(&user.id)
                .execute(&mut *tx)
                .await
                .map_err(crate::error::Error::from)?;
            }
            User {
                role: role.as_str().into(),
                role_source: source.as_str().into(),
                ..user
            }
        }
        None => {
            let base = local_name(&who.preferred_name);
            let mut name = base.clone();
            let tag = token_hash(&format!("{}\n{}", who.issuer, who.subject));
            let mut n = 6;
            while users::find_by_name(pool, &name).await?.is_some() {
                name = format!("{base}-{}", &tag[..n]);
                n += 2;
            }
            let id = format!("usr_{}", uuid::Uuid::new_v4().simple());
            let now = crate::time::now();
            audit::record(
                &mut tx,
                Entry {
                    actor: Actor::system(),
                    action: "user.create",
                    target_kind: "user",
                    target_id: &id,
                    outcome: Outcome::Success,
                    summary: json!({"name": name, "role": role.as_str(), "via": "oidc",
                        "source": source.as_str(), "groups": who.groups, "issuer": who.issuer}),
                },
            )
            .await?;
            // No password: an empty hash never verifies.
            db::query(
                "INSERT INTO users (id, name, role, password_hash, created_at, updated_at, oidc_issuer, oidc_subject, role_source)
                 VALUES ($1, $2, $3, '', $4, $5, $6, $7, $8)",
            )
            .bind(&id)
            .bind(&name)
            .bind(role.as_str())
            .bind(&now)
            .bind(&now)
            .bind(&who.issuer)
            .bind(&who.subject)
            .bind(source.as_str())
            .execute(&mut *tx)
            .await
            .map_err(crate::error::Error::from)?;
            User {
                id,
                name,
                role: role.as_str().into(),
                disabled: false,
                created_at: now,
                password_hash: String::new(),
                oidc_issuer: Some(who.issuer.clone()),
                role_source: source.as_str().into(),
            }
        }
    };
    tx.commit().await.map_err(crate::error::Error::from)?;
    Ok(user)
}

/// A refused single sign-on, audited without tokens.
pub async fn record_refusal(pool: &Pool, e: &SsoError, address: &str) {
    let mut summary = json!({"address": address, "reason": e.reason(), "via": "oidc"});
    if let SsoError::NoMatchingGroup { groups } = e {
        summary["groups"] = json!(groups);
    }
    let entry = Entry {
        actor: Actor::anonymous("sso"),
        action: "auth.login",
        target_kind: "session",
        target_id: "-",
        outcome: Outcome::Failure,
        summary,
    };
    if let Err(error) = audit::record_alone(pool, entry).await {
        tracing::error!(%error, "could not audit a refused sign-in");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> OidcSettings {
        OidcSettings {
            oidc_issuer: Some("https://idp.example.com/realms/ops".into()),
            oidc_client_id: Some("cluecdc".into()),
            oidc_client_secret_file: None,
            oidc_scopes: "openid profile email groups".into(),
            oidc_groups_claim: "groups".into(),
            oidc_admin_groups: "ops-admins".into(),
            oidc_operator_groups: "".into(),
            oidc_viewer_groups: "staff, ".into(),
            oidc_default_role: "none".into(),
            oidc_ca_file: None,
            oidc_name: "Keycloak".into(),
            oidc_algorithms: "RS256".into(),
            local_passwords: true,
        }
    }

    fn check(s: &OidcSettings) -> Result<Option<OidcConfig>, Vec<String>> {
        OidcConfig::validate(
            s,
            Some("https://cdc.example.com/"),
            None,
            Some("s3cret".into()),
            None,
        )
    }

    fn problems(s: &OidcSettings) -> String {
        check(s).unwrap_err().join("\n")
    }

    #[test]
    fn a_complete_configuration_gives_the_callback_under_the_public_url_and_drops_openid_from_extra_scopes(
    ) {
        let c = check(&settings()).unwrap().unwrap();
        assert_eq!(
            c.redirect_url,
            "https://cdc.example.com/login/oidc/callback"
        );
        assert_eq!(c.scopes, vec!["profile", "email", "groups"]);
        assert_eq!(c.mapping.viewer, vec!["staff"]);
        assert_eq!(c.client_secret.expose(), "s3cret");
    }

    #[test]
    fn no_issuer_means_no_single_sign_on_unless_local_passwords_are_off() {
        let mut s = settings();
        s.oidc_issuer = None;
        assert!(check(&s).unwrap().is_none());
        s.local_passwords = false;
        assert!(problems(&s).contains("CLUECDC_LOCAL_PASSWORDS"));
    }

    #[test]
    fn each_invalid_setting_is_named_with_its_fix() {
        let mut s = settings();
        s.oidc_issuer = Some("http://idp.example.com".into());
        s.oidc_client_id = Some(" ".into());
        s.oidc_scopes = "profile".into();
        s.oidc_groups_claim = "realm_access..roles".into();
        s.oidc_default_role = "root".into();
        s.oidc_algorithms = "HS256".into();
        s.oidc_name = "".into();
        let p = problems(&s);
        for needle in [
            "CLUECDC_OIDC_ISSUER (--oidc-issuer): http://idp.example.com must be an https:// URL",
            "CLUECDC_OIDC_CLIENT_ID",
            "CLUECDC_OIDC_SCOPES (--oidc-scopes): \"profile\" must include openid",
            "CLUECDC_OIDC_GROUPS_CLAIM",
            "CLUECDC_OIDC_DEFAULT_ROLE (--oidc-default-role): \"root\" is not a role",
            "CLUECDC_OIDC_ALGORITHMS (--oidc-algorithms): \"HS256\" is not accepted",
            "CLUECDC_OIDC_NAME",
        ] {
            assert!(p.contains(needle), "{needle} missing from:\n{p}");
        }
    }

    #[test]
    fn plain_http_issuers_are_accepted_only_on_loopback() {
        let mut s = settings();
        s.oidc_issuer = Some("http://127.0.0.1:5556/dex".into());
        assert!(check(&s).is_ok());
    }

    #[test]
    fn the_client_secret_comes_from_exactly_one_place() {
        let s = settings();
        let none = OidcConfig::validate(&s, Some("https://c"), None, None, None).unwrap_err();
        assert!(none.join(" ").contains("CLUECDC_OIDC_CLIENT_SECRET_FILE"));
        let both = OidcConfig::validate(
            &s,
            Some("https://c"),
            Some("a\n".into()),
            Some("b".into()),
            None,
        )
        .unwrap_err();
        assert!(both.join(" ").contains("both set"));
        let file = OidcConfig::validate(
            &s,
            Some("https://c"),
            Some("from-file\n".into()),
            None,
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(file.client_secret.expose(), "from-file");
    }

    #[test]
    fn single_sign_on_needs_the_public_url_and_a_way_to_get_a_role() {
        let mut s = settings();
        let p = OidcConfig::validate(&s, None, None, Some("x".into()), None).unwrap_err();
        assert!(p.join(" ").contains("CLUECDC_PUBLIC_URL"));
        s.oidc_admin_groups = "".into();
        s.oidc_viewer_groups = "".into();
        assert!(problems(&s).contains("map at least one group"));
        s.oidc_default_role = "viewer".into();
        assert!(check(&s).is_ok());
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused() {
        let p = OidcConfig::validate(
            &settings(),
            Some("https://c"),
            None,
            Some("x".into()),
            Some(b"not a certificate".to_vec()),
        )
        .unwrap_err();
        assert!(p.join(" ").contains("CLUECDC_OIDC_CA_FILE"));
    }

    #[test]
    fn the_highest_matching_role_wins_and_the_default_applies_only_without_a_match() {
        let m = RoleMapping {
            admin: vec!["a".into()],
            operator: vec!["o".into()],
            viewer: vec!["v".into()],
            default: None,
        };
        let g = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            m.role_for(&g(&["v", "a"])),
            Some((Role::Admin, RoleSource::Groups))
        );
        assert_eq!(
            m.role_for(&g(&["o", "v"])),
            Some((Role::Operator, RoleSource::Groups))
        );
        assert_eq!(m.role_for(&g(&["staff"])), None);
        let with_default = RoleMapping {
            default: Some(Role::Viewer),
            ..m
        };
        assert_eq!(
            with_default.role_for(&g(&["staff"])),
            Some((Role::Viewer, RoleSource::Default))
        );
        assert_eq!(
            with_default.role_for(&g(&["a"])),
            Some((Role::Admin, RoleSource::Groups))
        );
    }

    #[test]
    fn groups_are_read_at_a_dotted_path_including_keys_that_hold_dots() {
        let claims = json!({
            "groups": ["g1", "g2"],
            "realm_access": {"roles": ["r1"]},
            "https://example.com/groups": ["url-claim"],
            "resource_access": {"my.client": {"roles": ["c1"]}},
            "single": "one",
            "number": 3
        });
        assert_eq!(groups_at(&claims, "groups"), vec!["g1", "g2"]);
        assert_eq!(groups_at(&claims, "realm_access.roles"), vec!["r1"]);
        assert_eq!(
            groups_at(&claims, "https://example.com/groups"),
            vec!["url-claim"]
        );
        assert_eq!(
            groups_at(&claims, "resource_access.my.client.roles"),
            vec!["c1"]
        );
        assert_eq!(groups_at(&claims, "single"), vec!["one"]);
        assert!(groups_at(&claims, "number").is_empty());
        assert!(groups_at(&claims, "realm_access.missing").is_empty());
    }

    #[test]
    fn the_end_session_redirect_names_the_client_and_the_way_back_and_keeps_the_endpoint_query() {
        let end =
            url::Url::parse("https://kc.example.com/realms/ops/logout?ui_locales=en").unwrap();
        assert_eq!(
            end_session_redirect(&end, "cluecdc", "https://cdc.example.com/login?signed_out=1"),
            "https://kc.example.com/realms/ops/logout?ui_locales=en&client_id=cluecdc&post_logout_redirect_uri=https%3A%2F%2Fcdc.example.com%2Flogin%3Fsigned_out%3D1"
        );
    }

    #[test]
    fn local_names_fit_the_user_name_rules() {
        assert_eq!(local_name("Alice Smith"), "alice-smith");
        assert_eq!(local_name("_bob"), "bob");
        assert_eq!(local_name("日本"), "sso-user");
        assert!(users::validate_name(&local_name(&"x".repeat(80))).is_ok());
    }
}
