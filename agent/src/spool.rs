//! The disk spool: every batch the agent cuts is written to `spool_dir`
//! before the ranks whose events it holds get their acknowledgement, and
//! removed once the collector acknowledged it (or rejected it for good). A
//! restarted agent sends what its previous runs left there (with their own
//! session and sequence numbers, so the collector's deduplication keeps each
//! batch exactly once).
//!
//! In: encoded `AgentBatch`es (batcher), acknowledgements (uplink). Out:
//! one file per batch, `<session:016x>-<seq:020>.batch`, written to a
//! `.tmp` name and renamed, so a kill leaves either the whole batch or a
//! `.tmp` file that the next start removes.
//!
//! Durability (`spool_fsync`): `false` (default): the file is in the page
//! cache when the ranks are acknowledged: safe against the agent being
//! killed (kill -9, OOM), not against the node losing power. `true`: the
//! file and the directory are fsync'ed before the acknowledgement (safe
//! against power loss; costs a disk flush per batch).
//!
//! Bounded: `spool_max_bytes`. While the spool holds more, ingest drops the
//! newest events and counts them (`dropped_events{reason="spool_full"}`);
//! ranks are never blocked.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The spool directory of one agent.
#[derive(Debug)]
pub(crate) struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    fsync: bool,
    bytes: AtomicU64,
}

/// A batch a previous run left in the spool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leftover {
    pub(crate) session: u64,
    pub(crate) seq: u64,
    pub(crate) path: PathBuf,
}

impl Spool {
    /// Opens (creates) `dir`: removes half-written files, counts the bytes
    /// held and returns the batches left there, oldest first.
    pub(crate) fn open(
        dir: &Path,
        max_bytes: u64,
        fsync: bool,
    ) -> std::io::Result<(Self, Vec<Leftover>)> {
        std::fs::create_dir_all(dir)?;
        let mut bytes = 0;
        let mut left = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let Some((session, seq)) = parse_name(&name) else {
                continue;
            };
            bytes += e.metadata().map_or(0, |m| m.len());
            left.push(Leftover { session, seq, path });
        }
        left.sort_by_key(|l| (l.session, l.seq));
        let spool = Self {
            dir: dir.to_owned(),
            max_bytes,
            fsync,
            bytes: AtomicU64::new(bytes),
        };
        Ok((spool, left))
    }

    fn path(&self, session: u64, seq: u64) -> PathBuf {
        self.dir.join(format!("{session:016x}-{seq:020}.batch"))
    }

    /// Whether the spool holds `spool_max_bytes` or more.
    pub(crate) fn full(&self) -> bool {
        self.bytes.load(Relaxed) >= self.max_bytes
    }

    /// Bytes held now.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// Writes one batch (blocking I/O: call it off the async threads).
    pub(crate) fn write(&self, session: u64, seq: u64, data: &[u8]) -> std::io::Result<()> {
        let path = self.path(session, seq);
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        if self.fsync {
            f.sync_all()?;
        }
        drop(f);
        std::fs::rename(&tmp, &path)?;
        if self.fsync {
            std::fs::File::open(&self.dir)?.sync_all()?;
        }
        self.bytes.fetch_add(data.len() as u64, Relaxed);
        Ok(())
    }

    /// Removes a delivered (or rejected) batch.
    pub(crate) fn remove(&self, session: u64, seq: u64) {
        self.remove_path(&self.path(session, seq));
    }

    /// Removes a spooled file.
    pub(crate) fn remove_path(&self, path: &Path) {
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        if std::fs::remove_file(path).is_ok() {
            let _ = self
                .bytes
                .fetch_update(Relaxed, Relaxed, |b| Some(b.saturating_sub(len)));
        }
    }
}

fn parse_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".batch")?;
    let (session, seq) = stem.split_once('-')?;
    Some((u64::from_str_radix(session, 16).ok()?, seq.parse().ok()?))
}

/// Sends the batches a previous run left in the spool, oldest first, each
/// until the collector acknowledged it (or rejected it for good), then
/// removes it. Runs beside the live uplink; ends when done or at `stop`.
pub(crate) struct Resend {
    /// Each batch goes to its job's owner.
    pub(crate) routes: crate::route::Routes,
    pub(crate) auth: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    pub(crate) backoff: crate::backoff::Backoff,
    pub(crate) rng: rand::rngs::SmallRng,
    pub(crate) metrics: std::sync::Arc<crate::metrics::Metrics>,
}

/// The job of an encoded batch (its first group's; empty: none or not
/// decodable, which the collector will say).
fn job_of(bytes: &[u8]) -> String {
    use rankscope_proto::prost::Message;
    rankscope_proto::v1::AgentBatch::decode(bytes)
        .ok()
        .and_then(|b| b.ranks.into_iter().next())
        .and_then(|g| g.identity)
        .map(|i| i.job_id)
        .unwrap_or_default()
}

impl Resend {
    /// Runs until every leftover is settled or `stop` turns true.
    pub(crate) async fn run(
        mut self,
        left: Vec<Leftover>,
        spool: std::sync::Arc<Spool>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let (routes, auth, metrics) =
            (self.routes.clone(), self.auth.clone(), self.metrics.clone());
        if left.is_empty() {
            return;
        }
        tracing::info!(
            batches = left.len(),
            bytes = spool.bytes(),
            "resending batches a previous run left in the spool"
        );
        for l in left {
            let Ok(bytes) = std::fs::read(&l.path).map(bytes::Bytes::from) else {
                continue;
            };
            let job = job_of(&bytes);
            let mut failures = 0u32;
            loop {
                let body = rankscope_proto::codec::StampedBatch {
                    body: bytes.clone(),
                    sent_at_ns: crate::uplink::now_ns(),
                };
                let mut request = tonic::Request::new(body);
                if let Some(v) = &auth {
                    request.metadata_mut().insert("authorization", v.clone());
                }
                // A previous run may have sent it to another collector.
                request.metadata_mut().insert(
                    rankscope_proto::resend::TRIED_ELSEWHERE,
                    tonic::metadata::MetadataValue::from_static("1"),
                );
                let channel = crate::route::lock(&routes)
                    .owner(&job)
                    .map(|(_, t)| t.channel.clone());
                let result = match channel {
                    Some(channel) => tokio::select! {
                        r = crate::uplink::ingest(channel, request) => r,
                        _ = stop.wait_for(|s| *s) => return,
                    },
                    None => Err(tonic::Status::unavailable("no live collector")),
                };
                match result {
                    Ok(_) => {
                        crate::metrics::Metrics::inc(&metrics.batches_resent_from_spool);
                        break;
                    }
                    Err(status)
                        if crate::uplink::classify(&status) == crate::uplink::Outcome::Drop =>
                    {
                        tracing::warn!(session = l.session, seq = l.seq, code = ?status.code(), "collector rejected a spooled batch; dropped");
                        break;
                    }
                    Err(_) => {
                        failures = failures.saturating_add(1);
                        let delay = self.backoff.delay(failures, &mut self.rng);
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = stop.wait_for(|s| *s) => return,
                        }
                    }
                }
            }
            spool.remove_path(&l.path);
        }
        tracing::info!("spooled batches of previous runs delivered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_survive_a_reopen_and_half_written_files_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let (s, left) = Spool::open(dir.path(), 100, false).unwrap();
        assert!(left.is_empty());
        s.write(7, 2, b"bbbb").unwrap();
        s.write(7, 1, b"aaaaaa").unwrap();
        s.write(9, 1, b"cc").unwrap();
        assert_eq!(s.bytes(), 12);
        s.remove(9, 1);
        assert_eq!(s.bytes(), 10);
        std::fs::write(
            dir.path().join("0000000000000007-00000000000000000003.tmp"),
            b"x",
        )
        .unwrap();
        drop(s);
        let (s, left) = Spool::open(dir.path(), 10, true).unwrap();
        let got: Vec<(u64, u64)> = left.iter().map(|l| (l.session, l.seq)).collect();
        assert_eq!(got, [(7, 1), (7, 2)], "oldest first; the .tmp file is gone");
        assert_eq!(s.bytes(), 10);
        assert!(s.full());
        assert_eq!(std::fs::read(&left[0].path).unwrap(), b"aaaaaa");
        s.remove_path(&left[0].path);
        assert!(!s.full());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
