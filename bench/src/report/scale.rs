//! The scale model (issue 6, item 7): from the measured per-event costs to
//! the collector cores and ClickHouse capacity a 16,384-rank job needs.
//!
//! In: [`Details`]. Out: a markdown section with every input, formula and
//! result written out, so the arithmetic can be checked by hand.

use std::fmt::Write as _;

use super::{human, Details};
use crate::stats::median;

/// Cluster-wide event rate of the reference job (issue 6), events/s.
pub const CLUSTER_EVENTS_PER_S: f64 = 2.7e6;
/// Ranks of the reference job.
pub const RANKS: f64 = 16_384.0;
/// Ranks (GPUs) per node.
pub const RANKS_PER_NODE: f64 = 8.0;
/// Cores per collector or ClickHouse host in the model.
pub const HOST_CORES: f64 = 32.0;
/// Utilisation we plan hosts for (headroom for bursts and failover).
pub const TARGET_UTILISATION: f64 = 0.5;

fn h(v: f64) -> String {
    human(Some(v))
}

/// The scale-model section of RESULTS.md.
pub fn section(d: &Details) -> String {
    let e = &d.e2e;
    let med = |f: &dyn Fn(&crate::e2e::E2eRun) -> f64| median(&e.iter().map(f).collect::<Vec<_>>());
    let coll = med(&|r| r.collector_cpu_s / r.events as f64 * 1e6);
    let agent = med(&|r| r.agent_cpu_s / r.events as f64 * 1e6);
    let ch_e2e = med(&|r| r.clickhouse_cpu_s / r.events as f64 * 1e6);
    let ch_bulk = med(&|r| r.bulk.clickhouse_cpu_s / r.bulk.rows as f64 * 1e6);
    let bytes_per_row = med(&|r| r.stored_bytes as f64 / r.events as f64);
    let rss = med(&|r| r.collector_peak_rss_mib);
    let r = CLUSTER_EVENTS_PER_S;
    let rm = r / 1e6;
    let mut s = String::new();
    let _ = writeln!(s, "## 7. Scale model: 16,384 ranks at 2.7 M events/s\n");
    if !(coll.is_finite() && ch_e2e.is_finite()) {
        let _ = writeln!(
            s,
            "Not computed: the end-to-end section produced no figures this run.\n"
        );
        return s;
    }
    let coll_cores = rm * coll;
    let coll_hosts = (coll_cores / (HOST_CORES * TARGET_UTILISATION))
        .ceil()
        .max(1.0);
    let ch_cores = rm * ch_e2e;
    let ch_bulk_cores = rm * ch_bulk;
    let shards = (ch_cores / (HOST_CORES * TARGET_UTILISATION))
        .ceil()
        .max(1.0);
    let nodes = RANKS / RANKS_PER_NODE;
    let per_node = r / nodes;
    let agent_cores = per_node / 1e6 * agent;
    let day_tb = r * bytes_per_row * 86_400.0 / 1e12;
    let _ = writeln!(
        s,
        "Inputs (medians of the end-to-end runs above, this machine): collector \
         **{coll:.3} CPU s per million events**, agent **{agent:.3} CPU s per million**, \
         ClickHouse server **{ch_e2e:.3} CPU s per million rows** inserted by the collector \
         (**{ch_bulk:.3}** for the same rows loaded in bulk by `clickhouse-client`), \
         **{bytes_per_row:.1} bytes per stored event row** on disk (compressed, all event \
         tables). R = 2.7 M events/s cluster-wide, {} nodes of {} ranks.\n",
        h(nodes),
        RANKS_PER_NODE
    );
    let _ = writeln!(s, "| quantity | arithmetic | result |\n|---|---|---|");
    let rows = [
        (
            "collector CPU",
            format!("2.7 M/s x {coll:.3} CPU s/M"),
            format!("{coll_cores:.2} cores"),
        ),
        (
            "collector hosts",
            format!(
                "{coll_cores:.2} / ({HOST_CORES} cores x {TARGET_UTILISATION}) rounded up, \
                 +1 for failover"
            ),
            format!("{} hosts", coll_hosts + 1.0),
        ),
        (
            "collector memory",
            format!("peak RSS {rss:.0} MiB per instance under full load"),
            format!("{rss:.0} MiB each"),
        ),
        (
            "ClickHouse insert CPU",
            format!("2.7 M rows/s x {ch_e2e:.3} CPU s/M (collector inserts)"),
            format!("{ch_cores:.2} cores"),
        ),
        (
            "ClickHouse, bulk floor",
            format!("2.7 M rows/s x {ch_bulk:.3} CPU s/M (clickhouse-client Native)"),
            format!("{ch_bulk_cores:.2} cores"),
        ),
        (
            "ClickHouse shards",
            format!(
                "{ch_cores:.2} / ({HOST_CORES} cores x {TARGET_UTILISATION}) rounded up; x2 replicas"
            ),
            format!("{shards} shard(s), {} servers", shards * 2.0),
        ),
        (
            "ClickHouse disk",
            format!("2.7 M/s x {bytes_per_row:.1} B x 86,400 s"),
            format!("{day_tb:.2} TB/day per replica"),
        ),
        (
            "agent per node",
            format!(
                "2.7 M/s / {} nodes = {} events/s x {agent:.3} CPU s/M",
                h(nodes),
                h(per_node)
            ),
            format!("{:.3} % of a core", agent_cores * 100.0),
        ),
    ];
    for (q, a, v) in rows {
        let _ = writeln!(s, "| {q} | {a} | {v} |");
    }
    let _ = writeln!(
        s,
        "\nThe INSERT rate stays low: each collector's writer flushes once per \
         `flush_interval_ms` (1 s) or per `batch_max_rows` (100,000 rows), so the {} \
         collectors together make about {:.0} INSERTs per second per event table at 2.7 M \
         rows/s, in line with ClickHouse's guidance of large, infrequent inserts.\n",
        coll_hosts + 1.0,
        (r / 100_000.0).max(coll_hosts + 1.0)
    );
    s.push_str(SCALE_OUT);
    s
}

const SCALE_OUT: &str = "\
**How collectors scale out.** Ingest is stateless: validation, conversion, duplicate \
detection (keyed by the agent's `(agent_id, agent_session, seq)`, seeded from \
`ingest_batches` when a collector first sees a session) and the ClickHouse write need \
no shared state, so agents can be spread over any number of collectors behind an L4/gRPC \
load balancer. Only live step assembly (per-step breakdown, collective matching, \
straggler verdicts) needs all of a job's ranks in one place: the balancer keeps \
**per-job affinity** (hash of `job_id`, sent by the agent as gRPC metadata or encoded \
in the collector address it is given), and a collector restart loses only the \
unfinalized steps in memory (the raw events are stored). One 16,384-rank job is a \
single affinity key, so its whole 2.7 M events/s would land on one collector: the \
collector CPU above (a few cores) fits one host, but the per-job assembly runs in one \
task. The next step for jobs of this size is to split the assembly in two levels: \
ingest collectors reduce each rank-step to its breakdown and collective timings (which \
need only that rank's events), and only those per-(step, rank) summaries, 16,384 per \
step instead of millions of events, go to the job's owner for cross-rank matching and \
the straggler statistics.\n\n\
**How storage scales out.** ClickHouse shards by `cityHash64(job_id, rank)` (a \
`Distributed` table over the same MergeTree schemas) so a job's inserts spread over \
all shards while per-rank timelines stay on one shard; `ReplicatedMergeTree` with two \
replicas per shard gives failover, and retention keeps dropping whole day partitions. \
The collectors insert into the local shard tables (or through the `Distributed` table \
with `insert_distributed_sync`), keeping the acknowledge-after-store guarantee.\n\n";
