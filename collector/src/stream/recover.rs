//! Live state after a restart: a collector killed with kill -9 lost the
//! unfinalized steps and the straggler window of every running job; this
//! rebuilds both from ClickHouse before the collector accepts batches again.
//!
//! In: a job whose first batch reaches this collector (`crate::ownership`:
//! after a restart, or a job moved here from another collector); at
//! start-up [`load`] reads only the uncommitted batches of the last
//! `recover_horizon_secs` (`[stream]`) and the firing alerts. Per job,
//! [`load_job`] reads
//! - the last finalized step F (highest `step_breakdown` step),
//! - the finalized breakdowns of a replay window before F: they are fed to a
//!   fresh `StragglerTracker` in step order, which rebuilds its window and
//!   active episodes exactly (its input is exactly those columns; a step's
//!   flags depend on that step alone, so `window_steps` replayed steps before
//!   the oldest active verdict suffice),
//! - the raw step markers, GPU events, spans and collectives after F: each
//!   rank's stream is rebuilt and pushed through step assembly again, so the
//!   steps the crash left open finalize as they would have.
//!
//! Out: a [`JobSnapshot`] per job, consumed by the stream task before its
//! first input. Batches stored before the crash are in the snapshot; the
//! agents resend the rest (unacknowledged) and deduplication drops what was
//! stored, so every stored batch reaches analytics once.
//!
//! Limits and approximations, documented in RELIABILITY.md:
//! - Stream order inside a rank is rebuilt from timestamps (markers and
//!   events sorted by time; at equal times an end precedes a begin precedes
//!   other events). The live path places events by stream position; the two
//!   agree when every event of a step starts within its step's markers (the
//!   simulator, the SDK's spans and collectives).
//! - A job over `recover_max_rows` rows in any table after F is not rebuilt
//!   (logged); its next steps start a fresh state.
//! - GPU samples (straggler evidence) and the alert rules' own windows
//!   (GPU utilization, collective baselines) are not rebuilt; firing alerts
//!   are (`alert::restore`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;

use rankscope_analysis::{
    classify_kernel, CollOp, CollectiveObs, GpuEvent, GpuEventKind, Interval, RankStepStats,
    RankStepWait, StragglerPolicy, StragglerTracker,
};

use super::{RankInput, StreamConfig, StreamEvent};
use crate::store::analytics::AlertReadRow;
use crate::store::{
    BatchKey, RecoverBreakdown, RecoverCollective, RecoverKernel, RecoverMarker, RecoverRank,
    RecoverSpan, Store, StoreError,
};

/// What the store holds of one running job's live state.
#[derive(Debug, Clone, Default)]
pub struct JobSnapshot {
    pub job: String,
    /// The last finalized step, `None` when no step was.
    pub last_finalized: Option<u64>,
    pub ranks: Vec<RecoverRank>,
    /// Finalized breakdowns of the replay window, by step then rank.
    pub finalized: Vec<RecoverBreakdown>,
    /// (rank, first step) -> first seen, of the active verdicts.
    pub first_seen: HashMap<(u32, u64), u64>,
    pub markers: Vec<RecoverMarker>,
    pub kernels: Vec<RecoverKernel>,
    pub spans: Vec<RecoverSpan>,
    pub collectives: Vec<RecoverCollective>,
}

/// What a restart rebuilt (logged at start-up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoverStats {
    pub jobs: u64,
    /// Jobs left out: over `recover_max_rows`.
    pub jobs_skipped: u64,
    /// Raw rows (markers and events) pushed through step assembly again.
    pub events_replayed: u64,
}

/// Everything a start-up takes back from ClickHouse.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Live state of the running jobs (for the stream task).
    pub jobs: Vec<JobSnapshot>,
    /// Batches stored in part (for the ingest service).
    pub uncommitted: Vec<BatchKey>,
    /// Alerts still firing (for the alert engine).
    pub firing: Vec<AlertReadRow>,
    pub stats: RecoverStats,
}

/// Reads what a start-up needs from the last `recover_horizon_secs` before
/// `now_ns` (nothing when the horizon is 0): the uncommitted batches and
/// the firing alerts. `jobs` stays empty: each job is rebuilt by
/// [`load_job`] when its first batch arrives (`crate::ownership`).
pub async fn load(
    store: &Store,
    cfg: &StreamConfig,
    _policy: &StragglerPolicy,
    now_ns: u64,
) -> Result<Recovered, StoreError> {
    if cfg.recover_horizon_secs == 0 {
        return Ok(Recovered::default());
    }
    let since = now_ns.saturating_sub(cfg.recover_horizon_secs.saturating_mul(1_000_000_000));
    let uncommitted = store.uncommitted_batches(since).await?;
    // Jobs are not rebuilt here: a collector rebuilds a job when its first
    // batch arrives (`crate::ownership`), so a restarted collector never
    // holds a job another collector took over while it was down.
    let (jobs, stats) = (Vec::new(), RecoverStats::default());
    let firing = store.alerts(None, true).await?;
    Ok(Recovered {
        jobs,
        uncommitted,
        firing,
        stats,
    })
}

/// The snapshot of one job (`None`: over `recover_max_rows`, logged and
/// counted in `stats`). A collector taking over a job from another
/// (`crate::ownership`) rebuilds it with this too.
pub async fn load_job(
    store: &Store,
    cfg: &StreamConfig,
    policy: &StragglerPolicy,
    uncommitted: &HashSet<BatchKey>,
    job: &str,
    stats: &mut RecoverStats,
) -> Result<Option<JobSnapshot>, StoreError> {
    let limit = cfg.recover_max_rows;
    let job = job.to_owned();
    {
        let last_finalized = store.last_finalized_step(&job).await?;
        let next = last_finalized.map_or(0, |f| f + 1);
        let markers = store.recover_markers(&job, next, limit + 1).await?;
        if markers.len() as u64 > limit {
            tracing::warn!(
                job,
                limit,
                "not rebuilding live state: too many step markers after the last finalized step"
            );
            stats.jobs_skipped += 1;
            return Ok(None);
        }
        let since_ns = markers.iter().map(|m| m.ts_ns).min().unwrap_or(u64::MAX);
        let (kernels, spans, collectives) = if markers.is_empty() {
            Default::default()
        } else {
            store.recover_events(&job, since_ns, limit + 1).await?
        };
        if [kernels.len(), spans.len(), collectives.len()]
            .iter()
            .any(|&n| n as u64 > limit)
        {
            tracing::warn!(
                job,
                limit,
                "not rebuilding live state: too many events after the last finalized step"
            );
            stats.jobs_skipped += 1;
            return Ok(None);
        }
        // Rows of batches a killed collector stored in part are left out:
        // those batches come again and reach analytics whole.
        let committed = |a: &String, s: u64, q: u64| {
            uncommitted.is_empty() || !uncommitted.contains(&(a.clone(), s, q))
        };
        let mut markers = markers;
        markers.retain(|r| committed(&r.agent_id, r.agent_session, r.batch_seq));
        let (mut kernels, mut spans, mut collectives) = (kernels, spans, collectives);
        kernels.retain(|r| committed(&r.agent_id, r.agent_session, r.batch_seq));
        spans.retain(|r| committed(&r.agent_id, r.agent_session, r.batch_seq));
        collectives.retain(|r| committed(&r.agent_id, r.agent_session, r.batch_seq));
        let verdicts = store.recover_verdicts(&job).await?;
        let first_seen: HashMap<(u32, u64), u64> = verdicts
            .iter()
            .map(|v| ((v.rank, v.first_step), v.first_seen_ns))
            .collect();
        let finalized = match last_finalized {
            Some(f) => {
                let oldest = verdicts.iter().map(|v| v.first_step).min().unwrap_or(f);
                let from = oldest
                    .min(f)
                    .saturating_sub(u64::from(policy.window_steps()));
                store.recover_breakdowns(&job, from).await?
            }
            None => Vec::new(),
        };
        let ranks = store
            .recover_ranks(&job, last_finalized.unwrap_or(0))
            .await?;
        stats.jobs += 1;
        stats.events_replayed +=
            (markers.len() + kernels.len() + spans.len() + collectives.len()) as u64;
        Ok(Some(JobSnapshot {
            job,
            last_finalized,
            ranks,
            finalized,
            first_seen,
            markers,
            kernels,
            spans,
            collectives,
        }))
    }
}

/// The straggler tracker, the what-if history (the last `recent` steps'
/// per-rank figures) and the step spans replayed from finalized breakdowns.
pub struct Replayed {
    pub tracker: StragglerTracker,
    pub recent: super::recent::RecentSteps,
    pub spans: Vec<(u64, u64, u64)>,
    pub steps: u64,
}

/// Feeds `rows` (by step then rank) to a fresh tracker; the verdict changes
/// of the replay were emitted before the crash and are dropped.
pub fn replay(policy: StragglerPolicy, rows: &[RecoverBreakdown], recent: usize) -> Replayed {
    let mut tracker = StragglerTracker::new(policy);
    let mut history = super::recent::RecentSteps::new(recent);
    let mut spans = Vec::new();
    let mut steps = 0;
    for chunk in rows.chunk_by(|a, b| a.step == b.step) {
        let step = chunk[0].step;
        let stats: Vec<RankStepStats> = chunk
            .iter()
            .map(|r| RankStepStats {
                rank: r.rank,
                node: r.node.clone(),
                step,
                compute_ns: r.compute_ns,
                dataloader_ns: r.dataloader_ns,
                step_time_ns: r.step_time_ns,
                comm_wait_ns: r.comm_wait_ns,
                comm_ns: r.comm_ns,
            })
            .collect();
        let _ = tracker.observe(step, &stats);
        steps += 1;
        for r in chunk {
            history.push(RankStepWait {
                step,
                rank: r.rank,
                step_time_ns: r.step_time_ns,
                work_ns: r.compute_ns + r.dataloader_ns,
                wait_ns: r.comm_wait_ns.min(r.comm_ns),
            });
        }
        for r in chunk {
            spans.push((step, r.step_start_ns, r.step_start_ns + r.step_time_ns));
        }
    }
    Replayed {
        tracker,
        recent: history,
        spans,
        steps,
    }
}

/// Every rank's stream after the last finalized step, rebuilt in time order
/// (module docs), as step assembly input. Events of a rank before its first
/// marker after F belong to finalized steps and are left out.
pub fn rank_inputs(snap: &JobSnapshot) -> Vec<RankInput> {
    // Tie order at equal times: end (0), begin (1), other events (2).
    type Timed = (u64, u8, StreamEvent);
    let world_size = snap.ranks.iter().map(|r| r.world_size).max().unwrap_or(1);
    let mut streams: BTreeMap<u32, (u64, String, String, Vec<Timed>)> = BTreeMap::new();
    for m in &snap.markers {
        let s = streams
            .entry(m.rank)
            .or_insert_with(|| (m.ts_ns, m.node.clone(), m.run_id.clone(), Vec::new()));
        s.0 = s.0.min(m.ts_ns);
        let ev = if m.is_end != 0 {
            (
                m.ts_ns,
                0,
                StreamEvent::StepEnd {
                    step: m.step,
                    ts_ns: m.ts_ns,
                },
            )
        } else {
            (
                m.ts_ns,
                1,
                StreamEvent::StepBegin {
                    step: m.step,
                    ts_ns: m.ts_ns,
                },
            )
        };
        s.3.push(ev);
    }
    let mut add = |rank: u32, start_ns: u64, ev: StreamEvent| {
        if let Some(s) = streams.get_mut(&rank).filter(|s| start_ns >= s.0) {
            s.3.push((start_ns, 2, ev));
        }
    };
    for k in &snap.kernels {
        let kind = if k.memcpy != 0 {
            GpuEventKind::Memcpy
        } else if k.memset != 0 {
            GpuEventKind::Memset
        } else {
            GpuEventKind::Kernel
        };
        let class = classify_kernel(&k.name, kind);
        let ev = GpuEvent {
            start_ns: k.start_ns,
            end_ns: k.end_ns,
            class,
        };
        add(k.rank, k.start_ns, StreamEvent::Gpu(ev));
    }
    for s in &snap.spans {
        let iv = Interval::new(s.start_ns, s.end_ns);
        let ev = if s.dataloader != 0 {
            StreamEvent::Dataloader(iv)
        } else if s.device < 0 {
            // The stored category is not read back: replayed steps name
            // their phases `compute`.
            StreamEvent::HostCompute(iv, "compute")
        } else {
            StreamEvent::DeviceCompute(iv, "compute")
        };
        add(s.rank, s.start_ns, ev);
    }
    for c in &snap.collectives {
        let Ok(op) = CollOp::from_str(&c.op) else {
            continue;
        };
        let obs = CollectiveObs {
            rank: c.rank,
            process_group: c.process_group.clone(),
            seq: c.seq,
            op,
            dtype: c.dtype.clone(),
            group_size: c.group_size,
            bytes: c.bytes,
            start_ns: c.start_ns,
            end_ns: c.end_ns,
        };
        add(c.rank, c.start_ns, StreamEvent::Collective(obs));
    }
    streams
        .into_iter()
        .map(|(rank, (_, node, run_id, mut events))| {
            events.sort_by_key(|e| (e.0, e.1));
            RankInput {
                job: snap.job.clone(),
                run_id,
                rank,
                world_size,
                node,
                events: events.into_iter().map(|e| e.2).collect(),
                // Not known to be connected until it sends again: a job that
                // ended while the collector was down is no hang.
                closed: true,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(rank: u32, step: u64, end: bool, ts_ns: u64) -> RecoverMarker {
        RecoverMarker {
            rank,
            step,
            is_end: u8::from(end),
            ts_ns,
            node: "n0".into(),
            run_id: "r".into(),
            agent_id: "a".into(),
            agent_session: 1,
            batch_seq: 1,
        }
    }

    fn kernel(rank: u32, name: &str, start_ns: u64, end_ns: u64) -> RecoverKernel {
        RecoverKernel {
            rank,
            memcpy: 0,
            memset: 0,
            name: name.into(),
            start_ns,
            end_ns,
            agent_id: "a".into(),
            agent_session: 1,
            batch_seq: 1,
        }
    }

    #[test]
    fn streams_are_rebuilt_in_time_order_from_the_first_marker_on() {
        let snap = JobSnapshot {
            job: "j".into(),
            last_finalized: Some(4),
            markers: vec![
                marker(0, 5, false, 100),
                marker(0, 5, true, 200),
                marker(0, 6, false, 200),
            ],
            kernels: vec![
                kernel(0, "gemm", 150, 160),
                // Before the rank's first marker after F: step 4's, left out.
                kernel(0, "gemm", 50, 60),
                kernel(0, "ncclKernel_AllReduce", 210, 220),
                // A rank without markers after F: nothing to rebuild.
                kernel(1, "gemm", 150, 160),
            ],
            ..Default::default()
        };
        let inputs = rank_inputs(&snap);
        assert_eq!(inputs.len(), 1);
        let ev = &inputs[0].events;
        assert_eq!(ev.len(), 5);
        assert!(matches!(ev[0], StreamEvent::StepBegin { step: 5, .. }));
        assert!(matches!(
            ev[1],
            StreamEvent::Gpu(GpuEvent { start_ns: 150, .. })
        ));
        // At t=200 the end of step 5 comes before the begin of step 6.
        assert!(matches!(ev[2], StreamEvent::StepEnd { step: 5, .. }));
        assert!(matches!(ev[3], StreamEvent::StepBegin { step: 6, .. }));
        assert!(matches!(
            ev[4],
            StreamEvent::Gpu(GpuEvent { start_ns: 210, .. })
        ));
    }

    fn row(step: u64, rank: u32, compute_ns: u64) -> RecoverBreakdown {
        RecoverBreakdown {
            step,
            rank,
            node: format!("n{rank}"),
            step_start_ns: step * 1_000,
            step_time_ns: 1_000,
            compute_ns,
            comm_ns: 0,
            dataloader_ns: 0,
            comm_wait_ns: 0,
        }
    }

    #[test]
    fn replay_rebuilds_the_tracker_a_live_run_had() {
        let policy = StragglerPolicy::default();
        let mut rows = Vec::new();
        for step in 0..40 {
            for rank in 0..8 {
                let slow = rank == 3 && step >= 10;
                rows.push(row(
                    step,
                    rank,
                    if slow { 1_500 } else { 1_000 + u64::from(rank) },
                ));
            }
        }
        let mut live = StragglerTracker::new(policy);
        for chunk in rows.chunk_by(|a, b| a.step == b.step) {
            let stats: Vec<RankStepStats> = chunk
                .iter()
                .map(|r| RankStepStats {
                    rank: r.rank,
                    node: r.node.clone(),
                    step: r.step,
                    compute_ns: r.compute_ns,
                    dataloader_ns: 0,
                    step_time_ns: r.step_time_ns,
                    comm_wait_ns: 0,
                    comm_ns: 0,
                })
                .collect();
            live.observe(chunk[0].step, &stats);
        }
        let active = live.active_verdicts();
        assert_eq!(active.len(), 1, "rank 3 is a straggler");
        // Replay only from window_steps before the verdict's first step.
        let from =
            active[0].first_step - u64::from(policy.window_steps()).min(active[0].first_step);
        let window: Vec<RecoverBreakdown> =
            rows.iter().filter(|r| r.step >= from).cloned().collect();
        let r = replay(policy, &window, 16);
        assert_eq!(r.tracker.active_verdicts(), active);
        assert_eq!(r.tracker.last_step(), Some(39));
        assert_eq!(r.recent.steps_held(), 16);
        assert_eq!(r.recent.last_step(), Some(39));
    }
}
