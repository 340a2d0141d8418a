//! `cluecdc migrate-store`: copies a whole setup from one metadata store to another (SQLite to
//! PostgreSQL, or back), then checks that every table holds as many rows on both sides.
//!
//! Invariants:
//! - The target is migrated first and must hold no setup (no user, connection, pipeline,
//!   delivery, replication or audit row); the rows its migrations seed (alert rules, counters,
//!   instance metadata) are replaced by the source's.
//! - One target transaction: a failed copy leaves the target as it was.
//! - Values travel as they are stored: secrets stay AES-GCM envelopes (the target needs the
//!   same master key, which `serve` checks at start), timestamps stay text.
//! - Tables are copied parents first (the target's foreign keys decide the order), and
//!   PostgreSQL's identity sequences continue after the copied ids.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};

use crate::db::{self, Engine, Pool};

/// Tables that say a store holds a setup already.
const SETUP_TABLES: &[&str] = &[
    "users",
    "connections",
    "pipelines",
    "deliveries",
    "replications",
    "audit_log",
];

/// What a copy did: rows per table (the same on both sides, checked).
#[derive(Debug)]
pub struct Report {
    pub tables: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Real,
    Text,
    Blob,
}

/// A stored value, read leniently (SQLite lets a column hold any type) and written as the
/// target column's type.
enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

pub async fn copy(from: &Pool, to: &Pool) -> anyhow::Result<Report> {
    db::migrate(from).await.context("the source store")?;
    db::migrate(to).await.context("the target store")?;
    for t in SETUP_TABLES {
        let n: i64 = db::query_scalar(&format!("SELECT COUNT(*) FROM {t}"))
            .fetch_one(to)
            .await?;
        if n > 0 {
            bail!("the target store already holds a setup ({n} rows in {t}); migrate-store copies into an empty database only");
        }
    }
    let tables = columns(to).await?;
    let order = parents_first(to, tables.keys().cloned().collect()).await?;
    let mut tx = to.begin().await?;
    // Children first, so that deleting the seeded rows breaks no reference.
    for t in order.iter().rev() {
        if t != "audit_log" {
            db::query(&format!("DELETE FROM {t}"))
                .execute(&mut *tx)
                .await?;
        }
    }
    let mut report = Report {
        tables: BTreeMap::new(),
    };
    for t in &order {
        let cols = &tables[t];
        let names: Vec<&str> = cols.iter().map(|(c, _)| c.as_str()).collect();
        let select = format!("SELECT {} FROM {t}", names.join(", "));
        let insert = format!(
            "INSERT INTO {t} ({}) VALUES ({})",
            names.join(", "),
            db::placeholders(1, names.len())
        );
        let rows = db::query(&select)
            .fetch_all(from)
            .await
            .with_context(|| format!("reading {t} from the source"))?;
        for row in &rows {
            let mut q = db::query(&insert);
            for (i, (_, kind)) in cols.iter().enumerate() {
                q = match read(row, i, *kind) {
                    Cell::Null => match kind {
                        Kind::Integer => q.bind(None::<i64>),
                        Kind::Real => q.bind(None::<f64>),
                        Kind::Text => q.bind(None::<String>),
                        Kind::Blob => q.bind(None::<Vec<u8>>),
                    },
                    Cell::Int(v) => q.bind(v),
                    Cell::Real(v) => q.bind(v),
                    Cell::Text(v) => q.bind(v),
                    Cell::Blob(v) => q.bind(v),
                };
            }
            q.execute(&mut *tx)
                .await
                .with_context(|| format!("writing {t} to the target"))?;
        }
        report.tables.insert(t.clone(), rows.len() as i64);
    }
    if Engine::of(to) == Engine::Postgres {
        let identities: Vec<(String, String)> = db::query_as(
            "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT) FROM information_schema.columns WHERE table_schema = current_schema() AND is_identity = 'YES'",
        )
        .fetch_all(&mut *tx)
        .await?;
        for (t, c) in identities {
            db::query(&format!(
                "SELECT setval(pg_get_serial_sequence('{t}', '{c}'), (SELECT COALESCE(MAX({c}), 0) + 1 FROM {t}), false)"
            ))
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    for (t, n) in &report.tables {
        let there: i64 = db::query_scalar(&format!("SELECT COUNT(*) FROM {t}"))
            .fetch_one(to)
            .await?;
        if there != *n {
            bail!("table {t}: {n} rows read from the source, {there} in the target after the copy");
        }
    }
    Ok(report)
}

fn read(row: &db::Row, i: usize, kind: Kind) -> Cell {
    use sqlx::Row as _;
    if let Ok(None) = row.try_get::<Option<i64>, _>(i) {
        return Cell::Null;
    }
    let int = row.try_get::<Option<i64>, _>(i).ok().flatten();
    let real = row.try_get::<Option<f64>, _>(i).ok().flatten();
    let text = row.try_get::<Option<String>, _>(i).ok().flatten();
    let blob = row.try_get::<Option<Vec<u8>>, _>(i).ok().flatten();
    if int.is_none() && real.is_none() && text.is_none() && blob.is_none() {
        return Cell::Null;
    }
    match kind {
        Kind::Integer => int
            .or(real.map(|r| r as i64))
            .or(text.as_deref().and_then(|t| t.parse().ok()))
            .map_or(Cell::Null, Cell::Int),
        Kind::Real => real
            .or(int.map(|i| i as f64))
            .or(text.as_deref().and_then(|t| t.parse().ok()))
            .map_or(Cell::Null, Cell::Real),
        Kind::Text => text
            .or(int.map(|i| i.to_string()))
            .or(real.map(|r| r.to_string()))
            .map_or(Cell::Null, Cell::Text),
        Kind::Blob => blob
            .or(text.map(String::into_bytes))
            .map_or(Cell::Null, Cell::Blob),
    }
}

/// Every table of a store (its migrations' own bookkeeping aside) with its columns in order.
async fn columns(pool: &Pool) -> anyhow::Result<BTreeMap<String, Vec<(String, Kind)>>> {
    let rows: Vec<(String, String, String)> = match Engine::of(pool) {
        Engine::Sqlite => db::query_as(
            "SELECT m.name, p.name, UPPER(p.type) FROM sqlite_master m, pragma_table_info(m.name) p
             WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations' ORDER BY m.name, p.cid",
        ),
        Engine::Postgres => db::query_as(
            "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT), UPPER(CAST(data_type AS TEXT)) FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name <> '_sqlx_migrations'
               AND table_name IN (SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE')
             ORDER BY table_name, ordinal_position",
        ),
    }
    .fetch_all(pool)
    .await?;
    let mut out: BTreeMap<String, Vec<(String, Kind)>> = BTreeMap::new();
    for (table, column, ty) in rows {
        let kind = if ty.contains("INT") {
            Kind::Integer
        } else if ty.contains("REAL") || ty.contains("DOUBLE") || ty.contains("FLOAT") {
            Kind::Real
        } else if ty.contains("BLOB") || ty.contains("BYTEA") {
            Kind::Blob
        } else {
            Kind::Text
        };
        out.entry(table).or_default().push((column, kind));
    }
    Ok(out)
}

/// `tables` ordered so that every table comes after the tables its foreign keys reference.
async fn parents_first(pool: &Pool, tables: BTreeSet<String>) -> anyhow::Result<Vec<String>> {
    let edges: Vec<(String, String)> = match Engine::of(pool) {
        Engine::Sqlite => db::query_as(
            "SELECT m.name, f.\"table\" FROM sqlite_master m, pragma_foreign_key_list(m.name) f WHERE m.type = 'table'",
        ),
        Engine::Postgres => db::query_as(
            "SELECT CAST(tc.table_name AS TEXT), CAST(ccu.table_name AS TEXT) FROM information_schema.table_constraints tc
             JOIN information_schema.constraint_column_usage ccu ON ccu.constraint_name = tc.constraint_name AND ccu.table_schema = tc.table_schema
             WHERE tc.constraint_type = 'FOREIGN KEY' AND tc.table_schema = current_schema()",
        ),
    }
    .fetch_all(pool)
    .await?;
    let mut parents: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (child, parent) in edges {
        if child != parent && tables.contains(&parent) {
            parents.entry(child).or_default().insert(parent);
        }
    }
    let mut order = Vec::new();
    let mut placed = BTreeSet::new();
    while placed.len() < tables.len() {
        let ready: Vec<String> = tables
            .iter()
            .filter(|t| !placed.contains(*t))
            .filter(|t| parents.get(*t).is_none_or(|p| p.is_subset(&placed)))
            .cloned()
            .collect();
        if ready.is_empty() {
            bail!("the target's foreign keys form a cycle; cannot order the copy");
        }
        for t in ready {
            placed.insert(t.clone());
            order.push(t);
        }
    }
    Ok(order)
}
