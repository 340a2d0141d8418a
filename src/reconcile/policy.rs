//! Failure policy: read the trace first. Transient failures are restarted with capped,
//! jittered exponential backoff; permanent ones are reported with what to do, never restarted.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Restarts of one connector before ClueCDC stops trying and reports it.
    pub max_restarts: u32,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// RUNNING this long without a failure resets the restart counter.
    pub healthy_window: Duration,
    /// Restarts across all connectors of one cluster in one pass.
    pub restarts_per_pass: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_restarts: 5,
            base_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(300),
            healthy_window: Duration::from_secs(120),
            restarts_per_pass: 5,
        }
    }
}

impl Policy {
    /// The wait before restart `attempt` (1-based): base·2^(attempt−1), capped, then scaled by
    /// `jitter` in [0.5, 1.0] so many connectors failing together do not restart in lockstep.
    pub fn backoff(&self, attempt: u32, jitter: f64) -> Duration {
        let exp = self
            .base_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        exp.min(self.max_backoff).mul_f64(jitter.clamp(0.5, 1.0))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Worth restarting: the cause usually goes away by itself.
    Transient { reason: &'static str },
    /// Restarting will not help; a person must act.
    Permanent {
        reason: &'static str,
        what_to_do: &'static str,
    },
}

/// What fixes a certificate the client does not trust, or one issued for another name.
const UNTRUSTED: &str = "the server's certificate is not signed by the connection's CA: put the CA that signed it in the connection's ca_certificate, then restart the connector";
const NAME_MISMATCH: &str = "the server's certificate does not name the host the connection uses: use a host name the certificate lists, or tls_mode verify-ca";

/// (needle, reason, what to do). Needles are matched case-insensitively against the trace.
const PERMANENT: &[(&str, &str, &str)] = &[
    // TLS: a certificate the connection's CA did not sign, or one for another name, stays so.
    ("pkix path building failed", "TLS certificate not trusted", UNTRUSTED),
    ("unable to find valid certification path", "TLS certificate not trusted", UNTRUSTED),
    ("unknownissuer", "TLS certificate not trusted", UNTRUSTED),
    // MySQL Connector/J with a truststore of its own (trustCertificateKeyStoreUrl).
    ("path does not chain with any of the trust anchors", "TLS certificate not trusted", UNTRUSTED),
    ("notvalidforname", "TLS host name mismatch", NAME_MISMATCH),
    ("certificate verify failed", "TLS certificate not trusted", UNTRUSTED),
    ("could not be verified by hostnameverifier", "TLS host name mismatch", NAME_MISMATCH),
    ("no subject alternative", "TLS host name mismatch", NAME_MISMATCH),
    ("password authentication failed", "authentication failed", "the database rejected the password: rotate the connection's credentials, then restart the connector"),
    ("access denied for user", "authentication failed", "the database rejected the user or password: check the grants and rotate the connection's credentials"),
    ("signaturedoesnotmatch", "authentication failed", "the object store rejected the secret key: rotate the connection's credentials"),
    ("invalidaccesskeyid", "authentication failed", "the object store does not know the access key: rotate the connection's credentials"),
    ("authentication failed", "authentication failed", "check the credentials of the connection and rotate them"),
    ("accessdenied", "access denied", "the object store refused the credentials: grant them list on the bucket and put, get and delete on its objects, or rotate the connection's credentials"),
    ("http 403", "access denied", "the object store refused the credentials: grant them list on the bucket and put, get and delete on its objects, or rotate the connection's credentials"),
    ("must be superuser or replication role", "missing privilege", "grant the connector user REPLICATION (ALTER ROLE … WITH REPLICATION)"),
    ("permission denied", "missing privilege", "grant the connector user the privileges the connection test lists"),
    ("replication slot", "replication slot lost", "the replication slot is gone (dropped, or invalidated by max_slot_wal_keep_size): changes since the last offset are lost; re-snapshot the pipeline"),
    ("requested wal segment", "WAL removed", "the WAL the connector needs was removed: re-snapshot the pipeline"),
    ("could not find first log file name in binary log index file", "binlog purged", "the binlog position the connector needs was purged: re-snapshot the pipeline and keep binlogs longer"),
    ("binlog probably contains events that have been purged", "binlog purged", "the binlog position the connector needs was purged: re-snapshot the pipeline and keep binlogs longer"),
    // Debezium 3.5 at task start when the server no longer has its offset (MySQL 9.7: the binlog
    // file and GTIDs were purged).
    ("but this is no longer available on the server", "source position purged", "the server no longer has the position the connector must resume from (a MySQL/MariaDB binlog purged past it): reset and re-snapshot the pipeline, and keep binary logs longer than a pipeline may be paused or down"),
    ("is behind the", "saved offset behind the slot", "the saved offset is older than what the server still keeps: re-snapshot the pipeline"),
    ("offset is not valid", "saved offset invalid", "the saved offset no longer matches the source: re-snapshot the pipeline"),
    ("configexception", "invalid configuration", "fix the connector configuration; Connect's validation message is in the trace"),
    ("missing required configuration", "invalid configuration", "fix the connector configuration; Connect's validation message is in the trace"),
    ("invalid value", "invalid configuration", "fix the connector configuration; Connect's validation message is in the trace"),
    ("classnotfoundexception", "plugin missing", "install the connector plugin on every worker of the Connect cluster"),
    ("failed due to serialization error", "unreadable record", "a record in the topic cannot be read by the converter: fix its producer, or choose error_policy continue with a dead-letter topic to skip such records"),
    ("publication", "publication missing", "create the publication (the pipeline page shows the statement) or let ClueCDC create it"),
];

/// Checked before the permanent list: these phrases contain permanent-looking words but are
/// passing conditions (e.g. "replication slot … is active for PID").
const TRANSIENT_FIRST: &[(&str, &str)] = &[
    (
        "is active for pid",
        "replication slot held by another connection",
    ),
    ("rebalance", "Connect rebalance in progress"),
];

const TRANSIENT: &[(&str, &str)] = &[
    ("connection refused", "connection refused"),
    ("connect timed out", "timeout"),
    ("timed out", "timeout"),
    ("timeoutexception", "timeout"),
    ("sockettimeoutexception", "timeout"),
    ("communications link failure", "network failure"),
    ("connection reset", "network failure"),
    ("the database system is shutting down", "server shutdown"),
    ("the database system is starting up", "server starting"),
    (
        "terminating connection due to administrator command",
        "server shutdown",
    ),
    ("server shutdown", "server shutdown"),
    ("networkexception", "network failure"),
    ("disconnectexception", "network failure"),
    ("notleaderorfollower", "Kafka leadership change"),
    ("retriableexception", "retriable error"),
    ("service unavailable", "service unavailable"),
    ("slowdown", "rate limited"),
];

pub fn classify(trace: &str) -> Failure {
    let t = trace.to_lowercase();
    for (needle, reason) in TRANSIENT_FIRST {
        if t.contains(needle) {
            return Failure::Transient { reason };
        }
    }
    for (needle, reason, what_to_do) in PERMANENT {
        if t.contains(needle) {
            return Failure::Permanent { reason, what_to_do };
        }
    }
    for (needle, reason) in TRANSIENT {
        if t.contains(needle) {
            return Failure::Transient { reason };
        }
    }
    // Unknown causes get the benefit of the doubt, within the restart limit.
    Failure::Transient {
        reason: "unclassified failure",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        let p = Policy {
            base_backoff: Duration::from_secs(2),
            max_backoff: Duration::from_secs(20),
            ..Policy::default()
        };
        assert_eq!(p.backoff(1, 1.0), Duration::from_secs(2));
        assert_eq!(p.backoff(2, 1.0), Duration::from_secs(4));
        assert_eq!(p.backoff(3, 1.0), Duration::from_secs(8));
        assert_eq!(p.backoff(10, 1.0), Duration::from_secs(20), "capped");
        assert_eq!(
            p.backoff(3, 0.5),
            Duration::from_secs(4),
            "jitter scales down to half"
        );
        assert_eq!(
            p.backoff(3, 0.1),
            Duration::from_secs(4),
            "jitter below half is clamped"
        );
    }

    #[test]
    fn traces_are_read_before_restarting() {
        for t in [
            "org.postgresql.util.PSQLException: FATAL: password authentication failed for user \"cdc\"",
            "io.debezium.DebeziumException: replication slot \"cdc\" does not exist",
            "ERROR: requested WAL segment 000000010000000000000003 has already been removed",
            "Could not find first log file name in binary log index file Error code: 1236",
            "org.apache.kafka.common.config.ConfigException: Missing required configuration \"topic.prefix\"",
            "bucket: SignatureDoesNotMatch: The request signature we calculated does not match",
            "bucket: AccessDenied: Access Denied",
            "org.postgresql.util.PSQLException: SSL error: PKIX path building failed: sun.security.provider.certpath.SunCertPathBuilderException: unable to find valid certification path to requested target",
            "org.postgresql.util.PSQLException: The hostname db.internal could not be verified by hostnameverifier PgjdbcHostnameVerifier.",
            "com.mysql.cj.jdbc.exceptions.CommunicationsException: Communications link failure\nCaused by: javax.net.ssl.SSLHandshakeException: java.security.cert.CertPathValidatorException: Path does not chain with any of the trust anchors",
        ] {
            assert!(matches!(classify(t), Failure::Permanent { .. }), "{t}");
        }
        for t in [
            "org.postgresql.util.PSQLException: Connection to 127.0.0.1:5432 refused",
            "ERROR: replication slot \"cdc\" is active for PID 4242",
            "FATAL: terminating connection due to administrator command",
            "java.net.SocketTimeoutException: Read timed out",
            "something nobody has seen before",
        ] {
            assert!(matches!(classify(t), Failure::Transient { .. }), "{t}");
        }
    }
}
