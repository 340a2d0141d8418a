//! The `cluecdc` command line: a thin layer over the library's composition root.

use clap::{Parser, Subcommand};

use cluecdc::app::{self, Application};
use cluecdc::cli;
use cluecdc::config::{DataSettings, LogSettings, ServeSettings};
use cluecdc::telemetry;

#[derive(Debug, Parser)]
#[command(
    name = "cluecdc",
    version,
    about = "Control plane for change data capture on Kafka Connect"
)]
struct Cli {
    #[command(flatten)]
    log: LogSettings,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the web pages and the JSON API (the default).
    Serve(ServeSettings),
    /// Run the reconciler and monitors without HTTP (alongside or instead of `serve`'s).
    Worker(cluecdc::config::WorkerSettings),
    /// Create or upgrade the database schema and exit.
    Migrate(DataSettings),
    /// Manage users.
    #[command(subcommand)]
    User(cli::UserCommand),
    /// Manage API tokens.
    #[command(subcommand)]
    Token(cli::TokenCommand),
    /// Manage the master key of the secret store.
    #[command(subcommand)]
    Keys(cli::KeysCommand),
    /// Print every HTTP route with who may call it, as JSON.
    Routes,
    /// Print the JSON API's OpenAPI 3.1 document (the one served at /api/v1/openapi.json).
    Openapi,
    /// Write the setup as one declarative YAML document (or Strimzi resources).
    Export(cli::ExportArgs),
    /// Show what applying a document would create, change and delete; changes nothing.
    Plan(cli::DocumentArgs),
    /// Apply a document through the same checks and service functions as the API.
    Apply(cli::DocumentArgs),
    /// Read Strimzi KafkaConnector resources into the declarative form (standard output).
    Import(cli::ImportArgs),
    /// Copy the database while ClueCDC runs (keep the master key with the copy).
    Backup(cli::BackupArgs),
    /// Replace the database with a backup (ClueCDC stopped; the master key must decrypt it).
    Restore(cli::RestoreArgs),
    /// Copy a whole setup to another metadata store (SQLite to PostgreSQL or back), checked.
    MigrateStore(cli::MigrateStoreArgs),
}

/// `cluecdc` with no subcommand behaves as `cluecdc serve`.
#[derive(Debug, Parser)]
struct DefaultServe {
    #[command(flatten)]
    settings: ServeSettings,
}

/// mimalloc (its v2), not glibc's malloc. At 10,000 connectors on 20 Connect clusters (same
/// session, 60-s wrk at 64 clients, background runtime in both) the list pages served 1.6–2×
/// the requests per second with it (`/connectors` 17,200 → 28,500, `/deliveries` 33,400 →
/// 66,800) and their p99 fell from 6.8–14.2 ms to 3.4–7.1 ms: glibc's allocator was about 30 %
/// of the process's CPU in a profile. Resident memory in `scripts/bench --scale`: largest
/// 175.6 MiB with v2, 226.3 MiB with v3, 171 MiB with glibc and two arenas. It also ends the
/// start-again-with-`MALLOC_ARENA_MAX` that glibc's per-thread arenas needed.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> std::process::ExitCode {
    app::install_tls_provider();
    let cli = Cli::parse();
    telemetry::init(&cli.log);
    let result = match cli.command {
        // No subcommand: `serve` with its defaults and environment.
        None => serve(DefaultServe::parse_from(["cluecdc"]).settings).await,
        Some(Command::Serve(settings)) => serve(settings).await,
        Some(Command::Migrate(data)) => migrate(data).await,
        Some(Command::Worker(settings)) => app::run_worker(&settings, app::shutdown_signal()).await,
        Some(Command::User(cmd)) => cli::user(cmd).await,
        Some(Command::Token(cmd)) => cli::token(cmd).await,
        Some(Command::Keys(cmd)) => cli::keys(cmd).await,
        Some(Command::Export(args)) => cli::export(args).await,
        Some(Command::Plan(args)) => cli::plan(args).await,
        Some(Command::Apply(args)) => cli::apply(args).await,
        Some(Command::Import(args)) => cli::import(args).await,
        Some(Command::Backup(args)) => cli::backup(args).await,
        Some(Command::Restore(args)) => cli::restore(args).await,
        Some(Command::MigrateStore(args)) => cli::migrate_store(args).await,
        Some(Command::Openapi) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&cluecdc::web::openapi_document()).unwrap_or_default()
            );
            Ok(())
        }
        Some(Command::Routes) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&cluecdc::web::route_infos()).unwrap_or_default()
            );
            Ok(())
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "cluecdc failed");
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(settings: ServeSettings) -> anyhow::Result<()> {
    let application = Application::build(&settings).await?;
    let url = application.url();
    tracing::info!(%url, data_dir = %settings.data.data_dir.display(), "listening");
    // The URL alone on standard output: people click it, tests read it.
    println!("ClueCDC listening on {url}");
    application.run(app::shutdown_signal()).await
}

async fn migrate(data: DataSettings) -> anyhow::Result<()> {
    app::open_database(&data).await?;
    println!("database {} is up to date", data.store()?.describe());
    Ok(())
}
