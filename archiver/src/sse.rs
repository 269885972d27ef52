//! Server-side encryption of the archives in an S3 store (`--s3-sse`, `--s3-sse-kms-key-id`):
//! the archiver encrypts nothing itself (it would then have to keep the keys); it asks the
//! store to encrypt each object it writes, with the store's own keys (SSE-S3) or a KMS key
//! (SSE-KMS). Parsed once here, refused where it would mean nothing, and handed to object_store
//! as its `aws_server_side_encryption` / `aws_sse_kms_key_id` settings (`crate::store`).

/// What the store is asked to do with every object the archiver writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerSideEncryption {
    /// SSE-S3 (`x-amz-server-side-encryption: AES256`): the store's own keys.
    Aes256,
    /// SSE-KMS (`x-amz-server-side-encryption: aws:kms`) with this key (an id, alias or ARN;
    /// not a secret), or the account's default key for S3 when `None`.
    Kms {
        /// `x-amz-server-side-encryption-aws-kms-key-id`.
        key_id: Option<String>,
    },
}

/// Server-side encryption options that cannot be used as given (exit 2, a configuration
/// error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// `--s3-sse` is neither `aes256` nor `aws:kms`.
    #[error("s3_sse = {0:?}: use aes256 (SSE-S3) or aws:kms (SSE-KMS)")]
    UnknownMode(String),
    /// `--s3-sse-kms-key-id` without `--s3-sse aws:kms`.
    #[error("s3_sse_kms_key_id is given without s3_sse = \"aws:kms\": a KMS key is only used by SSE-KMS")]
    KeyIdWithoutKms,
    /// An empty `--s3-sse-kms-key-id` (leave it out for the account's default key).
    #[error("s3_sse_kms_key_id is empty: leave it out to use the account's default KMS key")]
    EmptyKeyId,
    /// The store is not S3: a `file://` store relies on the disk's encryption, and the other
    /// clouds' encryption is configured on the bucket.
    #[error(
        "s3_sse / s3_sse_kms_key_id are for s3:// stores only, not a {scheme} store{why}",
        why = match .scheme.as_str() {
            "file://" => ": a file store relies on the encryption of the disk it is on",
            _ => ": configure encryption on the store itself",
        }
    )]
    NotS3 {
        /// The store's scheme (`file://`, `memory://`, `gs://`, `az://`), never its URL.
        scheme: String,
    },
    /// `--s3-sse aes256` while the environment names a KMS key (`AWS_SSE_KMS_KEY_ID`): S3
    /// refuses a KMS key with SSE-S3.
    #[error(
        "s3_sse = \"aes256\" but AWS_SSE_KMS_KEY_ID names a KMS key: unset it, or use \
         s3_sse = \"aws:kms\" with s3_sse_kms_key_id"
    )]
    KmsKeyInEnvironment,
}

impl ServerSideEncryption {
    /// The encryption `mode` and `key_id` ask for (`None`, `None`: none of ours; the object
    /// store's own `AWS_SERVER_SIDE_ENCRYPTION` may still apply), for a store at `store` (a
    /// URL: only its scheme is read, and never shown).
    pub fn resolve(
        mode: Option<&str>,
        key_id: Option<&str>,
        store: &str,
    ) -> Result<Option<ServerSideEncryption>, SseError> {
        let sse = match (mode, key_id) {
            (None, None) => return Ok(None),
            (None, Some(_)) => return Err(SseError::KeyIdWithoutKms),
            (Some(m), key_id) if m.eq_ignore_ascii_case("aws:kms") => {
                let key_id = match key_id.map(str::trim) {
                    Some("") => return Err(SseError::EmptyKeyId),
                    other => other.map(str::to_owned),
                };
                ServerSideEncryption::Kms { key_id }
            }
            (Some(m), None) if m.eq_ignore_ascii_case("aes256") => ServerSideEncryption::Aes256,
            (Some(m), Some(_)) if m.eq_ignore_ascii_case("aes256") => {
                return Err(SseError::KeyIdWithoutKms)
            }
            (Some(m), _) => return Err(SseError::UnknownMode(m.to_owned())),
        };
        match store.split_once("://") {
            Some((scheme, _)) if scheme != "s3" => Err(SseError::NotS3 {
                scheme: format!("{}://", scheme.to_ascii_lowercase()),
            }),
            // An S3 store, or no URL at all, which opening the store refuses with its reason.
            _ => Ok(Some(sse)),
        }
    }

    /// The object store's settings for it, by the names object_store parses
    /// ([`object_store::aws::AmazonS3ConfigKey`]'s `FromStr`; its `S3EncryptionConfigKey` is not
    /// public), to be set key by key on the S3 builder so the rest of what it read from the
    /// environment stays.
    pub fn config_keys(&self) -> Vec<(&'static str, String)> {
        match self {
            ServerSideEncryption::Aes256 => vec![(SSE_KEY, "AES256".into())],
            ServerSideEncryption::Kms { key_id } => {
                let mut keys = vec![(SSE_KEY, "aws:kms".into())];
                if let Some(id) = key_id {
                    keys.push((KMS_KEY_ID_KEY, id.clone()));
                }
                keys
            }
        }
    }
}

/// object_store's name of the encryption type (`AWS_SERVER_SIDE_ENCRYPTION` in its
/// environment).
pub const SSE_KEY: &str = "aws_server_side_encryption";
/// object_store's name of the KMS key id (`AWS_SSE_KMS_KEY_ID` in its environment).
pub const KMS_KEY_ID_KEY: &str = "aws_sse_kms_key_id";

impl std::fmt::Display for ServerSideEncryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerSideEncryption::Aes256 => f.write_str("aes256 (SSE-S3)"),
            ServerSideEncryption::Kms { key_id: None } => {
                f.write_str("aws:kms (SSE-KMS, the account's default key)")
            }
            ServerSideEncryption::Kms { key_id: Some(id) } => {
                write!(f, "aws:kms (SSE-KMS, key {id})")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S3: &str = "s3://bucket/prefix";

    #[test]
    fn the_two_modes_parse_and_nothing_else_does() {
        let r = |m, k| ServerSideEncryption::resolve(m, k, S3);
        assert_eq!(r(None, None), Ok(None));
        assert_eq!(
            r(Some("aes256"), None),
            Ok(Some(ServerSideEncryption::Aes256))
        );
        assert_eq!(
            r(Some("AES256"), None),
            Ok(Some(ServerSideEncryption::Aes256))
        );
        assert_eq!(
            r(Some("aws:kms"), None),
            Ok(Some(ServerSideEncryption::Kms { key_id: None }))
        );
        assert_eq!(
            r(Some("aws:kms"), Some("alias/archives")),
            Ok(Some(ServerSideEncryption::Kms {
                key_id: Some("alias/archives".into())
            }))
        );
        assert_eq!(
            r(Some("sse-c"), None),
            Err(SseError::UnknownMode("sse-c".into()))
        );
        assert_eq!(
            r(Some("aws:kms:dsse"), None),
            Err(SseError::UnknownMode("aws:kms:dsse".into()))
        );
        assert_eq!(r(Some("aws:kms"), Some(" ")), Err(SseError::EmptyKeyId));
    }

    #[test]
    fn a_kms_key_id_needs_aws_kms() {
        let r = |m, k| ServerSideEncryption::resolve(m, k, S3);
        assert_eq!(r(None, Some("k")), Err(SseError::KeyIdWithoutKms));
        assert_eq!(r(Some("aes256"), Some("k")), Err(SseError::KeyIdWithoutKms));
    }

    #[test]
    fn stores_other_than_s3_are_refused_naming_the_scheme_only() {
        for (store, scheme) in [
            ("file:///var/archive", "file://"),
            ("file://./archive", "file://"),
            ("memory://", "memory://"),
            ("gs://b/p", "gs://"),
            ("az://c/p", "az://"),
        ] {
            let e = ServerSideEncryption::resolve(Some("aes256"), None, store).unwrap_err();
            assert_eq!(
                e,
                SseError::NotS3 {
                    scheme: scheme.into()
                }
            );
            let shown = e.to_string();
            assert!(
                !shown.contains("archive") && !shown.contains("b/p"),
                "{shown}"
            );
        }
        let e = ServerSideEncryption::resolve(Some("aws:kms"), None, "file:///a").unwrap_err();
        assert!(e.to_string().contains("encryption of the disk"), "{e}");
        // A key id alone with a file store is refused too (for being without aws:kms first).
        assert!(ServerSideEncryption::resolve(None, Some("k"), "file:///a").is_err());
    }

    #[test]
    fn the_object_store_settings_are_its_own_names_and_values() {
        let names = |sse: ServerSideEncryption| {
            sse.config_keys()
                .into_iter()
                .map(|(k, v)| {
                    let key: object_store::aws::AmazonS3ConfigKey = k.parse().expect("a key");
                    (key.as_ref().to_owned(), v)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(ServerSideEncryption::Aes256),
            [("aws_server_side_encryption".into(), "AES256".into())]
        );
        assert_eq!(
            names(ServerSideEncryption::Kms { key_id: None }),
            [("aws_server_side_encryption".into(), "aws:kms".into())]
        );
        assert_eq!(
            names(ServerSideEncryption::Kms {
                key_id: Some("arn:aws:kms:eu-west-1:1:key/k".into())
            }),
            [
                ("aws_server_side_encryption".into(), "aws:kms".into()),
                (
                    "aws_sse_kms_key_id".into(),
                    "arn:aws:kms:eu-west-1:1:key/k".into()
                )
            ]
        );
    }
}
