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
//! Once a stored read found nothing memory lacks while the stream holds the
//! job, the route answers from memory alone ([`complete`]).
//!
//! The merge keeps, per (rank, first_step), the version with the highest
//! `updated_ns`: what `straggler_verdicts FINAL` (ReplacingMergeTree by
//! `updated_ns`) gives once the live version is stored, so an answer never
//! goes back to an older version when the row lands.
//!
//! A version raised while every step of it was in the stream's memory
//! carries its what-if gain (`recent`), held here and stored with it in
//! `straggler_gains` (migration 0017, [`fill_stored`]), so the route reads
//! no breakdowns for it, before or after a restart; the others' gains are
//! computed from the stored breakdowns.
//!
//! Memory: versions older than [`HORIZON_NS`] are pruned when a version is
//! recorded, at most once a second (stored by then, or their write failed
//! and was counted), at most
//! [`MAX_VERSIONS`] are held (beyond, new ones are not held and
//! `rankscope_collector_stream_live_verdicts_dropped_total` counts them:
//! they are served once stored).

pub mod complete;

use std::collections::HashMap;
use std::sync::Mutex;

use crate::store::analytics::StragglerRow;
use crate::store::gains::StoredGainRow;
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
    jobs: HashMap<String, HashMap<(u32, u64), Version>>,
    held: usize,
    last_prune_ns: u64,
    /// The jobs the stream holds (`complete`).
    held_jobs: HashMap<String, complete::Held>,
    /// Bumped whenever a job's `complete` mark may be cleared.
    epoch: u64,
}

/// A verdict version and what is known of its what-if gain.
#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    pub row: StragglerRow,
    /// `Some(expected_gain_pct)` when it was computed from memory as the
    /// version was raised (every step of the verdict held); `None`: to be
    /// computed from the stored breakdowns.
    pub gain: Option<Option<f64>>,
}

/// Old versions are looked for at most this often.
const PRUNE_EVERY_NS: u64 = 1_000_000_000;

impl LiveVerdicts {
    /// Holds `row` (a newer version replaces an older one); versions older
    /// than [`HORIZON_NS`] before `now_ns` are forgotten (checked at most
    /// once a second). False when `row` is a new verdict and
    /// [`MAX_VERSIONS`] are held: it is not held (the caller counts it).
    pub fn record(&self, row: &VerdictRow, gain: Option<Option<f64>>, now_ns: u64) -> bool {
        let mut st = self.lock();
        if now_ns.saturating_sub(st.last_prune_ns) >= PRUNE_EVERY_NS {
            st.last_prune_ns = now_ns;
            let oldest = now_ns.saturating_sub(HORIZON_NS);
            let mut held = 0;
            let mut pruned = Vec::new();
            st.jobs.retain(|job, versions| {
                let before = versions.len();
                versions.retain(|_, v| v.row.updated_ns >= oldest);
                if versions.len() != before {
                    pruned.push(job.clone());
                }
                held += versions.len();
                !versions.is_empty()
            });
            st.held = held;
            let State {
                held_jobs, epoch, ..
            } = &mut *st;
            complete::clear(held_jobs, epoch, pruned.iter().map(String::as_str));
            complete::prune_evidence(held_jobs, epoch, oldest);
        }
        let State {
            jobs,
            held,
            held_jobs,
            epoch,
            ..
        } = &mut *st;
        let versions = jobs.entry(row.job_id.clone()).or_default();
        let key = (row.rank, row.first_step);
        let version = || Version {
            row: straggler_row(row),
            gain,
        };
        match versions.get_mut(&key) {
            Some(v) if v.row.updated_ns <= row.updated_ns => *v = version(),
            Some(_) => {}
            None if *held < MAX_VERSIONS => {
                versions.insert(key, version());
                *held += 1;
            }
            None => {
                if versions.is_empty() {
                    jobs.remove(&row.job_id);
                }
                complete::clear(held_jobs, epoch, [row.job_id.as_str()]);
                return false;
            }
        }
        true
    }

    /// The versions of `job` raised in the last [`HORIZON_NS`] before `now_ns`.
    pub fn of(&self, job: &str, now_ns: u64) -> Vec<Version> {
        let oldest = now_ns.saturating_sub(HORIZON_NS);
        self.lock().jobs.get(job).map_or_else(Vec::new, |versions| {
            versions
                .values()
                .filter(|v| v.row.updated_ns >= oldest)
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
/// the highest `updated_ns` (the stored row on a tie, with the live gain:
/// the same version), ordered by (first_step, rank) as `stragglers.sql`
/// orders.
pub fn merge(stored: Vec<StragglerRow>, live: Vec<Version>) -> Vec<Version> {
    let mut by_key: HashMap<(u32, u64), Version> = stored
        .into_iter()
        .map(|row| ((row.rank, row.first_step), Version { row, gain: None }))
        .collect();
    for v in live {
        let key = (v.row.rank, v.row.first_step);
        match by_key.get_mut(&key) {
            Some(s) if s.row.updated_ns > v.row.updated_ns => {}
            Some(s) if s.row.updated_ns == v.row.updated_ns => s.gain = v.gain,
            _ => {
                by_key.insert(key, v);
            }
        }
    }
    let mut out: Vec<Version> = by_key.into_values().collect();
    out.sort_by_key(|v| (v.row.first_step, v.row.rank));
    out
}

/// Gives each version without a gain the stored gain of the same version
/// (same `updated_ns` and `last_step`); a stored gain of another version
/// (the verdict's latest version had none stored) is not used.
pub fn fill_stored(versions: &mut [Version], stored: Vec<StoredGainRow>) {
    let by_key: HashMap<(u32, u64), StoredGainRow> = stored
        .into_iter()
        .map(|g| ((g.rank, g.first_step), g))
        .collect();
    for v in versions.iter_mut().filter(|v| v.gain.is_none()) {
        if let Some(g) = by_key
            .get(&(v.row.rank, v.row.first_step))
            .filter(|g| g.updated_ns == v.row.updated_ns && g.last_step == v.row.last_step)
        {
            v.gain = Some(g.expected_gain_pct);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verdict version (also `complete`'s tests' helper).
    pub(super) fn version(
        job: &str,
        rank: u32,
        first_step: u64,
        active: bool,
        updated_ns: u64,
    ) -> VerdictRow {
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
        live.record(&version("a", 7, 3, true, t), Some(Some(4.0)), t);
        live.record(&version("a", 7, 3, false, t + 5), Some(None), t + 5);
        // An older version arriving late does not replace the newer one.
        live.record(&version("a", 7, 3, true, t + 1), None, t + 6);
        live.record(&version("b", 1, 0, true, t + 6), None, t + 6);
        let a = live.of("a", t + 6);
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].row.active, a[0].row.updated_ns), (0, t + 5));
        assert_eq!(a[0].gain, Some(None), "the gain of the version served");
        assert_eq!(live.held(), 2);
        // Past the horizon: not served, and pruned by the next record.
        assert!(live.of("a", t + 5 + HORIZON_NS + 1).is_empty());
        live.record(
            &version("b", 2, 0, true, t + 2 * HORIZON_NS),
            None,
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
        let live = |rank, first_step, active, updated_ns, gain| Version {
            row: row(rank, first_step, active, updated_ns),
            gain,
        };
        let stored = vec![
            row(5, 2, true, 10),
            row(9, 1, true, 10),
            row(3, 4, true, 30),
            row(4, 0, false, 50),
        ];
        let live = vec![
            live(5, 2, false, 20, Some(Some(2.0))), // newer than stored: wins
            live(3, 4, false, 30, Some(Some(3.0))), // same version: stored row, live gain
            live(1, 6, true, 40, None),             // not stored yet
            live(4, 0, true, 45, Some(Some(9.0))),  // older than stored: not used
        ];
        let merged = merge(stored, live);
        let got: Vec<_> = merged
            .iter()
            .map(|v| {
                let r = &v.row;
                (r.first_step, r.rank, r.active, r.updated_ns, v.gain)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 4, 0, 50, None),
                (1, 9, 1, 10, None),
                (2, 5, 0, 20, Some(Some(2.0))),
                (4, 3, 1, 30, Some(Some(3.0))),
                (6, 1, 1, 40, None)
            ]
        );
    }

    #[test]
    fn the_cap_drops_and_counts_new_verdicts() {
        let live = LiveVerdicts::default();
        let t = HORIZON_NS;
        for rank in 0..MAX_VERSIONS as u32 {
            assert!(live.record(&version("big", rank, 0, true, t), None, t));
        }
        assert!(!live.record(&version("other", 1, 0, true, t), None, t));
        assert_eq!(live.held(), MAX_VERSIONS as u64);
        assert!(live.of("other", t).is_empty());
        // A new version of a held verdict still replaces it.
        assert!(live.record(&version("big", 0, 0, false, t + 1), None, t + 1));
        assert!(live
            .of("big", t + 1)
            .iter()
            .any(|v| v.row.rank == 0 && v.row.active == 0));
    }

    #[test]
    fn stored_gains_fill_only_their_own_version() {
        let row = |rank, first_step, updated_ns| {
            straggler_row(&version("j", rank, first_step, true, updated_ns))
        };
        let gain = |rank, first_step, last_step, pct, updated_ns| StoredGainRow {
            rank,
            first_step,
            last_step,
            expected_gain_pct: pct,
            updated_ns,
        };
        let mut versions = vec![
            // Stored gain of this version: used.
            Version {
                row: row(1, 0, 10),
                gain: None,
            },
            // Stored gain null (no value by the definition): known.
            Version {
                row: row(2, 0, 10),
                gain: None,
            },
            // Stored gain of an older version: not used.
            Version {
                row: row(3, 0, 20),
                gain: None,
            },
            // No stored gain (written before migration 0017).
            Version {
                row: row(4, 0, 10),
                gain: None,
            },
            // A live gain is kept.
            Version {
                row: row(5, 0, 10),
                gain: Some(Some(7.0)),
            },
        ];
        fill_stored(
            &mut versions,
            vec![
                gain(1, 0, 2, Some(3.5), 10),
                gain(2, 0, 2, None, 10),
                gain(3, 0, 2, Some(1.0), 10),
                gain(5, 0, 2, Some(1.0), 10),
                // Same updated_ns, other last step: not this version.
                gain(4, 0, 9, Some(1.0), 10),
            ],
        );
        let got: Vec<_> = versions.iter().map(|v| (v.row.rank, v.gain)).collect();
        assert_eq!(
            got,
            vec![
                (1, Some(Some(3.5))),
                (2, Some(None)),
                (3, None),
                (4, None),
                (5, Some(Some(7.0)))
            ]
        );
    }
}
