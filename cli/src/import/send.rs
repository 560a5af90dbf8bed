//! Sending imported traces to the collector: the `rankscope import` command.
//!
//! In: trace files (local, or remote: [`TraceInput`]), [`ImportOptions`] and the collector's gRPC ingest URL.
//! Out: per file a [`FileReport`]; the events are stored through the same
//! `CollectorIngest` service (validation, duplicate detection, live step
//! assembly and straggler analytics) as live data.
//!
//! Each file is parsed on a blocking thread (at most `parse_threads` at
//! once); its chunks cross a bounded channel (parsing waits while the
//! collector is slow, memory stays bounded) to an async sender that sends
//! them as `AgentBatch`es, up to four at a time (each waits for the
//! collector's ClickHouse flush), in chunk order; the collector puts a
//! session's batches back in order for analytics. Up to `parallel_files`
//! files are imported at once, a sliding window (the next file starts when
//! one is done), so every rank's steps reach the collector together (a
//! job's steps finalize when all ranks ended them) and a file waiting for
//! its acknowledgements (up to a flush interval) does not hold a core:
//! memory is the parsers' windows plus at most eight chunks per file.
//!
//! Re-import replaces, never double-counts: a batch's identity is a pure
//! function of the input — `agent_id` = `rankscope-import`, `agent_session` =
//! FNV-1a 64 of (job, run id, overrides, chunk size, the file's
//! [`Digest`](super::Digest), taken while the scan reads it), `seq` = chunk index + 1
//! — so the collector acknowledges a re-sent batch as a duplicate without
//! storing it again. Transient failures (UNAVAILABLE, timeouts) are retried
//! with backoff; anything else fails the file with an error naming it.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesOrdered, StreamExt};
use rankscope_proto::v1 as proto;
use tokio::sync::{mpsc, Semaphore};

use super::remote::{Source, TraceInput};
use super::{
    import_file_with_progress, import_source_with_progress, Chunk, ImportError, ImportOptions,
    ImportSummary, Progress,
};

/// Chunks of one file sent at the same time.
const IN_FLIGHT: usize = 4;

/// `agent_id` of imported batches.
pub const IMPORT_AGENT_ID: &str = "rankscope-import";

/// How to reach the collector.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// The collector's gRPC ingest URL, e.g. `http://127.0.0.1:7700`.
    pub ingest_url: String,
    /// Attempts per batch before giving up on transient errors.
    pub max_attempts: u32,
    /// Files imported at the same time (being parsed, or waiting for the
    /// collector's acknowledgements).
    pub parallel_files: usize,
    /// Files parsed at the same time (the cores to use).
    pub parse_threads: usize,
    /// Print progress to stderr when it is a terminal (one indicatif bar
    /// per file being read).
    pub progress: bool,
    /// Bearer token the collector requires (empty: none).
    pub token: String,
    /// TLS files for an `https://` ingest URL (CA, optional client
    /// certificate for mutual TLS).
    pub tls: Option<rankscope_proto::tls::TlsPaths>,
}

/// What happened to one file.
#[derive(Debug, Clone)]
pub struct FileReport {
    pub path: PathBuf,
    pub summary: ImportSummary,
    /// Batches sent and stored.
    pub batches: u64,
    /// Batches the collector had stored before (re-import).
    pub duplicates: u64,
    /// Event rows the collector stored.
    pub rows: u64,
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("invalid collector ingest URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error("TLS: {0}")]
    Tls(#[from] rankscope_proto::tls::TlsError),
    #[error("{path}: chunk {chunk}: the collector at {url} refused it: {status}")]
    Refused {
        path: PathBuf,
        chunk: u64,
        url: String,
        status: String,
    },
    #[error("{path}: the import task failed: {reason}")]
    Task { path: PathBuf, reason: String },
}

/// Imports every file and sends it to the collector; the first file that
/// fails fails the import.
pub async fn import_and_send(
    files: Vec<PathBuf>,
    opts: &ImportOptions,
    send: &SendOptions,
) -> Result<Vec<FileReport>, SendError> {
    import_and_send_each(files, opts, send)
        .await?
        .into_iter()
        .collect()
}

/// Imports every file and sends it to the collector; a file that fails
/// (unreadable, a store that went away, refused by the collector) does not
/// stop the others: each file's result, in input order. The outer error is
/// for what stops every file (a bad ingest URL or TLS setup).
pub async fn import_and_send_each<I: Into<TraceInput>>(
    files: Vec<I>,
    opts: &ImportOptions,
    send: &SendOptions,
) -> Result<Vec<Result<FileReport, SendError>>, SendError> {
    let channel = tonic::transport::Endpoint::from_shared(send.ingest_url.clone())
        .map_err(|e| SendError::Url {
            url: send.ingest_url.clone(),
            reason: e.to_string(),
        })?
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(120));
    let channel = match (&send.tls, send.ingest_url.starts_with("https://")) {
        (Some(paths), true) => channel
            .tls_config(rankscope_proto::tls::tonic_client_tls(paths, "")?)
            .map_err(|e| SendError::Url {
                url: send.ingest_url.clone(),
                reason: e.to_string(),
            })?,
        (None, true) => {
            return Err(SendError::Url {
                url: send.ingest_url.clone(),
                reason: "https:// needs --tls-ca-path (RANKSCOPE_TLS_CA_PATH)".into(),
            })
        }
        _ => channel,
    }
    .connect_lazy();
    let client = proto::collector_ingest_client::CollectorIngestClient::new(channel)
        .max_encoding_message_size(usize::MAX);
    let bars =
        (send.progress && std::io::stderr().is_terminal()).then(indicatif::MultiProgress::new);
    let parsers = Arc::new(Semaphore::new(send.parse_threads.max(1)));
    // A sliding window of files: the next one starts as soon as one is done.
    let mut pending = files.into_iter().map(Into::into).enumerate();
    let mut tasks = tokio::task::JoinSet::new();
    let mut done: Vec<(usize, Result<FileReport, SendError>)> = Vec::new();
    loop {
        while tasks.len() < send.parallel_files.max(1) {
            let Some((i, input)) = pending.next() else {
                break;
            };
            let (opts, send, client, bars, parsers) = (
                opts.clone(),
                send.clone(),
                client.clone(),
                bars.clone(),
                parsers.clone(),
            );
            tasks.spawn(async move {
                (
                    i,
                    import_one(input, opts, send, client, bars, parsers).await,
                )
            });
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        let (i, result) = joined.map_err(|e| SendError::Task {
            path: PathBuf::from("?"),
            reason: e.to_string(),
        })?;
        done.push((i, result));
    }
    done.sort_by_key(|(i, _)| *i);
    Ok(done.into_iter().map(|(_, r)| r).collect())
}

type Client = proto::collector_ingest_client::CollectorIngestClient<tonic::transport::Channel>;

async fn import_one(
    input: TraceInput,
    opts: ImportOptions,
    send: SendOptions,
    client: Client,
    bars: Option<indicatif::MultiProgress>,
    parsers: Arc<Semaphore>,
) -> Result<FileReport, SendError> {
    let path = input.name();
    let task_error = |e: &dyn std::fmt::Display| SendError::Task {
        path: path.clone(),
        reason: e.to_string(),
    };
    let (tx, mut rx) = mpsc::channel::<Chunk>(4);
    // Parsing holds one of the `parse_threads` slots; waiting for the
    // collector's acknowledgements holds none.
    let slot = parsers.acquire_owned().await.map_err(|e| task_error(&e))?;
    // From the first chunk's file digest (every chunk carries the same).
    let mut session = None;
    let parse = {
        let (path, opts) = (path.clone(), opts.clone());
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let name = path.display().to_string();
            let mut bar: Option<indicatif::ProgressBar> = None;
            let progress = |p: &Progress| {
                let Some(multi) = &bars else { return };
                if p.file_bytes_total == 0 {
                    return;
                }
                let pb = bar.get_or_insert_with(|| {
                    let pb = multi.add(indicatif::ProgressBar::new(p.file_bytes_total));
                    pb.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{msg} {bar:30} {bytes}/{total_bytes}",
                        )
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                    );
                    pb
                });
                pb.set_message(format!("{name} (pass {})", p.pass));
                pb.set_position(p.file_bytes_read);
            };
            let sink = |chunk| tx.blocking_send(chunk).map_err(|_| "the sender stopped");
            let result = match &input {
                TraceInput::Local(file) => import_file_with_progress(file, &opts, progress, sink),
                TraceInput::Remote(file) => {
                    let source = Source { file, handle };
                    import_source_with_progress(&path, &source, &opts, progress, sink)
                }
            };
            if let Some(pb) = bar {
                pb.finish_and_clear();
            }
            result
        })
    };
    let mut report = (0u64, 0u64, 0u64);
    let mut send_result = Ok(());
    // Up to IN_FLIGHT chunks of this file are sent at once (each waits for
    // the collector's ClickHouse flush); acks are taken in chunk order.
    let mut inflight = FuturesOrdered::new();
    let mut record = |(index, result): (u64, Result<proto::IngestAck, String>)| match result {
        Ok(ack) => {
            report.0 += 1;
            report.1 += u64::from(ack.duplicate);
            report.2 += ack.rows;
            Ok(())
        }
        Err(status) => Err(SendError::Refused {
            path: path.clone(),
            chunk: index,
            url: send.ingest_url.clone(),
            status,
        }),
    };
    'chunks: while let Some(chunk) = rx.recv().await {
        let index = chunk.index;
        let batch = proto::AgentBatch {
            agent_id: IMPORT_AGENT_ID.to_owned(),
            agent_session: *session.get_or_insert_with(|| session_id(&opts, chunk.file_digest)),
            seq: index + 1,
            node: chunk.identity.node.clone(),
            sent_at_ns: now_ns(),
            ranks: vec![chunk.into_rank_events()],
            ..Default::default()
        };
        let (mut c, opts) = (client.clone(), send.clone());
        inflight.push_back(async move { (index, send_batch(&mut c, batch, &opts).await) });
        while inflight.len() >= IN_FLIGHT {
            let Some(done) = inflight.next().await else {
                break;
            };
            if let Err(e) = record(done) {
                send_result = Err(e);
                break 'chunks;
            }
        }
    }
    if send_result.is_ok() {
        while let Some(done) = inflight.next().await {
            if let Err(e) = record(done) {
                send_result = Err(e);
                break;
            }
        }
    }
    drop(inflight);
    drop(rx); // a parser still running sees the closed channel and stops
    let parsed = parse.await.map_err(|e| SendError::Task {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    send_result?;
    Ok(FileReport {
        summary: parsed?,
        path,
        batches: report.0,
        duplicates: report.1,
        rows: report.2,
    })
}

/// Sends one batch, retrying transient failures with exponential backoff.
async fn send_batch(
    client: &mut Client,
    batch: proto::AgentBatch,
    send: &SendOptions,
) -> Result<proto::IngestAck, String> {
    let mut delay = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        let mut request = tonic::Request::new(batch.clone());
        if !send.token.is_empty() {
            let v = rankscope_proto::auth::bearer(&send.token)
                .parse()
                .map_err(|_| "the token is not a valid header value".to_string())?;
            request.metadata_mut().insert("authorization", v);
        }
        match client.ingest(request).await {
            Ok(ack) => return Ok(ack.into_inner()),
            Err(s) => {
                let transient = matches!(
                    s.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Cancelled
                        | tonic::Code::Unknown
                );
                if !transient || attempt >= send.max_attempts {
                    return Err(format!(
                        "{:?}: {} (after {attempt} attempts)",
                        s.code(),
                        s.message()
                    ));
                }
                // gRPC reports a refused certificate as "connection closed";
                // a TLS problem does not go away by retrying, so say it now.
                if let (1, Some(paths)) = (attempt, &send.tls) {
                    use rankscope_proto::tls::probe::{probe, ProbeError};
                    if let Err(ProbeError::Tls(cause)) = probe(&send.ingest_url, paths, "").await {
                        return Err(cause);
                    }
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
        attempt += 1;
    }
}

/// A non-zero session id that is a pure function of the input: the options
/// and the file's [`Digest`](super::Digest) (taken while the scan read it).
fn session_id(opts: &ImportOptions, file_digest: u64) -> u64 {
    let mut h = Fnv::default();
    h.write(opts.job.as_bytes());
    h.write(&[0]);
    h.write(opts.run_id.as_bytes());
    h.write(&[0]);
    for o in [opts.rank_override, opts.world_size_override] {
        h.write(&o.map_or(u64::MAX, u64::from).to_le_bytes());
    }
    h.write(&(opts.chunk_events as u64).to_le_bytes());
    h.write(&file_digest.to_le_bytes());
    h.0.max(1)
}

/// FNV-1a, 64 bit: stable across builds and platforms.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_reference_vectors() {
        let mut h = Fnv::default();
        h.write(b"");
        assert_eq!(h.0, 0xcbf2_9ce4_8422_2325);
        let mut h = Fnv::default();
        h.write(b"a");
        assert_eq!(h.0, 0xaf63_dc4c_8601_ec8c);
        let mut h = Fnv::default();
        h.write(b"foobar");
        assert_eq!(h.0, 0x8594_4171_f739_67e8);
    }

    #[test]
    fn session_depends_on_job_and_content() {
        let digest = |bytes: &[u8]| {
            let mut d = crate::import::Digest::default();
            d.write(bytes);
            d.finish()
        };
        let (a, b) = (digest(b"{}"), digest(b"{ }"));
        let o = ImportOptions::new("j");
        let sa = session_id(&o, a);
        assert_eq!(sa, session_id(&o, a), "deterministic");
        assert_ne!(sa, session_id(&o, b));
        assert_ne!(sa, session_id(&ImportOptions::new("k"), a));
    }
}
