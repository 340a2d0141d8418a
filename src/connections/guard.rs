//! The guard between ClueCDC's database clients and a server that has not proved itself: no
//! stored password leaves in clear text, or in a form the server could decrypt, unless the
//! session's TLS verified the server's certificate.
//!
//! sqlx has no switch to refuse an authentication method, so a session without TLS goes
//! through a one-connection loopback relay that reads the server's side of the authentication
//! and closes both sockets when the server asks for something that would give the password
//! away. The invariant: every server message reaches sqlx only after it was checked, and sqlx
//! answers only what it has received, so sqlx never answers a refused request (for MySQL the
//! first reply already carries a scramble for the greeting's plugin: the greeting is checked
//! before sqlx sees it). After the authentication both directions are copied unchanged.
//! `tls_mode require` (TLS without certificate checks, legacy rows only) hides the exchange
//! from the relay, so no password is sent at all; `verify-ca`/`verify-full` connect directly.

use std::fmt::Display;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::settings::{DatabaseSettings, TlsMode};

/// The wire protocol a relay reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Postgres,
    /// MySQL and MariaDB.
    MySql,
}

/// Why a connect through the guard failed.
#[derive(Debug)]
pub enum Failure {
    /// The guard refused: why and what to change, safe to show as is.
    Refused(String),
    /// The driver's (or the dial's) own error; may need sanitizing.
    Driver(String),
}

const FIX_POSTGRES: &str = "set tls_mode verify-full with the server's CA certificate, or change the user's pg_hba.conf line to scram-sha-256 (with the password stored as SCRAM)";
// sqlx 0.8.6 asks a caching_sha2_password server for the full authentication on every login
// (launchbadge/sqlx#4244), so without verified TLS only mysql_native_password and client_ed25519
// logins (MariaDB's) get through: MySQL 8.4+/9 needs TLS.
const FIX_MYSQL: &str = "set tls_mode verify-full (or verify-ca) with the server's CA certificate; without verified TLS only mysql_native_password or client_ed25519 logins (MariaDB's) are answered, so MySQL 8.4 and later need TLS";
const FIX_UNVERIFIED: &str =
    "edit the connection and choose verify-full (or verify-ca) with the server's CA certificate";
const FIX_NOT_POSTGRES: &str = "check host and port: they must lead to a PostgreSQL server";
const FIX_NOT_MYSQL: &str = "check host and port: they must lead to a MySQL or MariaDB server";
const FIXES: [&str; 5] = [
    FIX_POSTGRES,
    FIX_MYSQL,
    FIX_UNVERIFIED,
    FIX_NOT_POSTGRES,
    FIX_NOT_MYSQL,
];

const WITHOUT_TLS: &str = "over a connection without verified TLS";

fn refusal(why: impl Display, fix: &str) -> String {
    format!("{why}; {fix}")
}

/// A refusal's text split into why and what to change (the check's message and its fix);
/// `None` for any other error text. Also finds a refusal at the end of a wrapping message.
pub fn split(message: &str) -> Option<(&str, &'static str)> {
    FIXES.into_iter().find_map(|fix| {
        let why = message.strip_suffix(fix)?.strip_suffix("; ")?;
        Some((why, fix))
    })
}

/// Connects by `dial`, guarded as the session's TLS mode needs: `dial` gets the relay's
/// loopback address to connect to instead of the server's, or `None` to connect directly.
pub async fn connect<C, E, F, Fut>(
    protocol: Protocol,
    d: &DatabaseSettings,
    dial: F,
) -> Result<C, Failure>
where
    E: Display,
    F: FnOnce(Option<SocketAddr>) -> Fut,
    Fut: Future<Output = Result<C, E>>,
{
    match d.tls_mode {
        TlsMode::VerifyCa | TlsMode::VerifyFull => dial(None)
            .await
            .map_err(|e| Failure::Driver(e.to_string())),
        TlsMode::Require => Err(Failure::Refused(refusal(
            "tls_mode require does not verify the server's certificate, so ClueCDC sends it no password",
            FIX_UNVERIFIED,
        ))),
        TlsMode::Disable => {
            let relay = Relay::start(protocol, &d.host, d.port)
                .await
                .map_err(Failure::Driver)?;
            match dial(Some(relay.addr)).await {
                Ok(c) => {
                    relay.keep();
                    Ok(c)
                }
                Err(e) => Err(match relay.refusal() {
                    Some(why) => Failure::Refused(why),
                    None => Failure::Driver(e.to_string()),
                }),
            }
        }
    }
}

/// A guarded connect's outcome within `timeout`, as text to show: a refusal as it is, the
/// driver's own error sanitized (`password` replaced, URL credentials removed).
pub async fn within<C>(
    timeout: std::time::Duration,
    password: &str,
    attempt: impl Future<Output = Result<C, Failure>>,
) -> Result<C, String> {
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(Failure::Refused(why))) => Err(why),
        Ok(Err(Failure::Driver(e))) => Err(super::sanitize(
            &e,
            &[(
                "password".to_string(),
                crate::secrets::Secret::new(password.to_string()),
            )]
            .into(),
        )),
        Err(_) => Err(format!("no answer within {} s", timeout.as_secs())),
    }
}

/// Large enough that a result set crosses in few reads.
const BUFFER: usize = 64 * 1024;

/// No authentication message comes near this; anything longer is not the protocol.
const MAX_AUTH_MESSAGE: usize = 1 << 20;

/// A loopback relay for one connection. Dropped before [`Relay::keep`], it stops (a failed or
/// timed-out connect leaves nothing running); kept, it ends when either side closes.
struct Relay {
    addr: SocketAddr,
    refused: Arc<Mutex<Option<String>>>,
    task: Option<JoinHandle<()>>,
}

impl Relay {
    /// Dials the server first, so that an unreachable one fails with the dial's own error.
    async fn start(protocol: Protocol, host: &str, port: u16) -> Result<Relay, String> {
        let server = TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("error communicating with database: {e}"))?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| format!("cannot open the loopback relay: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot open the loopback relay: {e}"))?;
        let refused = Arc::new(Mutex::new(None));
        let task = tokio::spawn(run(protocol, listener, server, refused.clone()));
        Ok(Relay {
            addr,
            refused,
            task: Some(task),
        })
    }

    fn refusal(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn keep(mut self) {
        self.task = None;
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn run(
    protocol: Protocol,
    listener: TcpListener,
    mut server: TcpStream,
    refused: Arc<Mutex<Option<String>>>,
) {
    let Ok((mut client, _)) = listener.accept().await else {
        return;
    };
    drop(listener);
    // The relay must not hold back small messages (sqlx sets no-delay on its own socket too).
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    match authenticate(protocol, &mut client, &mut server).await {
        Ok(()) => forward(client, server).await,
        Err(Stop::Refused(why)) => {
            // Recorded before the sockets close, so the failed connect finds it.
            *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        }
        Err(Stop::Closed) => {}
    }
}

enum Stop {
    Refused(String),
    Closed,
}

impl From<std::io::Error> for Stop {
    fn from(_: std::io::Error) -> Self {
        Stop::Closed
    }
}

/// Relays until the server has accepted or rejected the login, forwarding the client's bytes
/// unchanged and each server message only once it was checked.
async fn authenticate(
    protocol: Protocol,
    client: &mut TcpStream,
    server: &mut TcpStream,
) -> Result<(), Stop> {
    let mut inspector = Inspector::new(protocol);
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let mut up = vec![0u8; BUFFER];
    let mut down = vec![0u8; BUFFER];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        tokio::select! {
            n = client_read.read(&mut up) => {
                let n = n?;
                if n == 0 {
                    return Err(Stop::Closed);
                }
                server_write.write_all(&up[..n]).await?;
            }
            n = server_read.read(&mut down) => {
                let n = n?;
                if n == 0 {
                    return Err(Stop::Closed);
                }
                pending.extend_from_slice(&down[..n]);
                let mut checked = 0;
                let mut done = false;
                while !done {
                    match inspector.check(&pending[checked..]) {
                        Verdict::Need => break,
                        Verdict::Pass { len, done: last } => {
                            checked += len;
                            done = last;
                        }
                        Verdict::Refuse(why) => return Err(Stop::Refused(why)),
                    }
                }
                // Once the login is over, what follows is no longer inspected.
                let through = if done { pending.len() } else { checked };
                client_write.write_all(&pending[..through]).await?;
                pending.drain(..through);
                if done {
                    return Ok(());
                }
            }
        }
    }
}

/// Copies both ways unchanged until either side closes. Not `copy_bidirectional`: these
/// protocols never half-close, and ending at the first close means a server that never closes
/// cannot keep the relay (and its socket) alive after the client went away.
async fn forward(mut client: TcpStream, mut server: TcpStream) {
    let (client_read, mut client_write) = client.split();
    let (server_read, mut server_write) = server.split();
    let mut client_read = BufReader::with_capacity(BUFFER, client_read);
    let mut server_read = BufReader::with_capacity(BUFFER, server_read);
    tokio::select! {
        _ = tokio::io::copy_buf(&mut client_read, &mut server_write) => {}
        _ = tokio::io::copy_buf(&mut server_read, &mut client_write) => {}
    }
}

/// What the inspector makes of the start of the server's unforwarded bytes.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Not a whole message yet.
    Need,
    /// The first `len` bytes are one allowed message; `done` when it ends the authentication.
    Pass { len: usize, done: bool },
    /// Close both sides, for this reason.
    Refuse(String),
}

enum Inspector {
    Postgres,
    MySql(MySqlAuth),
}

impl Inspector {
    fn new(protocol: Protocol) -> Self {
        match protocol {
            Protocol::Postgres => Inspector::Postgres,
            Protocol::MySql => Inspector::MySql(MySqlAuth::default()),
        }
    }

    fn check(&mut self, buf: &[u8]) -> Verdict {
        match self {
            Inspector::Postgres => postgres_message(buf),
            Inspector::MySql(auth) => auth.check(buf),
        }
    }
}

/// One PostgreSQL backend message: type byte, int32 length (counting itself), body. Only
/// Authentication requests are judged: sqlx sends a password only in answer to one.
fn postgres_message(buf: &[u8]) -> Verdict {
    let not_postgres = || {
        Verdict::Refuse(refusal(
            "refused to send the password: the server's answer is not PostgreSQL's protocol",
            FIX_NOT_POSTGRES,
        ))
    };
    let Some(header) = buf.get(..5) else {
        return Verdict::Need;
    };
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if !(4..=MAX_AUTH_MESSAGE).contains(&len) {
        return not_postgres();
    }
    let Some(message) = buf.get(..1 + len) else {
        return Verdict::Need;
    };
    match message[0] {
        b'R' => {
            let Some(code) = message.get(5..9) else {
                return not_postgres();
            };
            match u32::from_be_bytes([code[0], code[1], code[2], code[3]]) {
                0 => Verdict::Pass {
                    len: message.len(),
                    done: true,
                },
                // MD5, and SASL (SCRAM): the password itself never crosses.
                5 | 10 | 11 | 12 => Verdict::Pass {
                    len: message.len(),
                    done: false,
                },
                3 => Verdict::Refuse(refusal(
                    format_args!("refused to send the password: the server asked for it in clear text (AuthenticationCleartextPassword) {WITHOUT_TLS}"),
                    FIX_POSTGRES,
                )),
                code => {
                    let method = match code {
                        2 => "Kerberos V5",
                        6 => "SCM credentials",
                        7 | 8 => "GSSAPI",
                        9 => "SSPI",
                        _ => "an unknown method",
                    };
                    Verdict::Refuse(refusal(
                        format_args!("refused to authenticate: the server asked for {method} (authentication request {code}), which ClueCDC does not answer {WITHOUT_TLS}"),
                        FIX_POSTGRES,
                    ))
                }
            }
        }
        // ErrorResponse: the login failed; nothing more to guard.
        b'E' => Verdict::Pass {
            len: message.len(),
            done: true,
        },
        _ => Verdict::Pass {
            len: message.len(),
            done: false,
        },
    }
}

/// The plugins whose answer gives a hostile server no password: a SHA-1 scramble, a SHA-256
/// scramble (caching_sha2_password's fast path; its full path is refused), an Ed25519
/// signature (which sqlx does not speak: it fails on its own).
const MYSQL_PLUGINS: [&str; 3] = [
    "mysql_native_password",
    "caching_sha2_password",
    "client_ed25519",
];

/// The MySQL/MariaDB connection phase as the server speaks it: the greeting, then OK, ERR,
/// AuthSwitchRequest or AuthMoreData packets until OK or ERR.
#[derive(Default)]
struct MySqlAuth {
    greeted: bool,
    plugin: Option<String>,
}

impl MySqlAuth {
    fn check(&mut self, buf: &[u8]) -> Verdict {
        let Some(header) = buf.get(..4) else {
            return Verdict::Need;
        };
        let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        // No authentication packet comes near the limit (nor continues in a next packet).
        if len == 0 || len > MAX_AUTH_MESSAGE {
            return not_mysql();
        }
        let Some(packet) = buf.get(..4 + len) else {
            return Verdict::Need;
        };
        let payload = &packet[4..];
        let pass = |done| Verdict::Pass {
            len: packet.len(),
            done,
        };
        if !self.greeted {
            self.greeted = true;
            return match payload[0] {
                // The server refused the client before any authentication (host not allowed).
                0xFF => pass(true),
                0x0A => match handshake_plugin(payload) {
                    Ok(plugin) => {
                        if let Some(refused) = plugin.as_deref().and_then(refuse_plugin) {
                            return refused;
                        }
                        self.plugin = plugin;
                        pass(false)
                    }
                    Err(()) => not_mysql(),
                },
                _ => not_mysql(),
            };
        }
        match payload[0] {
            0x00 | 0xFF => pass(true),
            // AuthSwitchRequest; without a plugin name, the pre-4.1 mysql_old_password switch.
            0xFE => {
                let plugin = if payload.len() == 1 {
                    "mysql_old_password".to_string()
                } else {
                    nul_terminated(&payload[1..])
                };
                if let Some(refused) = refuse_plugin(&plugin) {
                    return refused;
                }
                self.plugin = Some(plugin);
                pass(false)
            }
            // AuthMoreData.
            0x01 => {
                let caching = self.plugin.as_deref() == Some("caching_sha2_password");
                match &payload[1..] {
                    // caching_sha2_password: fast authentication succeeded; OK follows.
                    [0x03] if caching => pass(false),
                    [0x04] if caching => Verdict::Refuse(refusal(
                        format_args!("refused to send the password: the server asked for caching_sha2_password's full authentication, an RSA password exchange with a key the server sends, {WITHOUT_TLS}"),
                        FIX_MYSQL,
                    )),
                    _ => Verdict::Refuse(refusal(
                        format_args!("refused to send the password: the server sent authentication data ClueCDC does not answer {WITHOUT_TLS} (such as a public key for an RSA password exchange)"),
                        FIX_MYSQL,
                    )),
                }
            }
            other => Verdict::Refuse(refusal(
                format_args!("refused to send the password: the server sent an unexpected packet (0x{other:02x}) during authentication"),
                FIX_NOT_MYSQL,
            )),
        }
    }
}

fn not_mysql() -> Verdict {
    Verdict::Refuse(refusal(
        "refused to send the password: the server's answer is not a MySQL or MariaDB handshake",
        FIX_NOT_MYSQL,
    ))
}

fn refuse_plugin(plugin: &str) -> Option<Verdict> {
    if MYSQL_PLUGINS.contains(&plugin) {
        return None;
    }
    let what = match plugin {
        "mysql_clear_password" | "dialog" => "which sends the password in clear text",
        "sha256_password" => "which sends the password encrypted with a key the server sends",
        _ => "which ClueCDC does not use",
    };
    let name = if plugin.is_empty() {
        "an unnamed authentication plugin".to_string()
    } else {
        format!("the {plugin} authentication plugin")
    };
    Some(Verdict::Refuse(refusal(
        format_args!(
            "refused to send the password: the server asked for {name}, {what}, {WITHOUT_TLS}"
        ),
        FIX_MYSQL,
    )))
}

/// Up to the first NUL, or the end (some servers omit the last NUL).
fn nul_terminated(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The auth plugin a HandshakeV10 names (None without CLIENT_PLUGIN_AUTH: then sqlx sends no
/// auth response at all); Err when the packet is too short to be one.
fn handshake_plugin(payload: &[u8]) -> Result<Option<String>, ()> {
    const SECURE_CONNECTION: u32 = 0x0000_8000;
    const PLUGIN_AUTH: u32 = 0x0008_0000;
    let version_end = payload.iter().skip(1).position(|b| *b == 0).ok_or(())? + 1;
    // NUL, connection id (4), auth data part 1 (8), filler (1), then the capability flags.
    let mut at = version_end + 1 + 4 + 8 + 1;
    let low = payload.get(at..at + 2).ok_or(())?;
    let mut capabilities = u32::from(u16::from_le_bytes([low[0], low[1]]));
    at += 2;
    if payload.len() == at {
        return Ok(None);
    }
    // Character set (1), status (2), then the upper capability flags.
    at += 3;
    let high = payload.get(at..at + 2).ok_or(())?;
    capabilities |= u32::from(u16::from_le_bytes([high[0], high[1]])) << 16;
    at += 2;
    let auth_data_len = usize::from(*payload.get(at).ok_or(())?);
    at += 1 + 10;
    if capabilities & SECURE_CONNECTION != 0 {
        at += auth_data_len.saturating_sub(8).max(13);
    }
    if capabilities & PLUGIN_AUTH == 0 {
        return Ok(None);
    }
    Ok(Some(nul_terminated(payload.get(at..).ok_or(())?)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::connections::{Adapter, Capability, Connection, Provider, Settings};
    use crate::secrets::Secret;

    const PASSWORD: &str = "hunter2-canary-7c41";

    fn pg_auth(code: u32, extra: &[u8]) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend_from_slice(&(8 + extra.len() as u32).to_be_bytes());
        m.extend_from_slice(&code.to_be_bytes());
        m.extend_from_slice(extra);
        m
    }

    fn mysql_packet(seq: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut p = len.to_le_bytes()[..3].to_vec();
        p.push(seq);
        p.extend_from_slice(payload);
        p
    }

    /// A HandshakeV10 as MySQL 8 and MariaDB send it, naming `plugin`.
    fn handshake(plugin: &str) -> Vec<u8> {
        let mut p = vec![0x0a];
        p.extend_from_slice(b"8.0.36\0");
        p.extend_from_slice(&7u32.to_le_bytes());
        p.extend_from_slice(b"abcdefgh\0");
        p.extend_from_slice(&0xf7ffu16.to_le_bytes()); // includes SECURE_CONNECTION
        p.push(0xff);
        p.extend_from_slice(&0x0002u16.to_le_bytes());
        p.extend_from_slice(&0xdfffu16.to_le_bytes()); // includes PLUGIN_AUTH
        p.push(21);
        p.extend_from_slice(&[0; 10]);
        p.extend_from_slice(b"ijklmnopqrst\0");
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        p
    }

    fn refused(v: Verdict) -> String {
        match v {
            Verdict::Refuse(why) => why,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_postgres_request_for_a_clear_text_password_is_refused_with_why_and_what_to_change() {
        let why = refused(postgres_message(&pg_auth(3, &[])));
        assert!(why.contains("AuthenticationCleartextPassword"), "{why}");
        let (message, fix) = split(&why).unwrap();
        assert!(message.contains("without verified TLS"), "{message}");
        assert!(
            fix.contains("verify-full") && fix.contains("scram-sha-256"),
            "{fix}"
        );
    }

    #[test]
    fn postgres_md5_scram_and_ok_pass_and_ok_or_an_error_ends_the_inspection() {
        for (message, done) in [
            (pg_auth(5, b"salt"), false),
            (pg_auth(10, b"SCRAM-SHA-256\0\0"), false),
            (pg_auth(11, b"r=abc"), false),
            (pg_auth(12, b"v=xyz"), false),
            (pg_auth(0, &[]), true),
            (b"E\0\0\0\x0bSFATAL\0".to_vec(), true),
            (b"S\0\0\0\x08a\0b\0".to_vec(), false),
        ] {
            assert_eq!(
                postgres_message(&message),
                Verdict::Pass {
                    len: message.len(),
                    done
                },
                "{message:?}"
            );
        }
    }

    #[test]
    fn a_postgres_message_split_across_reads_waits_for_its_end_and_is_judged_whole() {
        let m = pg_auth(3, &[]);
        for cut in 0..m.len() {
            assert_eq!(postgres_message(&m[..cut]), Verdict::Need, "cut at {cut}");
        }
        let mut two = pg_auth(10, b"SCRAM-SHA-256\0\0");
        let first = two.len();
        two.extend(pg_auth(3, &[]));
        assert_eq!(
            postgres_message(&two),
            Verdict::Pass {
                len: first,
                done: false
            }
        );
        assert!(matches!(
            postgres_message(&two[first..]),
            Verdict::Refuse(_)
        ));
    }

    #[test]
    fn postgres_methods_sqlx_does_not_know_and_garbage_are_refused() {
        assert!(refused(postgres_message(&pg_auth(7, &[]))).contains("GSSAPI"));
        assert!(refused(postgres_message(b"HTTP/1.1 400 Bad Request")).contains("not PostgreSQL"));
        assert!(refused(postgres_message(b"R\0\0\0\x04")).contains("not PostgreSQL"));
    }

    #[test]
    fn a_mysql_handshake_is_read_for_its_plugin_as_sqlx_reads_it() {
        // sqlx's own test vector: MySQL 8.0.18's greeting.
        let mysql_8 = b"\n8.0.18\x00\x19\x00\x00\x00\x114aB0c\x06g\x00\xff\xff\xff\x02\x00\xff\xc7\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00tL\x03s\x0f[4\rl4. \x00caching_sha2_password\x00";
        assert_eq!(
            handshake_plugin(mysql_8),
            Ok(Some("caching_sha2_password".into()))
        );
        assert_eq!(
            handshake_plugin(&handshake("mysql_native_password")),
            Ok(Some("mysql_native_password".into()))
        );
        assert_eq!(handshake_plugin(b"\n5.0\0"), Err(()));
    }

    #[test]
    fn a_mysql_greeting_naming_a_clear_text_or_rsa_plugin_is_refused_before_sqlx_sees_it() {
        for (plugin, words) in [
            ("mysql_clear_password", "clear text"),
            ("dialog", "clear text"),
            ("sha256_password", "key the server sends"),
            ("auth_gssapi_client", "does not use"),
        ] {
            let why = refused(MySqlAuth::default().check(&mysql_packet(0, &handshake(plugin))));
            assert!(why.contains(plugin) && why.contains(words), "{why}");
            assert_eq!(split(&why).map(|(_, f)| f), Some(FIX_MYSQL));
        }
    }

    #[test]
    fn mysql_native_and_caching_sha2_fast_path_pass_until_ok() {
        let mut auth = MySqlAuth::default();
        let greeting = mysql_packet(0, &handshake("caching_sha2_password"));
        assert_eq!(
            auth.check(&greeting[..10]),
            Verdict::Need,
            "a partial packet waits"
        );
        assert_eq!(
            auth.check(&greeting),
            Verdict::Pass {
                len: greeting.len(),
                done: false
            }
        );
        let fast = mysql_packet(2, &[0x01, 0x03]);
        assert_eq!(
            auth.check(&fast),
            Verdict::Pass {
                len: 6,
                done: false
            }
        );
        let ok = mysql_packet(3, &[0x00, 0, 0, 2, 0, 0, 0]);
        assert_eq!(
            auth.check(&ok),
            Verdict::Pass {
                len: 11,
                done: true
            }
        );

        let mut auth = MySqlAuth::default();
        auth.check(&mysql_packet(0, &handshake("caching_sha2_password")));
        let mut switch = vec![0xfe];
        switch.extend_from_slice(b"mysql_native_password\0abcdefghijabcdefghij\0");
        assert!(matches!(
            auth.check(&mysql_packet(2, &switch)),
            Verdict::Pass { done: false, .. }
        ));
        assert!(matches!(
            auth.check(&mysql_packet(4, &[0xff, 0x15, 0x04])),
            Verdict::Pass { done: true, .. }
        ));
    }

    #[test]
    fn a_mysql_switch_to_clear_text_or_a_full_rsa_exchange_is_refused() {
        let mut auth = MySqlAuth::default();
        auth.check(&mysql_packet(0, &handshake("mysql_native_password")));
        let why = refused(auth.check(&mysql_packet(2, b"\xfemysql_clear_password\0")));
        assert!(why.contains("mysql_clear_password"), "{why}");

        let mut auth = MySqlAuth::default();
        auth.check(&mysql_packet(0, &handshake("caching_sha2_password")));
        let why = refused(auth.check(&mysql_packet(2, &[0x01, 0x04])));
        assert!(why.contains("RSA password exchange"), "{why}");

        let mut auth = MySqlAuth::default();
        auth.check(&mysql_packet(0, &handshake("caching_sha2_password")));
        let key = b"\x01-----BEGIN PUBLIC KEY-----\n...";
        assert!(refused(auth.check(&mysql_packet(4, key))).contains("public key"));

        let mut auth = MySqlAuth::default();
        auth.check(&mysql_packet(0, &handshake("mysql_native_password")));
        assert!(refused(auth.check(&mysql_packet(2, &[0xfe]))).contains("mysql_old_password"));
    }

    #[test]
    fn a_mysql_error_instead_of_a_greeting_passes_and_garbage_is_refused() {
        let err = mysql_packet(0, b"\xff\x6a\x04Host is not allowed");
        assert!(matches!(
            MySqlAuth::default().check(&err),
            Verdict::Pass { done: true, .. }
        ));
        assert!(refused(MySqlAuth::default().check(b"HTTP/1.1 400")).contains("not a MySQL"));
    }

    #[test]
    fn a_refusal_splits_into_why_and_fix_even_inside_a_wrapping_message_and_nothing_else_does() {
        let text = format!(
            "cannot reach the source s: {}",
            refusal("refused to send the password: x", FIX_UNVERIFIED)
        );
        assert_eq!(
            split(&text),
            Some((
                "cannot reach the source s: refused to send the password: x",
                FIX_UNVERIFIED
            ))
        );
        assert_eq!(
            split("error communicating with database: Connection refused"),
            None
        );
    }

    fn database(provider: Provider, port: u16, tls_mode: TlsMode) -> Connection {
        Connection {
            id: "conn_1".into(),
            name: "fake".into(),
            provider,
            capabilities: vec![Capability::Destination],
            settings: Settings::Database(DatabaseSettings {
                host: "127.0.0.1".into(),
                port,
                database: "app".into(),
                user: "cdc".into(),
                tls_mode,
                ca_certificate: None,
                slot_name: None,
                publication_name: None,
                server_id: None,
            }),
            secret_ref: "sec_1".into(),
            generation: 1,
            created_at: String::new(),
            updated_at: String::new(),
            last_test: None,
        }
    }

    /// A hostile server on loopback: sends `greeting` after the client's first bytes (or at
    /// once, as MySQL speaks first), then records everything the client sends until it closes
    /// or falls silent for a second.
    async fn hostile(
        greeting: Vec<u8>,
        wait_for_client: bool,
    ) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            if wait_for_client {
                let n = s.read(&mut buf).await.unwrap_or(0);
                got.extend_from_slice(&buf[..n]);
            }
            let _ = s.write_all(&greeting).await;
            loop {
                match tokio::time::timeout(std::time::Duration::from_secs(1), s.read(&mut buf))
                    .await
                {
                    Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            got
        });
        (port, task)
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[tokio::test]
    async fn a_postgres_server_asking_for_a_clear_text_password_never_gets_it_and_the_test_says_why(
    ) {
        let (port, server) = hostile(pg_auth(3, &[]), true).await;
        let conn = database(Provider::Postgresql, port, TlsMode::Disable);
        let secrets: BTreeMap<String, Secret<String>> =
            [("password".to_string(), Secret::new(PASSWORD.to_string()))].into();
        let checks = super::super::postgres::Postgres.test(&conn, &secrets).await;
        let got = server.await.unwrap();
        assert!(
            contains(&got, b"cdc"),
            "the startup message went through: {got:?}"
        );
        assert!(!contains(&got, PASSWORD.as_bytes()), "the password leaked");
        let reachable = &checks[0];
        assert_eq!(reachable.name, "reachable");
        assert!(
            reachable
                .message
                .contains("asked for it in clear text (AuthenticationCleartextPassword)"),
            "{reachable:?}"
        );
        assert_eq!(reachable.hint.as_deref(), Some(FIX_POSTGRES));
    }

    #[tokio::test]
    async fn a_mysql_server_naming_mysql_clear_password_never_gets_the_password() {
        let (port, server) =
            hostile(mysql_packet(0, &handshake("mysql_clear_password")), false).await;
        let conn = database(Provider::Mariadb, port, TlsMode::Disable);
        let err = super::super::mysql::connect(&conn, PASSWORD)
            .await
            .err()
            .unwrap();
        let got = server.await.unwrap();
        assert!(!contains(&got, PASSWORD.as_bytes()), "the password leaked");
        assert!(
            got.is_empty(),
            "sqlx never saw the greeting, so it sent nothing: {got:?}"
        );
        assert!(
            err.contains("mysql_clear_password authentication plugin, which sends the password in clear text"),
            "{err}"
        );
        assert_eq!(split(&err).map(|(_, f)| f), Some(FIX_MYSQL));
    }

    #[tokio::test]
    async fn a_postgres_server_that_accepts_at_once_is_relayed_and_not_refused() {
        let mut answer = pg_auth(0, &[]);
        answer.extend_from_slice(b"K\0\0\0\x0c\0\0\0\x01\0\0\0\x02");
        answer.extend_from_slice(b"Z\0\0\0\x05I");
        let (port, server) = hostile(answer, true).await;
        let conn = database(Provider::Postgresql, port, TlsMode::Disable);
        let result = super::super::postgres::connect(&conn, PASSWORD).await;
        assert!(result.is_ok(), "{:?}", result.err());
        drop(result);
        let got = server.await.unwrap();
        assert!(contains(&got, b"cdc"), "{got:?}");
        assert!(!contains(&got, PASSWORD.as_bytes()));
    }

    #[tokio::test]
    async fn a_postgres_server_asking_for_md5_gets_the_salted_hash_through_the_relay_and_never_the_password(
    ) {
        let (port, server) = hostile(pg_auth(5, b"salt"), true).await;
        let conn = database(Provider::Postgresql, port, TlsMode::Disable);
        let result = super::super::postgres::connect(&conn, PASSWORD).await;
        let got = server.await.unwrap();
        assert!(
            contains(&got, b"p\0\0\0\x28md5"),
            "the MD5 answer went through: {got:?}"
        );
        assert!(!contains(&got, PASSWORD.as_bytes()), "the password leaked");
        let e = result.err().unwrap();
        assert!(split(&e).is_none(), "the guard refused: {e}");
    }

    #[tokio::test]
    async fn tls_mode_require_sends_no_password_and_does_not_even_connect() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let conn = database(Provider::Postgresql, port, TlsMode::Require);
        let err = super::super::postgres::connect(&conn, PASSWORD)
            .await
            .err()
            .unwrap();
        assert!(err.starts_with("tls_mode require does not verify"), "{err}");
        assert_eq!(split(&err).map(|(_, f)| f), Some(FIX_UNVERIFIED));
        let accepted =
            tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "nothing connected");
    }
}
