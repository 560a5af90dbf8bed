//! URLs to object stores: which provider, which bucket or container, which
//! path, and the store built from the provider's environment variables.
//!
//! In: a URL string. Out: a `Located` (store, display base, object path) or
//! an [`Error::BadUrl`] / [`Error::Config`] naming the URL.

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use super::{Error, Located, MAX_RETRIES, RETRY_TIMEOUT};

/// The schemes of object storage URLs, as `rankscope import` takes them.
const SCHEMES: [&str; 9] = [
    "s3://", "s3a://", "gs://", "az://", "azure://", "abfs://", "abfss://", "https://", "http://",
];

/// Whether `s` is an object storage or http(s) URL rather than a local path.
pub fn is_remote(s: &str) -> bool {
    SCHEMES
        .iter()
        .any(|p| s.len() > p.len() && s.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p)))
}

fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
    }
}

/// Whether the S3 endpoint the environment names is plain http (a local
/// S3-compatible store such as MinIO or moto): then http is allowed, as
/// the user asked for it.
fn env_endpoint_is_http() -> bool {
    ["AWS_ENDPOINT_URL", "AWS_ENDPOINT"].iter().any(|k| {
        std::env::var(k)
            .map(|v| v.starts_with("http://"))
            .unwrap_or(false)
    })
}

/// The store and path `url` names.
pub(crate) fn locate(url: &str) -> Result<Located, Error> {
    let bad = |reason: &str| Error::BadUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let config = |source| Error::Config {
        url: url.to_owned(),
        source,
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("no scheme (s3://, gs://, az://, https://)"))?;
    let scheme = scheme.to_ascii_lowercase();
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err(bad("no bucket, container or host"));
    }
    let object_path = |p: &str| {
        Path::parse(p.trim_end_matches('/')).map_err(|e| bad(&format!("bad object path: {e}")))
    };
    let store: Arc<dyn ObjectStore>;
    let (base, path) = match scheme.as_str() {
        "s3" | "s3a" => {
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(host)
                .with_retry(retry());
            if env_endpoint_is_http() {
                b = b.with_allow_http(true);
            }
            store = Arc::new(b.build().map_err(config)?);
            (format!("{scheme}://{host}/"), object_path(path)?)
        }
        "gs" => {
            let b = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(host)
                .with_retry(retry());
            store = Arc::new(b.build().map_err(config)?);
            (format!("gs://{host}/"), object_path(path)?)
        }
        "az" | "azure" | "abfs" | "abfss" => {
            // fsspec's form: the host is the container.
            let (container, account) = match host.split_once('@') {
                Some((c, a)) => (c, a.split('.').next()),
                None => (host, None),
            };
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_container_name(container)
                .with_retry(retry());
            if let Some(account) = account {
                b = b.with_account(account);
            }
            store = Arc::new(b.build().map_err(config)?);
            (format!("{scheme}://{host}/"), object_path(path)?)
        }
        "https" | "http" if host.ends_with(".blob.core.windows.net") => {
            let account = host.split('.').next().unwrap_or_default();
            let (container, path) = path.split_once('/').unwrap_or((path, ""));
            if container.is_empty() {
                return Err(bad("no container after the account host"));
            }
            let b = MicrosoftAzureBuilder::from_env()
                .with_account(account)
                .with_container_name(container)
                .with_retry(retry());
            store = Arc::new(b.build().map_err(config)?);
            (
                format!("{scheme}://{host}/{container}/"),
                object_path(path)?,
            )
        }
        "https" | "http" => {
            let b = HttpBuilder::new()
                .with_url(format!("{scheme}://{host}"))
                .with_client_options(ClientOptions::new().with_allow_http(scheme == "http"))
                .with_retry(retry());
            store = Arc::new(b.build().map_err(config)?);
            (format!("{scheme}://{host}/"), object_path(path)?)
        }
        _ => return Err(bad("unknown scheme (s3://, gs://, az://, https://)")),
    };
    Ok(Located { store, base, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_are_told_from_paths() {
        for u in [
            "s3://b/p/",
            "S3://b",
            "gs://b/x.json",
            "az://c/p",
            "https://a.blob.core.windows.net/c/p/",
            "http://h/x.json",
        ] {
            assert!(is_remote(u), "{u}");
        }
        for p in ["traces/", "/tmp/s3://x", "s3://", "./gs:/x", "file.json"] {
            assert!(!is_remote(p), "{p}");
        }
    }

    #[test]
    fn bad_urls_name_what_is_wrong() {
        let e = locate("ftp://h/x").expect_err("ftp");
        assert!(e.to_string().contains("ftp://h/x") && e.to_string().contains("unknown scheme"));
        let e = locate("s3:///x").expect_err("no bucket");
        assert!(e.to_string().contains("no bucket"), "{e}");
        let e = locate("https://acct.blob.core.windows.net/").expect_err("no container");
        assert!(e.to_string().contains("no container"), "{e}");
    }

    #[test]
    fn azure_https_urls_split_account_container_and_path() {
        let loc = locate("https://acct.blob.core.windows.net/traces/job/1/").expect("azure");
        assert_eq!(loc.base, "https://acct.blob.core.windows.net/traces/");
        assert_eq!(loc.path.as_ref(), "job/1");
        let loc = locate("s3://bucket/a/b.json").expect("s3");
        assert_eq!(
            (loc.base.as_str(), loc.path.as_ref()),
            ("s3://bucket/", "a/b.json")
        );
    }
}
