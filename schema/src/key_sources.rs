//! Key sources: where the application's rows hold storage keys in names of their own making. Most frameworks do
//! not store the key: Django and Laravel store a path relative to a storage root, Rails a bare key under its
//! service's root, others derive the key from an id and a file name. A declaration in `asset_key_sources` gives the
//! key as a template of literal text and `{column}` placeholders (`media/{file}`, `{key}`, `uploads/{id}/{name}`),
//! checked as it is written (`schema/sql/key_sources.sql`). Here it compiles to the one test the recheck, discovery
//! and the index check share: which rows name a given key.

use std::fmt;

use platform::sql::{quote_ident, quote_literal};
use serde::{Deserialize, Serialize};

/// A declared template, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyTemplate {
    /// The template as declared.
    pub template: String,
    /// Its placeholders' columns, in order, each with its type as the catalog prints it.
    pub columns: Vec<(String, String)>,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part<'a> {
    Literal(&'a str),
    Column(&'a str),
}

/// Why a template cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{` or `}` without its pair.
    #[error("{0:?} has an unmatched brace; placeholders are written {{column}}")]
    Unmatched(String),
    /// No `{column}` at all.
    #[error("{0:?} names no column; write the column holding the name as {{column}}, such as 'media/{{file}}'")]
    NoColumn(String),
}

fn parts(template: &str) -> Result<Vec<Part<'_>>, TemplateError> {
    let mut parts = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                parts.push(Part::Literal(rest));
                break;
            }
            Some(at) if rest.as_bytes()[at] == b'}' => return Err(TemplateError::Unmatched(template.to_owned())),
            Some(at) => {
                if at > 0 {
                    parts.push(Part::Literal(&rest[..at]));
                }
                let close = rest[at..].find('}').ok_or_else(|| TemplateError::Unmatched(template.to_owned()))?;
                let name = &rest[at + 1..at + close];
                if name.contains('{') {
                    return Err(TemplateError::Unmatched(template.to_owned()));
                }
                parts.push(Part::Column(name));
                rest = &rest[at + close + 1..];
            }
        }
    }
    if !parts.iter().any(|p| matches!(p, Part::Column(_))) {
        return Err(TemplateError::NoColumn(template.to_owned()));
    }
    Ok(parts)
}

/// The columns a template names, in order (a column named twice, once).
pub fn columns_of(template: &str) -> Result<Vec<String>, TemplateError> {
    let mut columns: Vec<String> = Vec::new();
    for part in parts(template)? {
        if let Part::Column(c) = part
            && !columns.iter().any(|k| k == c)
        {
            columns.push(c.to_owned());
        }
    }
    Ok(columns)
}

/// Types whose text Postgres stores as written: compared as they are, with no conversion.
fn textual(type_name: &str) -> bool {
    matches!(type_name, "text") || type_name.starts_with("character varying")
}

impl KeyTemplate {
    /// The fixed text every key it names starts with: its root (`media/` of `media/{file}`; empty for `{key}`).
    pub fn root(&self) -> &str {
        let end = self.template.find('{').unwrap_or(self.template.len());
        &self.template[..end]
    }

    /// The one text column a `root{column}` template reads, compared as stored.
    fn rooted_column(&self) -> Option<&str> {
        let parts = parts(&self.template).ok()?;
        let column = match parts.as_slice() {
            [Part::Column(c)] | [Part::Literal(_), Part::Column(c)] => *c,
            _ => return None,
        };
        let (_, type_name) = self.columns.iter().find(|(name, _)| name == column)?;
        textual(type_name).then_some(column)
    }

    /// The key a row names, as an SQL expression over the row's columns (`alias.` before each, when given).
    pub fn expression(&self, alias: &str) -> String {
        let Ok(parts) = parts(&self.template) else { return "NULL::text".to_owned() };
        let pieces: Vec<String> = parts
            .iter()
            .map(|part| match part {
                Part::Literal(text) => format!("{}::text", quote_literal(text)),
                Part::Column(c) => {
                    let typed = self.columns.iter().find(|(name, _)| name == c).map(|(_, t)| t.as_str());
                    let column = format!("{alias}{}", quote_ident(c));
                    if typed.is_some_and(textual) { column } else { format!("{column}::text") }
                }
            })
            .collect();
        if pieces.len() == 1 { pieces[0].clone() } else { format!("({})", pieces.join(" || ")) }
    }

    /// The condition true of a row (columns prefixed with `alias.` when given) that names the key `key_sql`, as the
    /// index [`Self::index_definition`] describes serves it: a `root{column}` template of a text column compares the column
    /// with the key less its root, so a plain index on the column serves it; any other compares its whole expression.
    pub fn condition(&self, alias: &str, key_sql: &str) -> String {
        match self.rooted_column() {
            Some(column) => {
                let root = quote_literal(self.root());
                format!(
                    "{alias}{} = substr({key_sql}, length({root}) + 1) AND starts_with({key_sql}, {root})",
                    quote_ident(column)
                )
            }
            None => format!("{} = {key_sql}", self.expression(alias)),
        }
    }

    /// The index the recheck needs, as the end of its `CREATE INDEX` statement: the column of a rooted template,
    /// else the template's whole expression.
    pub fn index_definition(&self) -> String {
        match self.rooted_column() {
            Some(column) => format!("({})", quote_ident(column)),
            None => {
                let expression = self.expression("");
                if expression.starts_with('(') { format!("({expression})") } else { format!("(({expression}))") }
            }
        }
    }

    /// Whether `key` could be one this template names: it starts with the root.
    pub fn may_name(&self, key: &str) -> bool {
        key.starts_with(self.root())
    }
}

impl fmt::Display for KeyTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.template)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(t: &str, columns: &[(&str, &str)]) -> KeyTemplate {
        KeyTemplate {
            template: t.into(),
            columns: columns.iter().map(|(c, ty)| ((*c).to_owned(), (*ty).to_owned())).collect(),
        }
    }

    #[test]
    fn a_root_and_a_text_column_compare_the_column_so_a_plain_index_serves_it() {
        let django = template("media/{file}", &[("file", "character varying(100)")]);
        assert_eq!(django.root(), "media/");
        assert_eq!(
            django.condition("t.", "$k"),
            r#"t."file" = substr($k, length('media/') + 1) AND starts_with($k, 'media/')"#
        );
        assert_eq!(django.index_definition(), r#"("file")"#);
        let rails = template("{key}", &[("key", "character varying")]);
        assert_eq!(rails.root(), "");
        assert!(rails.condition("", "$k").starts_with(r#""key" = substr($k, length('') + 1)"#));
    }

    #[test]
    fn a_template_over_several_columns_or_a_number_compares_its_whole_expression() {
        let derived = template("uploads/{id}/{filename}", &[("id", "bigint"), ("filename", "text")]);
        assert_eq!(derived.expression(""), r#"('uploads/'::text || "id"::text || '/'::text || "filename")"#);
        assert_eq!(derived.condition("", "$k"), r#"('uploads/'::text || "id"::text || '/'::text || "filename") = $k"#);
        assert_eq!(derived.index_definition(), r#"(('uploads/'::text || "id"::text || '/'::text || "filename"))"#);
        let by_id = template("avatars/{user_id}", &[("user_id", "uuid")]);
        assert_eq!(by_id.condition("", "$k"), r#"('avatars/'::text || "user_id"::text) = $k"#);
    }

    #[test]
    fn templates_are_read_or_refused_by_name() {
        assert_eq!(columns_of("uploads/{id}/{name}.{id}").expect("read"), vec!["id", "name"]);
        assert!(matches!(columns_of("media/file"), Err(TemplateError::NoColumn(_))));
        assert!(matches!(columns_of("media/{file"), Err(TemplateError::Unmatched(_))));
        assert!(matches!(columns_of("media/file}"), Err(TemplateError::Unmatched(_))));
        let err = columns_of("media/").expect_err("no column").to_string();
        assert!(err.contains("{column}"), "{err}");
    }
}
