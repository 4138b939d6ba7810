//! The reference map as the catalog alone tells it: every foreign key to `assets`, every column of the `asset_id`
//! domain (scalar or array), the JSONB documents declared in `asset_reference_sources`, the problems the catalog
//! shows, and the candidate columns (uuid, text or JSON that are no source) the sample and the census read.

use migrator::OWN_TABLES;
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

/// The sources, the problems and the candidate columns, from the catalog alone.
pub async fn derive(conn: &mut PgConnection) -> Result<Derived, sqlx::Error> {
    let mut problems = Vec::new();
    let mut sources = Vec::new();

    let domain = sqlx::query!(
        "SELECT t.oid, t.typarray FROM pg_type t
          WHERE t.typname = 'asset_id' AND t.typtype = 'd'
            AND t.typnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'assets'::regclass)",
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
                  format_type(a.atttypid, a.atttypmod) AS "column_type!", con.confdeltype::text AS "action!", "#,
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
            });
        }
        if !readable {
            problems.push(SchemaProblem::unreadable(&schema, &table, &column));
        }
        sources.push(ReferenceSource::derived(schema, table, column, SourceKind::ForeignKey, column_type));
    }

    if let Some((domain_oid, _)) = domain {
        // Columns of asset_id, of any domain built on it, and arrays of those.
        let columns = query_with_readable!(
            r#"WITH RECURSIVE ref_types(oid) AS (
                   SELECT $1::oid
                   UNION
                   SELECT d.oid FROM pg_type d JOIN ref_types r ON d.typbasetype = r.oid WHERE d.typtype = 'd'
               )
               SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", a.attname::text AS "column!",
                      format_type(a.atttypid, a.atttypmod) AS "column_type!",
                      a.atttypid IN (SELECT oid FROM ref_types) AS "scalar!", "#,
            r#" AS "readable!"
                 FROM pg_attribute a
                 JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE (a.atttypid IN (SELECT oid FROM ref_types)
                       OR a.atttypid IN (SELECT t.typarray FROM pg_type t JOIN ref_types r ON r.oid = t.oid))
                  AND a.attnum > 0 AND NOT a.attisdropped
                  AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                ORDER BY 1, 2, 3"#,
            domain_oid,
        )
        .fetch_all(&mut *conn)
        .await?;
        for found in columns {
            let (schema, table, column, column_type, scalar, readable) =
                (found.schema, found.table, found.column, found.column_type, found.scalar, found.readable);
            // A domain column with a foreign key as well is one source, not two.
            if sources.iter().any(|s| s.schema == schema && s.table == table && s.column == column) {
                continue;
            }
            if !readable {
                problems.push(SchemaProblem::unreadable(&schema, &table, &column));
            }
            let kind = if scalar { SourceKind::Domain } else { SourceKind::DomainArray };
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

    let candidates = candidates(conn, &sources, &mut problems).await?;
    Ok(Derived { sources, problems, candidates })
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

/// Every uuid, text and JSON column that is neither a source, excluded, nor the project's own; one this role
/// cannot read is a problem instead (fail closed: a column nobody can read might hold references).
async fn candidates(
    conn: &mut PgConnection,
    sources: &[ReferenceSource],
    problems: &mut Vec<SchemaProblem>,
) -> Result<Vec<Candidate>, sqlx::Error> {
    // Every column whose type is, or is a domain over, a uuid, string or JSON type, or an array of one.
    let rows = query_with_readable!(
        r#"WITH RECURSIVE base(oid, base) AS (
             SELECT oid, oid FROM pg_type WHERE typtype <> 'd'
             UNION ALL
             SELECT d.oid, b.base FROM pg_type d JOIN base b ON d.typbasetype = b.oid WHERE d.typtype = 'd'
         ),
         shaped AS (
             SELECT b.oid,
                    CASE WHEN bt.typcategory = 'A' THEN 'array' ELSE 'scalar' END AS shape,
                    CASE WHEN bt.typcategory = 'A' THEN eb.base ELSE b.base END AS scalar_base
               FROM base b
               JOIN pg_type bt ON bt.oid = b.base
               LEFT JOIN base eb ON eb.oid = bt.typelem AND bt.typcategory = 'A'
         ),
         families AS (
             SELECT sh.oid, sh.shape,
                    CASE WHEN st.typname = 'uuid' THEN 'uuid'
                         WHEN st.typname IN ('json', 'jsonb') THEN 'json'
                         WHEN st.typcategory = 'S' THEN 'text' END AS family
               FROM shaped sh JOIN pg_type st ON st.oid = sh.scalar_base
         )
         SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", a.attname::text AS "column!",
                f.shape AS "shape!", f.family AS "family!", "#,
        r#" AS "readable!"
           FROM pg_attribute a
           JOIN pg_class c ON c.oid = a.attrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN families f ON f.oid = a.atttypid AND f.family IS NOT NULL
          WHERE a.attnum > 0 AND NOT a.attisdropped
            AND c.relkind IN ('r', 'p') AND NOT c.relispartition
            AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
            AND NOT (c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'assets'::regclass)
                     AND c.relname = ANY ($1))
            AND NOT EXISTS (SELECT 1 FROM asset_reference_exclusions x
                             WHERE x.table_schema = n.nspname AND x.table_name = c.relname
                               AND x.column_name = a.attname)
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
        if !row.readable {
            problems.push(SchemaProblem::SourceUnreadable { schema, table, column });
            continue;
        }
        found.push(Candidate { schema, table, column, shape: row.shape, family: row.family });
    }
    Ok(found)
}
