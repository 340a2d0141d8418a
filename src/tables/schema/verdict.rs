//! What a delivery's sink will do with a change of one of its tables, under its settings and
//! against the destination as it is: pure, unit-tested case by case.
//!
//! The Debezium JDBC sink (3.5.0.Final, `JdbcChangeEventSink`) is read from its source:
//! - at a record whose fields the destination table lacks, `alterTableIfNeeded` adds the
//!   missing columns when `schema.evolution=basic` and throws "Cannot alter table … because
//!   schema evolution is disabled" when `none`; a field that is not optional and has no default
//!   throws "Cannot ALTER table … because field … is not optional but has no default value" in
//!   both modes. Either failure fails the task.
//! - it never changes a column's type, nullability or default, and never drops a column
//!   (`// todo: should we check column type changes or default value changes?`): a destination
//!   column the records no longer carry is left out of the statements, so an insert gives it
//!   NULL (or its default; NOT NULL without a default fails the insert), and the upsert's
//!   `ON CONFLICT … DO UPDATE SET` names only the record's columns, so an updated row keeps
//!   the value it had.
//! - upserts and deletes go by the record key (`primary.key.mode=record_key`): a key change
//!   gives `ON CONFLICT (<new key>)`, which PostgreSQL refuses without a matching unique
//!   constraint, and MySQL/MariaDB's `ON DUPLICATE KEY` still matches the old key.
//!
//! The Aiven S3 sink writes each record's envelope as it is (JSON Lines with the schema), so
//! what changes is the shape consumers read, never a failure of the sink.

use serde::Serialize;

use super::classify::{fits, Change, Column, TableDef};

/// How a schema change affects a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "SchemaChangeSeverity")]
pub enum Severity {
    Info,
    Breaking,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Breaking => "breaking",
        }
    }
}

/// The sink of one delivery, as far as a schema change matters to it.
#[derive(Debug, Clone)]
pub enum Sink<'a> {
    Jdbc {
        /// `basic` or `none`.
        schema_evolution: &'a str,
        /// `insert`, `upsert` or `update`.
        insert_mode: &'a str,
        /// The destination table as sampled now; None when it does not exist (yet).
        destination: Option<&'a TableDef>,
        /// The destination table's name (for the words).
        table: &'a str,
    },
    ObjectStorage,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub severity: Severity,
    /// One sentence per change.
    pub says: Vec<String>,
}

/// The verdict on `changes` for one sink: the worst severity and what happens, per change.
pub fn judge(changes: &[Change], sink: &Sink) -> Verdict {
    let lines: Vec<(Severity, String)> = changes.iter().map(|c| one(c, sink)).collect();
    Verdict {
        severity: lines
            .iter()
            .map(|(s, _)| *s)
            .max()
            .unwrap_or(Severity::Info),
        says: lines.into_iter().map(|(_, s)| s).collect(),
    }
}

fn one(change: &Change, sink: &Sink) -> (Severity, String) {
    use Severity::*;
    match sink {
        Sink::ObjectStorage => match change {
            Change::Added { column } => (Info, format!("the JSON Lines shape changes: new field `{}` in before/after", column.name)),
            Change::Dropped { column } => (Breaking, format!("the JSON Lines shape changes: field `{}` is gone from before/after; consumers that read it get nothing", column.name)),
            Change::Renamed { from, to } => (Breaking, format!("the JSON Lines shape changes: field `{}` is gone and `{}` appears (seen as a drop and an add)", from.name, to.name)),
            Change::Retyped { column, to, .. } => (Breaking, format!("the JSON Lines shape may change: field `{column}` now carries {to}; consumers that parse it by its old type may fail")),
            Change::PrimaryKey { to, .. } => (Breaking, format!("the record key's shape changes to ({}): consumers that deduplicate or partition by key see new keys", to.join(", "))),
            Change::TableDropped => (Info, "no more records for this table; the objects written stay".into()),
            _ => (Info, "the JSON Lines shape does not change".into()),
        },
        Sink::Jdbc { schema_evolution, insert_mode, destination, table } => {
            jdbc(change, schema_evolution, insert_mode, *destination, table)
        }
    }
}

fn jdbc(
    change: &Change,
    evolution: &str,
    mode: &str,
    dest: Option<&TableDef>,
    table: &str,
) -> (Severity, String) {
    use Severity::*;
    let has = |name: &str| dest.and_then(|d| d.column(name));
    match change {
        Change::Added { column } => added(column, evolution, dest, table),
        Change::Dropped { column } => dropped(column, mode, dest, table),
        Change::Renamed { from, to } => {
            let (s1, w1) = added(to, evolution, dest, table);
            let (s2, w2) = dropped(from, mode, dest, table);
            // A rename is a drop and an add for the sink too: the values move to a new column.
            (Breaking.max(s1).max(s2), format!("seen as a drop and an add: {w1}; and {w2}"))
        }
        Change::Retyped { column, to, .. } => match has(column) {
            None if dest.is_none() => (Info, format!("the sink creates `{table}` from the records it gets, with `{column}` as they carry it")),
            None => (Info, format!("the destination has no column `{column}`")),
            Some(d) => match fits(to, &d.data_type) {
                Some(true) => (Info, format!("harmless: the destination column `{column}` stays {} (the sink never changes a column's type) and takes every value of {to}", d.data_type)),
                Some(false) => (Breaking, format!("will fail the task at the first value that does not fit: the destination column `{column}` stays {} (the sink never changes a column's type) and the source now allows {to}", d.data_type)),
                None => (Breaking, format!("will fail the task: the destination column `{column}` is {} and records now carry {to}, which the destination will not take (the sink never changes a column's type)", d.data_type)),
            },
        },
        Change::Nullability { column, nullable: true } => match has(column) {
            Some(d) if !d.nullable && d.default.is_none() => (Breaking, format!("will fail the task at the first NULL in `{column}`: the destination column is NOT NULL (the sink never changes nullability)")),
            _ => (Info, format!("harmless: the destination takes NULL in `{column}`")),
        },
        Change::Nullability { .. } | Change::Default { .. } => (Info, "harmless: records carry values, not the column's rules".into()),
        Change::PrimaryKey { to, .. } => {
            let dest_key = dest.map(|d| d.primary_key.clone()).unwrap_or_default();
            if dest.is_some() && dest_key.iter().map(|k| k.to_ascii_lowercase()).eq(to.iter().map(|k| k.to_ascii_lowercase())) {
                (Info, format!("the destination's key is ({}) already", to.join(", ")))
            } else if dest.is_some() {
                (Breaking, format!("will fail the task or write by the wrong key: the sink upserts and deletes by the record key, now ({}), and the destination's key is ({}); change the destination's key first", to.join(", "), dest_key.join(", ")))
            } else {
                (Info, format!("the sink creates `{table}` with the key ({})", to.join(", ")))
            }
        }
        Change::TableDropped => (Info, format!("no more records for this table; the destination table `{table}` keeps its rows")),
        Change::TableCreated => (Info, format!("records for this table arrive again; the sink writes them into `{table}`")),
    }
}

fn added(c: &Column, evolution: &str, dest: Option<&TableDef>, table: &str) -> (Severity, String) {
    use Severity::*;
    if dest.and_then(|d| d.column(&c.name)).is_some() {
        return (
            Info,
            format!(
                "the destination has a column `{}` already: the sink writes it",
                c.name
            ),
        );
    }
    if dest.is_none() {
        return (
            Info,
            format!("the sink creates `{table}` with column `{}`", c.name),
        );
    }
    if !c.nullable && c.default.is_none() {
        return (Breaking, format!("will fail the task: the sink cannot add the NOT NULL column `{}` without a default (\"field '{}' is not optional but has no default value\")", c.name, c.name));
    }
    if evolution == "basic" {
        (Info, format!("added: the sink will add column `{}` to `{table}` at the first record that carries it (schema.evolution=basic)", c.name))
    } else {
        (Breaking, format!("will fail the task: schema.evolution=none and `{table}` has no column `{}`; add it to the destination first", c.name))
    }
}

fn dropped(c: &Column, mode: &str, dest: Option<&TableDef>, table: &str) -> (Severity, String) {
    use Severity::*;
    let Some(d) = dest.and_then(|d| d.column(&c.name)) else {
        return (
            Info,
            format!(
                "nothing changes in the destination: it has no column `{}`",
                c.name
            ),
        );
    };
    if !d.nullable && d.default.is_none() && mode != "update" {
        return (Breaking, format!("will fail the task at the first new row: the destination column `{}` is NOT NULL without a default and records no longer carry it", c.name));
    }
    let filled = d
        .default
        .as_ref()
        .map(|v| format!("its default {v}"))
        .unwrap_or_else(|| "NULL".into());
    let updates = match mode {
        "insert" => "",
        _ => ", rows updated keep their last value",
    };
    (Breaking, format!("a dropped source column leaves `{}` in `{table}` and writes {filled} from now on (rows inserted get {filled}{updates})", c.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::schema::classify::classify;

    fn col(name: &str, t: &str, nullable: bool, default: Option<&str>) -> Column {
        Column {
            name: name.into(),
            data_type: t.into(),
            nullable,
            default: default.map(String::from),
        }
    }

    fn source() -> TableDef {
        TableDef {
            columns: vec![
                col("id", "integer", false, None),
                col("code", "character varying(50)", false, None),
                col("qty", "integer", false, None),
                col("price", "numeric(10,2)", true, None),
            ],
            primary_key: vec!["id".into()],
        }
    }

    /// As the JDBC sink creates it from the records: strings without a length.
    fn created() -> TableDef {
        TableDef {
            columns: vec![
                col("id", "integer", false, None),
                col("code", "character varying", false, None),
                col("qty", "integer", false, None),
                col("price", "numeric", true, None),
            ],
            primary_key: vec!["id".into()],
        }
    }

    fn jdbc<'a>(evolution: &'a str, dest: Option<&'a TableDef>) -> Sink<'a> {
        Sink::Jdbc {
            schema_evolution: evolution,
            insert_mode: "upsert",
            destination: dest,
            table: "items",
        }
    }

    fn after(f: impl FnOnce(&mut TableDef)) -> Vec<Change> {
        let mut new = source();
        f(&mut new);
        classify(Some(&source()), Some(&new))
    }

    #[test]
    fn an_added_nullable_column_is_added_by_basic_and_fails_none() {
        let changes = after(|t| t.columns.push(col("note", "text", true, None)));
        let dest = created();
        let v = judge(&changes, &jdbc("basic", Some(&dest)));
        assert_eq!(v.severity, Severity::Info);
        assert!(
            v.says[0].starts_with("added: the sink will add column `note`"),
            "{v:?}"
        );
        let v = judge(&changes, &jdbc("none", Some(&dest)));
        assert_eq!(v.severity, Severity::Breaking);
        assert!(v.says[0].contains("schema.evolution=none"), "{v:?}");
        // The destination has it already: fine either way.
        let mut ready = created();
        ready.columns.push(col("note", "text", true, None));
        assert_eq!(
            judge(&changes, &jdbc("none", Some(&ready))).severity,
            Severity::Info
        );
    }

    #[test]
    fn a_not_null_column_without_default_fails_the_sink_in_both_modes() {
        let changes = after(|t| t.columns.push(col("must", "integer", false, None)));
        for mode in ["basic", "none"] {
            let v = judge(&changes, &jdbc(mode, Some(&created())));
            assert_eq!(v.severity, Severity::Breaking);
            assert!(
                v.says[0].contains("not optional but has no default value"),
                "{v:?}"
            );
        }
        let defaulted = after(|t| t.columns.push(col("must", "integer", false, Some("0"))));
        assert_eq!(
            judge(&defaulted, &jdbc("basic", Some(&created()))).severity,
            Severity::Info
        );
    }

    #[test]
    fn a_dropped_column_leaves_the_destination_column_writing_null_or_fails_a_strict_one() {
        let changes = after(|t| t.columns.retain(|c| c.name != "price"));
        let v = judge(&changes, &jdbc("basic", Some(&created())));
        assert_eq!(v.severity, Severity::Breaking);
        assert_eq!(v.says[0], "a dropped source column leaves `price` in `items` and writes NULL from now on (rows inserted get NULL, rows updated keep their last value)");
        let mut strict = created();
        strict.columns[3].nullable = false;
        let v = judge(&changes, &jdbc("basic", Some(&strict)));
        assert!(
            v.says[0].starts_with("will fail the task at the first new row"),
            "{v:?}"
        );
        let mut defaulted = strict.clone();
        defaulted.columns[3].default = Some("0".into());
        assert!(judge(&changes, &jdbc("basic", Some(&defaulted))).says[0]
            .contains("writes its default 0"));
    }

    #[test]
    fn a_type_change_is_judged_against_the_destination_column_not_the_source_alone() {
        // Narrowed on the source: a sink-created varchar takes every value still.
        let narrowed = after(|t| t.columns[1].data_type = "character varying(10)".into());
        let v = judge(&narrowed, &jdbc("basic", Some(&created())));
        assert_eq!(v.severity, Severity::Info, "{v:?}");
        assert!(v.says[0].starts_with("harmless"));
        // Widened on the source past a destination column made to the old width.
        let widened = after(|t| t.columns[2].data_type = "bigint".into());
        let v = judge(&widened, &jdbc("basic", Some(&created())));
        assert_eq!(v.severity, Severity::Breaking);
        assert!(v.says[0].starts_with("will fail the task at the first value that does not fit: the destination column `qty` stays integer"), "{v:?}");
        // Narrowed into a destination that was narrower still (made by hand): fails.
        let mut tight = created();
        tight.columns[1].data_type = "character varying(5)".into();
        assert_eq!(
            judge(&narrowed, &jdbc("basic", Some(&tight))).severity,
            Severity::Breaking
        );
        // Another kind of type.
        let text = after(|t| t.columns[2].data_type = "text".into());
        assert!(judge(&text, &jdbc("basic", Some(&created()))).says[0]
            .starts_with("will fail the task: the destination column `qty` is integer"));
    }

    #[test]
    fn a_rename_is_a_drop_and_an_add_for_the_sink() {
        let changes = after(|t| t.columns[3].name = "cost".into());
        let v = judge(&changes, &jdbc("basic", Some(&created())));
        assert_eq!(v.severity, Severity::Breaking);
        assert!(
            v.says[0]
                .starts_with("seen as a drop and an add: added: the sink will add column `cost`"),
            "{v:?}"
        );
        assert!(v.says[0].contains("leaves `price`"));
    }

    #[test]
    fn a_key_change_breaks_unless_the_destination_has_that_key() {
        let changes = after(|t| t.primary_key = vec!["id".into(), "code".into()]);
        let v = judge(&changes, &jdbc("basic", Some(&created())));
        assert_eq!(v.severity, Severity::Breaking);
        assert!(
            v.says[0].contains("now (id, code), and the destination's key is (id)"),
            "{v:?}"
        );
        let mut keyed = created();
        keyed.primary_key = vec!["id".into(), "code".into()];
        assert_eq!(
            judge(&changes, &jdbc("basic", Some(&keyed))).severity,
            Severity::Info
        );
    }

    #[test]
    fn object_storage_sees_the_json_lines_shape_change() {
        let added = after(|t| t.columns.push(col("note", "text", true, None)));
        let v = judge(&added, &Sink::ObjectStorage);
        assert_eq!(
            (v.severity, v.says[0].as_str()),
            (
                Severity::Info,
                "the JSON Lines shape changes: new field `note` in before/after"
            )
        );
        let dropped = after(|t| t.columns.retain(|c| c.name != "price"));
        assert_eq!(
            judge(&dropped, &Sink::ObjectStorage).severity,
            Severity::Breaking
        );
        let gone = classify(Some(&source()), None);
        assert_eq!(judge(&gone, &Sink::ObjectStorage).severity, Severity::Info);
        assert_eq!(
            judge(&gone, &jdbc("basic", Some(&created()))).says[0],
            "no more records for this table; the destination table `items` keeps its rows"
        );
    }
}
