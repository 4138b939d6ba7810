//! What the application's records name of keys no row knows, before anything is adopted: the figures an operator
//! approves an adoption on (no approval is blind). Three ways a record names a key, strongest first:
//!
//! - **by key source**: a declared key source's rows make the key (every row asked, through the index the schema
//!   check demands of it);
//! - **by key**: a text or JSON value holds the key itself (a path, a URL), as the census's key scan reads keys;
//! - **relative to a root**: a value is the key with leading path segments removed (`original_images/cat.png` for
//!   `media/original_images/cat.png`), the census's generous hold for a name no key source declares.
//!
//! The last two are read from a sample (the first rows of each text and JSON column), so they are floors, not
//! counts; a column whose sampled values name keys relative to one root is an undeclared key source, and the
//! declaration that fixes it is written out ([`Suggestion`]). A prefix whose unknown keys are mostly named neither
//! by a key source nor by key, while such a column exists, is refused for approval ([`Naming::refusal`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use platform::keys::KeyLayout;
use platform::sql::{quote_ident, quote_literal};
use serde::{Deserialize, Serialize};
use sqlx::{AssertSqlSafe, PgConnection};

use crate::map::{Candidate, SourceKind};

/// How many rows of each text and JSON column the probe reads.
pub const SAMPLE_ROWS: i64 = 1_000;

/// Examples kept per prefix and way of naming.
const EXAMPLES: usize = 3;

/// What records name of one prefix's unknown keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixNaming {
    /// The managed prefix.
    pub prefix: String,
    /// Its keys no row knows.
    pub unknown: i64,
    /// Of them, named by a declared key source.
    pub by_key_source: i64,
    /// Named by key in a sampled value (and by no key source).
    pub by_key: i64,
    /// Named only relative to a root in a sampled value.
    pub relative: i64,
    /// Named by nothing the probe read.
    pub unnamed: i64,
    /// A few keys of each way, with what names them.
    pub examples: Vec<Example>,
    /// The first few keys nothing named.
    pub unnamed_sample: Vec<String>,
}

impl PrefixNaming {
    /// Most of its unknown keys are named neither by a key source nor by key: an approval of it would rest on
    /// relative names or on nothing.
    pub fn mostly_unnamed(&self) -> bool {
        self.unknown > 0 && (self.by_key_source + self.by_key) * 2 < self.unknown
    }
}

/// One named key, and what names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Example {
    /// The key.
    pub key: String,
    /// `key_source`, `key` or `relative`.
    pub how: String,
    /// The key source (`schema.table template`) or the column (`schema.table.column`).
    pub by: String,
    /// The name as the record writes it (a key source's: the key).
    pub name: String,
}

/// How many unknown keys a declared key source names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceMatches {
    /// `schema.table template`.
    pub source: String,
    /// Unknown keys its rows name.
    pub keys: i64,
}

/// A column that names unknown keys relative to one root: the key source that would declare it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suggestion {
    /// The managed prefix of the keys it names.
    pub prefix: String,
    /// `schema.table.column`.
    pub column: String,
    /// Unknown keys its sampled values name, relative to `root`.
    pub keys: i64,
    /// What its values leave off the keys they name.
    pub root: String,
    /// One of them: (the key, the value naming it).
    pub example: (String, String),
    /// The statement that declares it.
    pub declaration: String,
}

/// What the probe found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Naming {
    /// Rows read of each sampled column.
    pub sample_rows: i64,
    /// Text and JSON columns sampled.
    pub columns_sampled: usize,
    /// Per prefix holding unknown keys.
    pub prefixes: Vec<PrefixNaming>,
    /// Per declared key source.
    pub key_sources: Vec<SourceMatches>,
    /// Undeclared key sources the sample shows.
    pub suggestions: Vec<Suggestion>,
}

impl Naming {
    /// What the figures of `prefix` are, if it holds unknown keys.
    pub fn prefix(&self, prefix: &str) -> Option<&PrefixNaming> {
        self.prefixes.iter().find(|p| p.prefix == prefix)
    }

    /// Why approving an adoption of `prefix` would be blind, with the declaration that fixes it: most of its unknown
    /// keys are named by no key source and no key, while a column names them relative to a root.
    pub fn refusal(&self, prefix: &str) -> Option<String> {
        let figures = self.prefix(prefix)?;
        let suggestion = self.suggestions.iter().filter(|s| s.prefix == prefix).max_by_key(|s| s.keys)?;
        if !figures.mostly_unnamed() {
            return None;
        }
        Some(format!(
            "{} of the {} keys no row knows under {prefix:?} are named by no key source and no record naming the key, \
             but {} holds values that end like {} of them ({:?} for {}): the application names its files relative \
             to {:?}. Declare the key source, then reconcile again: {}",
            figures.unknown - figures.by_key_source - figures.by_key,
            figures.unknown,
            suggestion.column,
            suggestion.keys,
            suggestion.example.1,
            suggestion.example.0,
            suggestion.root,
            suggestion.declaration,
        ))
    }
}

impl Naming {
    /// The figures for a person, a line each: per prefix, how many of its unknown keys what names, with examples;
    /// the undeclared key sources the sample shows, with their declarations; each declared key source's matches.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "what records name of them (key sources: every row; keys and names relative to a root: the first {} rows \
             of each of {} text and JSON columns, so at least these):",
            self.sample_rows, self.columns_sampled
        )];
        for p in &self.prefixes {
            lines.push(format!(
                "  {}: {} key(s): {} named by a key source, {} by key, {} only relative to a root, {} by nothing read",
                shown(&p.prefix),
                p.unknown,
                p.by_key_source,
                p.by_key,
                p.relative,
                p.unnamed
            ));
            for e in &p.examples {
                lines.push(format!("    {:<10} {}  <- {} {:?}", e.how, e.key, e.by, e.name));
            }
            for key in &p.unnamed_sample {
                lines.push(format!("    {:<10} {key}", "unnamed"));
            }
        }
        for s in &self.suggestions {
            lines.push(format!(
                "  UNDECLARED KEY SOURCE {} names {} key(s) of {} relative to {:?} ({:?} for {}): {}",
                s.column,
                s.keys,
                shown(&s.prefix),
                s.root,
                s.example.1,
                s.example.0,
                s.declaration
            ));
        }
        for k in &self.key_sources {
            let none = if k.keys == 0 { " (matches none of them)" } else { "" };
            lines.push(format!("  key source {}: names {} of them{none}", k.source, k.keys));
        }
        lines
    }
}

/// A prefix as a person reads it.
fn shown(prefix: &str) -> String {
    if prefix.is_empty() { "the bucket".to_owned() } else { format!("prefix {prefix:?}") }
}

/// Reads what records name of the keys `keys` selects: an SQL query (built by the caller, no parameters) yielding
/// `(storage_key text, prefix text)` for each key no row knows. Reads only.
pub async fn probe(conn: &mut PgConnection, layout: &KeyLayout, keys: &str) -> Result<Naming, sqlx::Error> {
    let derived = crate::derive::derive(&mut *conn).await?;
    let mut naming = Naming { sample_rows: SAMPLE_ROWS, ..Naming::default() };
    let totals: Vec<(String, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT prefix, count(*) FROM ({keys}) k GROUP BY prefix ORDER BY prefix"
    )))
    .fetch_all(&mut *conn)
    .await?;
    if totals.is_empty() {
        return Ok(naming);
    }
    // Strongest first: a key counts once, in the first way that names it.
    let mut named: HashMap<String, (String, Example)> = HashMap::new();
    for source in &derived.sources {
        let SourceKind::Key(template) = &source.kind else { continue };
        let by = format!("{}.{} {}", source.schema, source.table, template);
        // Built here: the table and template are the declaration's, which the owner's trigger checked.
        let sql = format!(
            "SELECT k.storage_key, k.prefix FROM ({keys}) k
              WHERE EXISTS (SELECT 1 FROM {} WHERE {})",
            source.quoted_table(),
            template.condition("", "k.storage_key")
        );
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        crate::typed::hold(&mut tx, &crate::typed::Planned::source(source)).await?;
        let found: Vec<(String, String)> = sqlx::query_as(AssertSqlSafe(sql)).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        naming.key_sources.push(SourceMatches { source: by.clone(), keys: found.len() as i64 });
        for (key, prefix) in found {
            let example = Example { key: key.clone(), how: "key_source".into(), by: by.clone(), name: key.clone() };
            named.entry(key).or_insert((prefix, example));
        }
    }
    let declared: HashSet<(&str, &str)> = derived
        .sources
        .iter()
        .filter(|s| matches!(s.kind, SourceKind::Key(_)))
        .map(|s| (s.schema.as_str(), s.table.as_str()))
        .collect();

    let sampled: Vec<&Candidate> = derived
        .candidates
        .iter()
        .filter(|c| matches!(c.family.as_str(), "text" | "json") && c.reads != "ids")
        .collect();
    naming.columns_sampled = sampled.len();
    let (names, columns, relative) = sample(conn, layout, &sampled).await?;
    let matched: Vec<(String, String, i32, bool, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT DISTINCT k.storage_key, k.prefix, n.col, n.relative, n.name
           FROM ({keys}) k
           JOIN unnest($1::text[], $2::int4[], $3::bool[]) AS n(name, col, relative)
             ON substring(n.name FROM '[^/]*$') = substring(k.storage_key FROM '[^/]*$')
          WHERE k.storage_key = n.name OR asset_sweeper_ends_key(k.storage_key, n.name)
          ORDER BY k.storage_key, n.relative, n.col"
    )))
    .bind(&names)
    .bind(&columns)
    .bind(&relative)
    .fetch_all(&mut *conn)
    .await?;
    // Per (prefix, column, root): the keys a column names relative to one root.
    let mut roots: BTreeMap<(String, usize, String), RootedNames> = BTreeMap::new();
    for (key, prefix, col, relative, name) in matched {
        let Some((col, column)) = usize::try_from(col).ok().and_then(|c| sampled.get(c).map(|column| (c, column)))
        else {
            continue;
        };
        let by = format!("{}.{}.{}", column.schema, column.table, column.column);
        let how = if relative && key != name { "relative" } else { "key" };
        if how == "relative" {
            let root = key[..key.len() - name.len()].to_owned();
            let entry = roots
                .entry((prefix.clone(), col, root))
                .or_insert_with(|| (HashSet::new(), (key.clone(), name.clone())));
            entry.0.insert(key.clone());
        }
        let example = Example { key: key.clone(), how: how.into(), by, name };
        if named.get(&key).is_none_or(|(_, e)| rank(&example.how) < rank(&e.how)) {
            named.insert(key, (prefix, example));
        }
    }
    for ((prefix, col, root), (keys, example)) in roots {
        let column = sampled[col];
        if declared.contains(&(column.schema.as_str(), column.table.as_str())) || root.is_empty() {
            continue;
        }
        let template = format!("{root}{{{}}}", column.column);
        naming.suggestions.push(Suggestion {
            prefix,
            column: format!("{}.{}.{}", column.schema, column.table, column.column),
            keys: keys.len() as i64,
            root,
            example,
            declaration: format!(
                "INSERT INTO asset_sweeper.asset_key_sources (table_schema, table_name, template) VALUES ({}, {}, {});",
                quote_literal(&column.schema),
                quote_literal(&column.table),
                quote_literal(&template)
            ),
        });
    }

    let named_keys: Vec<String> = named.keys().cloned().collect();
    let unnamed: Vec<(String, Vec<String>)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT k.prefix, (array_agg(k.storage_key ORDER BY k.storage_key))[1:5]
           FROM ({keys}) k
          WHERE NOT EXISTS (SELECT 1 FROM unnest($1::text[]) m(key) WHERE m.key = k.storage_key)
          GROUP BY k.prefix"
    )))
    .bind(&named_keys)
    .fetch_all(&mut *conn)
    .await?;
    for (prefix, unknown) in totals {
        let mut figures = PrefixNaming { prefix: prefix.clone(), unknown, ..PrefixNaming::default() };
        let mut examples: Vec<&Example> = named.values().filter(|(p, _)| *p == prefix).map(|(_, e)| e).collect();
        examples.sort_by(|a, b| (&a.how, &a.key).cmp(&(&b.how, &b.key)));
        for example in &examples {
            match example.how.as_str() {
                "key_source" => figures.by_key_source += 1,
                "key" => figures.by_key += 1,
                _ => figures.relative += 1,
            }
        }
        for how in ["key_source", "key", "relative"] {
            figures.examples.extend(examples.iter().filter(|e| e.how == how).take(EXAMPLES).map(|e| (*e).clone()));
        }
        figures.unnamed = unknown - figures.by_key_source - figures.by_key - figures.relative;
        figures.unnamed_sample = unnamed.iter().find(|(p, _)| *p == prefix).map(|(_, s)| s.clone()).unwrap_or_default();
        naming.prefixes.push(figures);
    }
    Ok(naming)
}

/// How many stored objects (the keys rows already know) the key source `source` names: what `references` shows
/// beside the newest reconciliation's figures, so a declaration whose files were adopted and kept is not taken for
/// one that matches nothing. `None` for a source that is no key source.
pub async fn known_keys_named(
    conn: &mut PgConnection,
    source: &crate::map::ReferenceSource,
) -> Result<Option<i64>, sqlx::Error> {
    let SourceKind::Key(template) = &source.kind else { return Ok(None) };
    // Built here: the table and template are the declaration's, which the owner's trigger checked.
    let sql = format!(
        "SELECT count(*) FROM stored_objects o WHERE EXISTS (SELECT 1 FROM {} WHERE {})",
        source.quoted_table(),
        template.condition("", "o.storage_key")
    );
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    crate::typed::hold(&mut tx, &crate::typed::Planned::source(source)).await?;
    let known = sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&mut *tx).await?;
    tx.commit().await?;
    Ok(Some(known))
}

/// The keys one column names relative to one root, and one of them with the value naming it.
type RootedNames = (HashSet<String>, (String, String));

/// Which way of naming is stronger: a key source's, then a key's, then a name relative to a root.
fn rank(how: &str) -> u8 {
    match how {
        "key_source" => 0,
        "key" => 1,
        _ => 2,
    }
}

/// The names the first [`SAMPLE_ROWS`] rows of each of `columns` give: each key of ours a value names (by key),
/// and each name it could give relative to a root; as three arrays (name, column's position, relative).
async fn sample(
    conn: &mut PgConnection,
    layout: &KeyLayout,
    columns: &[&Candidate],
) -> Result<(Vec<String>, Vec<i32>, Vec<bool>), sqlx::Error> {
    let mut seen: HashSet<(String, i32, bool)> = HashSet::new();
    for (position, column) in columns.iter().enumerate() {
        let col = quote_ident(&column.column);
        let value = if column.shape == "array" {
            format!("unnest({col})::text")
        } else {
            crate::census::text_of(&col, &column.family)
        };
        // Built here: the table and column are the application's, known only now.
        let sql = format!(
            "SELECT {value} FROM (SELECT {col} FROM {}.{} LIMIT {SAMPLE_ROWS}) s WHERE {col} IS NOT NULL",
            quote_ident(&column.schema),
            quote_ident(&column.table)
        );
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let mut planned = crate::typed::Planned::default();
        planned.add(
            &format!("{}.{}", quote_ident(&column.schema), quote_ident(&column.table)),
            &column.column,
            column.type_oid,
        );
        crate::typed::hold(&mut tx, &planned).await?;
        let values: Vec<Option<String>> = sqlx::query_scalar(AssertSqlSafe(sql)).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        let position = i32::try_from(position).unwrap_or(i32::MAX);
        for value in values.into_iter().flatten() {
            for key in layout.named_in(&value) {
                seen.insert((key, position, false));
            }
            for name in crate::census::relative_candidates(&value, column.family == "json") {
                seen.insert((name, position, true));
            }
        }
    }
    let mut names = Vec::with_capacity(seen.len());
    let mut positions = Vec::with_capacity(seen.len());
    let mut relative = Vec::with_capacity(seen.len());
    for (name, position, rel) in seen {
        names.push(name);
        positions.push(position);
        relative.push(rel);
    }
    Ok((names, positions, relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(unknown: i64, by_key_source: i64, by_key: i64, relative: i64) -> PrefixNaming {
        PrefixNaming {
            prefix: "media/".into(),
            unknown,
            by_key_source,
            by_key,
            relative,
            unnamed: unknown - by_key_source - by_key - relative,
            ..PrefixNaming::default()
        }
    }

    fn suggestion() -> Suggestion {
        Suggestion {
            prefix: "media/".into(),
            column: "public.wagtailimages_image.file".into(),
            keys: 71,
            root: "media/".into(),
            example: ("media/original_images/cat.png".into(), "original_images/cat.png".into()),
            declaration: "INSERT INTO asset_sweeper.asset_key_sources (table_schema, table_name, template) VALUES \
                          ('public', 'wagtailimages_image', 'media/{file}');"
                .into(),
        }
    }

    #[test]
    fn a_prefix_named_only_relative_to_a_root_is_refused_with_the_declaration_that_fixes_it() {
        let naming =
            Naming { prefixes: vec![figures(78, 0, 0, 71)], suggestions: vec![suggestion()], ..Naming::default() };
        let refusal = naming.refusal("media/").expect("refused");
        assert!(refusal.starts_with("78 of the 78 keys no row knows under \"media/\""), "{refusal}");
        assert!(refusal.contains("public.wagtailimages_image.file holds values that end like 71 of them"), "{refusal}");
        assert!(refusal.contains("'media/{file}'"), "{refusal}");
        assert_eq!(naming.refusal("other/"), None);
    }

    #[test]
    fn a_prefix_mostly_named_by_key_sources_or_keys_or_without_a_column_to_declare_is_not_refused() {
        let declared =
            Naming { prefixes: vec![figures(78, 71, 0, 0)], suggestions: vec![suggestion()], ..Naming::default() };
        assert_eq!(declared.refusal("media/"), None);
        let by_key =
            Naming { prefixes: vec![figures(10, 2, 4, 3)], suggestions: vec![suggestion()], ..Naming::default() };
        assert_eq!(by_key.refusal("media/"), None, "6 of 10 named strongly");
        let orphans = Naming { prefixes: vec![figures(10, 0, 0, 0)], ..Naming::default() };
        assert_eq!(orphans.refusal("media/"), None, "nothing to declare: they are orphans");
    }
}
