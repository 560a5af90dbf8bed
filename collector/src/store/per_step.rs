//! Per-step reads behind the web UI: the step range of a job's breakdowns,
//! its (step, rank) windows, and the statistics of its collectives step by
//! step (the bus-bandwidth-over-steps chart).
//!
//! In: a job and an inclusive step range. Out: typed rows. A collective
//! belongs to the step whose window `[step_start_ns, step_start_ns +
//! step_time_ns)` on the same rank contains its start: both times come from
//! that rank's clock, so no cross-node comparison is made. Collectives that
//! start outside every window of their rank (before the first step, between
//! steps) are left out. A step's statistics are
//! `rankscope_analysis::collective_stats` over that step's collectives only
//! (algbw / busbw as nccl-tests, see that crate). SQL in
//! `collector/queries/`, arguments bound with `?`.

use std::collections::{BTreeMap, HashMap};

use clickhouse::Row;
use rankscope_analysis::{collective_stats, CollectiveObs, CollectiveStats};
use serde::Deserialize;

use super::analytics::CollectiveReadRow;
use super::sql::{query_file, QueryFile};
use super::telemetry::StepWindow;
use super::{Store, StoreError};

const BREAKDOWN_MAX_STEP_SQL: QueryFile = query_file!("breakdown_max_step");
const STEP_WINDOWS_SQL: QueryFile = query_file!("step_windows");
const COLLECTIVES_WINDOW_SQL: QueryFile = query_file!("job_collectives_window");

#[derive(Debug, Row, Deserialize)]
struct MaxStep {
    step: u64,
    n: u64,
}

impl Store {
    /// The highest step with a stored breakdown; `None` when the job has none.
    pub async fn last_breakdown_step(&self, job: &str) -> Result<Option<u64>, StoreError> {
        let rows: Vec<MaxStep> = self
            .read(BREAKDOWN_MAX_STEP_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("breakdown max step"))?;
        Ok(rows.into_iter().find(|m| m.n > 0).map(|m| m.step))
    }

    /// The (step, rank) windows of steps `from..=to`, ordered by step and rank.
    pub async fn step_windows(
        &self,
        job: &str,
        from_step: u64,
        to_step: u64,
    ) -> Result<Vec<StepWindow>, StoreError> {
        self.read(STEP_WINDOWS_SQL)
            .bind(job)
            .bind(from_step)
            .bind(to_step)
            .fetch_all()
            .await
            .map_err(StoreError::query("step windows"))
    }

    /// Job-wide collective statistics of each step of `from..=to` that holds
    /// collectives, in step order.
    pub async fn step_collective_stats(
        &self,
        job: &str,
        from_step: u64,
        to_step: u64,
    ) -> Result<Vec<(u64, Vec<CollectiveStats>)>, StoreError> {
        let windows = self.step_windows(job, from_step, to_step).await?;
        let (Some(lo), Some(hi)) = (
            windows.iter().map(|w| w.step_start_ns).min(),
            windows.iter().map(window_end).max(),
        ) else {
            return Ok(Vec::new());
        };
        let rows: Vec<CollectiveReadRow> = self
            .read(COLLECTIVES_WINDOW_SQL)
            .bind(job)
            .bind(lo)
            .bind(hi)
            .fetch_all()
            .await
            .map_err(StoreError::query("collectives in a step range"))?;
        let obs = rows.into_iter().filter_map(CollectiveReadRow::into_obs);
        Ok(assign_steps(&windows, obs)
            .into_iter()
            .map(|(step, obs)| (step, collective_stats(&obs, false)))
            .collect())
    }
}

fn window_end(w: &StepWindow) -> u64 {
    w.step_start_ns.saturating_add(w.step_time_ns)
}

/// Groups collectives by the step whose window on their rank contains their
/// start (see the module doc); the others are dropped.
pub fn assign_steps(
    windows: &[StepWindow],
    obs: impl IntoIterator<Item = CollectiveObs>,
) -> BTreeMap<u64, Vec<CollectiveObs>> {
    let mut per_rank: HashMap<u32, Vec<&StepWindow>> = HashMap::new();
    for w in windows {
        per_rank.entry(w.rank).or_default().push(w);
    }
    for ws in per_rank.values_mut() {
        ws.sort_by_key(|w| (w.step_start_ns, w.step));
    }
    let mut out: BTreeMap<u64, Vec<CollectiveObs>> = BTreeMap::new();
    for o in obs {
        let Some(ws) = per_rank.get(&o.rank) else {
            continue;
        };
        // The last window starting at or before the collective.
        let i = ws.partition_point(|w| w.step_start_ns <= o.start_ns);
        if let Some(w) = i.checked_sub(1).map(|i| ws[i]) {
            if o.start_ns < window_end(w) {
                out.entry(w.step).or_default().push(o);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_analysis::CollOp;

    fn w(step: u64, rank: u32, start: u64, len: u64) -> StepWindow {
        StepWindow {
            step,
            rank,
            step_start_ns: start,
            step_time_ns: len,
        }
    }

    fn c(rank: u32, seq: u64, start: u64) -> CollectiveObs {
        CollectiveObs {
            rank,
            process_group: "pg".into(),
            seq,
            op: CollOp::AllReduce,
            dtype: "float32".into(),
            group_size: 2,
            bytes: 1 << 20,
            start_ns: start,
            end_ns: start + 10,
        }
    }

    #[test]
    fn collectives_go_to_the_window_of_their_own_rank() {
        // Rank 1's clock is 1000 ns ahead of rank 0's.
        let windows = [
            w(0, 0, 100, 100),
            w(1, 0, 200, 100),
            w(0, 1, 1100, 100),
            w(1, 1, 1200, 100),
        ];
        let obs = vec![
            c(0, 1, 150),
            c(1, 1, 1150),
            c(0, 2, 200), // a window's start belongs to it
            c(1, 2, 1299),
            c(0, 3, 300),  // after the last window: dropped
            c(1, 3, 1050), // before the first: dropped
            c(2, 1, 150),  // a rank without windows: dropped
        ];
        let got = assign_steps(&windows, obs);
        let seqs =
            |s: u64| -> Vec<(u32, u64)> { got[&s].iter().map(|o| (o.rank, o.seq)).collect() };
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(seqs(0), vec![(0, 1), (1, 1)]);
        assert_eq!(seqs(1), vec![(0, 2), (1, 2)]);
    }

    #[test]
    fn assignment_does_not_depend_on_window_order() {
        let mut windows = vec![w(3, 0, 300, 50), w(1, 0, 100, 50), w(2, 0, 200, 50)];
        let obs = || vec![c(0, 1, 120), c(0, 2, 220), c(0, 3, 320), c(0, 4, 260)];
        let a = assign_steps(&windows, obs());
        windows.reverse();
        let b = assign_steps(&windows, obs());
        assert_eq!(a, b);
        assert_eq!(a.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
    }
}
