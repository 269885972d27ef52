//! Object keys, minted under the batch id: `<prefix>/<namespace>/<schema>.<table>/<yyyy>/<mm>/<dd>/<batch>.slice`
//! and `.manifest.json` beside it. The date is the claim's, so a resumed batch finds its keys.
//! The namespace is the database's own (`crate::namespace`): databases sharing a store never
//! write, sweep or expire under each other's. Keys written before namespaces
//! (`<database>/<schema>.<table>/…`) stay where they are: the database recorded them.
//!
//! A key is the text the database records (`retention.archives.object_key`): `/`-separated
//! segments, each as it is (a table named `we"ird` keeps its quotes). [`path_of`] and
//! [`key_of`] are the only conversions between a key and the object store's [`Path`], which
//! percent-encodes each segment: every write, read, listing, comparison and delete goes
//! through them, so a key is encoded exactly once on its way in and decoded exactly once on
//! its way out. [`display`] and [`parse_display`] are the key as operators see and type it
//! (control characters escaped, one object per line).

use object_store::path::Path;
use pg_retention_format::Manifest;

/// Key of the slice of `m` in namespace `ns`, relative to the store prefix.
pub fn slice_key(ns: &str, m: &Manifest) -> String {
    format!("{}.slice", stem(ns, m))
}

/// Key of the manifest of `m` in namespace `ns`, relative to the store prefix.
pub fn manifest_key(ns: &str, m: &Manifest) -> String {
    format!("{}.manifest.json", stem(ns, m))
}

fn stem(ns: &str, m: &Manifest) -> String {
    let d = &m.created_at;
    let (y, mo, da) = (
        d.get(0..4).unwrap_or("0000"),
        d.get(5..7).unwrap_or("00"),
        d.get(8..10).unwrap_or("00"),
    );
    canonical(&format!("{ns}/{}/{y}/{mo}/{da}/{}", m.relation, m.batch))
}

/// Whether the name (last segment) of a key has the shape this product gives objects: a
/// slice (`<batch>.slice`, an erasure's rewrite `<batch>.s<n>.slice`) or a manifest
/// (`.manifest.json`), with a name before the suffix. A `notes.txt` or a `<batch>.slice.bak`
/// is not one.
pub fn is_product_name(name: &str) -> bool {
    name.strip_suffix(".slice")
        .or_else(|| name.strip_suffix(".manifest.json"))
        .is_some_and(|stem| !stem.is_empty() && !stem.starts_with('.'))
}

/// Whether `key` is an object of this product in namespace `ns`:
/// `<ns>/<relation…>/<yyyy>/<mm>/<dd>/<name>` with a product name ([`is_product_name`]). The
/// only objects `sweep-orphans` and `verify --all` consider; everything else is left alone.
pub fn in_namespace(ns: &str, key: &str) -> bool {
    let segments: Vec<&str> = key.split('/').collect();
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    match segments.as_slice() {
        [first, relation @ .., y, m, d, name] => {
            *first == ns
                && !relation.is_empty()
                && digits(y, 4)
                && digits(m, 2)
                && digits(d, 2)
                && is_product_name(name)
        }
        _ => false,
    }
}

/// `key` without empty segments (a relation or database name holding `//`, a leading or
/// trailing `/`): the object store has no empty segments, so this is the key of the object
/// `key` names, and the form listings give back.
pub fn canonical(key: &str) -> String {
    key.split('/')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

/// The object-store path of `key` under `prefix`: each segment encoded once, by object_store's
/// own rules (`PathPart`: `%`, `"`, control characters, … become `%XX`).
pub fn path_of(prefix: &str, key: &str) -> Path {
    Path::from_iter(prefix.split('/').chain(key.split('/')))
}

/// The key of the object at `path` under `prefix`: each segment decoded once. None when the
/// path is not under the prefix, or is not a path [`path_of`] makes (an object another writer
/// named, whose key would name some other object): the archiver leaves such objects alone.
pub fn key_of(prefix: &str, path: &Path) -> Option<String> {
    let segments = path
        .prefix_match(&path_of(prefix, ""))?
        .map(|part| percent_decode(part.as_ref()))
        .collect::<Option<Vec<String>>>()?;
    let key = segments.join("/");
    (!key.is_empty() && path_of(prefix, &key) == *path).then_some(key)
}

/// `%XX` sequences decoded; None when one is malformed or the result is not UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A key as printed for operators: `\\`, `\t`, `\n`, `\r` and `\u{..}` (other control
/// characters) escaped, so one object is one line and its columns stay tab-separated. Commands
/// take keys back in this form ([`parse_display`]).
pub fn display(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// A key typed with a backslash that does not start an escape [`display`] prints (a
/// configuration error: `crate::error` converts it).
#[derive(Debug, thiserror::Error)]
#[error("key {0:?}: a backslash starts \\\\, \\t, \\n, \\r or \\u{{hex}} (as ls prints keys)")]
pub struct UnreadableKey(String);

/// The key an operator typed, in the form [`display`] prints.
pub fn parse_display(typed: &str) -> Result<String, UnreadableKey> {
    let bad = || UnreadableKey(typed.to_owned());
    let mut out = String::with_capacity(typed.len());
    let mut chars = typed.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('u') => {
                let rest = chars.as_str();
                let hex = rest
                    .strip_prefix('{')
                    .and_then(|r| r.split_once('}'))
                    .map(|(hex, _)| hex)
                    .ok_or_else(bad)?;
                let code = u32::from_str_radix(hex, 16).map_err(|_| bad())?;
                out.push(char::from_u32(code).ok_or_else(bad)?);
                chars = rest[hex.len() + 2..].chars();
            }
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// The manifest key that belongs to a slice key (or the key itself if it is one).
pub fn manifest_for(key: &str) -> String {
    match key.strip_suffix(".slice") {
        Some(stem) => format!("{stem}.manifest.json"),
        None => key.to_owned(),
    }
}

/// The slice key that belongs to a manifest key (or the key itself if it is one).
pub fn slice_for(key: &str) -> String {
    match key.strip_suffix(".manifest.json") {
        Some(stem) => format!("{stem}.slice"),
        None => key.to_owned(),
    }
}

/// The relation of a table named `we"ird<TAB>tab<LF>name%2F/x`, as `format('%I.%I')` (the
/// extension's manifest) spells it.
#[cfg(test)]
pub(crate) const WEIRD_RELATION: &str = "public.\"we\"\"ird\ttab\nname%2F/x\"";

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty manifest of batch `b1` of `relation` under `policy`, made at `created_at`.
    fn manifest(relation: &str, policy: &str, created_at: &str) -> Manifest {
        Manifest {
            format: 1,
            database: "app".into(),
            relation: relation.into(),
            policy: policy.into(),
            policy_version: 1,
            batch: "b1".into(),
            columns: vec![],
            key_columns: vec![],
            rows: 0,
            bytes: 0,
            blake3: String::new(),
            age_min: None,
            age_max: None,
            created_at: created_at.into(),
            supersedes: None,
        }
    }

    #[test]
    fn keys_are_minted_under_the_batch() {
        let m = manifest("public.audit", "audit", "2026-11-30T02:48:08.653101Z");
        assert_eq!(
            slice_key("7.app", &m),
            "7.app/public.audit/2026/11/30/b1.slice"
        );
        assert_eq!(
            manifest_key("7.app", &m),
            "7.app/public.audit/2026/11/30/b1.manifest.json"
        );
        assert_eq!(manifest_for(&slice_key("n", &m)), manifest_key("n", &m));
        assert_eq!(slice_for(&manifest_key("n", &m)), slice_key("n", &m));
    }

    #[test]
    fn only_product_objects_of_the_namespace_are_ours() {
        let b = "0b7c5a52-6a47-4f0e-9d7e-1f2a3b4c5d6e";
        for name in [
            format!("{b}.slice"),
            format!("{b}.manifest.json"),
            format!("{b}.s12.slice"),
            format!("{b}.s3.manifest.json"),
        ] {
            assert!(is_product_name(&name), "{name}");
            let key = format!("7.app/public.audit/2026/11/30/{name}");
            assert!(in_namespace("7.app", &key), "{key}");
            assert!(!in_namespace("8.app", &key), "another namespace: {key}");
            let weird = format!("7.app/{WEIRD_RELATION}/2026/11/30/{name}");
            assert!(in_namespace("7.app", &canonical(&weird)), "{weird}");
        }
        for key in [
            format!("7.app/public.audit/2026/11/30/{b}.slice.bak"),
            "7.app/public.audit/2026/11/30/.slice".into(),
            "7.app/public.audit/2026/11/30/notes.txt".into(),
            format!("7.app/public.audit/2026/11/{b}.slice"),
            format!("7.app/2026/11/30/{b}.slice"),
            "7.app/notes.txt".into(),
            format!("7.app/public.audit/26/11/30/{b}.slice"),
            "_retention/namespaces/7.app.json".into(),
        ] {
            assert!(!in_namespace("7.app", &key), "{key}");
        }
    }

    #[test]
    fn a_key_is_encoded_once_and_decoded_once() {
        let key = format!("app/{WEIRD_RELATION}/2026/11/30/b1.slice");
        for prefix in ["", "pfx", "a/b"] {
            let path = path_of(prefix, &key);
            assert!(
                !path.as_ref().contains('"') && !path.as_ref().contains('\t'),
                "{path}"
            );
            assert!(path.as_ref().contains("%252F"), "% encoded once: {path}");
            assert!(!path.as_ref().contains("%25252F"), "not twice: {path}");
            assert_eq!(key_of(prefix, &path).as_deref(), Some(key.as_str()));
        }
        // Plain keys are their own path: objects written before stay where they are.
        let plain = "app/public.audit/2026/11/30/b1.slice";
        assert_eq!(path_of("pfx", plain).as_ref(), format!("pfx/{plain}"));
        // A path object_store would not make from a key is nobody's key.
        assert_eq!(
            key_of("", &Path::from_iter(["a%2Fb"])),
            Some("a%2Fb".into())
        );
        assert_eq!(key_of("", &Path::parse("a%2Fb").unwrap()), None);
        assert_eq!(key_of("", &Path::parse("a%41").unwrap()), None);
        assert_eq!(key_of("", &Path::parse("a%zz").unwrap()), None);
        assert_eq!(key_of("pfx", &Path::parse("other/a").unwrap()), None);
        assert_eq!(key_of("pfx", &Path::parse("pfx").unwrap()), None);
    }

    #[test]
    fn keys_are_minted_without_empty_segments() {
        let mut m = manifest("public.\"a//b/\"", "p", "2026-11-30T00:00:00Z");
        let key = slice_key("app", &m);
        assert_eq!(key, "app/public.\"a/b/\"/2026/11/30/b1.slice");
        assert_eq!(key_of("", &path_of("", &key)), Some(key));
        m.relation = WEIRD_RELATION.into();
        let key = slice_key("app", &m);
        assert_eq!(canonical(&key), key);
    }

    #[test]
    fn keys_are_displayed_one_per_line_and_read_back() {
        let key = format!("app/{WEIRD_RELATION}/a\\b\u{7}/b1.slice");
        let shown = display(&key);
        assert!(!shown.contains('\t') && !shown.contains('\n'), "{shown}");
        assert_eq!(parse_display(&shown).unwrap(), key);
        let plain = "app/public.\"we\"\"ird 100%\"/b1.slice";
        assert_eq!(
            display(plain),
            plain,
            "printable keys are shown as they are"
        );
        for bad in ["a\\x", "a\\", "a\\u{zz}", "a\\u{110000}", "a\\u{41"] {
            assert!(parse_display(bad).is_err(), "{bad}");
        }
    }
}
