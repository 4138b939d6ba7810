//! `references`: the effective reference map (discovered and declared) and the schema check's verdict on each
//! source — the same check the sweep and the consumer run before anything is destroyed. A refused verdict
//! exits 1 (needs a person), so a deploy script can gate on it; the report is printed either way.

use anyhow::Context;
use schema::guards::Guard;
use schema::{self, ReferenceSource, SchemaCheckError, SchemaProblem};
use serde_json::{Value, json};

use crate::{Output, connect};

/// Unproven columns the text lists by name.
const UNPROVEN_LISTED: usize = 20;

/// The database and the schema check's own settings, nothing else: a check of the schema names no queue or bucket.
pub(crate) async fn run() -> anyhow::Result<Output> {
    let options = settings::Settings::schema_check_from_env()?;
    let pool = connect::database().await?;
    let (sources, problems, unproven) = match connect::check(&pool, options).await {
        Ok(map) => (map.sources, Vec::new(), map.unproven),
        Err(SchemaCheckError::Refused(refusal)) => (refusal.sources, refusal.problems, Vec::new()),
        Err(SchemaCheckError::Database(e)) => return Err(e).context("the schema check could not read the catalog"),
    };
    let mut output = render(&sources, &problems);
    if !unproven.is_empty() {
        // Not a refusal: retiring goes on, and the census reads them within a pass or a few. A column a line, and
        // the first few only: a large schema has thousands, which `--json` lists.
        output.text.push_str(&format!(
            "\ndeletes and purges wait for the census to read {} column(s) completely:",
            unproven.len()
        ));
        for column in unproven.iter().take(UNPROVEN_LISTED) {
            output.text.push_str(&format!("\n  - {column}"));
        }
        if unproven.len() > UNPROVEN_LISTED {
            output.text.push_str(&format!(
                "\n  … and {} more (`asset-sweeper references --json` lists every one)",
                unproven.len() - UNPROVEN_LISTED
            ));
        }
    }
    output.json["unproven"] = json!(unproven);
    let mut conn = pool.acquire().await.context("cannot reach the database")?;
    key_sources(&mut conn, &sources, &mut output).await?;
    Ok(output)
}

/// Each key source with what it names: the stored objects its rows make the key of, and the keys no row knew in the
/// newest reconciliation. One that names neither is reported: a template that protects nothing while it looks as
/// if it did.
async fn key_sources(
    conn: &mut sqlx::PgConnection,
    sources: &[ReferenceSource],
    output: &mut Output,
) -> anyhow::Result<()> {
    let naming = ::reconcile::newest_naming(&mut *conn).await?;
    let mut listed = Vec::new();
    for source in sources {
        let Some(known) = schema::naming::known_keys_named(&mut *conn, source).await? else { continue };
        let by = match &source.kind {
            schema::SourceKind::Key(template) => format!("{}.{} {template}", source.schema, source.table),
            _ => continue,
        };
        let unknown = naming.as_ref().and_then(|n| n.key_sources.iter().find(|k| k.source == by)).map(|k| k.keys);
        let none = known == 0 && unknown.unwrap_or(0) == 0;
        output.text.push_str(&format!(
            "\nkey source {by}: names {known} stored object(s){}{}",
            unknown.map(|u| format!(" and {u} key(s) no row knew in the newest reconciliation")).unwrap_or_default(),
            if none {
                " — MATCHES NONE: check its table, column and root against the keys in the bucket"
            } else {
                ""
            }
        ));
        listed.push(json!({ "source": by, "stored_objects": known, "unknown_keys": unknown, "matches_none": none }));
    }
    output.json["key_sources"] = json!(listed);
    Ok(())
}

fn of_source<'a>(source: &ReferenceSource, problems: &'a [SchemaProblem]) -> Vec<&'a SchemaProblem> {
    problems
        .iter()
        .filter(|p| p.column() == Some((source.schema.as_str(), source.table.as_str(), source.column.as_str())))
        .collect()
}

fn render(sources: &[ReferenceSource], problems: &[SchemaProblem]) -> Output {
    let verdict = if problems.is_empty() { "valid" } else { "refused" };
    let mut text = format!(
        "schema check: {} ({} source(s){})\n",
        verdict.to_uppercase(),
        sources.len(),
        if problems.is_empty() { String::new() } else { format!(", {} problem(s)", problems.len()) }
    );
    let mut listed = Vec::new();
    for source in sources {
        let own = of_source(source, problems);
        let key = if source.key_columns.is_empty() { "ctid".to_owned() } else { source.key_columns.join(", ") };
        let status = if own.is_empty() {
            "ok".to_owned()
        } else {
            own.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
        };
        let unguarded = own.iter().any(|p| matches!(p, SchemaProblem::UnguardedSource { .. }));
        let guard = match Guard::of(source) {
            None => "foreign key".to_owned(),
            Some(_) if unguarded => "missing".to_owned(),
            Some(guard) => guard.trigger,
        };
        text.push_str(&format!("  {source}  [records named by {key}]  [guard: {guard}]  {status}\n"));
        let mut entry = serde_json::to_value(source).unwrap_or(Value::Null);
        entry["guard"] = json!(guard);
        entry["problems"] = json!(own);
        entry["verdict"] = json!(if own.is_empty() { "ok" } else { "refused" });
        listed.push(entry);
    }
    let elsewhere: Vec<&SchemaProblem> =
        problems.iter().filter(|p| !sources.iter().any(|s| of_source(s, problems).contains(p))).collect();
    if !elsewhere.is_empty() {
        text.push_str("outside the sources:\n");
        for problem in &elsewhere {
            text.push_str(&format!("  {problem}\n"));
        }
    }
    if !problems.is_empty() {
        text.push_str("while refused, no pass enqueues and no settle retires, deletes or purges anything\n");
    }
    Output {
        text: text.trim_end().to_owned(),
        json: json!({ "verdict": verdict, "sources": listed, "other_problems": elsewhere }),
        attention: problems.iter().map(ToString::to_string).collect(),
    }
}
