//! Ranks of one world that arrived under different job ids.
//!
//! In: the job list (`JobRow`s, one per job and run). Out: a warning on
//! each row that looks like part of a world split across job ids, e.g. the
//! nodes of a multi-node launch that each named their own job (a per-node
//! `--job`, or a launcher whose job id the attribution rule could not find).
//! The steps and collectives of such parts never meet, so the user is told
//! how to name one job.
//!
//! Rule: rows with the same non-empty run id and the same world size > 1,
//! each of which saw fewer ranks than its world size, and whose seen time
//! ranges overlap (they ran together: run ids such as Slurm's `restart-N`
//! repeat across unrelated jobs, but not at the same time with the same
//! world size, while a split world's parts do).

use std::collections::BTreeMap;

use super::JobRow;

/// Adds a warning to each row of `jobs` that shares its world with rows of
/// other job ids (see the module docs).
pub fn warn_split_worlds(jobs: &mut [JobRow]) {
    let mut worlds: BTreeMap<(&str, u32), Vec<usize>> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        if !j.run_id.is_empty() && j.world_size > 1 && j.ranks_seen < j.world_size {
            worlds
                .entry((j.run_id.as_str(), j.world_size))
                .or_default()
                .push(i);
        }
    }
    let overlap = |a: &JobRow, b: &JobRow| {
        a.first_seen_ns <= b.last_seen_ns && b.first_seen_ns <= a.last_seen_ns
    };
    let mut warnings: Vec<(usize, String)> = Vec::new();
    for ((run_id, world_size), rows) in &worlds {
        for &i in rows {
            let me = &jobs[i];
            let others: Vec<&JobRow> = rows
                .iter()
                .map(|&k| &jobs[k])
                .filter(|o| o.job != me.job && overlap(me, o))
                .collect();
            if others.is_empty() {
                continue;
            }
            let listed: Vec<String> = others
                .iter()
                .map(|o| format!("{} ({} ranks)", o.job, o.ranks_seen))
                .collect();
            warnings.push((
                i,
                format!(
                    "world split across job ids: this job has {} of the {world_size} ranks of run {run_id}; \
                     the others arrived as {}. Give every node one job id (torchrun --rdzv-id, \
                     or the same `rankscope run --job`)",
                    me.ranks_seen,
                    listed.join(", ")
                ),
            ));
        }
    }
    for (i, w) in warnings {
        jobs[i].warnings.push(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(job: &str, run: &str, world: u32, seen: u32, from: u64, to: u64) -> JobRow {
        JobRow {
            job: job.into(),
            run_id: run.into(),
            world_size: world,
            ranks_seen: seen,
            nodes: 1,
            first_seen_ns: from,
            last_seen_ns: to,
            last_step: None,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn two_halves_of_one_world_are_both_warned() {
        let mut jobs = vec![
            row("a", "mn-1", 4, 2, 10, 20),
            row("b", "mn-1", 4, 2, 15, 30),
            row("whole", "mn-1", 4, 4, 10, 30),
        ];
        warn_split_worlds(&mut jobs);
        assert_eq!(jobs[0].warnings.len(), 1);
        assert!(
            jobs[0].warnings[0].contains("2 of the 4 ranks of run mn-1")
                && jobs[0].warnings[0].contains("b (2 ranks)"),
            "{:?}",
            jobs[0].warnings
        );
        assert!(jobs[1].warnings[0].contains("a (2 ranks)"));
        assert!(jobs[2].warnings.is_empty(), "a complete world is no part");
    }

    #[test]
    fn no_warning_without_a_shared_world_at_the_same_time() {
        let cases = [
            (
                "other run ids",
                [row("a", "r1", 4, 2, 0, 9), row("b", "r2", 4, 2, 0, 9)],
            ),
            (
                "other world sizes",
                [row("a", "r", 4, 2, 0, 9), row("b", "r", 8, 2, 0, 9)],
            ),
            (
                "no run id",
                [row("a", "", 4, 2, 0, 9), row("b", "", 4, 2, 0, 9)],
            ),
            (
                "one after the other",
                [
                    row("a", "restart-1", 4, 2, 0, 9),
                    row("b", "restart-1", 4, 2, 10, 19),
                ],
            ),
            (
                "same job, two runs listed apart",
                [row("a", "r", 4, 2, 0, 9), row("a", "r", 4, 2, 0, 9)],
            ),
        ];
        for (name, mut jobs) in cases {
            warn_split_worlds(&mut jobs);
            assert!(jobs.iter().all(|j| j.warnings.is_empty()), "{name}");
        }
    }
}
