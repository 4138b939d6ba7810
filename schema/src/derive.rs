//! The reference map as the catalog alone tells it: every foreign key to `assets`, every column of the `asset_id`
//! domain (scalar or array), the JSONB documents declared in `asset_reference_sources`, the problems the catalog
//! shows, and the candidate columns (uuid, text or JSON that are no source) the sample and the census read.

use migrator::OWN_TABLES;
use platform::sql::quote_ident;
use sqlx::PgConnection;

use crate::map::{Candidate, Derived, ReferenceSource, SchemaProblem, SourceKind};

/// `sqlx::query!` of `$head`, then SQL that is true when this role reads every row of column `a` of table `c` in
/// schema `n` (schema usage, column privilege, and no row-level security policy that would silently hide rows, and
/// so references, from it), then `$tail`. A macro, not a constant: the checked macros take only string literals,
/// and so the test is still written once.
macro_rules! query_with_readable {
    ($head:tt, $tail:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query!(
            $head
                + "(has_schema_privilege(n.oid, 'USAGE') AND has_column_privilege(c.oid, a.attnum, 'SELECT')
                    AND (NOT c.relrowsecurity
                         OR (SELECT rolbypassrls FROM pg_roles WHERE rolname = current_user)
                         OR (pg_has_role(c.relowner, 'USAGE') AND NOT c.relforcerowsecurity)))"
                + $tail
            $(, $arg)*
        )
    };
}

/// The statements that turn the foreign key `constraint` on `schema.table`, as `pg_get_constraintdef` wrote it, into
/// the same key with no `ON DELETE` action: added `NOT VALID` and validated apart, so the table is not locked against
/// writes while its rows are checked.
fn no_action(schema: &str, table: &str, constraint: &str, definition: &str) -> String {
    let mut kept = definition.to_owned();
    if let Some(at) = kept.find(" ON DELETE ") {
        let rest = &kept[at + " ON DELETE ".len()..];
        let action = ["CASCADE", "SET NULL", "SET DEFAULT"].into_iter().find(|a| rest.starts_with(a)).unwrap_or("");
        let mut end = at + " ON DELETE ".len() + action.len();
        // `SET NULL (column, …)`: the columns it would set.
        if kept[end..].starts_with(" (") {
            end = kept[end..].find(')').map_or(end, |close| end + close + 1);
        }
        kept.replace_range(at..end, "");
    }
    let kept = kept.strip_suffix(" NOT VALID").unwrap_or(&kept);
    let (table, constraint) = (format!("{}.{}", quote_ident(schema), quote_ident(table)), quote_ident(constraint));
    format!(
        "ALTER TABLE {table} DROP CONSTRAINT {constraint}, ADD CONSTRAINT {constraint} {kept} NOT VALID; \
         ALTER TABLE {table} VALIDATE CONSTRAINT {constraint};"
    )
}

/// The sources, the problems and the candidate columns, from the catalog alone.
pub async fn derive(conn: &mut PgConnection) -> Result<Derived, sqlx::Error> {
    let mut problems = Vec::new();
    let mut sources = Vec::new();

    let domain = sqlx::query!(
        "SELECT t.oid, t.typarray FROM pg_type t
          WHERE t.typname = 'asset_id' AND t.typtype = 'd'
            AND t.typnamespace = 'asset_sweeper'::regnamespace",
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|t| (t.oid, t.typarray));
    if domain.is_none() {
        problems.push(SchemaProblem::DomainMissing);
    }

    // Foreign keys to assets, by the column that maps to assets.id (a key may be composite). Partitions inherit
    // their parent's key (conparentid <> 0): check the parent only.
    let keys = query_with_readable!(
        r#"SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", a.attname::text AS "column!",
                  format_type(a.atttypid, a.atttypmod) AS "column_type!", con.confdeltype::text AS "action!",
                  con.conname::text AS "constraint!", pg_get_constraintdef(con.oid) AS "definition!", "#,
        r#" AS "readable!"
             FROM pg_constraint con
             JOIN pg_class c ON c.oid = con.conrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL unnest(con.conkey, con.confkey) AS k(attnum, refnum)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
             JOIN pg_attribute ra ON ra.attrelid = con.confrelid AND ra.attnum = k.refnum
            WHERE con.contype = 'f' AND con.confrelid = 'assets'::regclass AND con.conparentid = 0
              AND ra.attname = 'id'
            ORDER BY 1, 2, 3"#
    )
    .fetch_all(&mut *conn)
    .await?;
    for key in keys {
        let (schema, table, column, column_type, action, readable) =
            (key.schema, key.table, key.column, key.column_type, key.action, key.readable);
        let on_delete = match action.as_str() {
            "c" => Some("CASCADE"),
            "n" => Some("SET NULL"),
            "d" => Some("SET DEFAULT"),
            _ => None,
        };
        if let Some(on_delete) = on_delete {
            problems.push(SchemaProblem::DestructiveForeignKey {
                schema: schema.clone(),
                table: table.clone(),
                column: column.clone(),
                on_delete: on_delete.to_owned(),
                fix: no_action(&schema, &table, &key.constraint, &key.definition),
            });
        }
        if !readable {
            problems.push(SchemaProblem::unreadable(&schema, &table, &column));
        }
        sources.push(ReferenceSource::derived(schema, table, column, SourceKind::ForeignKey, column_type));
    }

    if let Some((domain_oid, _)) = domain {
        // Columns of asset_id, of any domain built on it, arrays of those, and composite types holding any of them
        // however deep (a field, a composite inside a composite, an array of composites, a domain over one).
        let columns = query_with_readable!(
            r#"WITH RECURSIVE ref_types(oid) AS (
                   SELECT $1::oid
                   UNION
                   SELECT d.oid FROM pg_type d JOIN ref_types r ON d.typbasetype = r.oid WHERE d.typtype = 'd'
               ),
               -- Column types with the domain inside a composite, however deep.
               holding(oid) AS (
                   SELECT p.root FROM asset_sweeper_type_parts(ARRAY(
                              SELECT DISTINCT a.atttypid FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                               WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped)) p
                    WHERE p.nested AND p.part IN (SELECT oid FROM ref_types)
               )
               SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", a.attname::text AS "column!",
                      format_type(a.atttypid, a.atttypmod) AS "column_type!",
                      CASE WHEN a.atttypid IN (SELECT oid FROM ref_types) THEN 'domain'
                           WHEN a.atttypid IN (SELECT t.typarray FROM pg_type t JOIN ref_types r ON r.oid = t.oid)
                                THEN 'domain_array'
                           ELSE 'nested' END AS "kind!", "#,
            r#" AS "readable!"
                 FROM pg_attribute a
                 JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE (a.atttypid IN (SELECT oid FROM ref_types)
                       OR a.atttypid IN (SELECT t.typarray FROM pg_type t JOIN ref_types r ON r.oid = t.oid)
                       OR a.atttypid IN (SELECT oid FROM holding))
                  AND a.attnum > 0 AND NOT a.attisdropped
                  AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                ORDER BY 1, 2, 3"#,
            domain_oid,
        )
        .fetch_all(&mut *conn)
        .await?;
        for found in columns {
            let (schema, table, column, column_type, readable) =
                (found.schema, found.table, found.column, found.column_type, found.readable);
            // A domain column with a foreign key as well is one source, not two.
            if sources.iter().any(|s| s.schema == schema && s.table == table && s.column == column) {
                continue;
            }
            if !readable {
                problems.push(SchemaProblem::unreadable(&schema, &table, &column));
            }
            let kind = match found.kind.as_str() {
                "domain" => SourceKind::Domain,
                "domain_array" => SourceKind::DomainArray,
                _ => SourceKind::Nested,
            };
            sources.push(ReferenceSource::derived(schema, table, column, kind, column_type));
        }
    }

    // Each declaration and what the catalog says of its column: no data type when the table or column does not exist.
    let declared = query_with_readable!(
        r#"SELECT s.table_schema AS schema, s.table_name AS table, s.column_name AS column,
                  s.json_path::text AS "json_path!", format_type(a.atttypid, a.atttypmod) AS data_type, "#,
        r#" AS readable
             FROM asset_reference_sources s
             LEFT JOIN pg_namespace n ON n.nspname = s.table_schema
             LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.table_name AND c.relkind IN ('r', 'p')
             LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = s.column_name
                                     AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY s.id"#
    )
    .fetch_all(&mut *conn)
    .await?;
    for row in declared {
        let (schema, table, column, json_path, data_type, readable) =
            (row.schema, row.table, row.column, row.json_path, row.data_type, row.readable);
        match data_type.as_deref() {
            None => problems.push(SchemaProblem::DeclaredSourceMissing {
                schema: schema.clone(),
                table: table.clone(),
                column: column.clone(),
            }),
            Some("jsonb") => {
                if readable != Some(true) {
                    problems.push(SchemaProblem::unreadable(&schema, &table, &column));
                }
            }
            Some(found) => problems.push(SchemaProblem::DeclaredSourceWrongType {
                schema: schema.clone(),
                table: table.clone(),
                column: column.clone(),
                found: found.to_owned(),
            }),
        }
        let column_type = data_type.unwrap_or_default();
        let kind = SourceKind::Json { json_path };
        sources.push(ReferenceSource::derived(schema, table, column, kind, column_type));
    }

    key_sources(conn, &mut sources, &mut problems).await?;
    let candidates = candidates(conn, &sources, &mut problems).await?;
    Ok(Derived { sources, problems, candidates })
}

/// The types a key source's column may have: those whose text the system makes (checked again here, since the
/// application may change a column's type after it declared the source).
const KEY_COLUMN_TYPES: &[&str] = &["text", "character varying", "character", "smallint", "integer", "bigint", "uuid"];

/// The key sources declared in `asset_key_sources`, each as a source of the map, or a problem naming what is wrong
/// with it now: a table or column gone, a column whose type the application changed, one this role cannot read.
async fn key_sources(
    conn: &mut PgConnection,
    sources: &mut Vec<ReferenceSource>,
    problems: &mut Vec<SchemaProblem>,
) -> Result<(), sqlx::Error> {
    let declared = sqlx::query!(
        r#"SELECT table_schema AS "schema!", table_name AS "table!", template AS "template!"
             FROM asset_key_sources ORDER BY id"#
    )
    .fetch_all(&mut *conn)
    .await?;
    for row in declared {
        let (schema, table, template) = (row.schema, row.table, row.template);
        let invalid = |why: String| SchemaProblem::KeySourceInvalid {
            schema: schema.clone(),
            table: table.clone(),
            template: template.clone(),
            why,
        };
        let names = match crate::key_sources::columns_of(&template) {
            Ok(names) => names,
            Err(e) => {
                problems.push(invalid(e.to_string()));
                continue;
            }
        };
        let found = query_with_readable!(
            r#"SELECT a.attname::text AS "column!", format_type(a.atttypid, a.atttypmod) AS "column_type!",
                      a.atttypid::regtype::text AS "base!", "#,
            r#" AS "readable!"
                 FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p') AND a.attname = ANY ($3)"#,
            &schema,
            &table,
            &names,
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut columns = Vec::with_capacity(names.len());
        let mut wrong = None;
        for name in &names {
            match found.iter().find(|f| f.column == *name) {
                None => wrong = Some(format!("{schema}.{table} has no column {name}")),
                Some(f) if !KEY_COLUMN_TYPES.contains(&f.base.as_str()) => {
                    wrong = Some(format!(
                        "column {name} is {}, not text: a key source reads text, varchar, char, integer or uuid                          columns",
                        f.column_type
                    ))
                }
                Some(f) if !f.readable => problems.push(SchemaProblem::unreadable(&schema, &table, name)),
                Some(f) => columns.push((f.column.clone(), f.column_type.clone())),
            }
        }
        if let Some(why) = wrong {
            problems.push(invalid(why));
            continue;
        }
        let Some((column, column_type)) = columns.last().cloned() else { continue };
        let kind = SourceKind::Key(crate::key_sources::KeyTemplate { template: template.clone(), columns });
        sources.push(ReferenceSource::derived(schema, table, column, kind, column_type));
    }
    Ok(())
}

/// The valid, whole-table indexes whose leading column is a source's: their access methods and that column's
/// operator classes, pairwise.
pub(crate) struct LeadingIndexes {
    pub(crate) methods: Vec<String>,
    pub(crate) classes: Vec<String>,
}

/// The indexes leading on `source`'s column; `None` when its table or column is missing (reported elsewhere).
pub(crate) async fn leading_indexes(
    conn: &mut PgConnection,
    source: &ReferenceSource,
) -> Result<Option<LeadingIndexes>, sqlx::Error> {
    let found = sqlx::query!(
        r#"SELECT coalesce(array_agg(am.amname::text) FILTER (WHERE i.indexrelid IS NOT NULL), '{}') AS "methods!",
                  coalesce(array_agg(oc.opcname::text) FILTER (WHERE i.indexrelid IS NOT NULL), '{}') AS "classes!"
             FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $3 AND NOT a.attisdropped
             LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisvalid AND i.indpred IS NULL
                                 AND i.indkey[0] = a.attnum
             LEFT JOIN pg_class ic ON ic.oid = i.indexrelid
             LEFT JOIN pg_am am ON am.oid = ic.relam
             LEFT JOIN pg_opclass oc ON oc.oid = i.indclass[0]
            WHERE n.nspname = $1 AND c.relname = $2
            GROUP BY a.attnum"#,
        &source.schema,
        &source.table,
        &source.column,
    )
    .fetch_optional(conn)
    .await?;
    Ok(found.map(|f| LeadingIndexes { methods: f.methods, classes: f.classes }))
}

/// The primary-key columns of `schema.table`, in key order (empty for a table without one, or a missing one).
pub(crate) async fn primary_key(
    conn: &mut PgConnection,
    schema: &str,
    table: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT a.attname::text AS "column!"
             FROM pg_index i
             JOIN pg_class c ON c.oid = i.indrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, position)
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
            WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary
            ORDER BY k.position"#,
        schema,
        table,
    )
    .fetch_all(conn)
    .await
}

/// Every column whose values could spell an asset id (docs/integrating.md, "Shapes") that is neither a source,
/// excluded, nor the project's own; one this role cannot read is a problem instead (fail closed: a column nobody
/// can read might hold references), and so is one of a type the census cannot read as written.
async fn candidates(
    conn: &mut PgConnection,
    sources: &[ReferenceSource],
    problems: &mut Vec<SchemaProblem>,
) -> Result<Vec<Candidate>, sqlx::Error> {
    // The types that could spell an id, by what the census reads them as: `uuid`; `json`; `text` (every string
    // type); `bytea`; `refused` (a text search vector, normalised and split into words, and the `lo` extension's
    // large object references, whose bytes are not in the row); and `value`, everything else read by its output
    // function (xml, hstore and any other base type of an extension or the application, composites holding any of
    // these, however deep). Domains are read as their base, arrays as their elements; numbers, times, booleans,
    // enums, networks and geometry cannot spell one.
    let rows = query_with_readable!(
        r#"WITH cols AS MATERIALIZED (
             SELECT a.attrelid, a.attnum, a.atttypid
               FROM pg_attribute a
               JOIN pg_class c ON c.oid = a.attrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE a.attnum > 0 AND NOT a.attisdropped
                -- Tables, partitioned tables, materialized views (a copy the application may read instead of
                -- the table: an unpopulated one holds nothing yet) and foreign tables (refused: their rows are
                -- another server's).
                AND c.relkind IN ('r', 'p', 'm', 'f') AND NOT c.relispartition
                AND (c.relkind <> 'm' OR c.relispopulated)
                AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
                AND NOT (c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'assets'::regclass)
                         AND c.relname = ANY ($1))
                AND NOT EXISTS (SELECT 1 FROM asset_reference_exclusions x
                                 WHERE x.table_schema = n.nspname AND x.table_name = c.relname
                                   AND x.column_name = a.attname AND x.excludes = 'both')
         ),
         parts AS MATERIALIZED (
             SELECT * FROM asset_sweeper_type_parts(ARRAY(SELECT DISTINCT atttypid FROM cols))
         ),
         families AS (
             SELECT p.root,
                    CASE WHEN bool_or(t.typtype = 'd' AND t.typname = 'lo' AND t.typbasetype = 'oid'::regtype)
                              THEN 'refused'
                         -- A part written out by a function in a language any role may write in: writing a value
                         -- out would run that code as the sweeper (docs/security.md, "The rule"). Only a superuser
                         -- can write in C, or make a function internal.
                         WHEN bool_or(EXISTS (SELECT 1 FROM pg_proc o JOIN pg_language l ON l.oid = o.prolang
                                               WHERE o.oid = t.typoutput AND l.lanname NOT IN ('internal', 'c')))
                              THEN 'refused'
                         -- A composite is read whole, by its output function.
                         WHEN bool_or(p.nested) THEN CASE WHEN bool_or(b.family IS NOT NULL) THEN 'value' END
                         ELSE max(b.family) END AS family
               FROM parts p
               JOIN pg_type t ON t.oid = p.part
               LEFT JOIN LATERAL (
                    SELECT CASE WHEN t.oid = 'uuid'::regtype THEN 'uuid'
                                WHEN t.oid IN ('json'::regtype, 'jsonb'::regtype) THEN 'json'
                                WHEN t.oid = 'bytea'::regtype THEN 'bytea'
                                WHEN t.typcategory = 'S' THEN 'text'
                                WHEN t.oid IN ('tsvector'::regtype, 'tsquery'::regtype) THEN 'refused'
                                ELSE 'value' END AS family
                     WHERE t.typtype = 'b' AND t.typcategory IN ('S', 'U')
               ) b ON true
              GROUP BY p.root
         )
         SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", a.attname::text AS "column!",
                CASE WHEN t.typcategory = 'A' THEN 'array' ELSE 'scalar' END AS "shape!",
                -- An array of byte strings is read by its output function, as hex.
                CASE WHEN t.typcategory = 'A' AND f.family = 'bytea' THEN 'value' ELSE f.family END AS "family!",
                format_type(a.atttypid, a.atttypmod) AS "data_type!",
                a.atttypid AS "type_oid!",
                -- Rows on another server: a foreign table, or a partitioned table with a foreign partition.
                -- Each leaf looked up by its oid: a join was planned as a scan of pg_class for each column of a
                -- partitioned table (0.5 s of every schema check at GitLab's size).
                (c.relkind = 'f' OR (c.relkind = 'p' AND EXISTS (
                    SELECT 1 FROM pg_partition_tree(c.oid) p
                     WHERE p.isleaf AND (SELECT l.relkind FROM pg_class l WHERE l.oid = p.relid) = 'f'))) AS "foreign!",
                -- What its exclusion leaves to read.
                coalesce((SELECT CASE x.excludes WHEN 'ids' THEN 'keys' ELSE 'ids' END
                            FROM asset_reference_exclusions x
                           WHERE x.table_schema = n.nspname AND x.table_name = c.relname
                             AND x.column_name = a.attname), 'both') AS "reads!", "#,
        r#" AS "readable!"
           FROM cols k
           JOIN pg_attribute a ON a.attrelid = k.attrelid AND a.attnum = k.attnum
           JOIN pg_class c ON c.oid = a.attrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN pg_type t ON t.oid = a.atttypid
           JOIN families f ON f.root = a.atttypid AND f.family IS NOT NULL
          ORDER BY 1, 2, 3"#,
        OWN_TABLES as &[&str],
    )
    .fetch_all(&mut *conn)
    .await?;

    let mut found = Vec::new();
    for row in rows {
        let (schema, table, column) = (row.schema, row.table, row.column);
        if sources.iter().any(|s| s.schema == schema && s.table == table && s.column == column) {
            continue;
        }
        // A column excluded for ids is read for keys alone, which a uuid or bytes cannot spell.
        if row.reads == "keys" && !matches!(row.family.as_str(), "text" | "json" | "value") {
            continue;
        }
        // Neither the census nor the key scan reads these: what a person excludes is everything.
        let exclude = crate::map::exclusion(&schema, &table, &column, "both");
        if row.foreign {
            problems.push(SchemaProblem::ForeignRows { schema, table, column, exclude });
            continue;
        }
        if !row.readable {
            problems.push(SchemaProblem::SourceUnreadable { schema, table, column });
            continue;
        }
        if row.family == "refused" {
            problems.push(SchemaProblem::UnreadableShape { schema, table, column, data_type: row.data_type, exclude });
            continue;
        }
        found.push(Candidate {
            schema,
            table,
            column,
            shape: row.shape,
            family: row.family,
            reads: row.reads,
            type_oid: row.type_oid.0,
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::no_action;

    #[test]
    fn a_destructive_key_is_rewritten_without_its_action_and_nothing_else() {
        assert_eq!(
            no_action(
                "public",
                "covers",
                "covers_image_fkey",
                "FOREIGN KEY (image) REFERENCES asset_sweeper.assets(id) ON DELETE SET NULL"
            ),
            r#"ALTER TABLE "public"."covers" DROP CONSTRAINT "covers_image_fkey", ADD CONSTRAINT "covers_image_fkey" FOREIGN KEY (image) REFERENCES asset_sweeper.assets(id) NOT VALID; ALTER TABLE "public"."covers" VALIDATE CONSTRAINT "covers_image_fkey";"#
        );
        let kept = no_action(
            "App",
            "notes",
            "Notes FK",
            "FOREIGN KEY (ws, image) REFERENCES asset_sweeper.assets(workspace_id, id) ON UPDATE CASCADE \
             ON DELETE SET NULL (image) DEFERRABLE NOT VALID",
        );
        assert!(
            kept.contains(r#"ADD CONSTRAINT "Notes FK" FOREIGN KEY (ws, image) REFERENCES asset_sweeper.assets(workspace_id, id) ON UPDATE CASCADE DEFERRABLE NOT VALID;"#),
            "{kept}"
        );
        assert!(kept.starts_with(r#"ALTER TABLE "App"."notes" DROP CONSTRAINT "Notes FK""#), "{kept}");
    }
}
