//! Straggler verdict versions as the live analytics raise them, for the API
//! to serve before their rows are stored.
//!
//! In: every [`VerdictRow`] the stream writes ([`LiveVerdicts::record`]).
//! Out: the job's versions of the last [`HORIZON_NS`]
//! ([`LiveVerdicts::of`]), which `GET /api/v1/jobs/{job}/stragglers`
//! merges with `straggler_verdicts` ([`merge`]): a verdict is answered the
//! moment it is raised instead of after the results writer's flush and
//! INSERT (`writer.results_flush_interval_ms`), which under ingest load
//! waits behind the raw events' commit.
//!
//! The merge keeps, per (rank, first_step), the version with the highest
//! `updated_ns`: what `straggler_verdicts FINAL` (ReplacingMergeTree by
//! `updated_ns`) gives once the live version is stored, so an answer never
//! goes back to an older version when the row lands.
//!
//! Memory: versions older than [`HORIZON_NS`] are pruned when a version is
//! recorded, at most once a second (stored by then, or their write failed
//! and was counted), at most
//! [`MAX_VERSIONS`] are held (beyond, new ones are not held and
//! `rankscope_collector_stream_live_verdicts_dropped_total` counts them:
//! they are served once stored).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::store::analytics::StragglerRow;
use crate::store::VerdictRow;

/// How long a raised version is served from memory.
pub const HORIZON_NS: u64 = 60_000_000_000;
/// Most versions held across all jobs.
pub const MAX_VERSIONS: usize = 100_000;

/// The recent verdict versions of every job. Shared by the stream task and
/// the API (behind an `Arc`).
#[derive(Debug, Default)]
pub struct LiveVerdicts {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// job -> (rank, first_step) -> latest version.
    jobs: HashMap<String, HashMap<(u32, u64), StragglerRow>>,
    held: usize,
    last_prune_ns: u64,
}

/// Old versions are looked for at most this often.
const PRUNE_EVERY_NS: u64 = 1_000_000_000;

impl LiveVerdicts {
    /// Holds `row` (a newer version replaces an older one); versions older
    /// than [`HORIZON_NS`] before `now_ns` are forgotten (checked at most
    /// once a second). False when `row` is a new verdict and
    /// [`MAX_VERSIONS`] are held: it is not held (the caller counts it).
    pub fn record(&self, row: &VerdictRow, now_ns: u64) -> bool {
        let mut st = self.lock();
        if now_ns.saturating_sub(st.last_prune_ns) >= PRUNE_EVERY_NS {
            st.last_prune_ns = now_ns;
            let oldest = now_ns.saturating_sub(HORIZON_NS);
            let mut held = 0;
            st.jobs.retain(|_, versions| {
                versions.retain(|_, v| v.updated_ns >= oldest);
                held += versions.len();
                !versions.is_empty()
            });
            st.held = held;
        }
        let State { jobs, held, .. } = &mut *st;
        let versions = jobs.entry(row.job_id.clone()).or_default();
        let key = (row.rank, row.first_step);
        match versions.get_mut(&key) {
            Some(v) if v.updated_ns <= row.updated_ns => *v = straggler_row(row),
            Some(_) => {}
            None if *held < MAX_VERSIONS => {
                versions.insert(key, straggler_row(row));
                *held += 1;
            }
            None => {
                if versions.is_empty() {
                    jobs.remove(&row.job_id);
                }
                return false;
            }
        }
        true
    }

    /// The versions of `job` raised in the last [`HORIZON_NS`] before `now_ns`.
    pub fn of(&self, job: &str, now_ns: u64) -> Vec<StragglerRow> {
        let oldest = now_ns.saturating_sub(HORIZON_NS);
        self.lock().jobs.get(job).map_or_else(Vec::new, |versions| {
            versions
                .values()
                .filter(|v| v.updated_ns >= oldest)
                .cloned()
                .collect()
        })
    }

    /// Versions held now (pruned ones leave at the next prune).
    pub fn held(&self) -> u64 {
        self.lock().held as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data: keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn straggler_row(v: &VerdictRow) -> StragglerRow {
    StragglerRow {
        rank: v.rank,
        node: v.node.clone(),
        first_step: v.first_step,
        last_step: v.last_step,
        steps_flagged: v.steps_flagged,
        slowdown: v.slowdown,
        score: v.score,
        cause: v.cause.clone(),
        active: v.active,
        first_seen_ns: v.first_seen_ns,
        updated_ns: v.updated_ns,
    }
}

/// Stored and live versions together: per (rank, first_step) the one with
/// the highest `updated_ns` (the stored one on a tie), ordered by
/// (first_step, rank) as `stragglers.sql` orders.
pub fn merge(stored: Vec<StragglerRow>, live: Vec<StragglerRow>) -> Vec<StragglerRow> {
    let mut by_key: HashMap<(u32, u64), StragglerRow> = stored
        .into_iter()
        .map(|v| ((v.rank, v.first_step), v))
        .collect();
    for v in live {
        match by_key.get(&(v.rank, v.first_step)) {
            Some(s) if s.updated_ns >= v.updated_ns => {}
            _ => {
                by_key.insert((v.rank, v.first_step), v);
            }
        }
    }
    let mut out: Vec<StragglerRow> = by_key.into_values().collect();
    out.sort_by_key(|v| (v.first_step, v.rank));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(job: &str, rank: u32, first_step: u64, active: bool, updated_ns: u64) -> VerdictRow {
        VerdictRow {
            job_id: job.into(),
            rank,
            node: "n".into(),
            first_step,
            last_step: first_step + 2,
            steps_flagged: 3,
            slowdown: 1.5,
            score: 9.0,
            cause: "compute".into(),
            active: u8::from(active),
            first_seen_ns: 1,
            updated_ns,
        }
    }

    #[test]
    fn newest_version_wins_and_old_ones_expire() {
        let live = LiveVerdicts::default();
        let t = 1_000 * HORIZON_NS;
        live.record(&version("a", 7, 3, true, t), t);
        live.record(&version("a", 7, 3, false, t + 5), t + 5);
        // An older version arriving late does not replace the newer one.
        live.record(&version("a", 7, 3, true, t + 1), t + 6);
        live.record(&version("b", 1, 0, true, t + 6), t + 6);
        let a = live.of("a", t + 6);
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].active, a[0].updated_ns), (0, t + 5));
        assert_eq!(live.held(), 2);
        // Past the horizon: not served, and pruned by the next record.
        assert!(live.of("a", t + 5 + HORIZON_NS + 1).is_empty());
        live.record(
            &version("b", 2, 0, true, t + 2 * HORIZON_NS),
            t + 2 * HORIZON_NS,
        );
        assert_eq!(live.held(), 1);
        assert!(live.of("a", t + 2 * HORIZON_NS).is_empty());
    }

    #[test]
    fn merge_keeps_the_latest_version_in_route_order() {
        let row = |rank, first_step, active, updated_ns| {
            straggler_row(&version("j", rank, first_step, active, updated_ns))
        };
        let stored = vec![
            row(5, 2, true, 10),
            row(9, 1, true, 10),
            row(3, 4, true, 30),
        ];
        let live = vec![
            row(5, 2, false, 20), // newer than stored: wins
            row(3, 4, false, 30), // same version: the stored one stays
            row(1, 6, true, 40),  // not stored yet
        ];
        let merged = merge(stored, live);
        let got: Vec<(u64, u32, u8, u64)> = merged
            .iter()
            .map(|v| (v.first_step, v.rank, v.active, v.updated_ns))
            .collect();
        assert_eq!(
            got,
            vec![(1, 9, 1, 10), (2, 5, 0, 20), (4, 3, 1, 30), (6, 1, 1, 40)]
        );
    }

    #[test]
    fn the_cap_drops_and_counts_new_verdicts() {
        let live = LiveVerdicts::default();
        let t = HORIZON_NS;
        for rank in 0..MAX_VERSIONS as u32 {
            assert!(live.record(&version("big", rank, 0, true, t), t));
        }
        assert!(!live.record(&version("other", 1, 0, true, t), t));
        assert_eq!(live.held(), MAX_VERSIONS as u64);
        assert!(live.of("other", t).is_empty());
        // A new version of a held verdict still replaces it.
        assert!(live.record(&version("big", 0, 0, false, t + 1), t + 1));
        assert!(live
            .of("big", t + 1)
            .iter()
            .any(|v| v.rank == 0 && v.active == 0));
    }
}
