//! The trace archive: every trace file the agent captures is copied to
//! object storage before the agent deletes it.
//!
//! In: the `[traces]` section of the agent's config (`archive_url`, a URL
//! template) and a captured trace file with its job, trace id, rank and
//! node. Out: the object's URL (reported to the collector in the rank's
//! `captured` status, so `rankscope traces` lists it and `rankscope import
//! <url>` brings it back), or an error that names the URL; the trace is
//! imported either way (a failed upload is logged, the rank's URL stays
//! empty).
//!
//! The template's `{job}`, `{trace_id}`, `{rank}` and `{node}` are replaced
//! (job ids and node names may hold any character: `/` and characters an
//! object key should not carry become `_`); a template that ends in `/`
//! gets the file's own name appended. The upload streams the file
//! (`rankscope_objstore::upload`, multipart for large files) with the
//! providers' standard credentials (AWS_*, GOOGLE_APPLICATION_CREDENTIALS,
//! AZURE_STORAGE_*) from the agent's environment. It runs on the parse
//! thread, before the trace is reported captured, so the local file is
//! always archived before it can be removed.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// `[traces]` of the agent's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracesConfig {
    /// Where every captured trace is archived, e.g.
    /// `s3://bucket/traces/{job}/{trace_id}/` (also `gs://`, `az://`,
    /// `https://ACCOUNT.blob.core.windows.net/CONTAINER/...`); placeholders
    /// `{job}`, `{trace_id}`, `{rank}`, `{node}`; a trailing `/` appends the
    /// file name. Empty (default): no archive.
    pub archive_url: String,
}

impl TracesConfig {
    /// Checks the URL's form (the store itself is first reached when a
    /// trace is captured).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = &self.archive_url;
        if url.is_empty() {
            return Ok(());
        }
        if !rankscope_objstore::is_remote(url) || url.starts_with("http://") {
            return Err(ConfigError::Invalid {
                field: "traces.archive_url",
                value: url.clone(),
                problem: "must be an s3://, gs://, az:// or https:// URL",
            });
        }
        Ok(())
    }

    /// The archive, when one is configured.
    pub(crate) fn archive(&self) -> Option<Archive> {
        (!self.archive_url.is_empty()).then(|| Archive {
            template: self.archive_url.clone(),
        })
    }
}

/// Where captured traces go.
#[derive(Debug, Clone)]
pub(crate) struct Archive {
    template: String,
}

/// What names one archived trace file.
pub(crate) struct TraceName<'a> {
    pub job: &'a str,
    pub trace_id: &'a str,
    pub rank: u32,
    pub node: &'a str,
}

/// A path segment safe in an object key: `/`, control characters and
/// characters URLs reserve become `_`.
fn segment(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match out.as_str() {
        "" | "." | ".." => format!("_{out}"),
        _ => out,
    }
}

impl Archive {
    /// The object URL of `file` for `name`.
    pub(crate) fn url_for(&self, name: &TraceName<'_>, file: &Path) -> String {
        let mut url = self
            .template
            .replace("{job}", &segment(name.job))
            .replace("{trace_id}", &segment(name.trace_id))
            .replace("{rank}", &name.rank.to_string())
            .replace("{node}", &segment(name.node));
        if url.ends_with('/') {
            let file_name = file
                .file_name()
                .map(|n| segment(&n.to_string_lossy()))
                .unwrap_or_else(|| format!("rank{}.json", name.rank));
            url.push_str(&file_name);
        }
        url
    }

    /// Uploads `file` (blocking: called on the parse thread; `handle` runs
    /// the requests). Returns the object's URL.
    pub(crate) fn store(
        &self,
        handle: &tokio::runtime::Handle,
        name: &TraceName<'_>,
        file: &Path,
    ) -> Result<String, rankscope_objstore::Error> {
        let url = self.url_for(name, file);
        let bytes = handle.block_on(rankscope_objstore::upload(file, &url))?;
        tracing::info!(%url, bytes, trace = name.trace_id, rank = name.rank, "trace archived");
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_a_prefix_gets_the_file_name() {
        let a = TracesConfig {
            archive_url: "s3://b/t/{job}/{trace_id}/".into(),
        }
        .archive()
        .expect("archive");
        let name = TraceName {
            job: "slurm/42 x",
            trace_id: "t1",
            rank: 3,
            node: "n",
        };
        assert_eq!(
            a.url_for(&name, Path::new("/tmp/traces/t1/rank3.json.gz")),
            "s3://b/t/slurm_42_x/t1/rank3.json.gz"
        );
        let a = TracesConfig {
            archive_url: "gs://b/{node}/{trace_id}-{rank}.json".into(),
        }
        .archive()
        .expect("archive");
        assert_eq!(a.url_for(&name, Path::new("x")), "gs://b/n/t1-3.json");
        let none = TracesConfig {
            archive_url: "..".into(),
        };
        assert!(segment("..") != ".." && segment("") == "_");
        let e = none.validate().expect_err("not a URL");
        assert!(e.to_string().contains("traces.archive_url"), "{e}");
        assert!(TracesConfig::default().validate().is_ok());
    }
}
