//! Quoting for SQL text we assemble. Identifiers are always quoted; values go in as parameters
//! wherever a statement has them, and as quoted literals only where a statement cannot.

/// Quotes an identifier, always, so a name is used exactly as given (the quoting the
/// archiver's restore uses for the same names).
pub use pg_retention_format::quote_ident as ident;

/// Quotes a string literal. Backslashes are doubled and the E'' form is used so the result
/// means the same whatever `standard_conforming_strings` is.
pub fn literal(value: &str) -> String {
    if value.contains('\\') {
        format!("E'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
    } else {
        format!("'{}'", value.replace('\'', "''"))
    }
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
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(literal("it's"), "'it''s'");
        assert_eq!(literal("a\\b'"), "E'a\\\\b'''");
    }
}
