//! Structured logs through tracing; text for people, JSON for log shippers.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber once. Logs go to standard error so that standard output
/// stays free for what commands print (the URL, a created token).
/// Libraries whose debug output can carry credentials (signed request dumps, headers): they
/// stay at warn whatever the filter says, so no log level leaks a secret.
const QUIET: &str = "aws_sigv4=warn,aws_smithy_runtime=warn,aws_smithy_runtime_api=warn,aws_smithy_http_client=warn,aws_sdk_s3=warn,aws_runtime=warn,aws_config=warn,hyper=warn,hyper_util=warn,h2=warn,reqwest=warn,rustls=warn,sqlx=warn";

pub fn init(settings: &LogSettings) {
    let filter = EnvFilter::try_new(format!("{},{QUIET}", settings.filter))
        .unwrap_or_else(|_| EnvFilter::new(format!("info,{QUIET}")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true);
    // A second init (tests in one process) is harmless: keep the first subscriber.
    let _ = match settings.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

tokio::task_local! {
    /// The id of the HTTP request being handled, for audit rows and error pages.
    pub static REQUEST_ID: String;
}

pub fn current_request_id() -> Option<String> {
    REQUEST_ID.try_with(|id| id.clone()).ok()
}
