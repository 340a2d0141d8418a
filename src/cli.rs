//! Administrative subcommands that work on the database directly (`user`, `token`, `routes`).
//! They act as a local admin: whoever can run them can read the database file anyway.

use crate::db;
use anyhow::Context as _;
use std::io::{BufRead, IsTerminal, Write};

use clap::Subcommand;

use crate::app;
use crate::auth::{tokens, users, Principal};
use crate::config::DataSettings;
use crate::error::Error;

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user. The password is read from standard input when it is not a terminal,
    /// otherwise prompted for twice; never taken from the command line.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "viewer")]
        role: String,
        #[command(flatten)]
        data: DataSettings,
    },
    /// Set a new password (read like `create`) and sign the user out everywhere.
    ResetPassword {
        #[arg(long)]
        name: String,
        #[command(flatten)]
        data: DataSettings,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create an API token and print it alone on standard output (the only time it is shown).
    Create {
        #[arg(long)]
        user: String,
        /// A duration such as 90d or 12h; omit for no expiry.
        #[arg(long)]
        expires: Option<String>,
        #[arg(long, default_value = "cli")]
        label: String,
        #[command(flatten)]
        data: DataSettings,
    },
    /// List tokens (never their values).
    List {
        #[command(flatten)]
        data: DataSettings,
    },
    /// Revoke a token by id; it stops working at once.
    Revoke {
        id: String,
        #[command(flatten)]
        data: DataSettings,
    },
}

fn read_password(confirm: bool) -> anyhow::Result<String> {
    if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password("Password: ")?;
        if confirm {
            let second = rpassword::prompt_password("Password again: ")?;
            anyhow::ensure!(first == second, "the two passwords differ");
        }
        Ok(first)
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }
}

/// Service errors as a person at a shell wants them: field messages one per line.
fn explain(e: Error) -> anyhow::Error {
    match e {
        Error::Invalid { fields, .. } => {
            anyhow::anyhow!(fields
                .iter()
                .map(|(k, v)| format!("--{k}: {v}"))
                .collect::<Vec<_>>()
                .join("\n"))
        }
        other => anyhow::anyhow!(other.to_string()),
    }
}

pub async fn user(cmd: UserCommand) -> anyhow::Result<()> {
    match cmd {
        UserCommand::Create { name, role, data } => {
            let pool = app::open_database(&data).await?;
            let password = read_password(true)?;
            let input = users::NewUser {
                name,
                role,
                password,
            };
            let user = users::create(&pool, &Principal::cli(), &input)
                .await
                .map_err(explain)?;
            eprintln!("created user {} with role {}", user.name, user.role);
        }
        UserCommand::ResetPassword { name, data } => {
            let pool = app::open_database(&data).await?;
            let password = read_password(true)?;
            users::reset_password(&pool, &Principal::cli(), &name, &password)
                .await
                .map_err(explain)?;
            eprintln!("password of {name} reset; their sessions were ended");
        }
    }
    Ok(())
}

pub async fn token(cmd: TokenCommand) -> anyhow::Result<()> {
    match cmd {
        TokenCommand::Create {
            user,
            expires,
            label,
            data,
        } => {
            let pool = app::open_database(&data).await?;
            let input = tokens::NewToken {
                user,
                label,
                expires: expires.unwrap_or_default(),
            };
            let created = tokens::create(&pool, &Principal::cli(), &input)
                .await
                .map_err(explain)?;
            println!("{}", created.token);
            std::io::stdout().flush()?;
            eprintln!(
                "token {} for {} created; it is not shown again",
                created.info.id, created.info.user_name
            );
        }
        TokenCommand::List { data } => {
            let pool = app::open_database(&data).await?;
            for t in tokens::list(&pool, &Principal::cli())
                .await
                .map_err(explain)?
            {
                let state = if t.revoked_at.is_some() {
                    "revoked"
                } else {
                    "live"
                };
                println!(
                    "{}\t{}\t{}\t{}…\t{}\texpires {}",
                    t.id,
                    t.user_name,
                    t.label,
                    t.prefix,
                    state,
                    t.expires_at.as_deref().unwrap_or("never")
                );
            }
        }
        TokenCommand::Revoke { id, data } => {
            let pool = app::open_database(&data).await?;
            tokens::revoke(&pool, &Principal::cli(), &id)
                .await
                .map_err(explain)?;
            eprintln!("token {id} revoked");
        }
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Re-encrypt every stored secret under a new master key. A running server keeps reading
    /// throughout: it reloads the key file when it changes. Needs a key file (the embedded
    /// default `<data-dir>/master.key`, or CLUECDC_MASTER_KEY_FILE).
    Rotate {
        #[command(flatten)]
        data: DataSettings,
    },
}

pub async fn keys(cmd: KeysCommand) -> anyhow::Result<()> {
    match cmd {
        KeysCommand::Rotate { data } => {
            let pool = app::open_database(&data).await?;
            let rotation = crate::secrets::store::rotate_master_key(&pool, &data).await?;
            let mut tx = pool.begin().await?;
            crate::audit::record(
                &mut tx,
                crate::audit::Entry {
                    actor: (&Principal::cli()).into(),
                    action: "keys.rotate",
                    target_kind: "master_key",
                    target_id: &rotation.new,
                    outcome: crate::audit::Outcome::Success,
                    summary: serde_json::json!({"old_keys": rotation.old, "new_key": rotation.new, "re_encrypted": rotation.re_encrypted}),
                },
            )
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?;
            tx.commit().await?;
            eprintln!(
                "re-encrypted {} secret values under key {} (was {})",
                rotation.re_encrypted,
                rotation.new,
                rotation.old.join(", ")
            );
        }
    }
    Ok(())
}

// ---- configuration as code and recovery ------------------------------------------------------

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// `cluecdc` (the declarative document) or `strimzi` (KafkaConnector and KafkaTopic
    /// resources).
    #[arg(long, default_value = "cluecdc")]
    pub format: String,
    /// Write to this file instead of standard output.
    #[arg(short = 'o', long)]
    pub output: Option<std::path::PathBuf>,
    /// Strimzi: the namespace of the resources.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Strimzi: the KafkaConnect resource the connectors belong to.
    #[arg(long)]
    pub connect_cluster: Option<String>,
    /// Strimzi: the Kafka resource the topics belong to (default: the ClueCDC Kafka cluster's
    /// name).
    #[arg(long)]
    pub kafka_cluster: Option<String>,
    #[command(flatten)]
    pub data: DataSettings,
}

#[derive(Debug, clap::Args)]
pub struct DocumentArgs {
    /// The document: a YAML file, or a folder of them.
    #[arg(short = 'f', long = "file")]
    pub file: std::path::PathBuf,
    /// Also delete what the document leaves out (never without this flag).
    #[arg(long)]
    pub prune: bool,
    #[command(flatten)]
    pub data: DataSettings,
}

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// `strimzi`: KafkaConnector (and KafkaTopic) resources.
    #[arg(long)]
    pub format: String,
    /// The resources (YAML, several documents or a `kind: List`).
    pub file: std::path::PathBuf,
    /// Write the declarative document to this file instead of standard output.
    #[arg(short = 'o', long)]
    pub output: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub data: DataSettings,
}

#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// The backup file to write (it must not exist).
    #[arg(long)]
    pub to: std::path::PathBuf,
    #[command(flatten)]
    pub data: DataSettings,
}

#[derive(Debug, clap::Args)]
pub struct MigrateStoreArgs {
    /// The store to copy from: `sqlite://PATH` or `postgres://USER@HOST:PORT/DATABASE`.
    #[arg(long)]
    pub from: String,
    /// The store to copy into (empty; it is migrated first). A PostgreSQL password comes from
    /// `CLUECDC_DATABASE_PASSWORD` or `--database-password-file`, never from the URL here.
    #[arg(long)]
    pub to: String,
    /// File holding the PostgreSQL password.
    #[arg(long, env = "CLUECDC_DATABASE_PASSWORD_FILE")]
    pub database_password_file: Option<std::path::PathBuf>,
    /// CA certificate PostgreSQL's server certificate must chain to (TLS, verify-full).
    #[arg(long, env = "CLUECDC_DATABASE_CA_FILE")]
    pub database_ca_file: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// The backup file to restore.
    #[arg(long)]
    pub from: std::path::PathBuf,
    #[command(flatten)]
    pub data: DataSettings,
}

/// The service layer's refusal of a document, one `path: why` per line.
fn refused(e: Error) -> anyhow::Error {
    match e {
        Error::Invalid { fields, message } if !fields.is_empty() => {
            let _ = message;
            anyhow::anyhow!(
                "the document was refused, nothing changed:\n{}",
                fields
                    .iter()
                    .map(|(k, v)| format!("  {k}: {v}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        }
        other => anyhow::anyhow!(other.to_string()),
    }
}

fn write_out(path: &Option<std::path::PathBuf>, text: &str) -> anyhow::Result<()> {
    match path {
        Some(p) => std::fs::write(p, text)?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(())
}

struct Local {
    svc: crate::ctx::Ctx,
    who: Principal,
}

impl Local {
    async fn open(data: &DataSettings) -> anyhow::Result<Local> {
        let pool = app::open_database(data).await?;
        let keyring = crate::secrets::Keyring::load(data)?;
        crate::secrets::store::verify_key(&pool, &keyring).await?;
        let store = crate::secrets::store::SecretStore::new(pool.clone(), keyring);
        Ok(Local {
            svc: crate::ctx::Ctx::new(pool, std::sync::Arc::new(store)),
            who: Principal::cli(),
        })
    }
    fn ctx(&self) -> crate::manifest::plan::Ctx<'_> {
        crate::manifest::plan::Ctx {
            svc: &self.svc,
            who: &self.who,
            values: crate::manifest::plan::Values::LOCAL,
        }
    }
}

pub async fn export(args: ExportArgs) -> anyhow::Result<()> {
    let local = Local::open(&args.data).await?;
    let text = match args.format.as_str() {
        "cluecdc" => crate::manifest::export::export(&local.svc, &local.who)
            .await
            .map_err(explain)?,
        "strimzi" => {
            let (Some(namespace), Some(connect_cluster)) = (args.namespace, args.connect_cluster)
            else {
                anyhow::bail!("--format strimzi needs --namespace and --connect-cluster (the KafkaConnect resource's name)");
            };
            let target = crate::manifest::strimzi::Target {
                namespace,
                connect_cluster,
                kafka_cluster: args.kafka_cluster,
            };
            let (text, warnings) =
                crate::manifest::strimzi::export(&local.svc, &local.who, &target)
                    .await
                    .map_err(explain)?;
            for w in warnings {
                eprintln!("note: {w}");
            }
            text
        }
        other => anyhow::bail!("--format {other}: choose cluecdc or strimzi"),
    };
    write_out(&args.output, &text)
}

fn load(file: &std::path::Path) -> anyhow::Result<crate::manifest::doc::Loaded> {
    crate::manifest::doc::read(file)
        .map_err(|problems| refused(crate::manifest::plan::refusal(problems)))
}

pub async fn plan(args: DocumentArgs) -> anyhow::Result<()> {
    let loaded = load(&args.file)?;
    let local = Local::open(&args.data).await?;
    let plan = crate::manifest::plan::plan(&local.ctx(), &loaded, args.prune)
        .await
        .map_err(refused)?;
    write_out(&None, &plan.text())
}

pub async fn apply(args: DocumentArgs) -> anyhow::Result<()> {
    let loaded = load(&args.file)?;
    let local = Local::open(&args.data).await?;
    let ctx = local.ctx();
    let plan = crate::manifest::plan::plan(&ctx, &loaded, args.prune)
        .await
        .map_err(refused)?;
    if plan.is_empty() {
        return write_out(&None, &plan.text());
    }
    write_out(&None, &plan.text())?;
    let report = crate::manifest::apply::apply(&ctx, plan, args.prune).await;
    write_out(&None, &report.text())?;
    if report.failed.is_some() {
        anyhow::bail!("apply stopped part way; see above for what is done and what is left");
    }
    Ok(())
}

pub async fn import(args: ImportArgs) -> anyhow::Result<()> {
    if args.format != "strimzi" {
        anyhow::bail!("--format {}: only strimzi can be imported", args.format);
    }
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {}", args.file.display(), e.kind()))?;
    // References to this instance's secrets name their connections, when there is a database
    // to ask (import never creates one).
    let mut refs = std::collections::HashMap::new();
    if args.data.database_path().exists() {
        let pool = app::open_database(&args.data).await?;
        let rows: Vec<(String, String)> = db::query_as("SELECT secret_ref, name FROM connections")
            .fetch_all(&pool)
            .await?;
        refs.extend(rows);
    }
    let lookup = |r: &str| refs.get(r).cloned();
    let (doc, problems) = crate::manifest::strimzi::import(&text, &lookup);
    for p in &problems {
        eprintln!("not carried over: {p}");
    }
    write_out(&args.output, &crate::manifest::doc::to_yaml(&doc))?;
    if !problems.is_empty() {
        eprintln!(
            "{} finding(s): the document above leaves those values out; review it before applying",
            problems.len()
        );
    }
    Ok(())
}

pub async fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let r = crate::backup::backup(&args.data, &args.to).await?;
    eprintln!(
        "backup written to {} ({} bytes, integrity ok, {} encrypted secret values).",
        r.path.display(),
        r.bytes,
        r.secrets
    );
    eprintln!(
        "Keep the master key with it ({}): without that key the credentials in the backup cannot be decrypted, and restore refuses it.",
        r.key_source
    );
    Ok(())
}

/// Opens the store one `migrate-store` URL names, with the password and CA settings.
async fn open_named(url: &str, args: &MigrateStoreArgs) -> anyhow::Result<crate::db::Pool> {
    let settings = DataSettings {
        data_dir: std::path::PathBuf::from("."),
        master_key: None,
        master_key_file: None,
        database_url: Some(url.to_string()),
        database_password_file: args.database_password_file.clone(),
        database_ca_file: args.database_ca_file.clone(),
    };
    crate::db::open_store(&settings.store()?).await
}

pub async fn migrate_store(args: MigrateStoreArgs) -> anyhow::Result<()> {
    let from = open_named(&args.from, &args).await.context("--from")?;
    let to = open_named(&args.to, &args).await.context("--to")?;
    let r = crate::store_copy::copy(&from, &to).await?;
    let rows: i64 = r.tables.values().sum();
    for (t, n) in &r.tables {
        if *n > 0 {
            eprintln!("{t:>32}  {n}");
        }
    }
    eprintln!(
        "copied {rows} rows in {} tables; every table holds as many rows in the target as in the source.",
        r.tables.len()
    );
    eprintln!(
        "Start ClueCDC on the target with the same master key (CLUECDC_DATABASE_URL={}).",
        args.to
    );
    Ok(())
}

pub async fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let r = crate::backup::restore(&args.data, &args.from).await?;
    eprintln!(
        "restored {} into {} ({} secret values decrypt with the master key).",
        args.from.display(),
        r.database.display(),
        r.secrets
    );
    if let Some(p) = r.previous {
        eprintln!("the database it replaced is kept at {}", p.display());
    }
    Ok(())
}
