//! Issue 27's proof: hostile counterparts on loopback record every byte they receive, and no
//! stored secret ever reaches them. A PostgreSQL server that asks for a clear-text password, a
//! MySQL server that names `mysql_clear_password` (or asks for caching_sha2_password's RSA
//! exchange and sends its own key), a Kafka listener offering SASL PLAIN and an HTTP server
//! answering like Connect: a connection or cluster re-pointed at them without its secret (by
//! the API, the edit page or an applied document) is refused and sends them nothing; a document
//! applied over HTTP never reads the server's environment or files; ClueCDC's own clients send
//! no password in clear text to a server that has not proved itself. Each counterpart first
//! proves, against a naive client, that it does get the password out of one, so that "received
//! nothing" means something.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::helpers::*;

// ---- the hostile counterparts ---------------------------------------------------------------

/// What a counterpart speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Answers an SSLRequest with 'N', then asks for AuthenticationCleartextPassword.
    Postgres,
    /// A HandshakeV10 naming `mysql_clear_password`.
    MySqlClearText,
    /// A HandshakeV10 naming `caching_sha2_password`, then "full authentication" (AuthMoreData
    /// 0x04) and, when asked, its own RSA public key; it decrypts what comes back.
    MySqlRsa,
    /// ApiVersions, then SaslHandshake offering PLAIN, then whatever SaslAuthenticate carries.
    KafkaSasl,
    /// HTTP/1.1 answering like a Connect REST API.
    Http,
}

/// One connection's bytes, as received, plus what the counterpart decoded from them (a basic
/// auth header, an RSA-encrypted password), marked `[decoded …]`.
type Session = Arc<Mutex<Vec<u8>>>;

/// A hostile counterpart on 127.0.0.1 (port 0). Dropped, it stops listening and cuts every
/// connection.
pub struct Hostile {
    pub kind: Kind,
    pub port: u16,
    sessions: Arc<Mutex<Vec<Session>>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    _dir: tempfile::TempDir,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

impl Hostile {
    pub async fn start(kind: Kind) -> Hostile {
        let dir = tempfile::tempdir().unwrap();
        let key = match kind {
            Kind::MySqlRsa => Some(Arc::new(RsaKey::new(dir.path()).await)),
            _ => None,
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let sessions: Arc<Mutex<Vec<Session>>> = Default::default();
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Default::default();
        let (all, spawned) = (sessions.clone(), tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let record: Session = Default::default();
                all.lock().unwrap().push(record.clone());
                let key = key.clone();
                let conn = tokio::spawn(async move {
                    let _ = stream.set_nodelay(true);
                    let mut c = Conn {
                        stream,
                        buf: Vec::new(),
                        record,
                    };
                    let _ = match kind {
                        Kind::Postgres => postgres(&mut c).await,
                        Kind::MySqlClearText => mysql(&mut c, None).await,
                        Kind::MySqlRsa => mysql(&mut c, key.as_deref()).await,
                        Kind::KafkaSasl => kafka(&mut c).await,
                        Kind::Http => http(&mut c).await,
                    };
                    // Whatever the client still sends is recorded too.
                    c.drain().await;
                });
                spawned.lock().unwrap().push(conn);
            }
        });
        tasks.lock().unwrap().push(accept);
        Hostile {
            kind,
            port,
            sessions,
            tasks,
            _dir: dir,
        }
    }

    /// `127.0.0.1:<port>` (a Kafka bootstrap server).
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many TCP connections it accepted.
    pub fn connections(&self) -> usize {
        self.sessions.lock().unwrap().len()
    }

    /// Every byte received, connection after connection, with what it decoded from them.
    pub fn received(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, s) in self.sessions.lock().unwrap().iter().enumerate() {
            out.extend_from_slice(format!("\n-- connection {i} --\n").as_bytes());
            out.extend_from_slice(&s.lock().unwrap());
        }
        out
    }

    /// `received()` as printable text, for failure messages and the canary sweep.
    pub fn transcript(&self) -> String {
        self.received().escape_ascii().to_string()
    }
}

/// A client that says nothing for this long is done.
const IDLE: Duration = Duration::from_secs(10);

struct Conn {
    stream: TcpStream,
    /// Received and not yet consumed.
    buf: Vec<u8>,
    record: Session,
}

impl Conn {
    /// Reads until at least `n` bytes are buffered; None when the client closes or goes quiet.
    async fn fill(&mut self, n: usize) -> Option<()> {
        let mut chunk = [0u8; 16 * 1024];
        while self.buf.len() < n {
            let got = tokio::time::timeout(IDLE, self.stream.read(&mut chunk))
                .await
                .ok()?
                .ok()?;
            if got == 0 {
                return None;
            }
            self.record.lock().unwrap().extend_from_slice(&chunk[..got]);
            self.buf.extend_from_slice(&chunk[..got]);
        }
        Some(())
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        self.buf.drain(..n).collect()
    }

    /// Everything up to and including `delim`.
    async fn until(&mut self, delim: &[u8]) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = find(&self.buf, delim) {
                return Some(self.take(i + delim.len()));
            }
            if self.buf.len() > 1 << 20 {
                return None;
            }
            let more = self.buf.len() + 1;
            self.fill(more).await?;
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> Option<()> {
        self.stream.write_all(bytes).await.ok()
    }

    fn decoded(&self, what: &str, bytes: &[u8]) {
        let mut r = self.record.lock().unwrap();
        r.extend_from_slice(format!("\n[decoded {what}] ").as_bytes());
        r.extend_from_slice(bytes);
        r.push(b'\n');
    }

    async fn drain(&mut self) {
        let mut chunk = [0u8; 16 * 1024];
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_secs(2), self.stream.read(&mut chunk)).await
        {
            if n == 0 {
                break;
            }
            self.record.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be16(b: &[u8]) -> i16 {
    i16::from_be_bytes([b[0], b[1]])
}

/// PostgreSQL: no TLS, no GSS; then AuthenticationCleartextPassword. A naive client answers
/// with a PasswordMessage ('p') carrying the password as is.
async fn postgres(c: &mut Conn) -> Option<()> {
    loop {
        c.fill(8).await?;
        let len = be32(&c.buf[0..4]) as usize;
        if !(8..=1 << 16).contains(&len) {
            return None;
        }
        c.fill(len).await?;
        let m = c.take(len);
        match be32(&m[4..8]) {
            // SSLRequest, GSSENCRequest: "no", go on in plain text.
            80877103 | 80877104 => c.send(b"N").await?,
            // StartupMessage, protocol 3.0.
            196608 => break,
            _ => return None,
        }
    }
    c.send(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]).await?;
    loop {
        c.fill(5).await?;
        let len = be32(&c.buf[1..5]) as usize;
        if !(4..=1 << 20).contains(&len) {
            return None;
        }
        c.fill(1 + len).await?;
        let m = c.take(1 + len);
        if m[0] == b'p' {
            let mut e = vec![b'E', 0, 0, 0, 0];
            e.extend_from_slice(b"SFATAL\0C28P01\0Mpassword authentication failed\0\0");
            let n = (e.len() - 1) as u32;
            e[1..5].copy_from_slice(&n.to_be_bytes());
            return c.send(&e).await;
        }
    }
}

/// The scramble a MySQL greeting carries (8 + 12 bytes).
const NONCE: &[u8; 20] = b"abcdefghijklmnopqrst";

fn mysql_packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut p = len.to_le_bytes()[..3].to_vec();
    p.push(seq);
    p.extend_from_slice(payload);
    p
}

/// A HandshakeV10 as MySQL 8 sends it (no CLIENT_SSL offered), naming `plugin`.
fn mysql_greeting(plugin: &str) -> Vec<u8> {
    let mut p = vec![0x0a];
    p.extend_from_slice(b"8.0.36\0");
    p.extend_from_slice(&7u32.to_le_bytes());
    p.extend_from_slice(&NONCE[..8]);
    p.push(0);
    p.extend_from_slice(&0xf7ffu16.to_le_bytes());
    p.push(0xff);
    p.extend_from_slice(&0x0002u16.to_le_bytes());
    p.extend_from_slice(&0xdfffu16.to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend_from_slice(&NONCE[8..]);
    p.push(0);
    p.extend_from_slice(plugin.as_bytes());
    p.push(0);
    p
}

fn mysql_denied() -> Vec<u8> {
    let mut p = vec![0xff];
    p.extend_from_slice(&1045u16.to_le_bytes());
    p.extend_from_slice(b"#28000Access denied");
    p
}

async fn mysql_read(c: &mut Conn) -> Option<(u8, Vec<u8>)> {
    c.fill(4).await?;
    let len = u32::from_le_bytes([c.buf[0], c.buf[1], c.buf[2], 0]) as usize;
    let seq = c.buf[3];
    c.fill(4 + len).await?;
    let p = c.take(4 + len);
    Some((seq, p[4..].to_vec()))
}

/// MySQL: with `rsa`, caching_sha2_password's full authentication with the counterpart's own
/// key (what it decrypts is recorded); without, mysql_clear_password (the HandshakeResponse
/// then carries the password as is).
async fn mysql(c: &mut Conn, rsa: Option<&RsaKey>) -> Option<()> {
    let plugin = match rsa {
        Some(_) => "caching_sha2_password",
        None => "mysql_clear_password",
    };
    c.send(&mysql_packet(0, &mysql_greeting(plugin))).await?;
    let (seq, _response) = mysql_read(c).await?;
    let Some(key) = rsa else {
        return c
            .send(&mysql_packet(seq.wrapping_add(1), &mysql_denied()))
            .await;
    };
    // "Perform full authentication": no cached login for this user.
    c.send(&mysql_packet(seq.wrapping_add(1), &[0x01, 0x04]))
        .await?;
    let (seq, asked) = mysql_read(c).await?;
    if asked != [0x02] {
        // Over TLS a client sends the password as is here; it is in the record already.
        return c
            .send(&mysql_packet(seq.wrapping_add(1), &mysql_denied()))
            .await;
    }
    let mut answer = vec![0x01];
    answer.extend_from_slice(key.public_pem.as_bytes());
    c.send(&mysql_packet(seq.wrapping_add(1), &answer)).await?;
    let (seq, blob) = mysql_read(c).await?;
    if let Some(plain) = key.decrypt(&blob).await {
        let password: Vec<u8> = plain
            .iter()
            .zip(NONCE.iter().cycle())
            .map(|(b, n)| b ^ n)
            .collect();
        c.decoded("RSA-encrypted password", &password);
    }
    c.send(&mysql_packet(seq.wrapping_add(1), &mysql_denied()))
        .await
}

/// The MySQL counterpart's own RSA key pair (openssl), to read what a client encrypts for it.
struct RsaKey {
    dir: PathBuf,
    public_pem: String,
}

impl RsaKey {
    async fn new(dir: &Path) -> RsaKey {
        let key = dir.join("key.pem");
        let out = tokio::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
            ])
            .arg(&key)
            .output()
            .await
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = tokio::process::Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&key)
            .output()
            .await
            .unwrap();
        assert!(out.status.success());
        RsaKey {
            dir: dir.to_path_buf(),
            public_pem: String::from_utf8(out.stdout).unwrap(),
        }
    }

    /// RSA-OAEP (SHA-1), as MySQL clients encrypt.
    async fn decrypt(&self, blob: &[u8]) -> Option<Vec<u8>> {
        let input = self.dir.join(format!(
            "blob-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        tokio::fs::write(&input, blob).await.ok()?;
        let out = tokio::process::Command::new("openssl")
            .args(["pkeyutl", "-decrypt", "-inkey"])
            .arg(self.dir.join("key.pem"))
            .args([
                "-pkeyopt",
                "rsa_padding_mode:oaep",
                "-pkeyopt",
                "rsa_oaep_md:sha1",
                "-in",
            ])
            .arg(&input)
            .output()
            .await
            .ok()?;
        out.status.success().then_some(out.stdout)
    }
}

/// The Kafka API versions the listener admits to: ApiVersions, SaslHandshake, SaslAuthenticate
/// and Metadata.
const KAFKA_APIS: [(i16, i16, i16); 4] = [(18, 0, 3), (17, 0, 1), (36, 0, 1), (3, 0, 9)];

fn api_versions(version: i16) -> Vec<u8> {
    let mut b = 0i16.to_be_bytes().to_vec();
    if version >= 3 {
        // Flexible: a compact array (length + 1) with empty tagged fields.
        b.push((KAFKA_APIS.len() + 1) as u8);
        for (key, min, max) in KAFKA_APIS {
            b.extend_from_slice(&key.to_be_bytes());
            b.extend_from_slice(&min.to_be_bytes());
            b.extend_from_slice(&max.to_be_bytes());
            b.push(0);
        }
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(0);
    } else {
        b.extend_from_slice(&(KAFKA_APIS.len() as i32).to_be_bytes());
        for (key, min, max) in KAFKA_APIS {
            b.extend_from_slice(&key.to_be_bytes());
            b.extend_from_slice(&min.to_be_bytes());
            b.extend_from_slice(&max.to_be_bytes());
        }
        if version >= 1 {
            b.extend_from_slice(&0i32.to_be_bytes());
        }
    }
    b
}

/// The mechanism a SaslHandshake request names (after request header v1).
fn sasl_mechanism(req: &[u8]) -> String {
    let Some(id) = req.get(12..14) else {
        return String::new();
    };
    let at = 14 + be16(id).max(0) as usize;
    let Some(len) = req.get(at..at + 2) else {
        return String::new();
    };
    let n = be16(len).max(0) as usize;
    req.get(at + 2..at + 2 + n)
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .unwrap_or_default()
}

/// Kafka: just enough for a client to log in with SASL PLAIN, whose SaslAuthenticate carries
/// `\0user\0password`; the login is then refused.
async fn kafka(c: &mut Conn) -> Option<()> {
    loop {
        c.fill(4).await?;
        let size = be32(&c.buf[0..4]) as usize;
        if !(8..=1 << 20).contains(&size) {
            return None;
        }
        c.fill(4 + size).await?;
        let req = c.take(4 + size);
        let (key, version) = (be16(&req[4..6]), be16(&req[6..8]));
        let body = match key {
            18 => api_versions(version),
            17 => {
                let error: i16 = if sasl_mechanism(&req) == "PLAIN" {
                    0
                } else {
                    33
                };
                let mut b = error.to_be_bytes().to_vec();
                b.extend_from_slice(&1i32.to_be_bytes());
                b.extend_from_slice(&5i16.to_be_bytes());
                b.extend_from_slice(b"PLAIN");
                b
            }
            36 => {
                let message = b"Authentication failed";
                let mut b = 58i16.to_be_bytes().to_vec();
                b.extend_from_slice(&(message.len() as i16).to_be_bytes());
                b.extend_from_slice(message);
                b.extend_from_slice(&0i32.to_be_bytes());
                if version >= 1 {
                    b.extend_from_slice(&0i64.to_be_bytes());
                }
                b
            }
            _ => return None,
        };
        // Response header v0 (ApiVersions always uses it): the correlation id.
        let mut frame = ((4 + body.len()) as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&req[8..12]);
        frame.extend_from_slice(&body);
        c.send(&frame).await?;
    }
}

/// HTTP/1.1 with keep-alive, answering like a Connect REST API; a basic auth header is decoded
/// into the record.
async fn http(c: &mut Conn) -> Option<()> {
    loop {
        let head = c.until(b"\r\n\r\n").await?;
        let head = String::from_utf8_lossy(&head).into_owned();
        let mut lines = head.split("\r\n");
        let request = lines.next().unwrap_or_default().to_string();
        let mut length = 0usize;
        for line in lines {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k == "content-length" {
                length = v.parse().unwrap_or(0);
            }
            if k == "authorization" {
                if let Some((scheme, b64)) = v.split_once(' ') {
                    if scheme.eq_ignore_ascii_case("basic") {
                        if let Ok(d) = base64::engine::general_purpose::STANDARD.decode(b64.trim())
                        {
                            c.decoded("basic auth", &d);
                        }
                    }
                }
            }
        }
        c.fill(length).await?;
        c.take(length);
        let path = request.split(' ').nth(1).unwrap_or("/");
        let (status, body) = if path == "/" {
            (
                "200 OK",
                r#"{"version":"4.0.0","commit":"x","kafka_cluster_id":"y"}"#,
            )
        } else if path.starts_with("/connector-plugins") {
            ("200 OK", "[]")
        } else if path.starts_with("/connectors") {
            ("200 OK", "{}")
        } else {
            (
                "404 Not Found",
                r#"{"error_code":404,"message":"not found"}"#,
            )
        };
        c.send(
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await?;
    }
}

// ---- what counts as a leak ------------------------------------------------------------------

/// The forms in which `secret` shows in received bytes: as is, and inside base64 at any of its
/// three alignments (a basic auth header is base64 of `user:password`).
pub fn exposures(secret: &str) -> Vec<Vec<u8>> {
    let mut out = vec![secret.as_bytes().to_vec()];
    for k in 0..3 {
        let mut b = vec![b'x'; k];
        b.extend_from_slice(secret.as_bytes());
        let enc = base64::engine::general_purpose::STANDARD.encode(&b);
        // The first group mixes in the prefix, the last one whatever follows the secret.
        let skip = if k == 0 { 0 } else { 4 };
        if enc.len() >= skip + 4 + 8 {
            out.push(enc.as_bytes()[skip..enc.len() - 4].to_vec());
        }
    }
    out
}

pub fn leaked(received: &[u8], secret: &str) -> bool {
    exposures(secret)
        .iter()
        .any(|e| find(received, e).is_some())
}

/// None of `secrets` reached any of `fakes`, in any form.
pub fn assert_nothing_leaked(fakes: &[&Hostile], secrets: &[&str]) {
    for f in fakes {
        let got = f.received();
        for s in secrets {
            assert!(
                !leaked(&got, s),
                "the hostile {:?} counterpart on port {} received {s}: {}",
                f.kind,
                f.port,
                f.transcript()
            );
        }
    }
}

/// Waits (up to 20 s) until `fake` has `secret`: the proof that it gets it out of a client.
async fn gets(fake: &Hostile, secret: &str, client: &str) {
    for _ in 0..80 {
        if leaked(&fake.received(), secret) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!(
        "the hostile {:?} counterpart did not get the password out of {client}: {}",
        fake.kind,
        fake.transcript()
    );
}

// ---- helpers --------------------------------------------------------------------------------

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}_{}", std::process::id(), n % 1_000_000)
}

pub fn canary(what: &str) -> String {
    format!("CANARY-{what}-{}", tag())
}

/// The message a 422 names for `field`.
fn refused<'a>(body: &'a Value, field: &str) -> &'a str {
    body["error"]["fields"][field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} named in {body}"))
}

/// A PostgreSQL source on the stack's server, plain text (the guard's relay is on its way).
async fn pg_connection(api: &Api, s: &Stack, name: &str, password: &str, slot: &str) -> Value {
    api.connection(json!({"name": name, "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
        "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user,
            "tls_mode": "disable", "slot_name": slot, "publication_name": slot},
        "secrets": {"password": password}}))
    .await
}

/// The stack's Kafka and Connect registered in `api`, without pointing the config provider at
/// it (these tests deploy nothing that needs a secret resolved).
async fn stack_clusters_unpointed(api: &Api) -> (String, String) {
    let s = stack();
    let (status, kafka) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "stack kafka", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{kafka}");
    let (status, connect) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "stack", "url": s.connect_url}),
        )
        .await;
    assert_eq!(status, 201, "{connect}");
    (
        kafka["id"].as_str().unwrap().to_string(),
        connect["id"].as_str().unwrap().to_string(),
    )
}

/// Every use of a connection that sends its password somewhere: its test, table discovery, a
/// pipeline preview (ClueCDC's source check, the plugin's validate on the worker) and a
/// pipeline create. The answers, for failure messages; a pipeline that got created is removed.
async fn use_everywhere(
    api: &Api,
    conn: &Value,
    kafka: &str,
    connect: &str,
    tag: &str,
) -> Vec<(&'static str, u16, Value)> {
    let id = conn["id"].as_str().unwrap();
    let prefix = format!("hz-{}", tag.replace('_', "-"));
    let body = json!({"name": format!("hostile {tag}"), "source_connection_id": id, "kafka_cluster_id": kafka,
        "connect_cluster_id": connect, "tables": ["public.hostile_probe"], "topic_prefix": prefix,
        "partitions": 1, "replication_factor": 1});
    let mut out = Vec::new();
    let (st, v) = api
        .post(&format!("/api/v1/connections/{id}/test"), json!({}))
        .await;
    out.push(("test", st, v));
    let (st, v) = api.get(&format!("/api/v1/connections/{id}/tables")).await;
    out.push(("tables", st, v));
    let (st, v) = api.post("/api/v1/pipelines/preview", body.clone()).await;
    out.push(("preview", st, v));
    let (st, v) = api.post("/api/v1/pipelines", body).await;
    if st == 201 {
        let _ = api
            .delete(&format!(
                "/api/v1/pipelines/{}",
                v["id"].as_str().unwrap_or_default()
            ))
            .await;
        delete_connector(&stack().connect_url, &format!("cluecdc-capture-{prefix}")).await;
    }
    out.push(("pipeline create", st, v));
    out
}

/// Each use reached the stored server and was turned away there (the canary is not its
/// password): the secret went only where it was given for.
fn assert_used_the_stored_address(answers: &[(&'static str, u16, Value)]) {
    for (what, status, v) in answers {
        assert!(
            v.to_string().contains("password authentication failed"),
            "{what} ({status}) logged in at the stored address: {v}"
        );
    }
}

/// What the edit page's form posts for `conn` (every setting it shows), with `changes`.
fn edit_form(conn: &Value, csrf: &str, changes: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut form = vec![
        ("csrf_token".to_string(), csrf.to_string()),
        (
            "provider".to_string(),
            conn["provider"].as_str().unwrap().to_string(),
        ),
        (
            "name".to_string(),
            conn["name"].as_str().unwrap().to_string(),
        ),
    ];
    for c in conn["capabilities"].as_array().unwrap() {
        form.push(("capabilities".into(), c.as_str().unwrap().to_string()));
    }
    for key in [
        "host",
        "port",
        "database",
        "user",
        "tls_mode",
        "ca_certificate",
    ] {
        let v = match &conn["settings"][key] {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        form.push((format!("settings.{key}"), v));
    }
    form.push(("secrets.password".into(), String::new()));
    for (k, v) in changes {
        match form.iter_mut().find(|(name, _)| name == k) {
            Some(f) => f.1 = v.to_string(),
            None => form.push((k.to_string(), v.to_string())),
        }
    }
    form
}

/// The newest audit row of `action`.
async fn last_audit(api: &Api, action: &str) -> Value {
    let (_, audit) = api.get(&format!("/api/v1/audit?action={action}")).await;
    audit["items"][0].clone()
}

/// The audit row of a change that gave secrets again names each and the settings that moved.
fn assert_rebound(row: &Value, expected: Value) {
    assert_eq!(row["summary"]["rebound"], expected, "{row}");
}

/// A raw request with a body of `content_type`: (status, JSON or Null, text).
async fn send(api: &Api, path: &str, content_type: &str, body: String) -> (u16, Value, String) {
    let res = api
        .http
        .post(format!("{}{path}", api.app.url))
        .bearer_auth(&api.token)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

fn failing_check(report: &Value) -> String {
    report["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("a test report: {report}"))
        .iter()
        .find(|c| c["status"] == "fail")
        .map(|c| {
            format!(
                "{} {}",
                c["message"].as_str().unwrap_or(""),
                c["hint"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_else(|| panic!("no failing check: {report}"))
}

// ---- the counterparts are real --------------------------------------------------------------

#[tokio::test]
async fn each_hostile_counterpart_gets_the_password_out_of_a_naive_client() {
    use rdkafka::consumer::Consumer;
    use sqlx::ConnectOptions;
    let pw = canary("naive");

    // sqlx asked for a clear-text password sends it.
    let pg = Hostile::start(Kind::Postgres).await;
    let opts = sqlx::postgres::PgConnectOptions::new()
        .host("127.0.0.1")
        .port(pg.port)
        .username("cdc")
        .password(&pw)
        .database("app")
        .ssl_mode(sqlx::postgres::PgSslMode::Disable);
    assert!(opts.connect().await.is_err());
    gets(&pg, &pw, "sqlx (PostgreSQL)").await;

    // sqlx sends it through mysql_clear_password, and encrypts it with the key the server sent.
    for kind in [Kind::MySqlClearText, Kind::MySqlRsa] {
        let my = Hostile::start(kind).await;
        let opts = sqlx::mysql::MySqlConnectOptions::new()
            .host("127.0.0.1")
            .port(my.port)
            .username("cdc")
            .password(&pw)
            .database("app")
            .ssl_mode(sqlx::mysql::MySqlSslMode::Disabled);
        assert!(opts.connect().await.is_err());
        gets(&my, &pw, &format!("sqlx (MySQL, {kind:?})")).await;
        if kind == Kind::MySqlRsa {
            assert!(
                my.transcript().contains("[decoded RSA-encrypted password]"),
                "{}",
                my.transcript()
            );
        }
    }

    // librdkafka logs in with PLAIN without TLS.
    let listener = Hostile::start(Kind::KafkaSasl).await;
    let (bootstrap, password) = (listener.addr(), pw.clone());
    let client = tokio::task::spawn_blocking(move || {
        let c: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("security.protocol", "sasl_plaintext")
            .set("sasl.mechanism", "PLAIN")
            .set("sasl.username", "cdc")
            .set("sasl.password", &password)
            .set("group.id", "naive")
            .set("log_level", "0")
            .create()
            .unwrap();
        let _ = c.fetch_metadata(None, Duration::from_secs(8));
    });
    gets(&listener, &pw, "librdkafka (SASL PLAIN)").await;
    let _ = client.await;

    // reqwest with basic auth.
    let web = Hostile::start(Kind::Http).await;
    let res = reqwest::Client::new()
        .get(format!("{}/connector-plugins", web.url()))
        .basic_auth("admin", Some(&pw))
        .send()
        .await
        .unwrap();
    assert_eq!(res.text().await.unwrap(), "[]");
    gets(&web, &pw, "reqwest (basic auth)").await;
}

// ---- a secret is bound to where it goes: connections -----------------------------------------

#[tokio::test]
async fn a_connection_re_pointed_by_patch_without_its_password_is_refused_and_its_test_discovery_preview_and_pipeline_create_send_nothing_to_the_new_host(
) {
    let s = stack();
    let _c = connect_shared().await;
    let fake = Hostile::start(Kind::Postgres).await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters_unpointed(&api).await;
    let tag = tag();
    let pw = canary("patch");
    let conn = pg_connection(
        &api,
        &s,
        &format!("patched {tag}"),
        &pw,
        &format!("hz_{tag}"),
    )
    .await;
    let id = conn["id"].as_str().unwrap();
    for (settings, changed) in [
        (
            json!({"host": "localhost", "port": fake.port}),
            vec!["host", "port"],
        ),
        (json!({"port": fake.port}), vec!["port"]),
        (json!({"user": "mallory"}), vec!["user"]),
    ] {
        let (status, err) = api
            .patch(
                &format!("/api/v1/connections/{id}"),
                json!({"settings": settings}),
            )
            .await;
        assert_eq!(status, 422, "{settings}: {err}");
        let why = refused(&err, "secrets.password");
        assert!(
            why.contains("password must be given again") && changed.iter().all(|c| why.contains(c)),
            "{why} names {changed:?}"
        );
    }
    let (_, after) = api.get(&format!("/api/v1/connections/{id}")).await;
    for k in ["settings", "generation", "secret_fields_set", "updated_at"] {
        assert_eq!(after[k], conn[k], "{k}: nothing changed");
    }
    let answers = use_everywhere(&api, &after, &kafka, &connect, &tag).await;
    assert_used_the_stored_address(&answers);
    assert_eq!(
        fake.connections(),
        0,
        "nothing went to the refused address: {answers:?}\n{}",
        fake.transcript()
    );
    assert_nothing_leaked(&[&fake], &[&pw, &s.pg_password]);
}

#[tokio::test]
async fn renaming_capabilities_tls_mode_and_other_settings_keep_a_stored_password() {
    let s = stack();
    let t = crate::tls::tls();
    let api = admin_api();
    let tag = tag();
    let conn = pg_connection(
        &api,
        &s,
        &format!("kept {tag}"),
        &s.pg_password,
        &format!("hk_{tag}"),
    )
    .await;
    let id = conn["id"].as_str().unwrap();
    for (patch, what) in [
        (json!({"name": format!("kept again {tag}")}), "a rename"),
        (
            json!({"capabilities": ["SOURCE", "DESTINATION"]}),
            "capabilities",
        ),
        (
            json!({"settings": {"tls_mode": "verify-full", "ca_certificate": t.ca}}),
            "tls_mode verify-full",
        ),
        (
            json!({"settings": {"slot_name": format!("hk2_{tag}"), "publication_name": format!("hk2_{tag}")}}),
            "the slot and publication",
        ),
        (
            json!({"settings": {"tls_mode": "disable", "ca_certificate": null}}),
            "tls_mode disable",
        ),
    ] {
        let (status, v) = api.patch(&format!("/api/v1/connections/{id}"), patch).await;
        assert_eq!(status, 200, "{what}: {v}");
        assert_eq!(v["secret_fields_set"], json!(["password"]), "{what}");
        // The kept password still logs in: it is the stored one, and it went nowhere new.
        let (_, report) = api
            .post(&format!("/api/v1/connections/{id}/test"), json!({}))
            .await;
        assert_eq!(report["ok"], true, "after {what}: {report}");
        let row = last_audit(&api, "connection.update").await;
        assert!(
            row["summary"]["rebound"].is_null() || row["summary"]["rebound"] == json!([]),
            "{what} rebinds nothing: {row}"
        );
    }
}

#[tokio::test]
async fn the_same_connection_re_pointed_with_its_password_given_again_passes_its_test_and_runs_a_pipeline(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("hz_{tag}");
    let su = pg_superuser(&s).await;
    for sql in [
        format!("CREATE SCHEMA {schema} AUTHORIZATION {}", s.pg_user),
        format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, note text)"),
        format!("ALTER TABLE {schema}.items OWNER TO {}", s.pg_user),
        format!("INSERT INTO {schema}.items VALUES (1, 'one')"),
    ] {
        sqlx::query(&sql).execute(&su).await.unwrap();
    }
    // Another address of the same server: "localhost" and a forwarded port.
    let gate = TcpGate::start(&format!("{}:{}", s.pg_host, s.pg_port)).await;
    let port: u16 = gate.url().rsplit(':').next().unwrap().parse().unwrap();
    let pw = canary("moved");
    let conn = pg_connection(&api, &s, &format!("moved {tag}"), &pw, &schema).await;
    let id = conn["id"].as_str().unwrap().to_string();
    let prefix = format!("hz-{}", tag.replace('_', "-"));
    let result = async {
        let moved = json!({"host": "localhost", "port": port});
        let (status, err) = api
            .patch(
                &format!("/api/v1/connections/{id}"),
                json!({"settings": moved}),
            )
            .await;
        assert_eq!(status, 422, "{err}");
        let (status, v) = api
            .patch(
                &format!("/api/v1/connections/{id}"),
                json!({"settings": moved, "secrets": {"password": s.pg_password}}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["settings"]["host"], "localhost");
        assert_eq!(v["settings"]["port"], port);
        assert_eq!(v["secret_ref"], conn["secret_ref"], "the reference stays");
        let row = last_audit(&api, "connection.update").await;
        assert_eq!(row["target_id"], id.as_str(), "{row}");
        assert_rebound(
            &row,
            json!([{"field": "password", "settings": ["host", "port"]}]),
        );
        assert!(!row.to_string().contains(&s.pg_password));
        let (_, report) = api
            .post(&format!("/api/v1/connections/{id}/test"), json!({}))
            .await;
        assert_eq!(report["ok"], true, "{report}");
        let (status, p) = api
            .post(
                "/api/v1/pipelines",
                json!({"name": format!("moved {tag}"), "source_connection_id": id, "kafka_cluster_id": kafka,
                    "connect_cluster_id": connect, "tables": [format!("{schema}.items")], "topic_prefix": prefix,
                    "partitions": 1, "replication_factor": 1}),
            )
            .await;
        assert_eq!(status, 201, "{p}");
        let running =
            crate::pipelines::wait_pipeline_running(&api, p["id"].as_str().unwrap()).await;
        assert_eq!(running["connector"]["phase"], "RUNNING");
        let _ = api
            .delete(&format!("/api/v1/pipelines/{}", p["id"].as_str().unwrap()))
            .await;
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &format!("cluecdc-capture-{prefix}")).await;
        drop_capture_fixture(&s, &schema, &schema).await;
    })
    .await;
    drop(gate);
}

#[tokio::test]
async fn a_connection_made_against_a_server_asking_for_a_clear_text_password_fails_its_test_and_the_server_gets_no_password(
) {
    let fake = Hostile::start(Kind::Postgres).await;
    let api = admin_api();
    let pw = canary("cleartext");
    let c = api
        .connection(json!({"name": "cleartext", "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
            "settings": {"host": "127.0.0.1", "port": fake.port, "database": "app", "user": "cdc", "tls_mode": "disable"},
            "secrets": {"password": pw}}))
        .await;
    let id = c["id"].as_str().unwrap();
    let (status, report) = api
        .post(&format!("/api/v1/connections/{id}/test"), json!({}))
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], false, "{report}");
    let why = failing_check(&report);
    assert!(
        why.contains("refused to send the password")
            && why.contains("AuthenticationCleartextPassword")
            && why.contains("verify-full"),
        "says it refused, why and what to change: {why}"
    );
    let (_, tables) = api.get(&format!("/api/v1/connections/{id}/tables")).await;
    assert!(fake.connections() >= 1, "the server was reached");
    assert!(
        fake.transcript().contains("cdc"),
        "the startup message arrived: {}",
        fake.transcript()
    );
    assert_nothing_leaked(&[&fake], &[&pw]);
    assert!(!report.to_string().contains(&pw) && !tables.to_string().contains(&pw));
}

#[tokio::test]
async fn a_mysql_connection_to_a_server_naming_mysql_clear_password_or_asking_for_an_rsa_exchange_fails_its_test_and_sends_no_password(
) {
    let api = admin_api();
    for (kind, words) in [
        (Kind::MySqlClearText, "mysql_clear_password"),
        (Kind::MySqlRsa, "RSA"),
    ] {
        let fake = Hostile::start(kind).await;
        let pw = canary("mysql");
        let c = api
            .connection(json!({"name": format!("hostile {kind:?}").to_lowercase(), "provider": "MYSQL", "capabilities": ["DESTINATION"],
                "settings": {"host": "127.0.0.1", "port": fake.port, "database": "app", "user": "cdc", "tls_mode": "disable"},
                "secrets": {"password": pw}}))
            .await;
        let (status, report) = api
            .post(
                &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        assert_eq!(status, 200, "{report}");
        assert_eq!(report["ok"], false, "{kind:?}: {report}");
        let why = failing_check(&report);
        assert!(
            why.contains("refused to send the password") && why.contains(words),
            "{kind:?}: {why}"
        );
        assert!(fake.connections() >= 1, "{kind:?}: the server was reached");
        assert!(
            !fake.transcript().contains("[decoded"),
            "{kind:?}: no public key asked for, nothing encrypted for it: {}",
            fake.transcript()
        );
        assert_nothing_leaked(&[&fake], &[&pw]);
    }
}

#[tokio::test]
async fn a_mariadb_connection_re_pointed_at_a_hostile_mysql_server_without_its_password_is_refused()
{
    let s = stack();
    let fake = Hostile::start(Kind::MySqlClearText).await;
    let api = admin_api();
    let c = api
        .connection(json!({"name": "maria", "provider": "MARIADB", "capabilities": ["DESTINATION"],
            "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "disable"},
            "secrets": {"password": s.mariadb_password}}))
        .await;
    let id = c["id"].as_str().unwrap();
    let (status, err) = api
        .patch(
            &format!("/api/v1/connections/{id}"),
            json!({"settings": {"port": fake.port}}),
        )
        .await;
    assert_eq!(status, 422, "{err}");
    assert!(refused(&err, "secrets.password").contains("port"), "{err}");
    let (_, report) = api
        .post(&format!("/api/v1/connections/{id}/test"), json!({}))
        .await;
    assert_eq!(report["ok"], true, "still the stack's MariaDB: {report}");
    assert_eq!(fake.connections(), 0, "{}", fake.transcript());
    assert_nothing_leaked(&[&fake], &[&s.mariadb_password]);
}

#[tokio::test]
async fn an_object_store_moved_to_a_new_endpoint_or_region_needs_every_stored_key_again_and_the_old_keys_never_reach_it(
) {
    let s = stack();
    let fake = Hostile::start(Kind::Http).await;
    let api = admin_api();
    let token = canary("st");
    let c = api
        .connection(json!({"name": "store", "provider": "MINIO", "capabilities": ["DESTINATION"],
            "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": s.s3_endpoint, "prefix": "hostile/"},
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key, "session_token": token}}))
        .await;
    let id = c["id"].as_str().unwrap();
    let all = [
        "secrets.access_key_id",
        "secrets.secret_access_key",
        "secrets.session_token",
    ];
    for (patch, missing) in [
        (json!({"settings": {"endpoint": fake.url()}}), &all[..]),
        (json!({"settings": {"region": "eu-west-1"}}), &all[..]),
        (
            json!({"settings": {"endpoint": fake.url()}, "secrets": {"access_key_id": "AK-new-1", "secret_access_key": "SK-new-secret-1"}}),
            &all[2..],
        ),
    ] {
        let (status, err) = api
            .patch(&format!("/api/v1/connections/{id}"), patch.clone())
            .await;
        assert_eq!(status, 422, "{patch}: {err}");
        let fields = err["error"]["fields"].as_object().unwrap();
        for f in missing {
            assert!(
                fields
                    .get(*f)
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.contains("must be given again")),
                "{patch}: {f} in {err}"
            );
        }
        for f in &all {
            if !missing.contains(f) {
                assert!(fields.get(*f).is_none(), "{f} was given: {err}");
            }
        }
    }
    // The prefix and the name are not where the keys go.
    let (status, v) = api
        .patch(
            &format!("/api/v1/connections/{id}"),
            json!({"name": "store two", "settings": {"prefix": "hostile-two/"}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, report) = api
        .post(&format!("/api/v1/connections/{id}/test"), json!({}))
        .await;
    assert_eq!(fake.connections(), 0, "{report} {}", fake.transcript());
    // Every key given again: it moves, audited, and the new endpoint gets only the new keys.
    let (ak, sk, st) = (canary("ak2"), canary("sk2"), canary("st2"));
    let (status, v) = api
        .patch(
            &format!("/api/v1/connections/{id}"),
            json!({"settings": {"endpoint": fake.url()}, "secrets": {"access_key_id": ak, "secret_access_key": sk, "session_token": st}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let row = last_audit(&api, "connection.update").await;
    assert_rebound(
        &row,
        json!([
            {"field": "access_key_id", "settings": ["endpoint"]},
            {"field": "secret_access_key", "settings": ["endpoint"]},
            {"field": "session_token", "settings": ["endpoint"]}
        ]),
    );
    let _ = api
        .post(&format!("/api/v1/connections/{id}/test"), json!({}))
        .await;
    assert!(
        fake.connections() >= 1,
        "the store was asked at its new endpoint"
    );
    assert_nothing_leaked(&[&fake], &[&s.s3_access_key, &s.s3_secret_key, &token, &sk]);
}

#[tokio::test]
async fn the_edit_page_refuses_a_new_host_without_the_password_inline_and_the_new_host_gets_nothing(
) {
    let s = stack();
    let _c = connect_shared().await;
    let fake = Hostile::start(Kind::Postgres).await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters_unpointed(&api).await;
    let tag = tag();
    let pw = canary("page");
    let conn = pg_connection(&api, &s, &format!("paged {tag}"), &pw, &format!("hp_{tag}")).await;
    let id = conn["id"].as_str().unwrap();
    let b = sign_in(&api.app, "ada", PASSWORD).await;
    let port = fake.port.to_string();
    let res = b
        .client
        .post(format!("{}/connections/{id}", b.base))
        .form(&edit_form(
            &conn,
            &b.csrf,
            &[("settings.host", "localhost"), ("settings.port", &port)],
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422);
    let html = res.text().await.unwrap();
    let at = html
        .find(r#"id="f-secrets.password-error""#)
        .unwrap_or_else(|| panic!("the error sits under the password field: {html}"));
    let error = &html[at..at + html[at..].find("</span>").unwrap()];
    assert!(
        error.contains("password must be given again")
            && error.contains("host")
            && error.contains("port"),
        "{error}"
    );
    assert!(
        html.contains(r#"value="localhost""#),
        "what was typed stays"
    );
    assert!(!html.contains(&pw));
    let (_, after) = api.get(&format!("/api/v1/connections/{id}")).await;
    assert_eq!(after["settings"], conn["settings"], "nothing saved");
    // The page's own Test button, then every other use.
    let res = b
        .client
        .post(format!("{}/connections/{id}/test", b.base))
        .form(&[("csrf_token", b.csrf.as_str())])
        .send()
        .await
        .unwrap();
    let tested = res.text().await.unwrap();
    let answers = use_everywhere(&api, &after, &kafka, &connect, &tag).await;
    assert_used_the_stored_address(&answers);
    assert_eq!(
        fake.connections(),
        0,
        "{tested}\n{answers:?}\n{}",
        fake.transcript()
    );
    assert_nothing_leaked(&[&fake], &[&pw]);

    // With the password given again it saves (at the stack's server, by another name).
    let res = b
        .client
        .post(format!("{}/connections/{id}", b.base))
        .form(&edit_form(
            &conn,
            &b.csrf,
            &[
                ("settings.host", "localhost"),
                ("secrets.password", &s.pg_password),
            ],
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 303, "{}", res.text().await.unwrap());
    let (_, report) = api
        .post(&format!("/api/v1/connections/{id}/test"), json!({}))
        .await;
    assert_eq!(report["ok"], true, "{report}");
    let row = last_audit(&api, "connection.update").await;
    assert_rebound(&row, json!([{"field": "password", "settings": ["host"]}]));
}

#[tokio::test]
async fn an_applied_document_that_moves_a_connection_without_its_password_is_refused_by_path_and_the_new_host_gets_nothing(
) {
    let s = stack();
    let _c = connect_shared().await;
    let fake = Hostile::start(Kind::Postgres).await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters_unpointed(&api).await;
    let tag = tag();
    let pw = canary("apply");
    let name = format!("applied {tag}");
    let conn = pg_connection(&api, &s, &name, &pw, &format!("ha_{tag}")).await;
    let id = conn["id"].as_str().unwrap();
    let exported = api.text("/api/v1/export").await;
    let edit = |key: &str, value: serde_yaml::Value| {
        let mut doc: serde_yaml::Value = serde_yaml::from_str(&exported).unwrap();
        let list = doc["connections"].as_sequence_mut().unwrap();
        let c = list
            .iter_mut()
            .find(|c| c["name"].as_str() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{name} in the export: {exported}"));
        c["settings"][key] = value;
        (
            list.iter()
                .position(|c| c["name"].as_str() == Some(name.as_str()))
                .unwrap(),
            serde_yaml::to_string(&doc).unwrap(),
        )
    };
    let (i, moved) = edit("port", serde_yaml::Value::from(fake.port));
    let path = format!("connections[{i}].secrets.password");
    for q in ["?dry_run=true", ""] {
        let (status, body, text) = send(
            &api,
            &format!("/api/v1/apply{q}"),
            "application/yaml",
            moved.clone(),
        )
        .await;
        assert_eq!(status, 422, "{q}: {text}");
        let why = refused(&body, &path);
        assert!(
            why.contains("must be given again") && why.contains("port"),
            "{why}"
        );
        // As JSON without a value for the reference: the same.
        let (status, body, text) = send(
            &api,
            &format!("/api/v1/apply{q}"),
            "application/json",
            json!({"document": moved, "secrets": {}}).to_string(),
        )
        .await;
        assert_eq!(status, 422, "{q}: {text}");
        refused(&body, &path);
    }
    let (_, after) = api.get(&format!("/api/v1/connections/{id}")).await;
    assert_eq!(after["settings"], conn["settings"], "nothing changed");
    // A change that does not move the password keeps it, and the plan says so.
    let (_, other) = edit("database", serde_yaml::Value::from(s.pg_dest_db.clone()));
    let (status, plan, text) = send(
        &api,
        "/api/v1/apply?dry_run=true",
        "application/yaml",
        other,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(
        plan["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().starts_with(&path) && n.as_str().unwrap().contains("kept")),
        "{plan}"
    );
    let answers = use_everywhere(&api, &after, &kafka, &connect, &tag).await;
    assert_used_the_stored_address(&answers);
    assert_eq!(fake.connections(), 0, "{answers:?}\n{}", fake.transcript());
    assert_nothing_leaked(&[&fake], &[&pw]);
}

// ---- only the caller's own side resolves references ------------------------------------------

#[tokio::test]
async fn a_document_applied_over_http_or_the_page_never_reads_the_servers_environment_or_files_and_the_cli_still_resolves_them(
) {
    let s = stack();
    let fake = Hostile::start(Kind::Postgres).await;
    let master_key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>());
    let api = admin_api_with(&[("CLUECDC_MASTER_KEY", &master_key)]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("readable-by-the-server");
    let file_canary = canary("file");
    std::fs::write(&file, format!("{file_canary}\n")).unwrap();
    let file = file.to_str().unwrap().to_string();
    let doc = format!(
        "apiVersion: cluecdc/v1\nconnections:\n\
         - name: from env\n  provider: POSTGRESQL\n  capabilities: [DESTINATION]\n  settings: {{host: 127.0.0.1, port: {p}, database: app, user: cdc, tls_mode: disable}}\n  secrets:\n    password: {{env: CLUECDC_MASTER_KEY}}\n\
         - name: from file\n  provider: POSTGRESQL\n  capabilities: [DESTINATION]\n  settings: {{host: 127.0.0.1, port: {p}, database: app, user: cdc, tls_mode: disable}}\n  secrets:\n    password: {{file: '{file}'}}\n",
        p = fake.port
    );
    let paths = [
        "connections[0].secrets.password",
        "connections[1].secrets.password",
    ];
    let secrets = [master_key.as_str(), file_canary.as_str()];
    for q in ["?dry_run=true", ""] {
        for (ct, body) in [
            ("application/yaml", doc.clone()),
            ("text/plain", doc.clone()),
            ("application/json", json!({"document": doc}).to_string()),
        ] {
            let (status, v, text) = send(&api, &format!("/api/v1/apply{q}"), ct, body).await;
            assert_eq!(status, 422, "{q} {ct}: {text}");
            for p in paths {
                assert!(refused(&v, p).contains("never reads"), "{p}: {v}");
            }
            assert!(secrets.iter().all(|x| !text.contains(x)), "{text}");
        }
    }
    assert_eq!(
        api.get("/api/v1/connections").await.1["items"],
        json!([]),
        "nothing stored"
    );

    // The page: the same refusal by path, and a password field per reference after Plan.
    let b = sign_in(&api.app, "ada", PASSWORD).await;
    let form = |action: &str, extra: &[(&str, &str)]| {
        let mut f: Vec<(String, String)> = vec![
            ("csrf_token".into(), b.csrf.clone()),
            ("document".into(), doc.clone()),
        ];
        f.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        b.client
            .post(format!("{}/settings/configuration/{action}", b.base))
            .form(&f)
            .send()
    };
    for action in ["plan", "apply"] {
        let res = form(action, &[]).await.unwrap();
        assert_eq!(res.status(), 422, "{action}");
        let html = res.text().await.unwrap();
        for p in paths {
            assert!(
                html.contains(&format!("<code>{p}</code>")),
                "{action} names {p}: {html}"
            );
        }
        assert!(
            html.contains(r#"name="value:CLUECDC_MASTER_KEY""#)
                && html.contains(&format!(r#"name="value:{file}""#)),
            "{action} offers a field per reference: {html}"
        );
        assert!(secrets.iter().all(|x| !html.contains(x)));
    }
    assert_eq!(
        api.get("/api/v1/connections").await.1["items"],
        json!([]),
        "nothing stored"
    );
    assert_eq!(fake.connections(), 0, "{}", fake.transcript());

    // With the values in the request, the same document plans and applies.
    let (given_env, given_file) = (canary("given-env"), canary("given-file"));
    let file_field = format!("value:{file}");
    let res = form(
        "plan",
        &[
            ("value:CLUECDC_MASTER_KEY", &given_env),
            (&file_field, &given_file),
        ],
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    let html = res.text().await.unwrap();
    assert!(html.contains("2 to create"), "{html}");
    assert!(
        !html.contains(&given_env) && !html.contains(&given_file),
        "values are not echoed"
    );
    let (status, v, text) = send(
        &api,
        "/api/v1/apply",
        "application/json",
        json!({"document": doc, "secrets": {"CLUECDC_MASTER_KEY": given_env, file.as_str(): given_file}}).to_string(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(v["applied"], true, "{v}");
    assert!(
        !text.contains(&given_env) && !text.contains(&given_file),
        "{text}"
    );
    let (_, list) = api.get("/api/v1/connections").await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    for c in items {
        let (_, report) = api
            .post(
                &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        assert!(
            failing_check(&report).contains("refused to send the password"),
            "{report}"
        );
    }
    assert_nothing_leaked(
        &[&fake],
        &[&master_key, &file_canary, &given_env, &given_file],
    );

    // The CLI resolves {env} and {file} where it runs.
    let env_name = format!("HOSTILE_CLI_PASSWORD_{}", tag());
    let cli_file = dir.path().join("cli-password");
    std::fs::write(&cli_file, format!("{}\n", s.pg_password)).unwrap();
    let cli_doc = format!(
        "apiVersion: cluecdc/v1\nconnections:\n\
         - name: cli env\n  provider: POSTGRESQL\n  capabilities: [DESTINATION]\n  settings: {{host: {h}, port: {p}, database: {d}, user: {u}, tls_mode: disable}}\n  secrets:\n    password: {{env: {env_name}}}\n\
         - name: cli file\n  provider: POSTGRESQL\n  capabilities: [DESTINATION]\n  settings: {{host: {h}, port: {p}, database: {d}, user: {u}, tls_mode: disable}}\n  secrets:\n    password: {{file: '{f}'}}\n",
        h = s.pg_host,
        p = s.pg_port,
        d = s.pg_dest_db,
        u = s.pg_user,
        f = cli_file.display()
    );
    let doc_file = dir.path().join("cli.yaml");
    std::fs::write(&doc_file, &cli_doc).unwrap();
    let (status, _, text) = send(&api, "/api/v1/apply", "application/yaml", cli_doc.clone()).await;
    assert_eq!(
        status, 422,
        "over HTTP the same document needs its values: {text}"
    );
    let (ok, out, err) = cli(
        &api.app.data,
        &["apply", "-f", doc_file.to_str().unwrap()],
        &[
            ("CLUECDC_MASTER_KEY".to_string(), master_key.clone()),
            (env_name.clone(), s.pg_password.clone()),
        ],
    )
    .await;
    assert!(ok, "{out}{err}");
    assert!(!out.contains(&s.pg_password) && !err.contains(&s.pg_password));
    let (_, list) = api.get("/api/v1/connections").await;
    for name in ["cli env", "cli file"] {
        let c = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} applied: {list}"));
        let (_, report) = api
            .post(
                &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        assert_eq!(
            report["ok"], true,
            "{name} logs in with what the CLI read: {report}"
        );
    }
}

// ---- Kafka and Connect clusters --------------------------------------------------------------

#[tokio::test]
async fn a_kafka_cluster_re_pointed_at_a_sasl_plain_listener_without_its_password_is_refused_and_plain_without_tls_is_refused_at_create(
) {
    let t = crate::tls::tls();
    let listener = Hostile::start(Kind::KafkaSasl).await;
    let api = admin_api();
    let kafka = t.kafka_cluster(&api, "scram").await;
    let id = kafka["id"].as_str().unwrap();
    for patch in [
        json!({"bootstrap_servers": listener.addr()}),
        json!({"sasl_username": "mallory"}),
        json!({"sasl_mechanism": "SCRAM-SHA-256"}),
    ] {
        let (status, err) = api
            .patch(&format!("/api/v1/kafka-clusters/{id}"), patch.clone())
            .await;
        assert_eq!(status, 422, "{patch}: {err}");
        assert!(
            refused(&err, "sasl_password").contains("must be given again"),
            "{patch}: {err}"
        );
    }
    // PLAIN without TLS, even with the password given: refused by mechanism.
    let pw = canary("plain");
    for (method, path) in [
        (reqwest::Method::POST, "/api/v1/kafka-clusters".to_string()),
        (
            reqwest::Method::PATCH,
            format!("/api/v1/kafka-clusters/{id}"),
        ),
    ] {
        let (status, err) = api
            .call(
                method.clone(),
                &path,
                Some(json!({"name": "plain", "bootstrap_servers": listener.addr(), "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "PLAIN", "sasl_username": "cdc", "sasl_password": pw})),
            )
            .await;
        assert_eq!(status, 422, "{method} {err}");
        assert!(
            refused(&err, "sasl_mechanism").contains("clear text"),
            "{err}"
        );
    }
    // Health and topics of what is stored: the real listener, never the hostile one.
    let (status, health) = api.get(&format!("/api/v1/kafka-clusters/{id}")).await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["bootstrap_servers"], t.kafka_bootstrap.as_str());
    assert_eq!(health["health"]["reachable"], true, "{health}");
    api.get(&format!("/api/v1/kafka-clusters/{id}/topics"))
        .await;
    assert_eq!(listener.connections(), 0, "{}", listener.transcript());

    // A cluster stored before the rule (SASL_PLAINTEXT + PLAIN, written directly): ClueCDC's
    // own client refuses to log in with it.
    let (status, legacy) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "legacy", "bootstrap_servers": listener.addr(), "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "SCRAM-SHA-256", "sasl_username": "cdc", "sasl_password": pw}),
        )
        .await;
    assert_eq!(status, 201, "{legacy}");
    let legacy_id = legacy["id"].as_str().unwrap();
    let db = crate::helpers::store(&api.app.data_dir()).await;
    sqlx::query("UPDATE kafka_clusters SET sasl_mechanism = 'PLAIN' WHERE id = $1")
        .bind(legacy_id)
        .execute(&db)
        .await
        .unwrap();
    db.close().await;
    let (_, health) = api
        .get(&format!("/api/v1/kafka-clusters/{legacy_id}"))
        .await;
    assert_eq!(health["health"]["reachable"], false, "{health}");
    assert!(
        health.to_string().contains("clear text"),
        "says why: {health}"
    );
    api.get(&format!("/api/v1/kafka-clusters/{legacy_id}/topics"))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_nothing_leaked(&[&listener], &[&pw, &t.scram_password]);
}

#[tokio::test]
async fn a_connect_cluster_re_pointed_without_its_basic_auth_password_is_refused_and_its_health_check_never_sends_it_to_the_new_url(
) {
    let first = Hostile::start(Kind::Http).await;
    let second = Hostile::start(Kind::Http).await;
    let api = admin_api();
    let pw = canary("basic");
    let (status, cluster) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "guarded", "url": first.url(), "basic_auth_user": "admin", "basic_auth_password": pw}),
        )
        .await;
    assert_eq!(status, 201, "{cluster}");
    let id = cluster["id"].as_str().unwrap();
    let (status, plugins) = api
        .get(&format!("/api/v1/connect-clusters/{id}/plugins"))
        .await;
    assert_eq!(status, 200, "{plugins}");
    gets(
        &first,
        &pw,
        "ClueCDC's Connect client, at the URL it was given for",
    )
    .await;
    for patch in [
        json!({"url": second.url()}),
        json!({"basic_auth_user": "mallory"}),
        json!({"url": second.url(), "basic_auth_user": "admin"}),
    ] {
        let (status, err) = api
            .patch(&format!("/api/v1/connect-clusters/{id}"), patch.clone())
            .await;
        assert_eq!(status, 422, "{patch}: {err}");
        assert!(
            refused(&err, "basic_auth_password").contains("must be given again"),
            "{patch}: {err}"
        );
    }
    let (_, after) = api.get(&format!("/api/v1/connect-clusters/{id}")).await;
    assert_eq!(after["url"], first.url());
    api.get(&format!("/api/v1/connect-clusters/{id}/plugins"))
        .await;
    assert_eq!(second.connections(), 0, "{}", second.transcript());

    // Given again, it moves (audited), and the new URL gets the new password only.
    let pw2 = canary("basic2");
    let (status, v) = api
        .patch(
            &format!("/api/v1/connect-clusters/{id}"),
            json!({"url": second.url(), "basic_auth_password": pw2}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let row = last_audit(&api, "connect_cluster.update").await;
    assert_rebound(
        &row,
        json!([{"field": "basic_auth_password", "settings": ["url"]}]),
    );
    api.get(&format!("/api/v1/connect-clusters/{id}/plugins"))
        .await;
    gets(&second, &pw2, "ClueCDC's Connect client, at the new URL").await;
    assert_nothing_leaked(&[&second], &[&pw]);
}
