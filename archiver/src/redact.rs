//! The one redaction every secret-bearing text goes through before it is printed, logged or
//! put in an error: database connection strings (URL or libpq `key = value`), store URLs, S3
//! endpoints, and any message that quotes one.
//!
//! What it hides:
//!
//! * a URL's password (`scheme://user:***@host`); for schemes other than `postgres` and
//!   `postgresql` the whole user info (it may be an access key or a token);
//! * the value of every URL query or fragment parameter whose name is a secret's
//!   ([`is_secret_key`]: `password`, `sslpassword`, `secret_access_key`, `access_key`, …);
//! * the value of every libpq `key = value` pair whose key is a secret's, with any whitespace
//!   around `=`, bare or single-quoted (backslash escapes, spaces), or double-quoted; and the
//!   value after a bare `password` / `sslpassword` keyword that lacks its `=`.
//!
//! It never fails and errs on the side of hiding: a text it cannot make sense of is masked
//! more, not less.

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Whether a parameter named `name` holds a secret: any name that, lower-cased and without
/// `_`/`-`, contains `password`, `passwd`, `secret`, `token`, `accesskey`, `accountkey`,
/// `masterkey`, `saskey`, `privatekey`, `signature` or `credential`, or is `pwd` or `sig`.
pub fn is_secret_key(name: &str) -> bool {
    let n: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    const PARTS: [&str; 11] = [
        "password",
        "passwd",
        "secret",
        "token",
        "accesskey",
        "accountkey",
        "masterkey",
        "saskey",
        "privatekey",
        "signature",
        "credential",
    ];
    n == "pwd" || n == "sig" || PARTS.iter().any(|p| n.contains(p))
}

/// `text` with every secret in it replaced by [`MASK`] (see the module's documentation).
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let word = rest.trim_start();
        out.push_str(&rest[..rest.len() - word.len()]);
        if word.is_empty() {
            return out;
        }
        let token_end = word.find(char::is_whitespace).unwrap_or(word.len());
        let url_first = word[..token_end]
            .find("://")
            .is_some_and(|u| !word[..u].contains('='));
        if url_first {
            out.push_str(&redact_urls(&word[..token_end]));
            rest = &word[token_end..];
            continue;
        }
        let key_end = word
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(word.len());
        let key = &word[..key_end];
        let after_key = &word[key_end..];
        let (eq, value_from) = match after_key.trim_start().strip_prefix('=') {
            Some(v) => (true, v),
            None => (false, after_key),
        };
        let bare_keyword = !eq
            && (key.eq_ignore_ascii_case("password") || key.eq_ignore_ascii_case("sslpassword"));
        if !eq && !bare_keyword {
            out.push_str(&redact_urls(key));
            rest = after_key;
            continue;
        }
        let value = value_from.trim_start();
        let lead = &word[..word.len() - value.len()];
        let secret = is_secret_key(key);
        let value_len = value_span(value, secret);
        out.push_str(&redact_urls(lead));
        if value_len > 0 && secret {
            out.push_str(MASK);
        } else {
            out.push_str(&redact_urls(&value[..value_len]));
        }
        rest = &value[value_len..];
    }
}

/// The length of the value at the start of `s`: up to the closing quote of a single- or
/// double-quoted one (backslash escapes; to the end when unterminated), else up to whitespace;
/// for a `secret` one, whitespace that no backslash escapes (libpq and tokio-postgres read an
/// unquoted `password=a\ b` as `a b`). Other values keep ending at any whitespace, so a
/// secret after one whose last character is a backslash is still masked on its own.
fn value_span(s: &str, secret: bool) -> usize {
    let Some(quote) = s.chars().next().filter(|c| *c == '\'' || *c == '"') else {
        if !secret {
            return s.find(char::is_whitespace).unwrap_or(s.len());
        }
        let mut chars = s.char_indices();
        while let Some((i, c)) = chars.next() {
            if c == '\\' {
                chars.next();
            } else if c.is_whitespace() {
                return i;
            }
        }
        return s.len();
    };
    let mut chars = s.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        if c == '\\' {
            chars.next();
        } else if c == quote {
            return i + c.len_utf8();
        }
    }
    s.len()
}

/// `token` with every URL in it (`scheme://…`, up to a quote or angle bracket) redacted.
fn redact_urls(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    let mut rest = token;
    while let Some(sep) = rest.find("://") {
        let scheme_start = rest[..sep]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[sep..]
            .find(|c: char| matches!(c, '"' | '\'' | '<' | '>' | '`') || c.is_whitespace())
            .map_or(rest.len(), |e| sep + e);
        out.push_str(&rest[..scheme_start]);
        out.push_str(&redact_url(&rest[scheme_start..sep], &rest[sep + 3..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `scheme://after` with its user info's secret and its secret parameters masked.
fn redact_url(scheme: &str, after: &str) -> String {
    let mut out = format!("{scheme}://");
    let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    // A password holding an unescaped `/`, `?` or `#` ends the authority early: the last `@`
    // anywhere then ends the user info (hiding more rather than less).
    let at = after[..authority_end]
        .rfind('@')
        .or_else(|| after.rfind('@'));
    let rest = match at {
        Some(at) => {
            let userinfo = &after[..at];
            let postgres = scheme.eq_ignore_ascii_case("postgres")
                || scheme.eq_ignore_ascii_case("postgresql");
            match userinfo.split_once(':') {
                Some((user, _)) if postgres => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(MASK);
                }
                None if postgres => out.push_str(userinfo),
                _ => out.push_str(MASK),
            }
            out.push('@');
            &after[at + 1..]
        }
        None => after,
    };
    // Query and fragment parameters: `name=value` pieces separated by `&` or `;`.
    let params_start = rest.find(['?', '#']).unwrap_or(rest.len());
    out.push_str(&rest[..params_start]);
    let mut piece_start = params_start;
    for (i, c) in rest[params_start..].char_indices() {
        let i = params_start + i;
        if matches!(c, '?' | '#' | '&' | ';') {
            out.push_str(&redact_param(&rest[piece_start..i]));
            out.push(c);
            piece_start = i + 1;
        }
    }
    out.push_str(&redact_param(&rest[piece_start.min(rest.len())..]));
    out
}

/// One `name=value` query parameter, its value masked when the (percent-decoded) name is a
/// secret's.
fn redact_param(piece: &str) -> String {
    match piece.split_once('=') {
        Some((name, value)) if !value.is_empty() => {
            let decoded: String = url::form_urlencoded::parse(name.as_bytes())
                .map(|(k, _)| k.into_owned())
                .collect();
            if is_secret_key(&decoded) {
                format!("{name}={MASK}")
            } else {
                piece.to_owned()
            }
        }
        _ => piece.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that `text` redacts to `want` and that none of `secrets` survives.
    fn hides(text: &str, want: &str, secrets: &[&str]) {
        let got = redact(text);
        assert_eq!(got, want, "{text}");
        for s in secrets {
            assert!(!got.contains(s), "{s:?} survives in {got:?}");
        }
    }

    #[test]
    fn url_user_info_passwords_are_hidden() {
        hides(
            "postgres://u:secret@h/d",
            "postgres://u:***@h/d",
            &["secret"],
        );
        hides(
            "postgresql://u:pa%40ss@h1:5432,h2:5433/d",
            "postgresql://u:***@h1:5432,h2:5433/d",
            &["pa%40ss"],
        );
        // A password with an unescaped `/` or `?` still ends at the last `@`.
        hides("postgres://u:p/w?x@h/d", "postgres://u:***@h/d", &["p/w"]);
        hides("postgres://u@h/d", "postgres://u@h/d", &[]);
        // Outside postgres the user itself may be a key.
        hides(
            "s3://AKIAXXXX:wJalr@bucket/pfx",
            "s3://***@bucket/pfx",
            &["AKIAXXXX", "wJalr"],
        );
        hides(
            "http://minio:minio123@127.0.0.1:9000",
            "http://***@127.0.0.1:9000",
            &["minio123"],
        );
    }

    #[test]
    fn url_query_secrets_are_hidden() {
        hides(
            "postgres://user:pw@host/db?password=secret&sslmode=require",
            "postgres://user:***@host/db?password=***&sslmode=require",
            &["pw@", "secret"],
        );
        hides(
            "postgres://host/db?sslpassword=k1&application_name=a&PassWord=k2",
            "postgres://host/db?sslpassword=***&application_name=a&PassWord=***",
            &["k1", "k2"],
        );
        hides(
            "s3://bucket/p?access_key_id=AKIA1&secret_access_key=S2&aws_secret_access_key=S3&session_token=T4&region=eu",
            "s3://bucket/p?access_key_id=***&secret_access_key=***&aws_secret_access_key=***&session_token=***&region=eu",
            &["AKIA1", "S2", "S3", "T4"],
        );
        // Percent-encoded names are decoded before they are judged; fragments too.
        hides(
            "az://c/p?sv=1&sig=abc%2F#pass%77ord=zz",
            "az://c/p?sv=1&sig=***#pass%77ord=***",
            &["abc", "zz"],
        );
    }

    #[test]
    fn libpq_key_values_are_hidden_in_every_spelling() {
        hides(
            "host=h user=u password=secret dbname=d",
            "host=h user=u password=*** dbname=d",
            &["secret"],
        );
        hides(
            "host=h password = 'se cret' dbname=d",
            "host=h password = *** dbname=d",
            &["se", "cret"],
        );
        hides(
            r"password='a\'b c' host=h",
            "password=*** host=h",
            &["a\\'b", "b c"],
        );
        hides("password=  x host=h", "password=  *** host=h", &["x "]);
        hides("password\t=\n'x y'", "password\t=\n***", &["x", "y"]);
        hides(
            "sslpassword=k1 PASSWORD=k2 sslkey=/k",
            "sslpassword=*** PASSWORD=*** sslkey=/k",
            &["k1", "k2"],
        );
        hides(
            "password='unterminated x",
            "password=***",
            &["unterminated"],
        );
        hides(
            r#"password="se cret" host=h"#,
            "password=*** host=h",
            &["se", "cret"],
        );
        // An unquoted value goes on past a backslash-escaped space (libpq's and
        // tokio-postgres's reading: the password is `a b`).
        hides(
            r"password=a\ b host=h",
            "password=*** host=h",
            &["b host", "a\\"],
        );
        hides(r"password=a\\ host=h", "password=*** host=h", &[r"a\\"]);
        hides(
            r"sslrootcert=C:\certs\ password=x host=h",
            r"sslrootcert=C:\certs\ password=*** host=h",
            &["=x"],
        );
        // libpq needs the `=`; a password given without it is still hidden.
        hides("host=h password secret", "host=h password ***", &["secret"]);
        hides("password=", "password=", &[]);
    }

    #[test]
    fn urls_and_pairs_inside_messages_are_hidden() {
        hides(
            "error: unrecognized subcommand 'postgres://u:pw@h/d?password=p2'",
            "error: unrecognized subcommand 'postgres://u:***@h/d?password=***'",
            &["pw", "p2"],
        );
        hides(
            "Error performing PUT http://key:secret@minio:9000/b/k in 1s",
            "Error performing PUT http://***@minio:9000/b/k in 1s",
            &["secret"],
        );
        hides(
            "database_url = \"postgres://u:pw@h/d\"",
            "database_url = \"postgres://u:***@h/d\"",
            &["pw"],
        );
        // A secret that looks like a URL is a secret.
        hides("password=ab://cd host=h", "password=*** host=h", &["cd"]);
        // Plain prose and ordinary settings are left alone.
        for plain in [
            "give both the S3 access key id and the secret, or neither",
            "sslmode=verify-ca needs trusted roots",
            "lease = \"soon\": expected a duration",
            "",
        ] {
            assert_eq!(redact(plain), plain);
        }
        // Redacting twice changes nothing.
        let once = redact("postgres://u:pw@h/d?password=x host=h password='y z'");
        assert_eq!(redact(&once), once);
    }

    #[test]
    fn secret_names_are_recognised() {
        for k in [
            "password",
            "sslpassword",
            "secret",
            "secret_access_key",
            "aws_secret_access_key",
            "access_key",
            "access_key_id",
            "AWS_SESSION_TOKEN",
            "client-secret",
            "account_key",
            "sig",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in [
            "host", "user", "sslkey", "sslcert", "sslmode", "region", "dbname",
        ] {
            assert!(!is_secret_key(k), "{k}");
        }
    }
}
