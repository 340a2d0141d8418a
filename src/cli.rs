//! Administrative subcommands that work on the database directly (`user`, `token`, `routes`).
//! They act as a local admin: whoever can run them can read the database file anyway.

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
