//! The scale model (issue 6, item 7): from the measured per-event costs to
//! the collector cores and ClickHouse capacity a 16,384-rank job needs.
//!
//! In: [`Details`]. Out: a markdown section with every input, formula and
//! result written out, so the arithmetic can be checked by hand.

pub mod tier;

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
    let flush_ms = super::default_flush_ms();
    let max_rows = super::default_batch_max_rows();
    let _ = writeln!(
        s,
        "\nThe INSERT rate stays low: each collector's writer closes a window (one INSERT \
         per table) once per `writer.flush_interval_ms` ({flush_ms} ms) or per \
         `writer.batch_max_rows` ({} rows), whichever comes first (later while the previous \
         window still commits), so the {} collectors together make at most about {:.0} INSERTs per \
         second per event table at 2.7 M rows/s, in line with ClickHouse's guidance of \
         large, infrequent inserts.\n",
        h(max_rows as f64),
        coll_hosts + 1.0,
        (r / max_rows as f64).max((coll_hosts + 1.0) * 1000.0 / flush_ms.max(1) as f64)
    );
    s.push_str(&scale_out());
    s
}

/// How collectors and storage scale out, with the sharding keys taken from
/// the collector's cluster-mode rewriter (`store::cluster::sharding_key`).
fn scale_out() -> String {
    use rankscope_collector::store::cluster::sharding_key;
    let cols = |c: &[&str]| c.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
    let job_key = sharding_key("steps", &cols(&["job_id", "run_id", "rank", "node"]))
        .unwrap_or_else(|e| e.to_string());
    let node_key = sharding_key("gpu_samples", &cols(&["node", "gpu_index"]))
        .unwrap_or_else(|e| e.to_string());
    format!(
        "{COLLECTORS}**How storage scales out.** In cluster mode (`clickhouse_cluster`) every \
         table is a `Distributed` table over `ReplicatedMergeTree` shards, sharded by \
         `{job_key}` when it has a `job_id` (node telemetry by `{node_key}`): all rows of one \
         job land on one shard, so a re-computed analytics row meets the version it replaces \
         and `FINAL` stays exact. Shards therefore add capacity across jobs, not within one: \
         the shard count above serves the cluster's many jobs, while a single job producing \
         all 2.7 M rows/s would need one shard to take them (ClickHouse 18.16 inserts 1.3-2.2 M \
         rows/s per server), the same one-owner limit as the collector's step assembly. \
         Replicas give failover, and retention keeps dropping whole day partitions (on the \
         `_local` tables, `ON CLUSTER`). The collectors insert through the `Distributed` \
         tables with `insert_distributed_sync = 1`, so an acknowledged batch is on its shard.\n\n"
    )
}

const COLLECTORS: &str = "\
**How collectors scale out.** Ingest is stateless: validation, conversion, duplicate \
detection (keyed by the agent's `(agent_id, agent_session, seq)`, seeded from \
`ingest_batches` when a collector first sees a session) and the ClickHouse write need \
no shared state. Only live step assembly (per-step breakdown, collective matching, \
straggler verdicts) needs all of a job's ranks in one collector, so agents route by job \
(issue 36): each batch holds one job, and each job goes to its owner, chosen by rendezvous \
(highest-random-weight) hashing of the job id over the collectors `collector_url` names or \
resolves to (a list, or a Kubernetes headless Service's addresses, re-resolved every \
`collector_resolve_interval_ms`), so all agents of a job agree without talking to each \
other. An owner unreachable for `collector_failover_after_ms` hands its jobs to the next \
collector in their order, which rebuilds a job's live state from ClickHouse; the agents' \
spool and acknowledgements keep delivery exactly once across the move. More collectors \
serve more jobs; one job is always one owner, whose limits the collector tier below works \
out.\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_out_states_the_sharding_key_the_collector_uses() {
        let text = scale_out();
        println!("{text}");
        assert!(text.contains("sharded by `cityHash64(job_id)`"), "{text}");
        assert!(text.contains("`cityHash64(node)`"), "{text}");
        assert!(!text.contains("job_id, rank)"), "{text}");
        assert!(text.contains("rendezvous"), "{text}");
        assert!(text.contains("insert_distributed_sync = 1"), "{text}");
    }
}
