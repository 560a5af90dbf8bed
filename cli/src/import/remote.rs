//! What `rankscope import` reads: local files and folders, and objects in
//! object storage or at `https://` URLs (`rankscope_objstore`).
//!
//! In: the command line's paths and URLs. Out: [`TraceInput`]s, each a
//! local file or a [`RemoteFile`] with its size, and per path that could
//! not be expanded an error naming it (a store that is down, a missing
//! bucket, an empty prefix): the other paths are imported all the same.
//! A remote file is parsed through [`Source`], a
//! [`TraceSource`](super::TraceSource) that streams one GET per pass of the
//! parser (nothing is copied to disk); folders and prefixes follow the same
//! rule (`*.json`, `*.json.gz`, not results files next to the traces).

use std::io;
use std::path::PathBuf;

pub use rankscope_objstore::{is_remote, RemoteFile};

use super::{discover_spans, looks_like_trace_source, TraceSource};

/// One file to import.
#[derive(Debug, Clone)]
pub enum TraceInput {
    Local(PathBuf),
    Remote(RemoteFile),
}

impl From<PathBuf> for TraceInput {
    fn from(path: PathBuf) -> Self {
        TraceInput::Local(path)
    }
}

impl From<RemoteFile> for TraceInput {
    fn from(file: RemoteFile) -> Self {
        TraceInput::Remote(file)
    }
}

impl TraceInput {
    /// The name reports and errors use (the path, or the object's URL).
    pub fn name(&self) -> PathBuf {
        match self {
            TraceInput::Local(p) => p.clone(),
            TraceInput::Remote(r) => PathBuf::from(&r.url),
        }
    }

    /// The file's size in bytes, when known without reading it.
    pub fn size(&self) -> Option<u64> {
        match self {
            TraceInput::Local(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            TraceInput::Remote(r) => Some(r.size),
        }
    }
}

/// A remote file as the parser reads it: each pass opens a new streaming
/// GET, driven by `handle` (the parser runs on a blocking thread).
pub struct Source<'a> {
    pub file: &'a RemoteFile,
    pub handle: tokio::runtime::Handle,
}

impl TraceSource for Source<'_> {
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.size)
    }

    fn open(&self) -> io::Result<Box<dyn io::Read + '_>> {
        Ok(Box::new(self.file.reader(self.handle.clone())?))
    }
}

/// Every path's files (see the module doc), in command-line order, with the
/// paths that failed and why.
pub async fn discover_all(paths: &[PathBuf]) -> (Vec<TraceInput>, Vec<String>) {
    let (files, errors, _notes) = discover_all_noted(paths).await;
    (files, errors)
}

/// [`discover_all`], with the notes on the spans of a local folder left out
/// (several spans of one worker: the latest is imported, see
/// `rankscope_kineto::discover_spans`).
pub async fn discover_all_noted(paths: &[PathBuf]) -> (Vec<TraceInput>, Vec<String>, Vec<String>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    let mut notes = Vec::new();
    let mut local = Vec::new();
    for path in paths {
        let Some(url) = path.to_str().filter(|s| is_remote(s)) else {
            local.push(path.clone());
            continue;
        };
        match discover_remote(url).await {
            Ok(found) => files.extend(found.into_iter().map(TraceInput::Remote)),
            Err(e) => errors.push(e),
        }
    }
    // Each local path on its own (one that fails does not stop the others),
    // then sorted and without duplicates, as `discover_spans` does for all at once.
    let mut local_files = Vec::new();
    for path in local {
        match discover_spans(std::slice::from_ref(&path)) {
            Ok((found, left_out)) => {
                local_files.extend(found);
                notes.extend(left_out);
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    local_files.sort();
    local_files.dedup();
    files.extend(local_files.into_iter().map(TraceInput::Local));
    (files, errors, notes)
}

/// The trace files at `url`: a single object as is; under a prefix, those
/// that look like traces (the local folders' rule, sniffed from each
/// object's first bytes, on a blocking thread).
async fn discover_remote(url: &str) -> Result<Vec<RemoteFile>, String> {
    let listed = rankscope_objstore::list(url)
        .await
        .map_err(|e| e.to_string())?;
    if listed.len() == 1 && listed[0].url == url {
        return Ok(listed);
    }
    let handle = tokio::runtime::Handle::current();
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let kept: Vec<RemoteFile> = listed
            .into_iter()
            .filter(|file| {
                looks_like_trace_source(&Source {
                    file,
                    handle: handle.clone(),
                })
            })
            .collect();
        if kept.is_empty() {
            return Err(format!("{url}: no trace files under this prefix"));
        }
        Ok(kept)
    })
    .await
    .map_err(|e| e.to_string())?
}
