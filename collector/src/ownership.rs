//! Job ownership: which jobs' live state this collector holds (issue 36).
//!
//! Several collectors share one ClickHouse; each job's batches go to one of
//! them, its owner, chosen by the agents (rendezvous hashing,
//! `rankscope_agent::route`). In: the job ids of every batch the ingest
//! service accepts ([`Ownership::ensure`], before the batch is written);
//! the `job_owners` table (migration 0015). Out: [`Control`] orders to
//! live analytics (take a job over, release one); `job_owners` rows.
//!
//! Rules:
//! * a collector holds a job from the first batch of it it receives: that
//!   batch waits while the job's live state is rebuilt from ClickHouse
//!   (`stream::recover::load_job`, the start-up recovery per job: open
//!   steps, straggler window, verdicts; a killed owner's partly stored
//!   batches are left out and completed when they come again). Only that
//!   job's batches wait; other jobs go on. A restarted collector holds
//!   nothing until batches come, so it never revives a job that moved;
//! * before taking a job it refuses (ABORTED, which the agent retries and
//!   then fails over) while a collector of another schema version holds the
//!   job (refreshed it within three `refresh_interval_ms`): two versions
//!   never assemble one job;
//! * it refreshes its `job_owners` row every `refresh_interval_ms` while it
//!   holds a job, and releases the job (live state dropped, open steps not
//!   finalized: the new owner finalizes them from the stored events) when
//!   another collector took it later, or when no batch of it came for
//!   `release_after_ms`;
//! * queries need no owner: every route reads ClickHouse. The one answer
//!   held in memory, a verdict not yet stored (`stream::live`), is served
//!   by its owner only, and by every collector once stored (within
//!   `writer.results_flush_interval_ms`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rankscope_analysis::StragglerPolicy;
use serde::{Deserialize, Serialize};
use tonic::Status;

use crate::store::owners::OwnerRow;
use crate::store::{BatchKey, Store};
use crate::stream::{recover, Control, StreamConfig, StreamHandle};

/// `[ownership]` of the collector config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OwnershipConfig {
    /// This collector's name in `job_owners` (empty: its gRPC address, the
    /// host name when it listens on every address).
    pub collector_id: String,
    /// A held job without a batch for this long is released (keep it above
    /// `alerts.rules.hang.hang_after_secs`).
    pub release_after_ms: u64,
    /// How often held jobs are refreshed in `job_owners` and checked for a
    /// newer owner.
    pub refresh_interval_ms: u64,
}

impl Default for OwnershipConfig {
    fn default() -> Self {
        Self {
            collector_id: String::new(),
            // Above `alerts.rules.hang.hang_after_secs` (300 s): a job whose
            // ranks all hang sends nothing, and its job-level hang alert
            // needs its live state.
            release_after_ms: 600_000,
            refresh_interval_ms: 5_000,
        }
    }
}

struct Held {
    since_ns: u64,
    last_batch: Instant,
    /// Agent sessions seen for the job (forgotten on release).
    sessions: HashSet<(String, u64)>,
}

/// Counters of `/metrics`.
#[derive(Debug, Default)]
pub struct OwnershipMetrics {
    pub jobs_taken: std::sync::atomic::AtomicU64,
    pub jobs_released: std::sync::atomic::AtomicU64,
    pub jobs_refused: std::sync::atomic::AtomicU64,
}

/// The jobs this collector holds.
pub struct Ownership {
    store: Store,
    stream: StreamHandle,
    stream_cfg: StreamConfig,
    policy: StragglerPolicy,
    cfg: OwnershipConfig,
    /// This collector in `job_owners`.
    id: String,
    schema_version: u32,
    dedupe: Arc<Mutex<crate::dedupe::Dedupe>>,
    uncommitted: Arc<Mutex<HashSet<BatchKey>>>,
    held: Mutex<HashMap<String, Held>>,
    /// One take-over at a time per job (kept after a release: removing a
    /// gate a take-over may be waiting on would let two run at once; one
    /// small entry per job seen).
    gates: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    pub metrics: Arc<OwnershipMetrics>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ownership {
    /// `uncommitted` is the ingest service's set of partly stored batches.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        stream: StreamHandle,
        stream_cfg: StreamConfig,
        policy: StragglerPolicy,
        cfg: OwnershipConfig,
        id: String,
        dedupe: Arc<Mutex<crate::dedupe::Dedupe>>,
        uncommitted: Arc<Mutex<HashSet<BatchKey>>>,
        metrics: Arc<OwnershipMetrics>,
    ) -> Self {
        let schema_version = crate::store::MIGRATIONS
            .iter()
            .map(|m| m.version)
            .max()
            .unwrap_or(0);
        Self {
            store,
            stream,
            stream_cfg,
            policy,
            cfg,
            id,
            schema_version,
            dedupe,
            uncommitted,
            held: Mutex::new(HashMap::new()),
            gates: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// This collector's id in `job_owners`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The jobs held now.
    pub fn held_jobs(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.held).keys().cloned().collect();
        v.sort();
        v
    }

    /// Makes sure this collector holds every job of a batch of `session`
    /// (taking each over first when it does not); an error is the batch's
    /// answer.
    pub async fn ensure(&self, jobs: &[&str], session: (&str, u64)) -> Result<(), Status> {
        for job in jobs {
            if !self.touch(job, session) {
                self.take(job).await?;
                self.touch(job, session);
            }
        }
        Ok(())
    }

    /// Records a batch of a held job; `false` when the job is not held.
    fn touch(&self, job: &str, session: (&str, u64)) -> bool {
        let mut held = lock(&self.held);
        let Some(h) = held.get_mut(job) else {
            return false;
        };
        h.last_batch = Instant::now();
        if !h.sessions.contains(&(session.0.to_owned(), session.1)) {
            h.sessions.insert((session.0.to_owned(), session.1));
        }
        true
    }

    /// Takes `job` over: checks the schema versions of its recent holders,
    /// records this collector, rebuilds the job's live state.
    async fn take(&self, job: &str) -> Result<(), Status> {
        use std::sync::atomic::Ordering::Relaxed;
        let gate = Arc::clone(lock(&self.gates).entry(job.to_owned()).or_default());
        let _one = gate.lock().await;
        if lock(&self.held).contains_key(job) {
            return Ok(());
        }
        let now = crate::service::now_ns();
        // Holding now: refreshed within the last three refresh intervals.
        let recent = now.saturating_sub(self.cfg.refresh_interval_ms.saturating_mul(3_000_000));
        let holders = self
            .store
            .job_owners(recent)
            .await
            .map_err(|e| Status::unavailable(format!("cannot read job owners: {e}")))?;
        if let Some(other) = holders.iter().find(|r| {
            r.job_id == job && r.collector != self.id && r.schema_version != self.schema_version
        }) {
            self.metrics.jobs_refused.fetch_add(1, Relaxed);
            let msg = format!(
                "job {job:?} is held by collector {:?} at schema version {} (seen {} ms ago); \
                 this collector ({:?}) is at schema version {}: collectors of different schema \
                 versions refuse to share a job; run one version on every collector (the other \
                 stops holding the job when it stops, or releases it when its agents move)",
                other.collector,
                other.schema_version,
                now.saturating_sub(other.seen_ns) / 1_000_000,
                self.id,
                self.schema_version
            );
            tracing::warn!(job, other = %other.collector, "{msg}");
            return Err(Status::aborted(msg));
        }
        self.store
            .record_owners(&[self.row(job, now, now)])
            .await
            .map_err(|e| Status::unavailable(format!("cannot record the job's owner: {e}")))?;
        let snapshot = self.rebuild(job, now).await?;
        let rebuilt = snapshot.is_some();
        if let Some(snap) = snapshot {
            self.stream.control(Control::Restore(Box::new(snap))).await;
        }
        lock(&self.held).insert(
            job.to_owned(),
            Held {
                since_ns: now,
                last_batch: Instant::now(),
                sessions: HashSet::new(),
            },
        );
        self.metrics.jobs_taken.fetch_add(1, Relaxed);
        tracing::info!(job, collector = %self.id, rebuilt, "job taken: this collector holds its live state");
        Ok(())
    }

    /// The job's stored live state (`None`: nothing stored yet, or off).
    async fn rebuild(&self, job: &str, now: u64) -> Result<Option<recover::JobSnapshot>, Status> {
        if self.stream_cfg.recover_horizon_secs == 0 {
            return Ok(None);
        }
        let since = now.saturating_sub(
            self.stream_cfg
                .recover_horizon_secs
                .saturating_mul(1_000_000_000),
        );
        let unavailable = |e: crate::store::StoreError| {
            Status::unavailable(format!("cannot rebuild the job's live state: {e}"))
        };
        // A killed owner's partly stored batches: left out of the rebuild,
        // completed when their agents send them again.
        let partial = self
            .store
            .uncommitted_batches(since)
            .await
            .map_err(unavailable)?;
        let partial: HashSet<BatchKey> = {
            let mut u = lock(&self.uncommitted);
            u.extend(partial);
            u.clone()
        };
        let mut stats = recover::RecoverStats::default();
        let snap = recover::load_job(
            &self.store,
            &self.stream_cfg,
            &self.policy,
            &partial,
            job,
            &mut stats,
        )
        .await
        .map_err(unavailable)?;
        Ok(snap
            .filter(|s| !s.ranks.is_empty() || !s.markers.is_empty() || s.last_finalized.is_some()))
    }

    fn row(&self, job: &str, since_ns: u64, seen_ns: u64) -> OwnerRow {
        OwnerRow {
            job_id: job.to_owned(),
            collector: self.id.clone(),
            schema_version: self.schema_version,
            since_ns,
            seen_ns,
        }
    }

    /// Refreshes the held jobs' rows and releases the jobs another collector
    /// took later or that sent nothing for `release_after_ms`, every
    /// `refresh_interval_ms` until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let every = Duration::from_millis(self.cfg.refresh_interval_ms.max(1));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = tick.tick() => {
                    if let Err(e) = self.refresh().await {
                        tracing::warn!(error = %e, "job ownership refresh failed; retrying next tick");
                    }
                }
            }
        }
    }

    /// One refresh round (see [`Ownership::run`]).
    pub async fn refresh(&self) -> Result<(), crate::store::StoreError> {
        let now = crate::service::now_ns();
        let idle = Duration::from_millis(self.cfg.release_after_ms);
        // (job, why, gone: its alerts end too, as for a job analytics forget)
        let mut release: Vec<(String, &'static str, bool)> = Vec::new();
        let rows: Vec<OwnerRow> = {
            let held = lock(&self.held);
            for (job, h) in held.iter() {
                if h.last_batch.elapsed() >= idle {
                    release.push((job.clone(), "no batch for release_after_ms", true));
                }
            }
            held.iter()
                .filter(|(j, _)| !release.iter().any(|(r, _, _)| r == *j))
                .map(|(j, h)| self.row(j, h.since_ns, now))
                .collect()
        };
        if !rows.is_empty() {
            self.store.record_owners(&rows).await?;
            let recent = now.saturating_sub(self.cfg.release_after_ms.saturating_mul(1_000_000));
            let owners = self.store.job_owners(recent).await?;
            let held = lock(&self.held);
            for o in owners {
                if o.collector == self.id {
                    continue;
                }
                if held.get(&o.job_id).is_some_and(|h| o.since_ns > h.since_ns) {
                    release.push((o.job_id, "another collector took it", false));
                }
            }
        }
        for (job, why, gone) in release {
            self.release(&job, why, gone).await;
        }
        Ok(())
    }

    /// Drops `job`'s live state here.
    async fn release(&self, job: &str, why: &str, gone: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(h) = lock(&self.held).remove(job) else {
            return;
        };
        let sessions: Vec<(String, u64)> = h.sessions.into_iter().collect();
        {
            let mut d = lock(&self.dedupe);
            for (agent, session) in &sessions {
                d.forget(agent, *session);
            }
        }
        self.stream
            .control(Control::Release {
                job: job.to_owned(),
                sessions,
                gone,
            })
            .await;
        self.metrics.jobs_released.fetch_add(1, Relaxed);
        tracing::info!(job, collector = %self.id, reason = why, "job released: its live state is dropped here");
    }
}

/// This collector's default id: its gRPC address, with the host name for
/// an unspecified IP (0.0.0.0 is every pod's address).
pub fn default_id(grpc: std::net::SocketAddr) -> String {
    if grpc.ip().is_unspecified() {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_owned())
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "collector".to_owned());
        format!("{host}:{}", grpc.port())
    } else {
        grpc.to_string()
    }
}
