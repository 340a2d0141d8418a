//! Lists that stay usable at hundreds of rows: one filter, order, paging and count shape
//! shared by the list pages and the `/api/v1` lists, so a view in the browser and an API call
//! with the same query string show the same rows.
//!
//! Invariants: filtering, counting and paging happen in SQL (a page never loads every row);
//! the order is total (ties broken by name, then id), so paging is stable; counts by state
//! ignore the state filter, so they always show what the other states hold.

use crate::db;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{Error, FieldErrors, Result};

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

/// A list request as the URL carries it (`?q=&state=&cluster=&sort=&page=&limit=`). Numbers
/// arrive as text so that bad input is a field error, not a bare 400.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct ListQuery {
    /// Matched anywhere in the name, case-insensitively.
    #[serde(default)]
    pub q: String,
    /// One of the list's states (case-insensitive); empty for all.
    #[serde(default)]
    pub state: String,
    /// A cluster's id or name; empty for all.
    #[serde(default)]
    pub cluster: String,
    /// `state`: failed and drifted first, then by name; `name` (the default): by name.
    #[serde(default)]
    #[schemars(with = "Option<SortBy>")]
    pub sort: String,
    /// The page, from 1.
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 1, max = 1_000_000))]
    pub page: String,
    /// Rows per page (default 50).
    #[serde(default)]
    #[schemars(with = "Option<u32>", range(min = 1, max = 500))]
    pub limit: String,
}

/// A list's order (documents `ListQuery.sort`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum SortBy {
    Name,
    State,
}

/// A checked list request.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Matched anywhere in the name, case-insensitively.
    pub q: String,
    /// Upper case, one of the list's states; empty for all.
    pub state: String,
    /// A cluster's id or name; empty for all.
    pub cluster: String,
    /// Failed and drifted first, then by name; else by name.
    pub by_state: bool,
    /// 1-based.
    pub page: u32,
    pub limit: u32,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            q: String::new(),
            state: String::new(),
            cluster: String::new(),
            by_state: false,
            page: 1,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl ListQuery {
    /// Checks the request against the states this list knows; errors name the field.
    pub fn window(&self, states: &[&str]) -> Result<Window> {
        let mut fields = FieldErrors::new();
        // Left out or empty: the default. Blanks around a number are forgiven, but blanks alone
        // are not a number.
        let number = |fields: &mut FieldErrors, name: &str, v: &str, max: u32, why: &str| {
            if v.is_empty() {
                return None;
            }
            match v.trim().parse::<u32>() {
                Ok(n) if n >= 1 && n <= max => Some(n),
                _ => {
                    fields.insert(name.into(), why.into());
                    None
                }
            }
        };
        let page = number(
            &mut fields,
            "page",
            &self.page,
            1_000_000,
            "write a page number, 1 or more",
        );
        let limit = number(
            &mut fields,
            "limit",
            &self.limit,
            MAX_LIMIT,
            &format!("write how many rows per page, 1 to {MAX_LIMIT}"),
        );
        let state = self.state.trim().to_ascii_uppercase();
        if !state.is_empty() && !states.contains(&state.as_str()) {
            fields.insert(
                "state".into(),
                format!(
                    "choose one of {}, or leave it empty for all",
                    states
                        .iter()
                        .map(|s| s.to_ascii_lowercase())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        let by_state = match self.sort.trim() {
            "" | "name" => false,
            "state" => true,
            _ => {
                fields.insert("sort".into(), "choose name or state".into());
                false
            }
        };
        Error::check(fields)?;
        Ok(Window {
            q: self.q.trim().into(),
            state,
            cluster: self.cluster.trim().into(),
            by_state,
            page: page.unwrap_or(1),
            limit: limit.unwrap_or(DEFAULT_LIMIT),
        })
    }
}

impl Window {
    pub fn offset(&self) -> i64 {
        i64::from(self.page - 1) * i64::from(self.limit)
    }

    /// The `q` filter as a LIKE pattern (use with `ESCAPE '\'`): `%` and `_` match themselves.
    pub fn like(&self) -> String {
        let mut s = String::from("%");
        for c in self.q.chars() {
            if matches!(c, '%' | '_' | '\\') {
                s.push('\\');
            }
            s.push(c);
        }
        s.push('%');
        s
    }

    /// Whether `name` passes the `q` filter (for lists not held in SQL, such as topics).
    pub fn matches(&self, name: &str) -> bool {
        self.q.is_empty() || name.to_lowercase().contains(&self.q.to_lowercase())
    }

    /// The query string that shows this view at `page` (empty fields left out).
    pub fn query_string(&self, page: u32) -> String {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("q", &self.q),
            ("state", &self.state.to_ascii_lowercase()),
            ("cluster", &self.cluster),
        ] {
            if !v.is_empty() {
                s.append_pair(k, v);
            }
        }
        if self.by_state {
            s.append_pair("sort", "state");
        }
        if self.limit != DEFAULT_LIMIT {
            s.append_pair("limit", &self.limit.to_string());
        }
        if page > 1 {
            s.append_pair("page", &page.to_string());
        }
        s.finish()
    }
}

/// A connector's phases (and so a pipeline's and a delivery's), in [`STATE_ORDER`].
pub const CONNECTOR_STATES: &[&str] = &[
    "FAILED",
    "DRIFTED",
    "UNKNOWN",
    "UNASSIGNED",
    "PENDING",
    "RESTARTING",
    "PAUSED",
    "STOPPED",
    "RUNNING",
];

/// Order of every list's states when sorting by state, and of the counts: what needs a person
/// first, what is fine last.
pub const STATE_ORDER: &[&str] = &[
    "FAILED",
    "DRIFTED",
    "UNDER-REPLICATED",
    "FIRING",
    "UNKNOWN",
    "UNASSIGNED",
    "PENDING",
    "RESTARTING",
    "UNTESTED",
    "ACKNOWLEDGED",
    "PAUSED",
    "STOPPED",
    "RUNNING",
    "PASSED",
    "IN-SYNC",
    "RESOLVED",
];

/// The SQL rank of a state expression, for `ORDER BY` (unknown states last).
pub fn rank_sql(expr: &str) -> String {
    let whens: String = STATE_ORDER
        .iter()
        .enumerate()
        .map(|(i, s)| format!(" WHEN '{s}' THEN {i}"))
        .collect();
    format!("CASE {expr}{whens} ELSE {} END", STATE_ORDER.len())
}

/// What every list of the JSON API answers: one schema for all lists, `items` of the list's
/// row type (the document names it `<Row>List`).
#[derive(Serialize, schemars::JsonSchema)]
#[schemars(rename = "{T}List")]
pub struct ListPage<T> {
    pub items: Vec<T>,
    /// Rows matching the filters (all pages).
    pub total: u64,
    /// This page, from 1.
    pub page: u32,
    /// Rows per page.
    pub limit: u32,
    /// Pages in all (at least 1).
    pub pages: u32,
    /// Rows by lower-case state among those matching `q` and `cluster`; states without rows
    /// are left out.
    pub counts: std::collections::BTreeMap<String, u64>,
}

impl<T> ListPage<T> {
    /// A list answered whole (a short list with no paging): one page holding every row.
    pub fn all(items: Vec<T>) -> Self {
        let n = items.len() as u64;
        ListPage {
            items,
            total: n,
            page: 1,
            limit: n.max(1) as u32,
            pages: 1,
            counts: Default::default(),
        }
    }
}

/// One page of a list, with what is needed to show where it is.
#[derive(Debug, Clone, Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Rows matching the filters (all pages).
    pub total: u64,
    pub page: u32,
    pub limit: u32,
    /// Rows by state among those matching `q` and `cluster` (the state filter left out), in
    /// [`STATE_ORDER`].
    #[serde(skip)]
    pub counts: Vec<(String, u64)>,
}

impl<T> Page<T> {
    pub fn new(items: Vec<T>, total: u64, w: &Window, mut counts: Vec<(String, u64)>) -> Self {
        counts.retain(|(_, n)| *n > 0);
        counts.sort_by_key(|(s, _)| {
            STATE_ORDER
                .iter()
                .position(|o| o == s)
                .unwrap_or(STATE_ORDER.len())
        });
        Page {
            items,
            total,
            page: w.page,
            limit: w.limit,
            counts,
        }
    }

    pub fn pages(&self) -> u32 {
        (self.total.div_ceil(u64::from(self.limit)).max(1)) as u32
    }

    /// The paging fields of the JSON API, next to `items`.
    pub fn json(&self) -> Value
    where
        T: Serialize,
    {
        json!(ListPage {
            items: self.items.iter().collect::<Vec<&T>>(),
            total: self.total,
            page: self.page,
            limit: self.limit,
            pages: self.pages(),
            counts: self
                .counts
                .iter()
                .map(|(s, n)| (s.to_ascii_lowercase(), *n))
                .collect(),
        })
    }

    /// The same page with other items (the rows loaded for a page of ids).
    pub fn with_items<U>(self, items: Vec<U>) -> Page<U> {
        Page {
            items,
            total: self.total,
            page: self.page,
            limit: self.limit,
            counts: self.counts,
        }
    }
}

/// What `load` finds for a window of the list named `list` (its page, and whatever else the
/// page shows), reused for a moment (see [`crate::snapshots::Snapshots::recent`]): a list
/// that many people, or one auto-refreshing page, ask for costs one load a second at most, not
/// one per request. The window is part of the key.
pub async fn cached<T, F, Fut>(
    snapshots: &crate::snapshots::Snapshots,
    list: &str,
    w: &Window,
    load: F,
) -> Result<std::sync::Arc<T>>
where
    T: Send + Sync + 'static,
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let key = format!("{list}?{}", w.query_string(w.page));
    snapshots.recent(&key, load).await
}

/// Parts of a cached list view rendered once per viewer kind, kept beside the rows they show (in
/// the value [`cached`] keeps, so they go when it goes and never outlive the data): what varies
/// between viewers (the CSRF token in each row's forms, the role's controls, selection mode) is
/// the key. A list many people watch, or one page refreshing itself, then renders its rows once
/// per load and viewer instead of once per request: escaping and writing 50 rows (about 70 KB)
/// was a third of the connectors page's CPU at 64 clients.
#[derive(Default)]
pub struct Rendered(std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<str>>>);

impl Rendered {
    /// Distinct viewers kept per load; past it, the ones kept so far are dropped (a load lasts
    /// about a second).
    const MAX: usize = 64;

    pub fn get_or_render(
        &self,
        key: String,
        render: impl FnOnce() -> Result<String>,
    ) -> Result<std::sync::Arc<str>> {
        if let Some(html) = self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(html.clone());
        }
        let html: std::sync::Arc<str> = render()?.into();
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= Self::MAX {
            kept.clear();
        }
        kept.insert(key, html.clone());
        Ok(html)
    }
}

/// Like [`cached`] for a JSON API list: the serialized body is what is kept, so a repeated
/// request costs no serialization either.
pub async fn cached_json<F, Fut>(
    snapshots: &crate::snapshots::Snapshots,
    list: &str,
    w: &Window,
    load: F,
) -> Result<std::sync::Arc<String>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Value>>,
{
    cached(snapshots, &format!("{list}.json"), w, || async {
        Ok(load().await?.to_string())
    })
    .await
}

/// A list held in memory (topics from broker metadata), with the same filter, order and
/// paging as the SQL lists. It is ordered once, when it is read, so that a view costs its page
/// rather than a filter and sort of every row (with 1,700 topics that sort was most of the
/// topics page's time).
pub struct InMemory<T> {
    /// By name; each with its state and its name in lower case (for `q`).
    rows: Vec<(T, &'static str, String)>,
    /// Indices into `rows`: by state (failed and drifted first), then by name.
    by_state: Vec<usize>,
    /// Rows by state, all of them: the counts of a view without `q`.
    counts: Vec<(String, u64)>,
}

impl<T> InMemory<T> {
    /// `name_of` gives a row's name, `state_of` its state.
    pub fn new(
        rows: Vec<T>,
        name_of: impl Fn(&T) -> &str,
        state_of: impl Fn(&T) -> &'static str,
    ) -> Self {
        let mut rows: Vec<(T, &'static str, String)> = rows
            .into_iter()
            .map(|r| {
                let (state, lower) = (state_of(&r), name_of(&r).to_lowercase());
                (r, state, lower)
            })
            .collect();
        rows.sort_by(|a, b| name_of(&a.0).cmp(name_of(&b.0)));
        let rank = |s: &str| {
            STATE_ORDER
                .iter()
                .position(|o| *o == s)
                .unwrap_or(STATE_ORDER.len())
        };
        let mut by_state: Vec<usize> = (0..rows.len()).collect();
        by_state.sort_by_key(|i| rank(rows[*i].1));
        let counts = count_states(rows.iter().map(|r| r.1));
        InMemory {
            rows,
            by_state,
            counts,
        }
    }

    /// The window's page: rows matching `q` and the state filter, in the window's order.
    pub fn page(&self, w: &Window) -> Page<&T> {
        let order: Box<dyn Iterator<Item = usize> + '_> = if w.by_state {
            Box::new(self.by_state.iter().copied())
        } else {
            Box::new(0..self.rows.len())
        };
        let (skip, take) = (w.offset() as usize, w.limit as usize);
        if w.q.is_empty() && w.state.is_empty() {
            let items = order
                .skip(skip)
                .take(take)
                .map(|i| &self.rows[i].0)
                .collect();
            return Page::new(items, self.rows.len() as u64, w, self.counts.clone());
        }
        let q = w.q.to_lowercase();
        let matching: Vec<usize> = order.filter(|i| self.rows[*i].2.contains(&q)).collect();
        let counts = count_states(matching.iter().map(|i| self.rows[*i].1));
        let shown: Vec<usize> = matching
            .into_iter()
            .filter(|i| w.state.is_empty() || self.rows[*i].1 == w.state)
            .collect();
        let items = shown
            .iter()
            .skip(skip)
            .take(take)
            .map(|i| &self.rows[*i].0)
            .collect();
        Page::new(items, shown.len() as u64, w, counts)
    }
}

fn count_states<'a>(states: impl Iterator<Item = &'a str>) -> Vec<(String, u64)> {
    let mut counts: Vec<(String, u64)> = Vec::new();
    for s in states {
        match counts.iter_mut().find(|(c, _)| c == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s.to_string(), 1)),
        }
    }
    counts
}

/// How a list's rows are found in SQL: every field is an SQL fragment of this crate's own
/// (never user input; user input is only ever bound).
pub struct ListSql<'a> {
    /// A `WITH …` prefix, or "".
    pub with: &'a str,
    /// `FROM …` with its joins and an optional fixed `WHERE` (write it with `WHERE`).
    pub from: &'a str,
    pub id: &'a str,
    /// What `q` is matched against.
    pub name: &'a str,
    /// The order within a state (and without sorting by state), e.g. `name` or
    /// `last_seen DESC`; the id breaks ties.
    pub order: &'a str,
    /// The row's state, in [`STATE_ORDER`]'s words.
    pub state: &'a str,
    /// The row's cluster id and name, for the `cluster` filter; None when rows have none.
    pub cluster: Option<(&'a str, &'a str)>,
}

/// One page of row ids in the window's order, with the total and the counts by state: two
/// queries, whatever the table size. The caller loads the rows for those ids.
pub async fn page_ids(
    pool: &crate::db::Pool,
    sql: &ListSql<'_>,
    w: &Window,
) -> Result<Page<String>> {
    let mut conds: Vec<String> = Vec::new();
    let mut binds: Vec<String> = Vec::new();
    if !w.q.is_empty() {
        // LOWER on both sides: SQLite's LIKE ignores ASCII case, PostgreSQL's does not.
        binds.push(w.like());
        conds.push(format!(
            "LOWER({}) LIKE LOWER(${}) ESCAPE '\\'",
            sql.name,
            binds.len()
        ));
    }
    if let (Some((id, name)), false) = (sql.cluster, w.cluster.is_empty()) {
        binds.push(w.cluster.clone());
        conds.push(format!("({id} = ${n} OR {name} = ${n})", n = binds.len()));
    }
    let glue = if sql.from.contains(" WHERE ") {
        " AND "
    } else {
        " WHERE "
    };
    let filter = if conds.is_empty() {
        String::new()
    } else {
        format!("{glue}{}", conds.join(" AND "))
    };
    let counts_sql = format!(
        "{} SELECT {} AS st, COUNT(*) FROM {}{filter} GROUP BY st",
        sql.with, sql.state, sql.from
    );
    let mut query = db::query_as::<(String, i64)>(&counts_sql);
    for b in &binds {
        query = query.bind(b);
    }
    let counts: Vec<(String, u64)> = query
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|(s, n)| (s, n as u64))
        .collect();
    let total = counts
        .iter()
        .filter(|(s, _)| w.state.is_empty() || *s == w.state)
        .map(|(_, n)| n)
        .sum();
    let mut page_filter = filter;
    if !w.state.is_empty() {
        page_filter.push_str(if page_filter.is_empty() {
            glue
        } else {
            " AND "
        });
        binds.push(w.state.clone());
        page_filter.push_str(&format!("{} = ${}", sql.state, binds.len()));
    }
    let order = if w.by_state {
        format!("{}, {}, {}", rank_sql(sql.state), sql.order, sql.id)
    } else {
        format!("{}, {}", sql.order, sql.id)
    };
    let ids_sql = format!(
        "{} SELECT {} FROM {}{page_filter} ORDER BY {order} LIMIT {} OFFSET {}",
        sql.with,
        sql.id,
        sql.from,
        w.limit,
        w.offset()
    );
    let mut query = db::query_scalar::<String>(&ids_sql);
    for b in &binds {
        query = query.bind(b);
    }
    let ids = query.fetch_all(pool).await?;
    Ok(Page::new(ids, total, w, counts))
}

/// `id → name` of the rows of `table` (a table of this crate's, never user input) with these
/// ids: the names a page's rows point at, loaded for that page only.
pub async fn names(
    pool: &crate::db::Pool,
    table: &str,
    ids: impl IntoIterator<Item = &String>,
) -> Result<std::collections::HashMap<String, String>> {
    let ids: std::collections::BTreeSet<&String> = ids.into_iter().collect();
    let ids: Vec<String> = ids.into_iter().cloned().collect();
    let rows: Vec<(String, String)> =
        rows_by_id(pool, &format!("SELECT id, name FROM {table}"), "id", &ids).await?;
    Ok(rows.into_iter().collect())
}

/// The rows `select` (a query of this crate's, ending before its WHERE) finds whose `id_column`
/// is one of `ids`, in any order: the rows of one page, loaded after `page_ids`. The ids are
/// bound in the column's own type (text ids as `String`, integer ids as `i64`): PostgreSQL
/// refuses to compare an integer column with text, and a cast on the column would cost the
/// index on either engine.
pub async fn rows_by_id<R, K>(
    pool: &crate::db::Pool,
    select: &str,
    id_column: &str,
    ids: &[K],
) -> Result<Vec<R>>
where
    R: for<'r> sqlx::FromRow<'r, crate::db::Row> + Send + Unpin,
    K: for<'q> sqlx::Encode<'q, crate::db::Db> + sqlx::Type<crate::db::Db> + Sync,
{
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let sql = format!(
        "{select} WHERE {id_column} IN ({})",
        db::placeholders(1, ids.len())
    );
    let mut q = db::query_as::<R>(&sql);
    for id in ids {
        q = q.bind(id);
    }
    Ok(q.fetch_all(pool).await?)
}

/// Puts rows loaded by id back in the page's order (rows since deleted are left out).
pub fn in_order<T, K: AsRef<str>>(
    ids: &[String],
    mut rows: Vec<T>,
    id_of: impl Fn(&T) -> K,
) -> Vec<T> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(i) = rows.iter().position(|r| id_of(r).as_ref() == id) {
            out.push(rows.swap_remove(i));
        }
    }
    out
}

/// What a list page shows above and below its table: the filter form, the counts and the
/// pager. Built from the page and the window; the templates are in `templates/listing/`.
#[derive(Debug, Clone)]
pub struct Nav {
    /// The list page's path, e.g. `/connectors`.
    pub path: &'static str,
    pub window: Window,
    /// States offered in the filter, in display order.
    pub states: Vec<&'static str>,
    /// Clusters offered in the filter: (id, name); empty hides the filter.
    pub clusters: Vec<(String, String)>,
    /// Offers the choice of order (name, or failed first); lists with one fixed order do not.
    pub sortable: bool,
    pub counts: Vec<(String, u64)>,
    pub total: u64,
    pub page: u32,
    pub pages: u32,
    /// Rows on this page.
    pub shown: usize,
    /// The rows' noun, singular and plural: ("delivery", "deliveries").
    pub noun: &'static str,
    pub nouns: &'static str,
}

impl Nav {
    pub fn new<T>(
        path: &'static str,
        (noun, nouns): (&'static str, &'static str),
        w: &Window,
        states: &[&'static str],
        clusters: Vec<(String, String)>,
        p: &Page<T>,
    ) -> Nav {
        Nav {
            path,
            window: w.clone(),
            states: states.to_vec(),
            clusters,
            sortable: true,
            counts: p.counts.clone(),
            total: p.total,
            page: p.page,
            pages: p.pages(),
            shown: p.items.len(),
            noun,
            nouns,
        }
    }

    pub fn href(&self, page: u32) -> String {
        let q = self.window.query_string(page);
        if q.is_empty() {
            self.path.to_string()
        } else {
            format!("{}?{q}", self.path)
        }
    }

    /// The same view, filtered to one state (page 1).
    pub fn state_href(&self, state: &str) -> String {
        let mut w = self.window.clone();
        w.state = state.to_string();
        let q = w.query_string(1);
        format!("{}?{q}", self.path)
    }

    pub fn first_row(&self) -> u64 {
        if self.shown == 0 {
            0
        } else {
            u64::from(self.page - 1) * u64::from(self.window.limit) + 1
        }
    }

    pub fn last_row(&self) -> u64 {
        u64::from(self.page - 1) * u64::from(self.window.limit) + self.shown as u64
    }

    /// Any filter of the form set (then an empty list says so, not "nothing yet"). A cluster
    /// chosen outside the form (topics) is where the list is, not a filter.
    pub fn filtered(&self) -> bool {
        !self.window.q.is_empty()
            || !self.window.state.is_empty()
            || (!self.clusters.is_empty() && !self.window.cluster.is_empty())
    }

    /// The same list without the form's filters.
    pub fn clear_href(&self) -> String {
        let w = Window {
            cluster: if self.clusters.is_empty() {
                self.window.cluster.clone()
            } else {
                String::new()
            },
            by_state: self.window.by_state,
            limit: self.window.limit,
            ..Window::default()
        };
        let q = w.query_string(1);
        if q.is_empty() {
            self.path.to_string()
        } else {
            format!("{}?{q}", self.path)
        }
    }

    /// "1 connector", "41 connectors".
    pub fn total_text(&self) -> String {
        if self.total == 1 {
            format!("1 {}", self.noun)
        } else {
            format!("{} {}", self.total, self.nouns)
        }
    }

    /// The poll URL of the rows partial: this view with its query string.
    pub fn self_href(&self) -> String {
        self.href(self.page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATES: &[&str] = &["RUNNING", "PAUSED", "FAILED"];

    #[test]
    fn rendered_rows_are_rendered_once_per_viewer_and_a_failed_render_keeps_nothing() {
        let rendered = Rendered::default();
        let renders = std::cell::Cell::new(0);
        let render = |html: &str| {
            renders.set(renders.get() + 1);
            Ok(html.to_string())
        };
        let a = rendered
            .get_or_render("csrf-a".into(), || render("a"))
            .unwrap();
        let again = rendered
            .get_or_render("csrf-a".into(), || render("x"))
            .unwrap();
        let b = rendered
            .get_or_render("csrf-b".into(), || render("b"))
            .unwrap();
        assert_eq!((&*a, &*again, &*b, renders.get()), ("a", "a", "b", 2));
        let failed = rendered.get_or_render("csrf-c".into(), || {
            Err(Error::Unexpected(anyhow::anyhow!("template failed")))
        });
        assert!(failed.is_err());
        let c = rendered
            .get_or_render("csrf-c".into(), || render("c"))
            .unwrap();
        assert_eq!((&*c, renders.get()), ("c", 3));
        // Past MAX viewers the kept ones go, and are rendered again when asked for.
        for i in 0..Rendered::MAX {
            rendered
                .get_or_render(format!("v{i}"), || render("v"))
                .unwrap();
        }
        let before = renders.get();
        rendered
            .get_or_render("csrf-a".into(), || render("a"))
            .unwrap();
        assert_eq!(renders.get(), before + 1);
    }

    fn q(pairs: &[(&str, &str)]) -> ListQuery {
        let mut l = ListQuery::default();
        for (k, v) in pairs {
            let v = v.to_string();
            match *k {
                "q" => l.q = v,
                "state" => l.state = v,
                "cluster" => l.cluster = v,
                "sort" => l.sort = v,
                "page" => l.page = v,
                "limit" => l.limit = v,
                _ => unreachable!(),
            }
        }
        l
    }

    #[test]
    fn defaults_are_page_one_of_fifty_by_name() {
        let w = q(&[]).window(STATES).unwrap();
        assert_eq!(w, Window::default());
        assert_eq!(w.offset(), 0);
        assert_eq!(w.query_string(1), "");
    }

    #[test]
    fn bad_paging_and_filters_name_their_field() {
        for (pairs, field) in [
            (vec![("page", "0")], "page"),
            (vec![("page", "two")], "page"),
            (vec![("page", "\x0c")], "page"),
            (vec![("limit", " ")], "limit"),
            (vec![("limit", "501")], "limit"),
            (vec![("limit", "-1")], "limit"),
            (vec![("state", "sleeping")], "state"),
            (vec![("sort", "size")], "sort"),
        ] {
            let Err(Error::Invalid { fields: f, .. }) = q(&pairs).window(STATES) else {
                panic!("{pairs:?} was accepted");
            };
            assert!(f.contains_key(field), "{pairs:?}: {f:?}");
        }
    }

    #[test]
    fn state_is_case_insensitive_and_the_query_string_round_trips() {
        let w = q(&[
            ("q", " orders "),
            ("state", "failed"),
            ("sort", "state"),
            ("page", "3"),
            ("limit", "20"),
        ])
        .window(STATES)
        .unwrap();
        assert_eq!(w.q, "orders");
        assert_eq!(w.state, "FAILED");
        assert_eq!(w.offset(), 40);
        let s = w.query_string(3);
        assert_eq!(s, "q=orders&state=failed&sort=state&limit=20&page=3");
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(s.as_bytes())
            .into_owned()
            .collect();
        let pairs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(q(&pairs).window(STATES).unwrap(), w);
    }

    #[test]
    fn like_patterns_escape_wildcards() {
        let w = Window {
            q: "a_b%c\\".into(),
            ..Window::default()
        };
        assert_eq!(w.like(), "%a\\_b\\%c\\\\%");
    }

    #[test]
    fn in_memory_pages_filter_count_and_sort_failed_first() {
        // Given in no particular order: the list orders them once.
        let rows: Vec<(String, &str)> = (0..120)
            .rev()
            .map(|i| {
                (
                    format!("t{i:03}"),
                    if i % 40 == 7 { "FAILED" } else { "RUNNING" },
                )
            })
            .collect();
        let w = q(&[("sort", "state")]).window(STATES).unwrap();
        let list = InMemory::new(rows, |r| &r.0, |r| r.1);
        let p = list.page(&w);
        assert_eq!(p.total, 120);
        assert_eq!(p.pages(), 3);
        assert_eq!(
            p.counts,
            vec![("FAILED".into(), 3), ("RUNNING".into(), 117)]
        );
        let names: Vec<&str> = p.items.iter().take(4).map(|r| r.0.as_str()).collect();
        assert_eq!(names, ["t007", "t047", "t087", "t000"]);
        let w = q(&[("q", "T11"), ("page", "1")]).window(STATES).unwrap();
        let p = list.page(&w);
        assert_eq!(p.total, 10);
        let w = q(&[("state", "failed"), ("page", "2"), ("limit", "2")])
            .window(STATES)
            .unwrap();
        let p = list.page(&w);
        assert_eq!(
            (p.total, p.items.len(), p.items[0].0.as_str()),
            (3, 1, "t087")
        );
        // Counts ignore the state filter: the other states stay visible.
        assert_eq!(p.counts.len(), 2);
        // By name, unfiltered: a slice of the name order.
        let p = list.page(&q(&[("page", "2")]).window(STATES).unwrap());
        assert_eq!((p.total, p.items[0].0.as_str()), (120, "t050"));
        // q and state together; counts among the rows q matches.
        let w = q(&[("q", "t0"), ("state", "failed")])
            .window(STATES)
            .unwrap();
        let p = list.page(&w);
        let names: Vec<&str> = p.items.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(names, ["t007", "t047", "t087"]);
        assert_eq!(p.counts, vec![("FAILED".into(), 3), ("RUNNING".into(), 97)]);
    }
}
