//! What changed between two versions of a table's definition, in the terms a sink cares about:
//! columns added (nullable, with a default, or NOT NULL without one), dropped, renamed (which a
//! catalog shows as a drop and an add), retyped (widened, narrowed or changed), the primary key,
//! the table itself dropped. Pure: unit-tested case by case.

use serde::{Deserialize, Serialize};

/// One column as the catalog describes it. `data_type` is the engine's own spelling with
/// length, precision and scale (`character varying(50)`, `numeric(10,2)`, `int unsigned`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "TableColumn")]
pub struct Column {
    pub name: String,
    pub data_type: String,
    pub nullable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// A table's definition: its columns in their catalog order and its primary key in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TableDef {
    pub columns: Vec<Column>,
    #[serde(default)]
    pub primary_key: Vec<String>,
}

impl TableDef {
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    }
}

/// How a type moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TypeMove {
    /// Every value of the old type fits the new one (varchar(20)→varchar(50), int→bigint,
    /// numeric precision up).
    Widened,
    /// The same kind of type, with less room (varchar(50)→varchar(10), bigint→int).
    Narrowed,
    /// Another kind of type (int→text), or a move this module cannot rank.
    Changed,
}

impl TypeMove {
    fn word(self) -> &'static str {
        match self {
            TypeMove::Widened => "widened",
            TypeMove::Narrowed => "narrowed",
            TypeMove::Changed => "changed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    Added {
        column: Column,
    },
    Dropped {
        column: Column,
    },
    /// One column dropped and one of the same type added in the same change: the catalog
    /// cannot tell a rename from a drop and an add, so it is reported as both.
    Renamed {
        from: Column,
        to: Column,
    },
    Retyped {
        column: String,
        from: String,
        to: String,
        how: TypeMove,
    },
    Nullability {
        column: String,
        nullable: bool,
    },
    Default {
        column: String,
        from: Option<String>,
        to: Option<String>,
    },
    PrimaryKey {
        from: Vec<String>,
        to: Vec<String>,
    },
    TableDropped,
    TableCreated,
}

impl Change {
    /// The change in plain words, names in backticks.
    pub fn describe(&self) -> String {
        match self {
            Change::Added { column: c } => format!("column `{}` {} added{}", c.name, c.data_type, added_kind(c)),
            Change::Dropped { column: c } => format!("column `{}` dropped", c.name),
            Change::Renamed { from, to } => format!(
                "column `{}` renamed to `{}`? (seen as a drop of `{}` and an add of `{}` {}: the catalog cannot tell a rename from a drop and an add)",
                from.name, to.name, from.name, to.name, to.data_type
            ),
            Change::Retyped { column, from, to, how } => {
                format!("column `{column}` type {from} → {to} ({})", how.word())
            }
            Change::Nullability { column, nullable: true } => format!("column `{column}` now allows NULL"),
            Change::Nullability { column, nullable: false } => format!("column `{column}` is now NOT NULL"),
            Change::Default { column, from, to } => format!(
                "default of column `{column}` {} → {}",
                from.as_deref().unwrap_or("none"),
                to.as_deref().unwrap_or("none")
            ),
            Change::PrimaryKey { from, to } => format!(
                "primary key ({}) → ({})",
                from.join(", "),
                to.join(", ")
            ),
            Change::TableDropped => "table dropped".into(),
            Change::TableCreated => "table created (again)".into(),
        }
    }
}

fn added_kind(c: &Column) -> &'static str {
    match (c.nullable, c.default.is_some()) {
        (true, _) => " (nullable)",
        (false, true) => " (NOT NULL with a default)",
        (false, false) => " (NOT NULL without a default)",
    }
}

/// The changes from `old` to `new`; `None` is a table that does not exist.
pub fn classify(old: Option<&TableDef>, new: Option<&TableDef>) -> Vec<Change> {
    let (old, new) = match (old, new) {
        (None, None) => return vec![],
        (Some(_), None) => return vec![Change::TableDropped],
        (None, Some(_)) => return vec![Change::TableCreated],
        (Some(o), Some(n)) => (o, n),
    };
    let mut dropped: Vec<&Column> = old
        .columns
        .iter()
        .filter(|c| new.column(&c.name).is_none())
        .collect();
    let mut added: Vec<&Column> = new
        .columns
        .iter()
        .filter(|c| old.column(&c.name).is_none())
        .collect();
    let mut out = Vec::new();
    // A rename shows as exactly one drop and one add of the same type and nullability.
    if let ([d], [a]) = (dropped.as_slice(), added.as_slice()) {
        if base_of(&d.data_type) == base_of(&a.data_type) && d.nullable == a.nullable {
            out.push(Change::Renamed {
                from: (*d).clone(),
                to: (*a).clone(),
            });
            dropped.clear();
            added.clear();
        }
    }
    out.extend(
        dropped
            .into_iter()
            .map(|c| Change::Dropped { column: c.clone() }),
    );
    out.extend(
        added
            .into_iter()
            .map(|c| Change::Added { column: c.clone() }),
    );
    for o in &old.columns {
        let Some(n) = new.column(&o.name) else {
            continue;
        };
        if !same_type(&o.data_type, &n.data_type) {
            out.push(Change::Retyped {
                column: n.name.clone(),
                from: o.data_type.clone(),
                to: n.data_type.clone(),
                how: type_move(&o.data_type, &n.data_type),
            });
        }
        if o.nullable != n.nullable {
            out.push(Change::Nullability {
                column: n.name.clone(),
                nullable: n.nullable,
            });
        }
        if o.default != n.default {
            out.push(Change::Default {
                column: n.name.clone(),
                from: o.default.clone(),
                to: n.default.clone(),
            });
        }
    }
    let renamed_key = |k: &Vec<String>| -> Vec<String> {
        k.iter()
            .map(|c| {
                match out.iter().find_map(|ch| match ch {
                    Change::Renamed { from, to } if from.name == *c => Some(to.name.clone()),
                    _ => None,
                }) {
                    Some(to) => to,
                    None => c.clone(),
                }
            })
            .collect()
    };
    if renamed_key(&old.primary_key) != new.primary_key {
        out.push(Change::PrimaryKey {
            from: old.primary_key.clone(),
            to: new.primary_key.clone(),
        });
    }
    out
}

/// A type's family and its room, from the engine's spelling.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shape {
    /// Text with at most this many characters (None: unbounded).
    Text(Option<u64>),
    /// Integers of this many bytes, and whether unsigned.
    Int(u8, bool),
    /// Exact numerics: precision and scale (None: unbounded).
    Numeric(Option<(u64, u64)>),
    /// Floating point of this many bytes.
    Float(u8),
    Other(String),
}

/// The lowercase type name without its parameters (`character varying(50)` → `character varying`).
pub(crate) fn base_of(t: &str) -> String {
    let t = t.trim().to_ascii_lowercase();
    match t.find('(') {
        Some(i) => {
            let rest = t[t.find(')').map(|j| j + 1).unwrap_or(t.len())..].trim();
            format!(
                "{}{}{}",
                t[..i].trim(),
                if rest.is_empty() { "" } else { " " },
                rest
            )
        }
        None => t,
    }
}

fn params(t: &str) -> Vec<u64> {
    let Some(open) = t.find('(') else {
        return vec![];
    };
    let close = t[open..].find(')').map(|j| open + j).unwrap_or(t.len());
    t[open + 1..close]
        .split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

/// How PostgreSQL, MySQL and MariaDB spell their types, read into a family and its room.
pub(crate) fn shape(t: &str) -> Shape {
    let base = base_of(t);
    let p = params(&t.to_ascii_lowercase());
    let unsigned = base.contains("unsigned");
    let name = base.replace(" unsigned", "").replace(" zerofill", "");
    let int = |bytes: u8| Shape::Int(bytes, unsigned);
    match name.as_str() {
        "character varying" | "varchar" | "character" | "char" | "bpchar" | "nvarchar"
        | "nchar" => Shape::Text(p.first().copied()),
        "text" | "longtext" | "mediumtext" => Shape::Text(None),
        "tinytext" => Shape::Text(Some(255)),
        "tinyint" => int(1),
        "smallint" | "int2" => int(2),
        "mediumint" => int(3),
        "integer" | "int" | "int4" => int(4),
        "bigint" | "int8" => int(8),
        "numeric" | "decimal" => Shape::Numeric(match p.as_slice() {
            [] => None,
            [prec] => Some((*prec, 0)),
            [prec, scale, ..] => Some((*prec, *scale)),
        }),
        "real" | "float4" | "float" => Shape::Float(4),
        "double precision" | "float8" | "double" => Shape::Float(8),
        other => Shape::Other(format!("{other}{:?}", p)),
    }
}

fn same_type(a: &str, b: &str) -> bool {
    shape(a) == shape(b)
}

/// Whether every value of type `from` fits type `to`: Some(true) wider or equal, Some(false)
/// the same family with less room, None another family.
pub(crate) fn fits(from: &str, to: &str) -> Option<bool> {
    match (shape(from), shape(to)) {
        (Shape::Text(a), Shape::Text(b)) => Some(match (a, b) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a <= b,
        }),
        (Shape::Int(a, ua), Shape::Int(b, ub)) => match (ua, ub) {
            _ if ua == ub => Some(a <= b),
            // Unsigned into signed fits with one byte more; signed into unsigned loses the
            // negative values: another kind of type.
            (true, false) => Some(a < b),
            _ => None,
        },
        (Shape::Int(a, _), Shape::Numeric(n)) => Some(match n {
            None => true,
            // Digits an integer of `a` bytes needs: 3, 5, 8, 10, 20.
            Some((p, s)) => {
                p.saturating_sub(s)
                    >= [
                        0, 3, 5, 8, 10, 10, 15, 15, 19, 19, 19, 19, 19, 19, 19, 19, 20,
                    ][usize::from(a).min(16)]
            }
        }),
        (Shape::Numeric(a), Shape::Numeric(b)) => Some(match (a, b) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some((p1, s1)), Some((p2, s2))) => {
                s2 >= s1 && p2.saturating_sub(s2) >= p1.saturating_sub(s1)
            }
        }),
        (Shape::Float(a), Shape::Float(b)) => Some(a <= b),
        (Shape::Int(a, _), Shape::Float(8)) => Some(a <= 4),
        (Shape::Other(a), Shape::Other(b)) if a == b => Some(true),
        _ => None,
    }
}

fn type_move(from: &str, to: &str) -> TypeMove {
    match fits(from, to) {
        Some(true) => TypeMove::Widened,
        Some(false) => TypeMove::Narrowed,
        None => TypeMove::Changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, t: &str, nullable: bool, default: Option<&str>) -> Column {
        Column {
            name: name.into(),
            data_type: t.into(),
            nullable,
            default: default.map(String::from),
        }
    }

    fn items(extra: Vec<Column>) -> TableDef {
        let mut columns = vec![
            col("id", "integer", false, None),
            col("code", "character varying(50)", false, None),
            col("price", "numeric(10,2)", true, None),
        ];
        columns.extend(extra);
        TableDef {
            columns,
            primary_key: vec!["id".into()],
        }
    }

    fn with(mut t: TableDef, f: impl FnOnce(&mut TableDef)) -> TableDef {
        f(&mut t);
        t
    }

    #[test]
    fn an_unchanged_table_has_no_change() {
        assert!(classify(Some(&items(vec![])), Some(&items(vec![]))).is_empty());
    }

    #[test]
    fn added_columns_say_whether_nullable_defaulted_or_not_null_without_default() {
        let old = items(vec![]);
        let nullable = classify(
            Some(&old),
            Some(&items(vec![col("note", "text", true, None)])),
        );
        assert_eq!(
            nullable[0].describe(),
            "column `note` text added (nullable)"
        );
        let defaulted = classify(
            Some(&old),
            Some(&items(vec![col("n", "integer", false, Some("0"))])),
        );
        assert!(defaulted[0]
            .describe()
            .ends_with("(NOT NULL with a default)"));
        let strict = classify(
            Some(&old),
            Some(&items(vec![col("n", "integer", false, None)])),
        );
        assert!(strict[0]
            .describe()
            .ends_with("(NOT NULL without a default)"));
    }

    #[test]
    fn a_dropped_column_is_a_drop() {
        let new = with(items(vec![]), |t| t.columns.retain(|c| c.name != "price"));
        assert_eq!(
            classify(Some(&items(vec![])), Some(&new)),
            vec![Change::Dropped {
                column: col("price", "numeric(10,2)", true, None)
            }]
        );
    }

    #[test]
    fn a_drop_and_an_add_of_the_same_type_are_reported_as_a_possible_rename() {
        let new = with(items(vec![]), |t| t.columns[2].name = "cost".into());
        let c = classify(Some(&items(vec![])), Some(&new));
        assert!(
            matches!(&c[..], [Change::Renamed { from, to }] if from.name == "price" && to.name == "cost"),
            "{c:?}"
        );
        assert!(c[0]
            .describe()
            .contains("seen as a drop of `price` and an add of `cost`"));
        // Of another type, they stay a drop and an add.
        let other = with(items(vec![]), |t| {
            t.columns[2].name = "cost".into();
            t.columns[2].data_type = "text".into();
        });
        let c = classify(Some(&items(vec![])), Some(&other));
        assert!(
            matches!(&c[..], [Change::Dropped { .. }, Change::Added { .. }]),
            "{c:?}"
        );
    }

    #[test]
    fn types_widen_narrow_or_change() {
        let retype = |from: &str, to: &str| {
            let old = with(items(vec![]), |t| t.columns[1].data_type = from.into());
            let new = with(items(vec![]), |t| t.columns[1].data_type = to.into());
            match &classify(Some(&old), Some(&new))[..] {
                [Change::Retyped { how, .. }] => *how,
                other => panic!("{from} → {to}: {other:?}"),
            }
        };
        assert_eq!(
            retype("character varying(20)", "character varying(50)"),
            TypeMove::Widened
        );
        assert_eq!(retype("character varying(50)", "text"), TypeMove::Widened);
        assert_eq!(retype("integer", "bigint"), TypeMove::Widened);
        assert_eq!(retype("numeric(10,2)", "numeric(12,2)"), TypeMove::Widened);
        assert_eq!(retype("numeric(10,2)", "numeric(10,3)"), TypeMove::Narrowed);
        assert_eq!(
            retype("character varying(50)", "character varying(10)"),
            TypeMove::Narrowed
        );
        assert_eq!(retype("bigint", "integer"), TypeMove::Narrowed);
        assert_eq!(retype("int", "int unsigned"), TypeMove::Changed);
        assert_eq!(retype("int unsigned", "bigint"), TypeMove::Widened);
        assert_eq!(retype("integer", "text"), TypeMove::Changed);
        assert_eq!(retype("varchar(20)", "varchar(50)"), TypeMove::Widened);
        assert_eq!(retype("bigint", "int"), TypeMove::Narrowed);
        // MariaDB's display widths are not room.
        assert!(classify(
            Some(&with(items(vec![]), |t| t.columns[0].data_type = "int(11)".into())),
            Some(&with(items(vec![]), |t| t.columns[0].data_type = "int".into()))
        )
        .is_empty());
    }

    #[test]
    fn the_primary_key_table_drop_and_nullability_are_changes() {
        let new = with(items(vec![]), |t| {
            t.primary_key = vec!["id".into(), "code".into()]
        });
        assert_eq!(
            classify(Some(&items(vec![])), Some(&new))[0].describe(),
            "primary key (id) → (id, code)"
        );
        assert_eq!(
            classify(Some(&items(vec![])), None),
            vec![Change::TableDropped]
        );
        let strict = with(items(vec![]), |t| t.columns[2].nullable = false);
        assert_eq!(
            classify(Some(&items(vec![])), Some(&strict))[0].describe(),
            "column `price` is now NOT NULL"
        );
        // A renamed key column is not also a key change.
        let renamed = with(items(vec![]), |t| {
            t.columns[0].name = "item_id".into();
            t.primary_key = vec!["item_id".into()];
        });
        assert!(matches!(
            &classify(Some(&items(vec![])), Some(&renamed))[..],
            [Change::Renamed { .. }]
        ));
    }
}
