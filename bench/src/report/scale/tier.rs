//! The collector tier of the scale model (issue 36, item 5): jobs per
//! collector, what one owner can assemble per second at 1k, 16k and 100k
//! ranks per job, and the job size past which per-rank reduction belongs in
//! the agents.
//!
//! In: the figures of `bench/results.json` (as JSON, so the same text comes
//! from a fresh run's [`super::super::Results`] and from the checked-in
//! file). Out: a markdown subsection with every input, formula and result
//! written out. Model constants are named below with where they come from.

use std::fmt::Write as _;

use serde_json::Value;

use super::super::human;
use super::{CLUSTER_EVENTS_PER_S, HOST_CORES, RANKS, RANKS_PER_NODE, TARGET_UTILISATION};

/// Events per rank and step of the simulated step of section 4 (the
/// simulator's model with `--layers 1`: 39,940 events per step for 1,024
/// ranks, 639,000 for 16,384).
pub const EVENTS_PER_RANK_STEP: f64 = 39.0;
/// Rows per rank and step once agents reduce: one per-(step, rank) summary
/// (phase durations, compute, exposed communication) and one start/end
/// record per collective call; 3 calls per rank and step, as section 5's
/// 16,384-rank job (an all-gather, a reduce-scatter, the loss all-reduce).
pub const SUMMARY_ROWS_PER_RANK_STEP: f64 = 4.0;
/// Kernel-level events per GPU per second (docs/deployment.md, "Sizing":
/// 5,700 to 43,300 measured from real PyTorch profiler traces).
pub const KERNEL_LEVEL_EVENTS_PER_RANK_S: f64 = 10_000.0;
/// The job sizes the issue asks about.
pub const JOB_RANKS: [f64; 3] = [1_024.0, 16_384.0, 100_000.0];

/// What the subsection needs from `results.json`.
#[derive(Debug, Clone, Copy)]
pub struct Inputs {
    /// `collector_cpu_s_per_million_events` = CPU µs per event.
    pub collector_us: f64,
    /// `agent_cpu_s_per_million_events` = CPU µs per event.
    pub agent_us: f64,
    /// `straggler_latency_p99_ms_16384_ranks`.
    pub verdict_p99_ms_16k: f64,
}

impl Inputs {
    /// From `results.json`'s object; `None` when a figure was not measured.
    pub fn from_json(v: &Value) -> Option<Self> {
        let f = |k: &str| v.get(k).and_then(Value::as_f64).filter(|x| *x > 0.0);
        Some(Self {
            collector_us: f("collector_cpu_s_per_million_events")?,
            agent_us: f("agent_cpu_s_per_million_events")?,
            verdict_p99_ms_16k: f("straggler_latency_p99_ms_16384_ranks")?,
        })
    }
}

fn h(v: f64) -> String {
    human(Some(v))
}

/// A count: whole, with thousands separators.
fn count(v: f64) -> String {
    if v >= 1000.0 {
        h(v)
    } else {
        format!("{v:.0}")
    }
}

/// The subsection; says so when the figures are missing.
pub fn section(results: &Value) -> String {
    let mut s = String::from("### The collector tier: jobs routed to owners (issue 36)\n\n");
    let Some(i) = Inputs::from_json(results) else {
        s.push_str("Not computed: this run did not measure the collector's cost.\n\n");
        return s;
    };
    let c = i.collector_us;
    let r = CLUSTER_EVENTS_PER_S / RANKS;
    let e = EVENTS_PER_RANK_STEP;
    let k = SUMMARY_ROWS_PER_RANK_STEP;
    let u = TARGET_UTILISATION;
    let task_events = 1e6 / c;
    let host_events = HOST_CORES * u * 1e6 / c;
    let _ = writeln!(
        s,
        "Agents route each job to one owner collector (rendezvous hashing of the job id over \
         the collectors that `collector_url` resolves to; the Helm chart runs 3 behind a \
         headless Service). The owner does all the work of its jobs' batches: ingest (decode, \
         validate, deduplicate, convert, write to ClickHouse) on any of its cores, and step \
         assembly, which runs for all the jobs one collector owns in one task (`stream`'s \
         `run`, one `select!`), so at most one core. Inputs from `bench/results.json`: \
         collector **c = {c:.3} CPU µs per event** (ingest and assembly together), agent \
         **a = {:.3} CPU µs per event**, straggler verdict at 16,384 ranks **{:.1} ms** \
         (p99). Model: **r = {} events/s per rank** (section 7's 2.7 M events/s over \
         16,384 ranks), **e = {e:.0} events per rank-step** (section 4's step), hosts of \
         {HOST_CORES:.0} cores planned at {:.0} %.\n",
        i.agent_us,
        i.verdict_p99_ms_16k,
        h(r),
        u * 100.0
    );
    let _ = writeln!(
        s,
        "Counting all of c in the assembly task (an upper bound on its cost per event: the \
         profile in section 1 puts most of c in ingest: protobuf, conversion, LZ4, column \
         encoding), **one owner assembles at least 1 / c = {} events/s**, for all its jobs \
         together, {} at the planned {:.0} %; its other cores ingest {HOST_CORES:.0} x {u} / c \
         = {} events/s. Assembly, not ingest, bounds the jobs per collector (the column \
         below is that floor); as jobs share no assembly state, one task per job would raise \
         it to the host's cores.\n",
        h(task_events),
        h(task_events * u),
        u * 100.0,
        h(host_events)
    );
    let _ = writeln!(
        s,
        "| ranks per job N | job events/s = N x r | owner CPU = N x r x c | jobs per \
         collector = {u} / (N x r x c) | steps/s one owner assembles, raw events = 1 / (c x N \
         x e) | steps/s with agent summaries = 1 / (c x N x {k:.0}) |\n|---|---|---|---|---|---|"
    );
    for n in JOB_RANKS {
        let job_events = n * r;
        let cores = job_events * c / 1e6;
        let jobs = (u / cores).floor();
        let jobs = if jobs >= 1.0 {
            format!("{jobs:.0}")
        } else {
            format!("none: one job needs {:.1}x the planned task", cores / u)
        };
        let steps_raw = 1e6 / (c * n * e);
        let steps_sum = 1e6 / (c * n * k);
        let _ = writeln!(
            s,
            "| {} | {} | {cores:.3} cores | {jobs} | {steps_raw:.2} | {steps_sum:.1} |",
            count(n),
            count(job_events)
        );
    }
    let step_rate = r / e;
    let n_star = u * 1e6 / (c * r);
    let n_star_kernel = u * 1e6 / (c * KERNEL_LEVEL_EVENTS_PER_RANK_S);
    let trial_events = 16_384.0 * e;
    let _ = writeln!(
        s,
        "\nAt r and e a job makes r / e = {step_rate:.1} steps per second. The 16,384-rank \
         row is the reference job of section 7: it fits one owner only if the assembly task \
         costs less than about {:.0} % of c per event. Measured check: section 4's 16,384-rank \
         trial assembled a {}-event step from 2,048 node batches and raised the verdict within \
         {:.0} ms (p99) of the last batch, about {} events/s through one collector on this \
         2-core machine shared with the driver.\n",
        100.0 * u / (16_384.0 * r * c / 1e6),
        h(trial_events),
        i.verdict_p99_ms_16k,
        h(trial_events / (i.verdict_p99_ms_16k / 1e3))
    );
    let _ = writeln!(
        s,
        "**Where per-rank reduction moves to the agents.** A job outgrows its owner when N x r \
         x c exceeds the planned {u} core: **N\\* = {u} / (c x r) = {} ranks** at r = {} \
         events/s per rank, and **{} ranks** at kernel level ({} events/s per GPU, \
         docs/deployment.md). More collectors add jobs, not ranks per job: every event of a \
         job meets in its owner. Past N\\* the agents should send per-(step, rank) summaries \
         (the rank-step's breakdown and its collectives' start and end: {k:.0} rows per \
         rank-step instead of {e:.0} events at step level, and instead of every kernel at \
         kernel level), and the owner keeps only what needs every rank: matching each collective across its \
         ranks, the straggler statistics and hang detection. The owner's load then shrinks \
         by e / {k:.0} = {:.1}x (last column): a 100,000-rank job's {step_rate:.1} steps/s \
         take {:.0} % of the owner's task instead of {:.1}x it. The agents pay for it on their own ranks only: {RANKS_PER_NODE:.0} ranks x r \
         = {} events/s per node, at a = {:.3} µs per event about {:.3} % of a core. \
         ARCHITECTURE.md (\"Per-rank reduction in the agents\") says what would move.\n",
        count(n_star),
        h(r),
        count(n_star_kernel),
        h(KERNEL_LEVEL_EVENTS_PER_RANK_S),
        e / k,
        100.0 * step_rate / (1e6 / (c * 100_000.0 * k)),
        step_rate / (1e6 / (c * 100_000.0 * e)),
        h(RANKS_PER_NODE * r),
        i.agent_us,
        RANKS_PER_NODE * r * i.agent_us / 1e6 * 100.0
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results_json() -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/results.json");
        let text = std::fs::read_to_string(path).expect("bench/results.json");
        serde_json::from_str(&text).expect("results.json parses")
    }

    /// RESULTS.md holds this subsection as the generator writes it from
    /// the checked-in results.json (so `make bench` keeps it and the text
    /// cannot drift from its arithmetic).
    #[test]
    fn results_md_holds_the_tier_computed_from_results_json() {
        let text = section(&results_json());
        println!("{text}");
        let md = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/RESULTS.md"))
            .expect("bench/RESULTS.md");
        assert!(
            md.contains(&text),
            "bench/RESULTS.md lacks the collector tier as generated; paste the text printed \
             above at the end of section 7"
        );
    }

    #[test]
    fn the_arithmetic_is_what_the_table_says() {
        let v = serde_json::json!({
            "collector_cpu_s_per_million_events": 0.5,
            "agent_cpu_s_per_million_events": 0.2,
            "straggler_latency_p99_ms_16384_ranks": 639.0,
        });
        let text = section(&v);
        // 1 / 0.5 µs = 2 M events/s in the task; 16 cores / 0.5 µs = 32 M.
        assert!(
            text.contains("at least 1 / c = 2,000,000 events/s"),
            "{text}"
        );
        assert!(text.contains("= 32,000,000 events/s"), "{text}");
        // 1,024 ranks x 164.8 events/s x 0.5 µs = 0.084 cores; 0.5 / 0.084 = 5.9.
        assert!(
            text.contains("| 1,024 | 168,750 | 0.084 cores | 5 |"),
            "{text}"
        );
        // N* = 0.5 / (0.5 µs x 164.8/s) = 6,068 ranks; kernel level 100.
        assert!(
            text.contains("N\\* = 0.5 / (c x r) = 6,068 ranks"),
            "{text}"
        );
        assert!(text.contains("and **100 ranks** at kernel level"), "{text}");
        // The trial: 638,976 events in 0.639 s = 999,962 events/s.
        assert!(text.contains("about 999,962 events/s"), "{text}");
        let missing = section(&serde_json::json!({"collector_cpu_s_per_million_events": null}));
        assert!(missing.contains("Not computed"), "{missing}");
    }
}
