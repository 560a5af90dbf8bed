//! The latest analytics values per job, rank and collective, as gauges: read
//! by `GET /metrics` (Prometheus text) and by the OTLP exporter (`otel`).
//!
//! In: finalized steps, straggler verdict changes and per-step collective
//! bandwidth from live analytics. Out: series labelled `job`, `rank`, `node`
//! (collectives: `job`, `op`, `process_group`, `size_bucket`).
//!
//! Names (the same in Prometheus and OTLP): `rankscope_step_time_seconds`,
//! `rankscope_step_compute_seconds`, `rankscope_step_communication_seconds`,
//! `rankscope_step_overlap_seconds`, `rankscope_step_exposed_communication_seconds`,
//! `rankscope_step_collective_wait_seconds`, `rankscope_step` (last finalized
//! step), `rankscope_straggler_slowdown`, `rankscope_straggler_active` (1 while
//! a verdict is active), `rankscope_collective_busbw_gbps`.
//! Memory: one entry per rank and collective key of the jobs live analytics
//! tracks; a forgotten job's series are removed.
//!
//! Fleet (issue 37): `rankscope_fleet_score{by, node[, gpu_uuid]}`, the
//! recurrence score of the worst [`FLEET_SERIES_MAX`] ranked units per
//! grouping (`by` = `node` or `gpu`) of the `repeat_offender` rule's last
//! round (`fleet::watch`: its window and `min_jobs`); each round replaces
//! the set, so a unit that left the top drops out. Low-exposure units are
//! not exported (they are not ranked).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// Latest per-rank step values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankGauges {
    pub node: String,
    pub step: u64,
    pub step_time_s: f64,
    pub compute_s: f64,
    pub comm_s: f64,
    pub overlap_s: f64,
    pub exposed_comm_s: f64,
    pub wait_s: f64,
    /// Latest straggler slowdown (1.0 when none was computed).
    pub slowdown: f64,
    pub straggler_active: bool,
}

/// One gauge sample: name, labels, value.
pub type Sample = (&'static str, Vec<(&'static str, String)>, f64);

#[derive(Debug, Default)]
struct State {
    ranks: BTreeMap<(String, u32), RankGauges>,
    busbw: BTreeMap<(String, String, String, String), f64>,
    /// (by, node, gpu_uuid or "", score) of the last fleet round.
    fleet: Vec<(&'static str, String, String, f64)>,
}

/// Most `rankscope_fleet_score` series per grouping (bounded cardinality).
pub const FLEET_SERIES_MAX: usize = 50;

/// The registry. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct JobGauges {
    state: Mutex<State>,
}

const NS: f64 = 1e9;

impl JobGauges {
    /// Records a finalized step of a rank.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &self,
        job: &str,
        rank: u32,
        node: &str,
        step: u64,
        step_time_ns: u64,
        compute_ns: u64,
        comm_ns: u64,
        overlap_ns: u64,
        wait_ns: u64,
    ) {
        if let Ok(mut s) = self.state.lock() {
            let g = s
                .ranks
                .entry((job.to_owned(), rank))
                .or_insert_with(|| RankGauges {
                    slowdown: 1.0,
                    ..Default::default()
                });
            // Per rank and step (16,384 per step of a large job, between its
            // last StepEnd and its verdict): the node only when it changed.
            if g.node != node {
                g.node = node.to_owned();
            }
            g.step = step;
            g.step_time_s = step_time_ns as f64 / NS;
            g.compute_s = compute_ns as f64 / NS;
            g.comm_s = comm_ns as f64 / NS;
            g.overlap_s = overlap_ns as f64 / NS;
            g.exposed_comm_s = comm_ns.saturating_sub(overlap_ns) as f64 / NS;
            g.wait_s = wait_ns as f64 / NS;
        }
    }

    /// Records a straggler verdict change.
    pub fn straggler(&self, job: &str, rank: u32, node: &str, slowdown: f64, active: bool) {
        if let Ok(mut s) = self.state.lock() {
            let g = s.ranks.entry((job.to_owned(), rank)).or_default();
            g.node = node.to_owned();
            g.slowdown = slowdown;
            g.straggler_active = active;
        }
    }

    /// Records the bus bandwidth of a collective key in a step.
    pub fn busbw(&self, job: &str, op: &str, process_group: &str, bucket: &str, gbps: f64) {
        if let Ok(mut s) = self.state.lock() {
            s.busbw.insert(
                (
                    job.to_owned(),
                    op.to_owned(),
                    process_group.to_owned(),
                    bucket.to_owned(),
                ),
                gbps,
            );
        }
    }

    /// Replaces the fleet scores with a round's rows (ranked worst first, as
    /// `fleet::assemble` gives them): the first [`FLEET_SERIES_MAX`] ranked
    /// rows of each grouping.
    pub fn fleet(&self, by_node: &[crate::fleet::FleetRow], by_gpu: &[crate::fleet::FleetRow]) {
        let mut next = Vec::new();
        for (by, rows) in [("node", by_node), ("gpu", by_gpu)] {
            for r in rows
                .iter()
                .filter(|r| r.place.is_some())
                .take(FLEET_SERIES_MAX)
            {
                let gpu = r.gpu_uuid.clone().unwrap_or_default();
                next.push((by, r.node.clone(), gpu, r.score));
            }
        }
        if let Ok(mut s) = self.state.lock() {
            s.fleet = next;
        }
    }

    /// Removes every series of `job`.
    pub fn forget(&self, job: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.ranks.retain(|(j, _), _| j != job);
            s.busbw.retain(|(j, ..), _| j != job);
        }
    }

    /// Every sample, in a stable order.
    pub fn samples(&self) -> Vec<Sample> {
        let Ok(s) = self.state.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for ((job, rank), g) in &s.ranks {
            let labels = vec![
                ("job", job.clone()),
                ("rank", rank.to_string()),
                ("node", g.node.clone()),
            ];
            for (name, v) in [
                ("rankscope_step", g.step as f64),
                ("rankscope_step_time_seconds", g.step_time_s),
                ("rankscope_step_compute_seconds", g.compute_s),
                ("rankscope_step_communication_seconds", g.comm_s),
                ("rankscope_step_overlap_seconds", g.overlap_s),
                (
                    "rankscope_step_exposed_communication_seconds",
                    g.exposed_comm_s,
                ),
                ("rankscope_step_collective_wait_seconds", g.wait_s),
                ("rankscope_straggler_slowdown", g.slowdown),
                (
                    "rankscope_straggler_active",
                    f64::from(u8::from(g.straggler_active)),
                ),
            ] {
                out.push((name, labels.clone(), v));
            }
        }
        for ((job, op, pg, bucket), v) in &s.busbw {
            out.push((
                "rankscope_collective_busbw_gbps",
                vec![
                    ("job", job.clone()),
                    ("op", op.clone()),
                    ("process_group", pg.clone()),
                    ("size_bucket", bucket.clone()),
                ],
                *v,
            ));
        }
        for (by, node, gpu, score) in &s.fleet {
            let mut labels = vec![("by", (*by).to_owned()), ("node", node.clone())];
            if !gpu.is_empty() {
                labels.push(("gpu_uuid", gpu.clone()));
            }
            out.push(("rankscope_fleet_score", labels, *score));
        }
        out
    }

    /// Prometheus text exposition of every gauge. `rankscope_fleet_score` is
    /// declared even before a fleet round ranked a unit (dashboards name it).
    pub fn render(&self, out: &mut String) {
        let mut samples = self.samples();
        samples.sort_by(|a, b| a.0.cmp(b.0));
        if !samples.iter().any(|s| s.0 == "rankscope_fleet_score") {
            let _ = writeln!(out, "# TYPE rankscope_fleet_score gauge");
        }
        let mut last = "";
        for (name, labels, v) in &samples {
            if *name != last {
                let _ = writeln!(out, "# TYPE {name} gauge");
                last = name;
            }
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {v}", labels.join(","));
        }
    }
}

/// Escapes a Prometheus label value.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_labelled_gauges_and_forgets_jobs() {
        let g = JobGauges::default();
        g.step(
            "j\"1",
            3,
            "n",
            7,
            2_000_000_000,
            1_500_000_000,
            400_000_000,
            100_000_000,
            0,
        );
        g.straggler("j\"1", 3, "n", 1.3, true);
        g.busbw("j\"1", "all_reduce", "pg0", "1MiB-2MiB", 150.5);
        let mut out = String::new();
        g.render(&mut out);
        assert!(
            out.contains("# TYPE rankscope_step_time_seconds gauge\n"),
            "{out}"
        );
        assert!(
            out.contains("rankscope_step_time_seconds{job=\"j\\\"1\",rank=\"3\",node=\"n\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("rankscope_straggler_active{job=\"j\\\"1\",rank=\"3\",node=\"n\"} 1\n")
        );
        assert!(out.contains("rankscope_step_exposed_communication_seconds{job=\"j\\\"1\",rank=\"3\",node=\"n\"} 0.3\n"));
        assert!(out.contains("rankscope_collective_busbw_gbps{job=\"j\\\"1\",op=\"all_reduce\",process_group=\"pg0\",size_bucket=\"1MiB-2MiB\"} 150.5\n"));
        g.forget("j\"1");
        assert!(g.samples().is_empty());
    }

    fn fleet_row(
        node: &str,
        gpu: Option<&str>,
        place: Option<usize>,
        score: f64,
    ) -> crate::fleet::FleetRow {
        crate::fleet::FleetRow {
            place,
            node: node.into(),
            gpu_uuid: gpu.map(str::to_owned),
            link: None,
            jobs: 3,
            placements: 3,
            rank_hours: 0.0,
            verdicts: 0,
            flagged_placements: 0,
            verdict_steps: 0,
            hang_suspects: 0,
            cost_gpu_hours: 0.0,
            score,
            low_exposure: place.is_none(),
            hardware: Default::default(),
            verdict_jobs: Vec::new(),
            timeline: Vec::new(),
        }
    }

    #[test]
    fn fleet_scores_are_the_ranked_top_of_the_last_round() {
        let g = JobGauges::default();
        let mut gpus: Vec<_> = (0..FLEET_SERIES_MAX + 5)
            .map(|i| {
                fleet_row(
                    "n1",
                    Some(&format!("GPU-{i:03}")),
                    Some(i + 1),
                    100.0 - i as f64,
                )
            })
            .collect();
        gpus.push(fleet_row("n9", Some("GPU-low"), None, 0.0));
        g.fleet(&[fleet_row("n1", None, Some(1), 7.5)], &gpus);
        let mut out = String::new();
        g.render(&mut out);
        assert!(
            out.contains("# TYPE rankscope_fleet_score gauge\n"),
            "{out}"
        );
        assert!(
            out.contains("rankscope_fleet_score{by=\"node\",node=\"n1\"} 7.5\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "rankscope_fleet_score{by=\"gpu\",node=\"n1\",gpu_uuid=\"GPU-000\"} 100\n"
            ),
            "{out}"
        );
        let series = out
            .lines()
            .filter(|l| l.starts_with("rankscope_fleet_score{by=\"gpu\""))
            .count();
        assert_eq!(series, FLEET_SERIES_MAX, "bounded: {out}");
        assert!(
            !out.contains("GPU-low"),
            "low exposure is not ranked: {out}"
        );
        // The next round replaces the set; the family stays declared.
        g.fleet(&[], &[]);
        assert!(g.samples().is_empty());
        let mut out = String::new();
        g.render(&mut out);
        assert_eq!(out, "# TYPE rankscope_fleet_score gauge\n");
    }
}
