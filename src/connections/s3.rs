//! AWS S3 and MinIO, as seed 000 describes the connection test: check the bucket, write a
//! unique small probe under `.cluecdc/connection-tests/`, read it back and compare, delete it
//! in a finally step. Never creates a bucket. Errors are sanitized before they leave.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use futures::future::BoxFuture;

use super::settings::ObjectStorageSettings;
use super::{sanitize, Adapter, Check, Connection, TableInfo};
use crate::error::{Error, Result};
use crate::secrets::Secret;

pub struct ObjectStorage;

pub const PROBE_DIR: &str = ".cluecdc/connection-tests/";

/// An S3 client for a connection: the regional AWS endpoint, or the MinIO endpoint with
/// path-style addressing. TLS verification is always on (the SDK offers no way off here); with
/// a private CA, that CA is the only root this client trusts.
pub fn client(
    s: &ObjectStorageSettings,
    secrets: &BTreeMap<String, Secret<String>>,
) -> std::result::Result<aws_sdk_s3::Client, String> {
    let get = |k: &str| secrets.get(k).map(|v| v.expose().clone());
    let creds = Credentials::new(
        get("access_key_id").unwrap_or_default(),
        get("secret_access_key").unwrap_or_default(),
        get("session_token"),
        None,
        "cluecdc",
    );
    let timeouts = aws_sdk_s3::config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_attempt_timeout(Duration::from_secs(10))
        .operation_timeout(Duration::from_secs(20))
        .build();
    let mut b = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(s.region.clone()))
        .credentials_provider(creds)
        .timeout_config(timeouts)
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::standard().with_max_attempts(2))
        .force_path_style(s.path_style);
    if let Some(endpoint) = &s.endpoint {
        b = b.endpoint_url(endpoint);
    }
    if let Some(pem) = &s.ca_certificate {
        b = b.http_client(private_ca_client(pem)?);
    }
    Ok(aws_sdk_s3::Client::from_conf(b.build()))
}

/// The SDK's own HTTPS client (rustls with aws-lc, as its default), trusting `pem` only. An
/// unparsable PEM fails the handshake with a certificate error, never falls back to more roots.
fn private_ca_client(
    pem: &str,
) -> std::result::Result<aws_sdk_s3::config::SharedHttpClient, String> {
    use aws_smithy_http_client::tls;
    let trust = tls::TrustStore::empty()
        .with_native_roots(false)
        .with_pem_certificate(pem.as_bytes());
    let context = tls::TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .map_err(|e| format!("the CA certificate cannot be used: {e}"))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(context)
        .build_https())
}

/// (error code, sanitized message) of an SDK error: never a secret, never a raw response.
pub fn describe<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    e: &SdkError<E, R>,
    secrets: &BTreeMap<String, Secret<String>>,
) -> (String, String) {
    let code = match e {
        SdkError::ServiceError(s) => s.err().code().map(str::to_string),
        _ => None,
    };
    let status = match e {
        SdkError::ServiceError(s) => Some(format!("{:?}", s.raw())).and_then(|raw| {
            raw.split("status: StatusCode(").nth(1).map(|r| {
                r.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
        }),
        _ => None,
    };
    let message = match e {
        SdkError::ServiceError(s) => s.err().message().map(str::to_string).unwrap_or_else(|| {
            code.clone()
                .unwrap_or_else(|| "the service refused the request".into())
        }),
        SdkError::TimeoutError(_) => "timed out".into(),
        SdkError::DispatchFailure(_) => {
            // The context ends with the SDK's Debug dump of the same chain: keep the words.
            let full = DisplayErrorContext(e).to_string();
            let words = full.split(" (DispatchFailure(").next().unwrap_or(&full);
            format!("could not reach the endpoint: {words}")
        }
        other => DisplayErrorContext(other).to_string(),
    };
    let code = code
        .or(status.map(|s| format!("HTTP {s}")))
        .unwrap_or_else(|| "error".into());
    (
        code.clone(),
        sanitize(&format!("{code}: {message}"), secrets),
    )
}

fn hint_for(code: &str, message: &str, bucket: &str) -> String {
    if let Some(why) = super::tls_problem(message) {
        return why.into();
    }
    match code {
        "NoSuchBucket" | "HTTP 404" | "NotFound" => format!("bucket {bucket} does not exist: create it yourself (ClueCDC never creates buckets) or fix the bucket name and region"),
        "InvalidAccessKeyId" => "the access key id is unknown to the server: rotate the connection's credentials".into(),
        "SignatureDoesNotMatch" => "the secret access key does not match the access key id: rotate the connection's credentials".into(),
        "AccessDenied" | "HTTP 403" | "Forbidden" => format!("the credentials lack permission: grant s3:ListBucket on {bucket} and s3:PutObject, s3:GetObject, s3:DeleteObject on its objects"),
        "ExpiredToken" | "TokenRefreshRequired" => "the session token expired: rotate the connection's credentials".into(),
        "PermanentRedirect" | "AuthorizationHeaderMalformed" => "the region does not match the bucket's region".into(),
        _ => "check the endpoint, region and network path from ClueCDC to the storage".into(),
    }
}

/// A probe key under `head` as long as `example` (`len` bytes) whose parts between slashes are
/// no longer than `example`'s longest: stores limit both (MinIO: 1,024 bytes in all, 255 a
/// part), and a probe with one long part would be refused where the real keys are not.
fn long_probe_key(head: &str, len: usize, example: &str) -> String {
    let part = example.split('/').map(str::len).max().unwrap_or(1).max(1);
    let mut key = head.to_string();
    key.push('k');
    while key.len() < len {
        let last = key.len() - key.rfind('/').map_or(0, |i| i + 1);
        // A full part continues after a slash, unless only the slash would fit.
        if last >= part && len - key.len() >= 2 {
            key.push('/');
        }
        key.push('k');
    }
    key
}

/// Writes and deletes a probe whose key is `len` bytes long (under the probe folder), so that
/// a store that refuses keys as long as a delivery's longest is named before anything is
/// created (a store that fails them fails every upload, and the sink then sits RUNNING with all
/// its records behind). `example` is the delivery's longest key, quoted in the message.
pub async fn long_key_check(
    s: &ObjectStorageSettings,
    secrets: &BTreeMap<String, Secret<String>>,
    len: usize,
    example: &str,
) -> Check {
    const NAME: &str = "long keys";
    let id = uuid::Uuid::new_v4().simple().to_string();
    let key = long_probe_key(&format!("{}{PROBE_DIR}{id}-", s.prefix), len, example);
    let client = match client(s, secrets) {
        Ok(c) => c,
        Err(why) => {
            return Check::fail(
                NAME,
                why,
                "paste the PEM of the CA that signed the server's certificate",
            )
        }
    };
    let put = client
        .put_object()
        .bucket(&s.bucket)
        .key(&key)
        .body(b"ClueCDC long key probe\n".to_vec().into())
        .content_type("text/plain")
        .send()
        .await;
    if let Err(e) = put {
        let (_, msg) = describe(&e, secrets);
        return Check::fail(
            NAME,
            format!("the store refused an object whose key is {} bytes, as long as this delivery's longest key ({example}), its parts between slashes no longer than that key's: {msg}", key.len()),
            "shorten the key template, the connection's prefix or the topic names, or use a store that takes longer keys (S3 takes 1,024 bytes; MinIO 1,024, and 255 between two slashes)",
        );
    }
    match client.delete_object().bucket(&s.bucket).key(&key).send().await {
        Ok(_) => Check::pass(NAME, format!("the store takes keys of {} bytes, as long as this delivery's longest key ({example})", key.len())),
        Err(e) => {
            let (_, msg) = describe(&e, secrets);
            Check::fail(NAME, format!("could not delete the probe object {key}: {msg}"), format!("remove {key} by hand, and grant s3:DeleteObject so tests clean up after themselves"))
        }
    }
}

impl Adapter for ObjectStorage {
    fn test<'a>(
        &'a self,
        conn: &'a Connection,
        secrets: &'a BTreeMap<String, Secret<String>>,
    ) -> BoxFuture<'a, Vec<Check>> {
        Box::pin(async move {
            let Some(s) = conn.object_storage() else {
                return vec![];
            };
            let mut checks = Vec::new();
            let client = match client(s, secrets) {
                Ok(c) => c,
                Err(why) => {
                    checks.push(Check::fail(
                        "bucket",
                        why,
                        "paste the PEM of the CA that signed the server's certificate",
                    ));
                    return checks;
                }
            };
            match client.head_bucket().bucket(&s.bucket).send().await {
                Ok(_) => checks.push(Check::pass(
                    "bucket",
                    format!("bucket {} exists and is reachable", s.bucket),
                )),
                Err(e) => {
                    let (mut code, mut msg) = describe(&e, secrets);
                    // A HEAD answer has no body, so a 403 does not say whether the key, the
                    // secret or a policy is wrong; a one-key listing does.
                    if code == "HTTP 403" {
                        if let Err(e) = client
                            .list_objects_v2()
                            .bucket(&s.bucket)
                            .max_keys(1)
                            .send()
                            .await
                        {
                            (code, msg) = describe(&e, secrets);
                        }
                    }
                    let hint = hint_for(&code, &msg, &s.bucket);
                    checks.push(Check::fail("bucket", msg, hint));
                    return checks;
                }
            }
            let id = uuid::Uuid::new_v4().simple().to_string();
            let key = format!("{}{PROBE_DIR}{id}.txt", s.prefix);
            let body =
                format!("ClueCDC connection test {id} at {}\n", crate::time::now()).into_bytes();
            if let Err(e) = client
                .put_object()
                .bucket(&s.bucket)
                .key(&key)
                .body(body.clone().into())
                .content_type("text/plain")
                .send()
                .await
            {
                let (code, msg) = describe(&e, secrets);
                let hint = hint_for(&code, &msg, &s.bucket);
                checks.push(Check::fail("write probe", msg, hint));
                return checks;
            }
            checks.push(Check::pass(
                "write probe",
                format!("wrote {} bytes to {key}", body.len()),
            ));
            match client.get_object().bucket(&s.bucket).key(&key).send().await {
                Ok(out) => match out.body.collect().await {
                    Ok(bytes) if bytes.clone().into_bytes().as_ref() == body.as_slice() => checks
                        .push(Check::pass(
                            "read back",
                            "read the probe back; the bytes match",
                        )),
                    Ok(_) => checks.push(Check::fail(
                        "read back",
                        "the probe read back differs from what was written",
                        "check for a proxy or gateway that rewrites objects",
                    )),
                    Err(e) => checks.push(Check::fail(
                        "read back",
                        sanitize(&e.to_string(), secrets),
                        "check the network path to the storage",
                    )),
                },
                Err(e) => {
                    let (code, msg) = describe(&e, secrets);
                    let hint = hint_for(&code, &msg, &s.bucket);
                    checks.push(Check::fail("read back", msg, hint));
                }
            }
            // The finally step: whatever happened to the read, the probe is removed.
            match client
                .delete_object()
                .bucket(&s.bucket)
                .key(&key)
                .send()
                .await
            {
                Ok(_) => checks.push(Check::pass("delete probe", format!("deleted {key}"))),
                Err(e) => {
                    let (_, msg) = describe(&e, secrets);
                    checks.push(Check::fail("delete probe", format!("could not delete the probe object {key}: {msg}"), format!("remove {key} by hand, and grant s3:DeleteObject so tests clean up after themselves")));
                }
            }
            checks
        })
    }

    fn discover<'a>(
        &'a self,
        conn: &'a Connection,
        _: &'a BTreeMap<String, Secret<String>>,
        _: usize,
    ) -> BoxFuture<'a, Result<Vec<TableInfo>>> {
        Box::pin(async move {
            Err(Error::Conflict(format!(
                "{} is object storage: it has no tables to discover",
                conn.name
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_probe_key_is_as_long_as_the_example_with_no_longer_parts() {
        let example = format!(
            "cdc/{}/year=2026/{}-0000000000.jsonl.gz",
            "t".repeat(200),
            "t".repeat(200)
        );
        let key = long_probe_key(
            "cdc/.cluecdc/connection-tests/abc-",
            example.len(),
            &example,
        );
        assert_eq!(key.len(), example.len());
        let longest = example.split('/').map(str::len).max().unwrap();
        assert!(
            key.split('/').all(|p| !p.is_empty() && p.len() <= longest),
            "{key}"
        );
        assert!(key.starts_with("cdc/.cluecdc/connection-tests/abc-k"));
        // A short example still gets a probe of its own.
        assert_eq!(long_probe_key("p/", 1, "x"), "p/k");
    }
}
