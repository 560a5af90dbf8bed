//! `rankscope-objstore`: trace files in object storage (Amazon S3 and
//! S3-compatible stores, Google Cloud Storage, Azure Blob Storage) and at
//! `https://` URLs, through Apache Arrow's `object_store` crate (one API
//! over the providers, with their standard credential chains).
//!
//! In: a URL ([`is_remote`] says which strings are one) and the providers'
//! environment variables, read by `object_store`'s `from_env` builders:
//! `AWS_*` (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL` for S3-compatible stores, web identity, instance
//! metadata), `GOOGLE_*` (`GOOGLE_APPLICATION_CREDENTIALS`, else the
//! metadata server; `GOOGLE_SKIP_SIGNATURE=true` for anonymous reads of
//! public buckets, `AWS_SKIP_SIGNATURE` likewise), `AZURE_*` (`AZURE_STORAGE_ACCOUNT_NAME`,
//! `AZURE_STORAGE_ACCOUNT_KEY`, SAS, `AZURE_STORAGE_USE_EMULATOR` with
//! `AZURITE_BLOB_STORAGE_URL`, managed identity).
//! Out: [`list`] (the trace files under a prefix with their sizes, or one
//! file), [`RemoteFile::reader`] (a blocking [`std::io::Read`] that
//! streams one GET; the importer opens one per pass) and [`upload`] (a
//! local file streamed into the store: the agent's trace archive).
//!
//! Accepted URLs: `s3://bucket/prefix/`, `gs://bucket/prefix/`,
//! `az://container/prefix/` (also `azure://`, `abfs[s]://`),
//! `https://<account>.blob.core.windows.net/<container>/<prefix>`, and
//! `http[s]://` URLs of single files. A URL ending in `/` is a prefix; one
//! without is the object of that name if it exists, else a prefix. A
//! prefix is read like a local folder: its `*.json` / `*.json.gz` objects,
//! not recursively.
//!
//! Errors name the URL and say what failed (listing, reading, writing) with
//! the provider's answer. Requests are retried [`MAX_RETRIES`] times within
//! [`RETRY_TIMEOUT`], so a store that is down fails in seconds, not minutes.

mod url_map;

use std::io::{self, Read};
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

pub use url_map::is_remote;

/// Attempts after the first for one request.
pub const MAX_RETRIES: usize = 3;
/// Time after which a failing request is not retried again.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(15);

/// Why an object store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL is not one of the accepted forms.
    #[error("{url}: not an object storage URL: {reason}")]
    BadUrl { url: String, reason: String },
    /// The store could not be configured (credentials, endpoint).
    #[error("{url}: cannot configure the object store: {source}")]
    Config {
        url: String,
        source: object_store::Error,
    },
    /// A request failed (no such bucket, refused credentials, store down).
    #[error("{url}: {action} failed: {source}")]
    Request {
        url: String,
        action: &'static str,
        source: object_store::Error,
    },
    /// A prefix holds no trace files.
    #[error("{url}: no .json or .json.gz trace files under this prefix")]
    NoTraceFiles { url: String },
    /// An upload failed (reading the file or writing the object).
    #[error("{url}: writing failed: {source}")]
    Write { url: String, source: io::Error },
    /// A local file to upload could not be opened.
    #[error("{path}: cannot read for upload: {source}")]
    Local { path: String, source: io::Error },
}

/// An object store and a location in it.
#[derive(Debug, Clone)]
struct Located {
    store: Arc<dyn ObjectStore>,
    /// The URL up to the object path (`s3://bucket/`), for display.
    base: String,
    path: Path,
}

impl Located {
    fn url_of(&self, path: &Path) -> String {
        format!("{}{}", self.base, path)
    }
}

/// One trace file in a store: its URL, size and how to read it.
#[derive(Debug, Clone)]
pub struct RemoteFile {
    /// The object's URL (what the user would pass to import it alone).
    pub url: String,
    /// Size in bytes.
    pub size: u64,
    store: Arc<dyn ObjectStore>,
    path: Path,
}

/// The trace files at `url` (see the module doc), sorted by URL. A single
/// object is returned whatever its name (importing it reports any
/// problem); under a prefix only trace-named objects are.
pub async fn list(url: &str) -> Result<Vec<RemoteFile>, Error> {
    let loc = url_map::locate(url)?;
    let request = |action, source| Error::Request {
        url: url.to_owned(),
        action,
        source,
    };
    let prefix_only = url.ends_with('/') || loc.path.as_ref().is_empty();
    if !prefix_only {
        match loc.store.head(&loc.path).await {
            Ok(meta) => {
                return Ok(vec![RemoteFile {
                    url: url.to_owned(),
                    size: meta.size,
                    store: loc.store.clone(),
                    path: meta.location,
                }])
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(request("reading the object's metadata", e)),
        }
    }
    let prefix = (!loc.path.as_ref().is_empty()).then_some(&loc.path);
    let listing = loc
        .store
        .list_with_delimiter(prefix)
        .await
        .map_err(|e| request("listing", e))?;
    let mut out: Vec<RemoteFile> = listing
        .objects
        .into_iter()
        .filter(|m| m.location.filename().is_some_and(is_trace_file_name))
        .map(|m| RemoteFile {
            url: loc.url_of(&m.location),
            size: m.size,
            store: loc.store.clone(),
            path: m.location,
        })
        .collect();
    if out.is_empty() {
        return Err(Error::NoTraceFiles {
            url: url.to_owned(),
        });
    }
    out.sort_by(|a, b| a.url.cmp(&b.url));
    Ok(out)
}

/// The trace-file name rule, the same as the local folders' (kept here so
/// this crate does not depend on the parser).
fn is_trace_file_name(name: &str) -> bool {
    name.ends_with(".json") || name.ends_with(".json.gz")
}

impl RemoteFile {
    /// A blocking reader over the whole object: one streaming GET, read
    /// chunk by chunk as the caller reads (nothing else is held). Must be
    /// called and read outside the runtime's worker threads (e.g. in
    /// `spawn_blocking`); `handle` drives the requests.
    pub fn reader(&self, handle: tokio::runtime::Handle) -> io::Result<RemoteReader> {
        let (store, path) = (self.store.clone(), self.path.clone());
        let stream = handle
            .block_on(async move { store.get(&path).await })
            .map_err(|e| io::Error::other(format!("{}: {e}", self.url)))?
            .into_stream();
        Ok(RemoteReader {
            handle,
            stream,
            current: Bytes::new(),
            url: self.url.clone(),
        })
    }
}

/// See [`RemoteFile::reader`].
pub struct RemoteReader {
    handle: tokio::runtime::Handle,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    current: Bytes,
    url: String,
}

impl Read for RemoteReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.handle.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => {
                    return Err(io::Error::other(format!("{}: reading: {e}", self.url)))
                }
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Copies the local file `local` to the object `url` (a full object URL,
/// not a prefix), streaming it in parts (never whole in memory). Returns
/// the bytes written.
pub async fn upload(local: &FsPath, url: &str) -> Result<u64, Error> {
    use tokio::io::AsyncWriteExt;
    let loc = url_map::locate(url)?;
    if loc.path.as_ref().is_empty() || url.ends_with('/') {
        return Err(Error::BadUrl {
            url: url.to_owned(),
            reason: "an upload needs an object name, not a prefix".into(),
        });
    }
    let local_err = |source| Error::Local {
        path: local.display().to_string(),
        source,
    };
    let mut file = tokio::fs::File::open(local).await.map_err(local_err)?;
    let mut writer = object_store::buffered::BufWriter::new(loc.store.clone(), loc.path.clone());
    let copied = tokio::io::copy(&mut file, &mut writer).await;
    let written = match copied {
        Ok(n) => writer.shutdown().await.map(|()| n),
        Err(e) => {
            let _ = writer.abort().await;
            Err(e)
        }
    };
    written.map_err(|source| Error::Write {
        url: url.to_owned(),
        source,
    })
}
