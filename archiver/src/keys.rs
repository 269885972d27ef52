//! Object keys, minted under the batch id: `<prefix>/<database>/<schema>.<table>/<yyyy>/<mm>/<dd>/<batch>.slice`
//! and `.manifest.json` beside it. The date is the claim's, so a resumed batch finds its keys.

use pg_retention_format::Manifest;

/// Key of the slice of `m`, relative to the store prefix.
pub fn slice_key(m: &Manifest) -> String {
    format!("{}.slice", stem(m))
}

/// Key of the manifest of `m`, relative to the store prefix.
pub fn manifest_key(m: &Manifest) -> String {
    format!("{}.manifest.json", stem(m))
}

fn stem(m: &Manifest) -> String {
    let d = &m.created_at;
    let (y, mo, da) = (
        d.get(0..4).unwrap_or("0000"),
        d.get(5..7).unwrap_or("00"),
        d.get(8..10).unwrap_or("00"),
    );
    format!("{}/{}/{y}/{mo}/{da}/{}", m.database, m.relation, m.batch)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_minted_under_the_batch() {
        let m = Manifest {
            format: 1,
            database: "app".into(),
            relation: "public.audit".into(),
            policy: "audit".into(),
            policy_version: 1,
            batch: "b1".into(),
            columns: vec![],
            key_columns: vec![],
            rows: 0,
            bytes: 0,
            blake3: String::new(),
            age_min: None,
            age_max: None,
            created_at: "2026-11-30T02:48:08.653101Z".into(),
            supersedes: None,
        };
        assert_eq!(slice_key(&m), "app/public.audit/2026/11/30/b1.slice");
        assert_eq!(
            manifest_key(&m),
            "app/public.audit/2026/11/30/b1.manifest.json"
        );
        assert_eq!(manifest_for(&slice_key(&m)), manifest_key(&m));
        assert_eq!(slice_for(&manifest_key(&m)), slice_key(&m));
    }
}
