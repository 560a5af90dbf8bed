//! The dump sink (`dump_dir`) and its replay: an uplink to a local folder
//! instead of a collector, for air-gapped nodes and the GPU capture kit.
//!
//! In (dump): the batches the uplink would send, already encoded. Out: one
//! file per batch in the disk spool's format ([`crate::spool::Spool`]:
//! `<session:016x>-<seq:020>.batch`, the encoded `AgentBatch` without
//! `sent_at_ns`, written to a `.tmp` name and renamed). The write is the
//! acknowledgement: the uplink counts the batch delivered when its file is
//! complete, and retries it (same seq) with its backoff when the write fails
//! (a full disk), exactly as for a collector that is down. Nothing is ever
//! removed from a dump.
//!
//! In (replay, `rankscope-agent replay DIR`): a dump (or a spool) folder and
//! the agent's collector settings (URL, token, TLS). Out: every batch sent to
//! `CollectorIngest.Ingest`, started oldest first (session, then seq), up
//! to `max_in_flight_batches` at once, each stamped with the time it is
//! sent, as the live uplink does; transient failures are
//! retried with the uplink's backoff, a rejection stops the replay with the
//! collector's answer. The batches keep their agent id, session and seq, so
//! a second replay of the same dump is stored once (the collector's
//! deduplication) and answered `duplicate`.

use std::path::Path;
use std::sync::Arc;

use rand::SeedableRng;
use rankscope_proto::codec::StampedBatch;
use rankscope_proto::v1 as proto;

use crate::config::Config;
use crate::spool::Spool;

/// Why a dump could not be written or replayed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("cannot use dump_dir {dir:?}: {error}")]
    Open { dir: String, error: std::io::Error },
    #[error("{dir:?} holds no batch files (<session>-<seq>.batch); is it a dump_dir?")]
    Empty { dir: String },
    #[error("cannot read batch file {path:?}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("the collector rejected batch file {path:?}: {code:?}: {message}")]
    Rejected {
        path: String,
        code: tonic::Code,
        message: String,
    },
    #[error("batch file {path:?} not delivered after {attempts} attempts: {code:?}: {message}")]
    Unavailable {
        path: String,
        attempts: u32,
        code: tonic::Code,
        message: String,
    },
    #[error(transparent)]
    Agent(#[from] crate::AgentError),
}

/// Opens (creates) a dump folder; batches of earlier runs stay as they are.
pub(crate) fn open(dir: &str) -> Result<Arc<Spool>, DumpError> {
    // No byte bound (the dump is the only copy) and no fsync per batch.
    Spool::open(Path::new(dir), u64::MAX, false)
        .map(|(spool, _earlier)| Arc::new(spool))
        .map_err(|error| DumpError::Open {
            dir: dir.to_owned(),
            error,
        })
}

/// Writes one batch into the dump; `Ok` is the batch's acknowledgement.
pub(crate) async fn write(
    dump: Arc<Spool>,
    session: u64,
    seq: u64,
    body: bytes::Bytes,
) -> Result<proto::IngestAck, tonic::Status> {
    let written = tokio::task::spawn_blocking(move || dump.write(session, seq, &body)).await;
    match written {
        Ok(Ok(())) => Ok(proto::IngestAck::default()),
        Ok(Err(e)) => Err(tonic::Status::unavailable(format!(
            "writing the batch to dump_dir: {e}"
        ))),
        Err(e) => Err(tonic::Status::internal(format!(
            "dump write task failed: {e}"
        ))),
    }
}

/// What a replay sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Batch files sent and acknowledged.
    pub batches: u64,
    /// Of those, the ones the collector already had (`duplicate`).
    pub duplicates: u64,
    /// Bytes of the batch files.
    pub bytes: u64,
}

/// Transient failures tolerated per batch before the replay gives up.
const REPLAY_ATTEMPTS: u32 = 20;

/// Sends every batch file of `dir` to `config`'s collector, oldest first.
pub async fn replay(config: &Config, dir: &Path) -> Result<ReplayReport, DumpError> {
    let shown = dir.display().to_string();
    let (_, batches) = Spool::open(dir, u64::MAX, false).map_err(|error| DumpError::Open {
        dir: shown.clone(),
        error,
    })?;
    if batches.is_empty() {
        return Err(DumpError::Empty { dir: shown });
    }
    let channel = crate::channel::client(config)?;
    let backoff = config
        .backoff()
        .map_err(|e| crate::AgentError::Config(e.into()))?;
    let auth: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>> =
        if config.collector_token.is_empty() {
            None
        } else {
            Some(
                rankscope_proto::auth::bearer(&config.collector_token)
                    .parse()
                    .map_err(|_| {
                        crate::AgentError::Config(crate::config::ConfigError::Invalid {
                            field: "collector_token",
                            value: "(hidden)".to_owned(),
                            problem: "is not a valid HTTP header value",
                        })
                    })?,
            )
        };
    // Up to max_in_flight_batches calls at once, started oldest first (the
    // live uplink's window; the collector deduplicates and orders by time).
    let window = config.max_in_flight_batches.max(1);
    let mut report = ReplayReport::default();
    let mut calls = tokio::task::JoinSet::new();
    let mut seed = crate::uplink::now_ns();
    for b in batches {
        if calls.len() >= window {
            settle(&mut calls, &mut report).await?;
        }
        let path = b.path.display().to_string();
        let body = std::fs::read(&b.path)
            .map(bytes::Bytes::from)
            .map_err(|error| DumpError::Read {
                path: path.clone(),
                error,
            })?;
        seed = seed.wrapping_add(1);
        let send = Send {
            channel: channel.clone(),
            auth: auth.clone(),
            backoff,
            rng: rand::rngs::SmallRng::seed_from_u64(seed),
        };
        calls.spawn(send.run(path, body));
    }
    while !calls.is_empty() {
        settle(&mut calls, &mut report).await?;
    }
    Ok(report)
}

type Sent = Result<(proto::IngestAck, u64), DumpError>;

/// Waits for one call of the window and counts it.
async fn settle(
    calls: &mut tokio::task::JoinSet<Sent>,
    report: &mut ReplayReport,
) -> Result<(), DumpError> {
    let Some(done) = calls.join_next().await else {
        return Ok(());
    };
    let (ack, bytes) = done.map_err(|e| DumpError::Unavailable {
        path: String::new(),
        attempts: 0,
        code: tonic::Code::Internal,
        message: format!("replay task failed: {e}"),
    })??;
    report.batches += 1;
    report.duplicates += u64::from(ack.duplicate);
    report.bytes += bytes;
    Ok(())
}

/// One batch file's delivery, with the uplink's retry policy.
struct Send {
    channel: tonic::transport::Channel,
    auth: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    backoff: crate::backoff::Backoff,
    rng: rand::rngs::SmallRng,
}

impl Send {
    async fn run(mut self, path: String, body: bytes::Bytes) -> Sent {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let mut request = tonic::Request::new(StampedBatch {
                body: body.clone(),
                sent_at_ns: crate::uplink::now_ns(),
            });
            if let Some(v) = &self.auth {
                request.metadata_mut().insert("authorization", v.clone());
            }
            match crate::uplink::ingest(self.channel.clone(), request).await {
                Ok(ack) => return Ok((ack, body.len() as u64)),
                Err(s) if crate::uplink::classify(&s) == crate::uplink::Outcome::Drop => {
                    return Err(DumpError::Rejected {
                        path,
                        code: s.code(),
                        message: s.message().to_owned(),
                    });
                }
                Err(s) if attempts >= REPLAY_ATTEMPTS => {
                    return Err(DumpError::Unavailable {
                        path,
                        attempts,
                        code: s.code(),
                        message: s.message().to_owned(),
                    });
                }
                Err(_) => {
                    tokio::time::sleep(self.backoff.delay(attempts - 1, &mut self.rng)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_written_batch_is_acknowledged_and_kept_in_the_spool_format() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("dump");
        let dump = open(d.to_str().unwrap()).unwrap();
        let ack = write(
            Arc::clone(&dump),
            0xab,
            3,
            bytes::Bytes::from_static(b"xyz"),
        )
        .await
        .unwrap();
        assert!(!ack.duplicate);
        let name = "00000000000000ab-00000000000000000003.batch";
        assert_eq!(std::fs::read(d.join(name)).unwrap(), b"xyz");
        // A reopen (a later run) keeps what is there.
        drop(open(d.to_str().unwrap()).unwrap());
        assert_eq!(std::fs::read(d.join(name)).unwrap(), b"xyz");
    }

    #[tokio::test]
    async fn a_failed_write_is_a_transient_failure_the_uplink_retries() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("dump");
        let dump = open(d.to_str().unwrap()).unwrap();
        std::fs::remove_dir(&d).unwrap();
        let err = write(dump, 1, 1, bytes::Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert_eq!(
            crate::uplink::classify(&err),
            crate::uplink::Outcome::Retry,
            "{err:?}"
        );
        assert!(err.message().contains("dump_dir"), "{err:?}");
    }

    #[tokio::test]
    async fn replaying_an_empty_folder_says_it_holds_no_batches() {
        let dir = tempfile::tempdir().unwrap();
        let err = replay(&Config::default(), dir.path()).await.unwrap_err();
        assert!(err.to_string().contains("no batch files"), "{err}");
    }
}
