//! SQL names. A manifest carries column, schema and table names; the extension builds its
//! statements from the same names and `restore` its DDL, both through this one quoting.

/// Quotes an identifier, always: a name is used exactly as given (case, spaces, quotes).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_always_quoted() {
        assert_eq!(quote_ident("created_at"), "\"created_at\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
    }
}
