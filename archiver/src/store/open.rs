//! [`Store::open`]: the store a URL names (`file://`, `memory://`, `s3://`, `gs://`, `az://`),
//! with the operator's timeouts and retry budget, refusing what a store URL must not carry
//! (credentials, a query, plain HTTP not asked for) before any request is made.

use super::Store;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::redact::redact;
use crate::sse::{ServerSideEncryption, SseError, KMS_KEY_ID_KEY};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::AzureConfigKey;
use object_store::gcp::GoogleConfigKey;
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};
use std::sync::Arc;

/// The client settings that are ours (timeouts; plain HTTP for an `http://` endpoint given with
/// `--s3-endpoint`), set key by key on a builder that read the store's standard environment
/// (`AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, `GOOGLE_*`, `AZURE_*`, …): setting whole client options
/// would replace what it read.
fn client_keys(settings: &Settings) -> Vec<(ClientConfigKey, String)> {
    let mut keys = vec![
        (
            ClientConfigKey::Timeout,
            humantime::format_duration(settings.request_timeout).to_string(),
        ),
        (
            ClientConfigKey::ConnectTimeout,
            humantime::format_duration(settings.connect_timeout).to_string(),
        ),
    ];
    if settings
        .s3_endpoint
        .as_deref()
        .is_some_and(|e| e.starts_with("http://"))
    {
        keys.push((ClientConfigKey::AllowHttp, "true".into()));
    }
    keys
}

/// Refuses an `http://` endpoint (ours or `AWS_ENDPOINT`) that plain HTTP was not allowed for,
/// with the variables to set, before the client builder fails with an opaque "builder error".
fn refuse_plain_http(endpoint: Option<String>, allow_http: Option<String>) -> Result<()> {
    let allowed = allow_http.is_some_and(|v| v.eq_ignore_ascii_case("true"));
    match endpoint {
        Some(e) if e.starts_with("http://") && !allowed => Err(Error::Config(format!(
            "the S3 endpoint {} is plain HTTP, which is not allowed: set AWS_ALLOW_HTTP=true \
             with AWS_ENDPOINT, or pass the endpoint as --s3-endpoint / PG_RETENTION_S3_ENDPOINT",
            redact(&e)
        ))),
        _ => Ok(()),
    }
}

/// Refuses an S3 endpoint (ours or `AWS_ENDPOINT`) with credentials in its user part: the
/// HTTP client logs the endpoint as it is, and credentials have their own settings.
fn refuse_endpoint_credentials(endpoint: Option<&str>) -> Result<()> {
    let has_user = endpoint
        .and_then(|e| url::Url::parse(e).ok())
        .is_some_and(|u| !u.username().is_empty() || u.password().is_some());
    if has_user {
        return Err(Error::Config(format!(
            "the S3 endpoint {} carries credentials: give them as AWS_ACCESS_KEY_ID and              AWS_SECRET_ACCESS_KEY (or the config file's s3 credentials) instead",
            redact(endpoint.unwrap_or_default())
        )));
    }
    Ok(())
}

/// The retry budget of every request: both bounds are the operator's (the object store's own
/// defaults, 10 retries over 3 minutes, would hold a failing batch for minutes).
fn retry_config(settings: &Settings) -> RetryConfig {
    RetryConfig {
        max_retries: settings.max_retries,
        retry_timeout: settings.retry_timeout,
        ..RetryConfig::default()
    }
}

/// Refuses a cloud or memory store URL that carries user info, a query or a fragment: the
/// archiver reads none of them (credentials come from flags and the cloud's environment), and
/// what follows the bucket would otherwise become part of every object key.
fn refuse_url_extras(scheme: &str, rest: &str) -> Result<()> {
    let authority = rest.split('/').next().unwrap_or_default();
    if scheme != "file" && (authority.contains('@') || rest.contains(['?', '#'])) {
        return Err(Error::Config(format!(
            "store {}://{}: user info, `?` and `#` are not part of a store URL; give credentials \
             as --s3-access-key-id / --s3-secret-access-key or the cloud's environment",
            scheme,
            redact(rest)
        )));
    }
    Ok(())
}

fn split_bucket(rest: &str) -> (String, String) {
    let mut parts = rest.splitn(2, '/');
    let bucket = parts.next().unwrap_or_default().to_owned();
    let prefix = parts
        .next()
        .unwrap_or_default()
        .trim_matches('/')
        .to_owned();
    (bucket, prefix)
}

/// The S3 client's builder: `base` (what the environment gave) with the bucket, region, retry
/// budget, `client` keys, endpoint, credentials and server-side encryption of `settings` set
/// key by key; refused when the endpoint carries credentials or is plain HTTP not allowed, or
/// when SSE-S3 was asked for while the environment names a KMS key.
fn s3_builder(
    settings: &Settings,
    base: AmazonS3Builder,
    bucket: String,
    retry: RetryConfig,
    client: Vec<(ClientConfigKey, String)>,
) -> Result<AmazonS3Builder> {
    let mut b = base
        .with_bucket_name(bucket)
        .with_region(&settings.s3_region)
        .with_retry(retry);
    for (key, value) in client {
        b = b.with_config(AmazonS3ConfigKey::Client(key), value);
    }
    if let Some(endpoint) = &settings.s3_endpoint {
        b = b
            .with_endpoint(endpoint)
            .with_virtual_hosted_style_request(false);
    }
    if let Some((key, secret)) = &settings.s3_credentials {
        b = b.with_access_key_id(key).with_secret_access_key(secret);
    }
    if let Some(sse) = &settings.s3_sse {
        // object_store would send the environment's key id beside `AES256`, which S3 refuses.
        let kms_key: AmazonS3ConfigKey = KMS_KEY_ID_KEY.parse()?;
        if *sse == ServerSideEncryption::Aes256 && b.get_config_value(&kms_key).is_some() {
            return Err(SseError::KmsKeyInEnvironment.into());
        }
        for (name, value) in sse.config_keys() {
            b = b.with_config(name.parse()?, value);
        }
    }
    let endpoint = b.get_config_value(&AmazonS3ConfigKey::Endpoint);
    refuse_endpoint_credentials(endpoint.as_deref())?;
    refuse_plain_http(
        endpoint,
        b.get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp)),
    )?;
    Ok(b)
}

impl Store {
    /// Opens the store named by `settings.store`.
    pub fn open(settings: &Settings) -> Result<Store> {
        let url = settings.store.as_str();
        let client = client_keys(settings);
        let retry = retry_config(settings);
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            Error::Config(format!(
                "store {:?} is not a URL (file:///path, s3://bucket/prefix, ...)",
                redact(url)
            ))
        })?;
        refuse_url_extras(scheme, rest)?;
        let (inner, prefix): (Arc<dyn ObjectStore>, String) = match scheme {
            "file" => {
                std::fs::create_dir_all(rest)?;
                let root = std::fs::canonicalize(rest)?;
                (
                    Arc::new(object_store::local::LocalFileSystem::new_with_prefix(root)?),
                    String::new(),
                )
            }
            "memory" => (
                Arc::new(object_store::memory::InMemory::new()),
                rest.trim_matches('/').to_owned(),
            ),
            "s3" => {
                let (bucket, prefix) = split_bucket(rest);
                let b = s3_builder(
                    settings,
                    object_store::aws::AmazonS3Builder::from_env(),
                    bucket,
                    retry,
                    client,
                )?;
                (Arc::new(b.build()?), prefix)
            }
            "gs" => {
                let (bucket, prefix) = split_bucket(rest);
                let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry);
                for (key, value) in client {
                    b = b.with_config(GoogleConfigKey::Client(key), value);
                }
                (Arc::new(b.build()?), prefix)
            }
            "az" => {
                let (container, prefix) = split_bucket(rest);
                let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_container_name(container)
                    .with_retry(retry);
                for (key, value) in client {
                    b = b.with_config(AzureConfigKey::Client(key), value);
                }
                (Arc::new(b.build()?), prefix)
            }
            other => return Err(Error::Config(format!("unknown store scheme {other:?}"))),
        };
        Ok(Store {
            inner,
            prefix,
            bound: super::timed::bound(scheme, settings),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Options;

    #[test]
    fn both_retry_bounds_are_the_operators() {
        let o = Options {
            store: Some("memory://pfx".into()),
            max_retries: Some(7),
            retry_timeout: Some("9s".into()),
            ..Default::default()
        };
        let retry = retry_config(&Settings::resolve(o).unwrap());
        assert_eq!(retry.max_retries, 7);
        assert_eq!(retry.retry_timeout, std::time::Duration::from_secs(9));
    }

    #[test]
    fn a_bucket_url_splits_into_bucket_and_prefix() {
        assert_eq!(
            split_bucket("archive/pg/x/"),
            ("archive".to_string(), "pg/x".to_string())
        );
        assert_eq!(
            split_bucket("archive"),
            ("archive".to_string(), String::new())
        );
    }

    #[test]
    fn credentials_in_a_store_url_are_refused_without_being_shown() {
        for url in [
            "s3://AKIA1:hunter2@bucket/p",
            "s3://bucket/p?secret_access_key=hunter2",
            "gs://bucket/p#token=hunter2",
            "memory://x?password=hunter2",
        ] {
            let o = Options {
                store: Some(url.into()),
                ..Default::default()
            };
            let e = Store::open(&Settings::resolve(o).unwrap())
                .err()
                .expect("refused");
            let shown = e.to_string();
            assert!(matches!(e, Error::Config(_)), "{shown}");
            assert!(
                !shown.contains("hunter2") && !shown.contains("AKIA1"),
                "{shown}"
            );
        }
        let e = refuse_plain_http(Some("http://k:hunter2@minio:9000".into()), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("AWS_ALLOW_HTTP") && !e.contains("hunter2"),
            "{e}"
        );
    }

    /// The S3 builder for `options` (an `s3://` store), from an empty environment.
    fn builder(options: Options, base: AmazonS3Builder) -> Result<AmazonS3Builder> {
        let settings = Settings::resolve(options)?;
        s3_builder(
            &settings,
            base,
            "bucket".into(),
            retry_config(&settings),
            client_keys(&settings),
        )
    }

    fn s3_with(mode: Option<&str>, key_id: Option<&str>) -> Options {
        Options {
            store: Some("s3://bucket/p".into()),
            s3_endpoint: Some("https://s3.example.net".into()),
            s3_sse: mode.map(Into::into),
            s3_sse_kms_key_id: key_id.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn server_side_encryption_reaches_the_s3_builder() {
        let sse: AmazonS3ConfigKey = crate::sse::SSE_KEY.parse().unwrap();
        let kms: AmazonS3ConfigKey = KMS_KEY_ID_KEY.parse().unwrap();
        let bucket_key: AmazonS3ConfigKey = "aws_sse_bucket_key_enabled".parse().unwrap();
        let set = |mode, key_id| {
            let b = builder(s3_with(mode, key_id), AmazonS3Builder::new()).expect("builds");
            let got = (b.get_config_value(&sse), b.get_config_value(&kms));
            b.build().expect("a client");
            got
        };
        assert_eq!(set(None, None), (None, None));
        assert_eq!(set(Some("aes256"), None), (Some("AES256".into()), None));
        assert_eq!(set(Some("aws:kms"), None), (Some("aws:kms".into()), None));
        assert_eq!(
            set(Some("aws:kms"), Some("arn:aws:kms:eu-west-1:1:key/k")),
            (
                Some("aws:kms".into()),
                Some("arn:aws:kms:eu-west-1:1:key/k".into())
            )
        );
        // Ours win over object_store's own variables, which stay when ours are not given.
        let from_env = || {
            AmazonS3Builder::new()
                .with_config(sse, "aws:kms")
                .with_config(bucket_key, "true")
        };
        let b = builder(s3_with(None, None), from_env()).expect("builds");
        assert_eq!(b.get_config_value(&sse).as_deref(), Some("aws:kms"));
        let b = builder(s3_with(Some("aes256"), None), from_env()).expect("builds");
        assert_eq!(b.get_config_value(&sse).as_deref(), Some("AES256"));
        let b = builder(s3_with(Some("aws:kms"), Some("k-2")), from_env()).expect("builds");
        assert_eq!(b.get_config_value(&kms).as_deref(), Some("k-2"));
        assert_eq!(b.get_config_value(&bucket_key).as_deref(), Some("true"));
    }

    #[test]
    fn sse_s3_with_a_kms_key_in_the_environment_is_refused() {
        let kms: AmazonS3ConfigKey = KMS_KEY_ID_KEY.parse().unwrap();
        let env = AmazonS3Builder::new().with_config(kms, "k-env");
        let e = builder(s3_with(Some("aes256"), None), env).unwrap_err();
        assert!(
            matches!(e, Error::Sse(SseError::KmsKeyInEnvironment)),
            "{e}"
        );
        assert_eq!(crate::exit::Exit::of(&e).code(), 2);
    }

    #[test]
    fn server_side_encryption_with_a_file_store_is_refused_before_opening_it() {
        let dir = std::env::temp_dir().join(format!("sse-refused-{}", std::process::id()));
        let o = Options {
            store: Some(format!("file://{}", dir.display())),
            s3_sse: Some("aes256".into()),
            ..Default::default()
        };
        let e = Settings::resolve(o).unwrap_err();
        assert!(matches!(e, Error::Sse(SseError::NotS3 { .. })), "{e}");
        assert!(e.to_string().contains("encryption of the disk"), "{e}");
        assert!(!dir.exists(), "nothing was created");
    }

    #[test]
    fn an_endpoint_with_credentials_is_refused_without_showing_them() {
        let e = refuse_endpoint_credentials(Some("http://AKIA:sekret@127.0.0.1:9")).unwrap_err();
        assert_eq!(crate::exit::Exit::of(&e).code(), 2);
        assert!(!e.to_string().contains("sekret"), "{e}");
        assert!(refuse_endpoint_credentials(Some("http://127.0.0.1:9")).is_ok());
        assert!(refuse_endpoint_credentials(None).is_ok());
    }
}
