//! Quoting for the SQL the product builds at run time (catalog names are data, so they are never spliced in raw).

/// Quotes an SQL identifier (catalog names are data, so they are never spliced in raw).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes an SQL string literal, for the few places a value must be spliced into DDL or a JSON key.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_so_catalog_names_cannot_inject_sql() {
        assert_eq!(quote_ident("pages"), "\"pages\"");
        assert_eq!(quote_ident("we\"ird; DROP TABLE assets"), "\"we\"\"ird; DROP TABLE assets\"");
    }
}
