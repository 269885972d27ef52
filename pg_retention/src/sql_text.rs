//! Quoting for SQL text we assemble. Identifiers are always quoted; values go in as parameters
//! wherever a statement has them, and as quoted literals only where a statement cannot.

/// Quotes an identifier the way Postgres's `quote_ident` does when quoting is needed; we
/// always quote, so a name is used exactly as given.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a string literal. Backslashes are doubled and the E'' form is used so the result
/// means the same whatever `standard_conforming_strings` is.
pub fn literal(value: &str) -> String {
    if value.contains('\\') {
        format!("E'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
    } else {
        format!("'{}'", value.replace('\'', "''"))
    }
}

/// A `tid` literal for block `block`, item `item`.
pub fn tid(block: u64, item: u64) -> String {
    format!("'({block},{item})'::tid")
}

/// Parses Postgres's text form of a tid, `(block,item)`.
pub fn parse_tid(text: &str) -> Option<(u64, u64)> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    let (b, i) = inner.split_once(',')?;
    Some((b.trim().parse().ok()?, i.trim().parse().ok()?))
}

/// Wraps a user predicate so it is one parenthesised expression whose NULL counts as false.
/// The newlines keep a trailing `--` comment from swallowing the closing parenthesis.
pub fn predicate(expr: &str) -> String {
    format!("coalesce((\n{expr}\n), false)")
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    #[pg_test]
    fn identifiers_are_always_quoted() {
        assert_eq!(ident("created_at"), "\"created_at\"");
        assert_eq!(ident("we\"ird"), "\"we\"\"ird\"");
    }

    #[pg_test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(literal("it's"), "'it''s'");
        assert_eq!(literal("a\\b'"), "E'a\\\\b'''");
    }

    #[pg_test]
    fn tids_round_trip() {
        assert_eq!(parse_tid("(12,7)"), Some((12, 7)));
        assert_eq!(tid(12, 7), "'(12,7)'::tid");
        assert_eq!(parse_tid("12,7"), None);
    }
}
