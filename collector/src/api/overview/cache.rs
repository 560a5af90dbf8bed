//! The overview's per-rank figures, kept per (job, rank filter) while the
//! job's inputs are unchanged.
//!
//! In: a job's [`ViewInput`]s (`Store::view_inputs`: per input table its
//! rows and a time sum, read before the figures are computed) and the
//! figures computed from the tables. Out: the figures of an earlier request
//! when the inputs read now equal the ones read before that computation.
//!
//! Why: the overview folds every GPU activity of the job with its launch
//! call and launch figures (8.4 M rows at 1,024 ranks x 100 steps: seconds,
//! bench/RESULTS-views.md) into one row per rank, while a finished job's
//! rows no longer change. Exactness: the inputs are read before the
//! figures, so a write that lands during a computation changes the next
//! request's inputs and that request computes again; an answer is never
//! served for inputs other than the ones it was computed after. A merge of
//! unmerged duplicates also changes the inputs (it only costs a
//! recomputation). At most [`CAPACITY`] entries, the least recently used
//! dropped first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::store::plugin::ViewInput;

use super::RankOverview;

/// Entries kept (one per job and rank filter asked for).
pub const CAPACITY: usize = 64;

type Key = (String, Option<u32>);

struct Entry {
    inputs: Vec<ViewInput>,
    rows: Arc<Vec<RankOverview>>,
    used: u64,
}

/// The kept figures (see the module docs).
#[derive(Default)]
pub struct OverviewCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    clock: u64,
}

impl OverviewCache {
    /// The figures of `(job, rank)` computed after the same `inputs`.
    pub fn get(
        &self,
        job: &str,
        rank: Option<u32>,
        inputs: &[ViewInput],
    ) -> Option<Arc<Vec<RankOverview>>> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.clock += 1;
        let now = g.clock;
        let e = g.entries.get_mut(&(job.to_owned(), rank))?;
        if e.inputs != inputs {
            return None;
        }
        e.used = now;
        Some(Arc::clone(&e.rows))
    }

    /// Keeps `rows`, computed after `inputs` were read.
    pub fn put(
        &self,
        job: &str,
        rank: Option<u32>,
        inputs: Vec<ViewInput>,
        rows: Arc<Vec<RankOverview>>,
    ) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.clock += 1;
        let used = g.clock;
        g.entries
            .insert((job.to_owned(), rank), Entry { inputs, rows, used });
        while g.entries.len() > CAPACITY {
            let Some(oldest) = g
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            g.entries.remove(&oldest);
        }
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_analysis::tb_plugin::GpuSummary;

    fn input(n: u64) -> Vec<ViewInput> {
        vec![ViewInput {
            input: "kernels".into(),
            n,
            time_sum: n * 10,
        }]
    }

    fn rows(rank: u32) -> Arc<Vec<RankOverview>> {
        Arc::new(vec![RankOverview {
            rank,
            summary: GpuSummary::default(),
            steps: 1,
            span_from: "steps",
            roles_us: [0.0; 8],
            step_us: 1.0,
            kernels: Default::default(),
            from_kept: false,
        }])
    }

    #[test]
    fn served_only_for_the_inputs_it_was_computed_after() {
        let c = OverviewCache::default();
        assert!(c.get("j", None, &input(1)).is_none());
        c.put("j", None, input(1), rows(7));
        assert_eq!(c.get("j", None, &input(1)).unwrap()[0].rank, 7);
        // A write changed the inputs: recompute.
        assert!(c.get("j", None, &input(2)).is_none());
        // Another rank filter or job is another entry.
        assert!(c.get("j", Some(0), &input(1)).is_none());
        assert!(c.get("k", None, &input(1)).is_none());
        c.put("j", None, input(2), rows(8));
        assert_eq!(c.get("j", None, &input(2)).unwrap()[0].rank, 8);
        assert!(c.get("j", None, &input(1)).is_none());
    }

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let c = OverviewCache::default();
        for i in 0..CAPACITY {
            c.put(&format!("j{i}"), None, input(1), rows(0));
        }
        // j0 is used again, so j1 is the oldest when one more arrives.
        assert!(c.get("j0", None, &input(1)).is_some());
        c.put("new", None, input(1), rows(0));
        assert_eq!(c.len(), CAPACITY);
        assert!(c.get("j0", None, &input(1)).is_some());
        assert!(c.get("j1", None, &input(1)).is_none());
        assert!(c.get("new", None, &input(1)).is_some());
    }
}
