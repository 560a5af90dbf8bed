//! One trace file for a rank the caller already knows: the agent's entry
//! point ([`parse_trace_file`]).
//!
//! In: a path (`.json` or `.json.gz`; gzip is recognised by its magic
//! bytes), the [`proto::RankIdentity`] of the process that wrote it, and a
//! cap on the file's size. Out: an [`ImportedRank`] (identity, name table,
//! events in stream order, stats), or an [`ImportError`] naming the file
//! and the problem ([`Problem::TooLarge`], [`Problem::Truncated`] /
//! [`Problem::TruncatedGzip`], [`Problem::NotJson`], ...). No network, no
//! threads; the file is read two or more times (streaming, see the crate
//! doc) and must not change in between.
//!
//! Identity: job, run, node, rank and world size are the caller's (the
//! trace's `distributedInfo` is not needed and does not override them);
//! the caller's `pid` and `local_rank` win when non-zero; labels are the
//! importer's (`source`, `trace_file`, `gpu`, `backend`, ...) with the
//! caller's added on top.
//!
//! Memory: everything the file yields is held at once, about 100 bytes per
//! output event; the size cap bounds it (a trace's JSON is ~200-400 bytes
//! per event, gzip ~10x less): the decompressed JSON may be at most
//! [`MAX_GZIP_EXPANSION`] times the cap (real traces compress 10-15x), so a
//! gzip bomb fails with [`Problem::JsonTooLarge`].

use std::path::Path;

use rankscope_proto::v1 as proto;

use crate::{import_to_memory, ImportError, ImportOptions, ImportedRank, Problem};

/// The decompressed JSON of a file may be this many times `max_file_bytes`.
pub const MAX_GZIP_EXPANSION: u64 = 32;

/// Parses the trace file at `path`, written by the rank `rank`, into
/// memory; refuses a file larger than `max_file_bytes` before reading it.
pub fn parse_trace_file(
    path: &Path,
    rank: &proto::RankIdentity,
    max_file_bytes: u64,
) -> Result<ImportedRank, ImportError> {
    let bytes = std::fs::metadata(path)
        .map_err(|e| Problem::Io(e).at(path))?
        .len();
    if bytes > max_file_bytes {
        return Err(Problem::TooLarge {
            bytes,
            max_bytes: max_file_bytes,
        }
        .at(path));
    }
    let mut opts = ImportOptions::new(rank.job_id.clone());
    opts.run_id.clone_from(&rank.run_id);
    opts.node.clone_from(&rank.node);
    opts.rank_override = Some(rank.rank);
    opts.world_size_override = Some(rank.world_size);
    opts.max_json_bytes = Some(max_file_bytes.saturating_mul(MAX_GZIP_EXPANSION));
    let mut out = import_to_memory(path, &opts)?;
    let id = &mut out.identity;
    if rank.pid != 0 {
        id.pid = rank.pid;
    }
    if rank.local_rank != 0 {
        id.local_rank = rank.local_rank;
    }
    id.labels
        .extend(rank.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(out)
}
