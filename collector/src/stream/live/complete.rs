//! When the live registry alone answers the stragglers route: a job whose
//! stored verdict versions and evidence are all held in memory.
//!
//! In: the jobs the stream task holds ([`LiveVerdicts::begin`] when it takes
//! a job up, fresh or restored; [`LiveVerdicts::end`] when it forgets or
//! releases one), every evidence row the stream writes
//! ([`LiveVerdicts::record_evidence`]), and the route's own stored read
//! ([`LiveVerdicts::verify`]). Out: [`LiveVerdicts::memory_of`], the job's
//! versions and evidence when memory holds everything the stored read
//! would add; `None` otherwise (the route then reads and merges as before).
//!
//! Why the answer does not change: a job is *verified* when a stored read
//! of the route found only versions memory holds at least as new (and only
//! evidence of verdicts memory holds evidence of), read while the stream
//! held the job. From then on, every row stored for the job is written by
//! this stream, which records it here before it writes it, so the merge of
//! stored and live versions is the live set: that is what `memory_of`
//! answers. Anything that breaks the premise clears the mark: versions of
//! the job pruned or not held ([`super::MAX_VERSIONS`]), a version older
//! than [`super::HORIZON_NS`] (not served from memory), the stream
//! forgetting or releasing the job (ownership moved: another collector may
//! write it). A mark is only set when nothing was cleared between the read
//! of memory the verification compares against and the mark (a global
//! epoch). The one difference: evidence the stream raised is answered before
//! its row is stored, as versions are.

use std::collections::HashMap;

use super::{LiveVerdicts, Version, HORIZON_NS};
use crate::store::analytics::StragglerRow;
use crate::store::telemetry::rows::EvidenceRow;
use crate::store::telemetry::EvidenceReadRow;

/// What the registry knows of a job the stream holds.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Memory holds every stored version and evidence row of the job.
    verified: bool,
    /// The job's rows were found stored ([`LiveVerdicts::found_stored`]).
    stored: bool,
    /// (rank, first_step) -> (updated_ns, latest evidence).
    evidence: HashMap<(u32, u64), (u64, EvidenceReadRow)>,
}

/// A job's answer from memory alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub versions: Vec<Version>,
    pub evidence: Vec<EvidenceReadRow>,
    /// The job's rows were found stored while the stream held it (the
    /// route's `job_exists` need not be asked again).
    pub stored: bool,
}

/// The state of memory a verification compares against (see
/// [`LiveVerdicts::snapshot`]).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub versions: Vec<Version>,
    epoch: u64,
    /// The stream holds the job, every version within the horizon.
    eligible: bool,
}

impl LiveVerdicts {
    /// The stream took `job` up (a fresh job or one restored): its rows are
    /// written through this registry from now on; not verified yet.
    pub fn begin(&self, job: &str) {
        let mut st = self.lock();
        st.epoch += 1;
        st.held_jobs.insert(job.to_owned(), Held::default());
    }

    /// The stream forgot or released `job`.
    pub fn end(&self, job: &str) {
        let mut st = self.lock();
        st.epoch += 1;
        st.held_jobs.remove(job);
    }

    /// Holds an evidence row the stream writes (the latest per verdict, as
    /// `straggler_evidence FINAL`; on a tie the later row, as in one INSERT).
    pub fn record_evidence(&self, row: &EvidenceRow) {
        let mut st = self.lock();
        let Some(held) = st.held_jobs.get_mut(&row.job_id) else {
            return;
        };
        let key = (row.rank, row.first_step);
        if held
            .evidence
            .get(&key)
            .is_none_or(|(t, _)| *t <= row.updated_ns)
        {
            held.evidence.insert(key, (row.updated_ns, read_row(row)));
        }
    }

    /// The job's live versions (as [`LiveVerdicts::of`]) and what a later
    /// [`LiveVerdicts::verify`] needs of this moment.
    pub fn snapshot(&self, job: &str, now_ns: u64) -> Snapshot {
        let st = self.lock();
        let oldest = now_ns.saturating_sub(HORIZON_NS);
        let all = st.jobs.get(job);
        let within = all.is_none_or(|v| v.values().all(|v| v.row.updated_ns >= oldest));
        Snapshot {
            versions: all.map_or_else(Vec::new, |versions| {
                versions
                    .values()
                    .filter(|v| v.row.updated_ns >= oldest)
                    .cloned()
                    .collect()
            }),
            epoch: st.epoch,
            eligible: within && st.held_jobs.contains_key(job),
        }
    }

    /// Marks `job` verified when the stored rows (read before `snap` was
    /// taken) are all held as new in memory and nothing was cleared since
    /// `snap`. True when the job is verified now.
    pub fn verify(
        &self,
        job: &str,
        snap: &Snapshot,
        stored: &[StragglerRow],
        evidence: &[EvidenceReadRow],
    ) -> bool {
        if !snap.eligible {
            return false;
        }
        let live: HashMap<(u32, u64), u64> = snap
            .versions
            .iter()
            .map(|v| ((v.row.rank, v.row.first_step), v.row.updated_ns))
            .collect();
        let versions_held = stored.iter().all(|s| {
            live.get(&(s.rank, s.first_step))
                .is_some_and(|&t| t >= s.updated_ns)
        });
        let mut st = self.lock();
        if st.epoch != snap.epoch {
            return false;
        }
        let Some(held) = st.held_jobs.get_mut(job) else {
            return false;
        };
        let evidence_held = evidence
            .iter()
            .all(|e| held.evidence.contains_key(&(e.rank, e.first_step)));
        if versions_held && evidence_held {
            held.verified = true;
        }
        held.verified
    }

    /// The job's versions and evidence when memory holds all the route
    /// would read (module docs); `None`: read the store.
    pub fn memory_of(&self, job: &str, now_ns: u64) -> Option<Memory> {
        let st = self.lock();
        let held = st.held_jobs.get(job).filter(|h| h.verified)?;
        let oldest = now_ns.saturating_sub(HORIZON_NS);
        let versions: Vec<Version> = match st.jobs.get(job) {
            Some(v) if v.values().any(|v| v.row.updated_ns < oldest) => return None,
            Some(v) => v.values().cloned().collect(),
            None => Vec::new(),
        };
        Some(Memory {
            versions,
            evidence: held.evidence.values().map(|(_, e)| e.clone()).collect(),
            stored: held.stored,
        })
    }

    /// The store answered that `job`'s rows exist (`Store::job_exists`),
    /// which stays true while the stream holds the job.
    pub fn found_stored(&self, job: &str) {
        if let Some(h) = self.lock().held_jobs.get_mut(job) {
            h.stored = true;
        }
    }
}

/// Clears the marks of `jobs` (their versions were pruned or not held).
pub(super) fn clear<'a>(
    held_jobs: &mut HashMap<String, Held>,
    epoch: &mut u64,
    jobs: impl IntoIterator<Item = &'a str>,
) {
    for job in jobs {
        *epoch += 1;
        if let Some(h) = held_jobs.get_mut(job) {
            h.verified = false;
        }
    }
}

/// Prunes evidence older than `oldest` (with its versions), clearing the
/// marks of the jobs that lose some.
pub(super) fn prune_evidence(held_jobs: &mut HashMap<String, Held>, epoch: &mut u64, oldest: u64) {
    for h in held_jobs.values_mut() {
        let before = h.evidence.len();
        h.evidence.retain(|_, (t, _)| *t >= oldest);
        if h.evidence.len() != before {
            *epoch += 1;
            h.verified = false;
        }
    }
}

fn read_row(e: &EvidenceRow) -> EvidenceReadRow {
    EvidenceReadRow {
        rank: e.rank,
        first_step: e.first_step,
        evidence: e.evidence.clone(),
        gpu_indexes: e.gpu_indexes.clone(),
        gpu_uuids: e.gpu_uuids.clone(),
        sm_clock_mhz: e.sm_clock_mhz,
        peer_sm_clock_mhz: e.peer_sm_clock_mhz,
        throttle_reasons: e.throttle_reasons.clone(),
        temp_c: e.temp_c,
        peer_temp_c: e.peer_temp_c,
        power_w: e.power_w,
        peer_power_w: e.peer_power_w,
        samples: e.samples,
        peer_gpus: e.peer_gpus,
    }
}

#[cfg(test)]
#[path = "complete_tests.rs"]
mod tests;
