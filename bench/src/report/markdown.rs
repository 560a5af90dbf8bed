//! RESULTS.md: the figures, how each was measured, the machine, the misses
//! and the scale model.
//!
//! In: [`Details`] and its [`Results`]. Out: one markdown document. Pure
//! formatting; every number comes from the run being reported.

use std::fmt::Write as _;

use super::{fig, human, rows, scale, Details, Results, TUNED_FLUSH_MS};
use crate::stats::{median, min_max, percentile};
use crate::straggler::StragglerTrial;

fn h(v: f64) -> String {
    human(fig(v))
}

/// The whole document.
pub fn render(d: &Details, r: &Results) -> String {
    let mut s = String::new();
    header(&mut s, d, r);
    e2e(&mut s, d);
    costs(&mut s, d, r);
    straggler(&mut s, d);
    query(&mut s, d);
    s.push_str(&super::views::section(d));
    import(&mut s, d);
    hta(&mut s, d);
    s.push_str(&scale::section(d));
    s.push_str(&scale::tier::section(
        &serde_json::to_value(r).unwrap_or(serde_json::Value::Null),
    ));
    super::misses::misses(&mut s, d, r);
    s.push_str(REPRODUCE);
    s
}

fn header(s: &mut String, d: &Details, r: &Results) {
    let m = &d.machine;
    let _ = writeln!(
        s,
        "# rankscope benchmark results\n\n\
         Written by `make bench` (`bench/`, binary `rankscope-bench`) at Unix time {} \
         in {:.0} s. Every process is the release build with its default configuration \
         unless a section says otherwise, started fresh on loopback ports next to a private \
         ClickHouse server, and measured from outside: wall time on the monotonic clock, CPU \
         seconds from `/proc/<pid>/stat` (or `wait4` for short-lived commands), RSS from \
         `/proc/<pid>/status`. Figures are medians of several runs; ratios are taken per run \
         and then the median. The raw figures are in `bench/results.json`; before / after \
         figures of single changes, each measured in alternation with the build before it, \
         in `bench/RESULTS-alternations.md`.\n",
        d.started_unix_s, d.runtime_s
    );
    let _ = writeln!(
        s,
        "## Machine\n\n| cores | memory | CPU | kernel | ClickHouse |\n|---|---|---|---|---|\n\
         | {} | {:.1} GiB | {} | {} | {} |\n\n\
         A shared 2-core VM: the simulator, the agent, the collector and ClickHouse all \
         compete for the same two cores, so absolute rates are low; the ratios and per-event \
         costs are what carry over.\n",
        m.cores, m.memory_gib, m.cpu_model, m.kernel, m.clickhouse_version
    );
    let _ = writeln!(
        s,
        "## Summary\n\n| figure | value | goal | status |\n|---|---|---|---|"
    );
    for (name, v, unit, goal) in rows(r) {
        let (g, st) = match (goal, v) {
            (Some(g), Some(v)) => (g.text(), if g.met(v) { "met" } else { "**missed**" }),
            (Some(g), None) => (g.text(), "not measured"),
            (None, _) => ("-".to_owned(), ""),
        };
        let _ = writeln!(s, "| `{name}` | {} {unit} | {g} | {st} |", human(v));
    }
    if !d.failures.is_empty() {
        let _ = writeln!(s, "\nSections that failed this run:\n");
        for f in &d.failures {
            let _ = writeln!(s, "- {f}");
        }
    }
    s.push('\n');
}

fn e2e(s: &mut String, d: &Details) {
    let p = &d.e2e_params;
    let _ = writeln!(
        s,
        "## 1. End-to-end ingest against raw ClickHouse\n\n\
         `rankscope simulate --ranks {} --layers {} --steps {}` (no `--rate`: as fast as the \
         agent acknowledges) -> one `rankscope-agent` -> `rankscope-collector` -> ClickHouse. \
         The clock runs from spawning the simulator until the collector's \
         `rankscope_collector_events_stored_total` equals the events the agent accepted; the \
         collector acknowledges a batch only after ClickHouse stored it, and the run checks \
         that the four event tables then hold exactly that many rows. In the same run, on the \
         same server, those rows are exported (`SELECT * ... FORMAT Native`) and loaded into \
         fresh tables of the same schema by four concurrent `clickhouse-client ... INSERT \
         ... FORMAT Native` (one per event table, as the collector's writer inserts them); the \
         bulk rate is rows / wall time of that load. `e2e_ratio_vs_clickhouse` = e2e events/s / \
         bulk rows/s (one event = one row); reported, no longer a goal (issue 38: two shared \
         cores cannot reach 0.7). `rankscope_cpu_vs_clickhouse` = CPU s of agent + collector / \
         ClickHouse's CPU s in the same run (what rankscope costs per unit of the database it \
         feeds); `pipeline_utilisation` = e2e events/s / (cores / CPU s per event of the four \
         processes), the share of the rate their measured cost allows on this machine.\n",
        p.ranks, p.layers, p.steps
    );
    let overrides: Vec<String> = p
        .agent
        .iter()
        .map(|o| format!("agent `{} = {}`", o.path, o.value))
        .chain(
            p.collector
                .iter()
                .map(|o| format!("collector `{} = {}`", o.path, o.value)),
        )
        .collect();
    if !overrides.is_empty() {
        let _ = writeln!(
            s,
            "**Not the default configuration:** {}.\n",
            overrides.join(", ")
        );
    }
    if d.e2e.is_empty() {
        let _ = writeln!(s, "No run completed.\n");
        return;
    }
    let _ = writeln!(
        s,
        "| run | events | e2e s | events/s | bulk rows/s | ratio | collector CPU s | agent CPU s | simulate CPU s | ClickHouse CPU s | bulk ClickHouse CPU s | INSERTs | batches left out of analytics | machine busy |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (i, r) in d.e2e.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {} | {} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {:.0} % |",
            i + 1,
            h(r.events as f64),
            r.elapsed_s,
            h(r.events_per_s),
            h(r.bulk.rows_per_s),
            r.events_per_s / r.bulk.rows_per_s,
            r.collector_cpu_s,
            r.agent_cpu_s,
            r.simulate_cpu_s,
            r.clickhouse_cpu_s,
            r.bulk.clickhouse_cpu_s,
            r.inserts,
            r.analytics_dropped_batches,
            r.machine_busy_pct
        );
    }
    let med =
        |f: &dyn Fn(&crate::e2e::E2eRun) -> f64| median(&d.e2e.iter().map(f).collect::<Vec<_>>());
    let wall = med(&|r| r.elapsed_s);
    let parts = [
        ("ClickHouse", med(&|r| r.clickhouse_cpu_s)),
        ("collector", med(&|r| r.collector_cpu_s)),
        ("agent", med(&|r| r.agent_cpu_s)),
        ("simulator", med(&|r| r.simulate_cpu_s)),
    ];
    let total: f64 = parts.iter().map(|p| p.1).sum();
    let split: Vec<String> = parts
        .iter()
        .map(|(n, c)| format!("{n} {:.0} %", 100.0 * c / total))
        .collect();
    let _ = writeln!(
        s,
        "\nMedian run: the four processes used {total:.1} CPU s in {wall:.1} s ({:.1} of the {} \
         cores): {}. *Machine busy* is the share of all CPU time of the machine that was not \
         idle during the run (other users' processes included: the machine is shared). \
         *bulk ClickHouse CPU s* covers only the load itself; the merges it triggers run \
         afterwards, while the end-to-end window includes the merges of its earlier inserts.\n",
        total / wall,
        d.machine.cores,
        split.join(", ")
    );
    let settled: Vec<String> = d
        .e2e
        .iter()
        .map(|r| {
            format!(
                "{:.2} s and {:.2} s ({:.2})",
                r.clickhouse_cpu_settled_s,
                r.bulk.clickhouse_cpu_settled_s,
                r.clickhouse_cpu_settled_s / r.bulk.clickhouse_cpu_settled_s
            )
        })
        .collect();
    let _ = writeln!(
        s,
        "Both sides with their merges: ClickHouse CPU from each load's start until no merge of \
         its database had run for {} s (`system.merges`), end to end and bulk per run, their \
         ratio in parentheses: {}. This compares whole costs: the headline ratio's end-to-end \
         window holds the merges done so far, its bulk side none.\n",
        crate::bulk::SETTLE_QUIET.as_secs(),
        settled.join("; ")
    );
    if !d.profile.is_empty() {
        let _ = writeln!(
            s,
            "CPU profile of one extra run (not counted above; `perf record -F 499 -p <pid>`, \
             flat, share of each process's own samples):\n\n```text"
        );
        for p in &d.profile {
            let _ = writeln!(s, "{} (pid {}):", p.name, p.pid);
            for l in p.top(12) {
                let _ = writeln!(s, "  {l}");
            }
        }
        let _ = writeln!(s, "```\n");
        let _ = writeln!(s, "{}\n", super::misses::profile_summary(d));
    }
}

fn costs(s: &mut String, d: &Details, r: &Results) {
    let _ = writeln!(
        s,
        "## 2. Collector cost\n\n\
         CPU seconds of the collector process over the end-to-end window divided by the events \
         stored: **{} CPU s per million events** (goal <= 0.5), peak RSS (`VmHWM`) **{} MiB** \
         while ingesting at full speed (writer queue, batches being converted, live step \
         assembly).\n",
        human(r.collector_cpu_s_per_million_events),
        human(r.collector_peak_rss_mib)
    );
    let _ = writeln!(
        s,
        "## 3. Agent cost\n\n\
         Relayed: CPU seconds of the agent over the end-to-end window per million events \
         relayed: **{} CPU s per million**; its peak RSS there, `agent_rss_mib` = **{} MiB** \
         (those runs give the agent buffers that hold the whole job: `queue_max_events` = \
         4,000,000, `backlog_max_bytes` = 1 GiB, so nothing is dropped).\n",
        human(r.agent_cpu_s_per_million_events),
        human(r.agent_rss_mib)
    );
    if let Some(f) = &d.full_relay {
        let _ = writeln!(
            s,
            "Full relay with the agent's default buffers (`queue_max_events` = {}, \
             `backlog_max_bytes` = {} MiB of encoded batches): one more run of the same job; \
             the agent relays as fast as the collector stores and drops what does not fit \
             (the simulator outruns any rank). Peak RSS `agent_rss_mib_full_relay` = **{} MiB** \
             (goal <= 64); {} events accepted and stored, {} dropped ({:.0} %); agent {:.3} CPU s \
             per million relayed.\n",
            rankscope_agent_defaults().0,
            rankscope_agent_defaults().1 >> 20,
            human(r.agent_rss_mib_full_relay),
            f.events,
            f.dropped,
            100.0 * f.dropped as f64 / (f.events + f.dropped).max(1) as f64,
            f.agent_cpu_s / f.events.max(1) as f64 * 1e6
        );
    }
    match &d.idle.not_measured {
        Some(why) => {
            let _ = writeln!(
                s,
                "Idle with 8 GPUs at 10 Hz: **not measured**: {why}. With sampling disabled \
                 the idle agent used {:.3} % of a core.\n",
                d.idle.baseline_cpu_pct
            );
        }
        None => {
            let _ = writeln!(
                s,
                "Idle with 8 GPUs at 10 Hz: no rank connected, the agent samples 8 GPUs of the \
                 NVML stand-in (`agent/tests/nvml_stub`, built with `cc -shared`, H100-like with \
                 GPM metrics) and the host every 100 ms and forwards the samples to a collector. \
                 CPU % of one core over {} windows of {} s: {} (median **{}**); RSS {:.1} MiB. \
                 The same agent with sampling disabled: {:.3} %. The stand-in answers from \
                 memory, so a real driver's NVML call cost comes on top.\n",
                d.idle.cpu_pct.len(),
                crate::idle::WINDOW.as_secs(),
                pcts(&d.idle.cpu_pct),
                human(r.agent_idle_cpu_pct),
                d.idle.rss_mib,
                d.idle.baseline_cpu_pct
            );
            let _ = writeln!(
                s,
                "Realtime, 8 ranks and 8 GPUs at 10 Hz (`agent_cpu_pct_8_ranks_realtime`): a \
                 fresh agent sampling the 8 stand-in GPUs every 100 ms and the host at its \
                 default interval (1 s) while `rankscope simulate --ranks {} --layers 12 --rate \
                 {:.0}` streams into it, the per-node rate of the scale model (section 7: 2.7 M \
                 events/s over 2,048 nodes); {:.0} events/s achieved over the whole run, {} \
                 dropped. CPU % of one core over {} windows of {} s after a 3 s warm-up: {} \
                 (median **{}**). The same run into the idle agent above, which also samples the \
                 host every 100 ms (this figure's configuration until 2026-11-26): {} (median \
                 {:.3}).\n",
                crate::idle::REALTIME_RANKS,
                crate::idle::REALTIME_EVENTS_PER_S,
                d.idle.realtime_events_per_s,
                d.idle.realtime_dropped,
                d.idle.realtime_cpu_pct.len(),
                crate::idle::WINDOW.as_secs(),
                pcts(&d.idle.realtime_cpu_pct),
                human(r.agent_cpu_pct_8_ranks_realtime),
                pcts(&d.idle.realtime_host_10hz_cpu_pct),
                median(&d.idle.realtime_host_10hz_cpu_pct),
            );
        }
    }
}

/// "1.18 %, 1.19 %, ..." of CPU % windows.
fn pcts(v: &[f64]) -> String {
    v.iter()
        .map(|v| format!("{v:.2} %"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn lat_row(s: &mut String, name: &str, t: &[StragglerTrial]) {
    let lat: Vec<f64> = t.iter().map(|x| x.latency_ms).collect();
    let stored: Vec<f64> = t.iter().map(|x| x.stored_ms).collect();
    let det: Vec<f64> = t.iter().map(|x| x.detected_ms).collect();
    let (lo, hi) = min_max(&lat);
    let _ = writeln!(
        s,
        "| {name} | {} | {:.0} | {:.0} | {:.0} - {:.0} | {} | {:.0} | {:.0} | {} |",
        t.len(),
        percentile(&lat, 50.0),
        percentile(&lat, 99.0),
        lo,
        hi,
        if stored.iter().all(|x| x.is_nan()) {
            "n/a".to_owned()
        } else {
            format!("{:.0}", median(&stored))
        },
        median(&det),
        median(&lat) - median(&det),
        t.iter().map(|x| x.retries).sum::<u64>()
    );
}

fn straggler(s: &mut String, d: &Details) {
    let n = d.straggler_default.len();
    let events = d.straggler_default.first().map_or(0, |t| t.step_events);
    let _ = writeln!(
        s,
        "## 4. Straggler latency\n\n\
         Each trial is a fresh job of 1,024 ranks on 128 simulated nodes with rank {} 1.5x \
         slower from step 0 (steps generated by the simulator's model with `--layers 1`, \
         {} events per step). The benchmark plays the 128 node agents and sends one \
         `AgentBatch` per node and step straight to the collector's gRPC ingest, encoded \
         before it is sent and stamped per call as an agent sends it (on a cluster each node \
         encodes its own batch; here the driver shares the collector's cores, so it encodes \
         before `t0`). Steps 0 and 1 \
         are sent and acknowledged and the driver waits until their breakdown is queryable \
         (the writer is idle). Step 2 is the first step in which the straggler crosses the \
         default threshold (flagged in 3 of the last 5 steps); its 128 batches are sent \
         concurrently (an UNAVAILABLE answer, the collector's writer queue being full, is \
         retried with the agent's default backoff, as an agent would, and counted) and `t0` \
         is when the last of them, holding the last rank's StepEnd, was \
         handed to the client. Latency = t0 -> the first `GET /api/v1/jobs/{{job}}/stragglers` \
         answer (polled every {} ms from t0 on, while the acknowledgements come in) that names \
         the rank as an active straggler. The split: \
         *stored* = t0 -> the last batch's ack (rows in ClickHouse; the analytics take a batch \
         as soon as the writer holds it, so the verdict may come first), *computed* = t0 -> the verdict's `updated_ns` (set by the collector \
         when it raised the verdict, same clock), and the rest is the route and the poll (the \
         route serves a verdict and its what-if gain from the collector's memory as soon as \
         it is raised, merged with the stored versions).\n\n\
         **End to end** (the JSON figures): the same jobs, but the driver plays the 1,024 ranks \
         and streams each rank's steps over its own `RankIngest.StreamEvents` stream to a real \
         `rankscope-agent` (default configuration: a batch is cut when every live rank of \
         the job on the node has ended a step, `flush_at_step_end`, else `batch_max_delay_ms` \
         after its first event), so the path is rank -> agent -> collector -> \
         verdict in the API; `t0` is when the last rank's decisive-step message was handed to \
         its stream (*stored* is not observable there). *Under load*: meanwhile a second agent \
         (another node) streams the end-to-end job of section 1 (`rankscope simulate --ranks \
         {} --layers {}`, as fast as acknowledged) into the same collector.\n",
        crate::straggler::SLOW_RANK,
        h(events as f64),
        crate::straggler::POLL.as_millis(),
        d.e2e_params.ranks,
        d.e2e_params.layers
    );
    let _ = writeln!(
        s,
        "| path, collector config | trials | p50 ms | p99 ms | range ms | stored ms | computed ms | route + poll ms | retried batches |\n|---|---|---|---|---|---|---|---|---|"
    );
    lat_row(s, "end to end, idle, defaults", &d.straggler_agent);
    lat_row(
        s,
        "end to end, under the end-to-end ingest load, defaults",
        &d.straggler_agent_loaded,
    );
    lat_row(
        s,
        &format!(
            "collector only, default (`writer.flush_interval_ms` = {})",
            super::default_flush_ms()
        ),
        &d.straggler_default,
    );
    lat_row(
        s,
        &format!("collector only, `writer.flush_interval_ms` = {TUNED_FLUSH_MS}"),
        &d.straggler_tuned,
    );
    if !d.straggler_16k.is_empty() {
        lat_row(
            s,
            &format!(
                "16,384 ranks (2,048 node batches per step), collector only, default, {} events per step",
                h(d.straggler_16k[0].step_events as f64)
            ),
            &d.straggler_16k,
        );
    }
    let retried: u64 = d
        .straggler_default
        .iter()
        .chain(&d.straggler_tuned)
        .map(|t| t.retries)
        .sum();
    if retried > 0 {
        let _ = writeln!(
            s,
            "\nRetried batches: 128 batches arriving at once can find the collector's writer \
             queue (`writer.queue_capacity` = 64 batches, not drained while an INSERT runs) \
             full; the collector answers UNAVAILABLE and the sender retries after 50-100 ms, \
             which shows in the latency of those trials."
        );
    }
    let _ = writeln!(
        s,
        "\nThe JSON figures are the end-to-end idle row, and \
         `straggler_latency_p99_ms_16384_ranks` the 16,384-rank row (the same trial at 16x \
         the ranks: 2,048 simulated node agents, one batch per node and step, straight to \
         the collector; one agent relaying 16,384 rank streams would not be a real node). \
         Percentiles are nearest-rank: \
         with {n} trials p99 is the {}-th smallest value{}.\n",
        ((0.99 * n as f64).ceil() as usize).max(1),
        if n < 100 {
            ", i.e. the slowest trial"
        } else {
            ""
        }
    );
}

fn query(s: &mut String, d: &Details) {
    let q = &d.query;
    let _ = writeln!(
        s,
        "## 5. Query latency\n\n\
         Generated analytics rows written with the collector's own row types and ClickHouse \
         client, one INSERT per step and table as the live writer stores a finalized step: \
         `step_breakdown` for 4,096 ranks x 100 steps and 16,384 ranks x 100 steps, and every \
         `straggler_verdicts` version the live tracker would write for the 16,384-rank job (1 % \
         of the ranks stragglers from step 3 on, updated at every step; 6 % with one short \
         episode) with the what-if gain the stream stores with each version \
         (`straggler_gains`, migration 0017: the route reads no breakdowns), and the \
         16,384-rank job's {} collectives (3 per rank and step: an \
         all-gather, a reduce-scatter and the loss all-reduce, with arrival jitter and the \
         stragglers arriving late): {} rows in {:.1} s, {} verdict versions for {} verdicts. \
         The collectives route is job-wide: ClickHouse aggregates every collective of the job \
         per call (process group, seq) and computes each statistics group's nearest-rank \
         percentiles, and the collector computes the rest from per-call sums; a job with calls \
         whose ranks disagree or repeat would be read call by call with those calls' rows \
         (none here) ({} warm requests). Round trip of the \
         HTTP API on a kept-alive connection: *cold* is the first request of each route after \
         the load (a fresh collector, nothing read yet), then {} warm requests per route after \
         two uncounted ones; the \
         same SQL sent straight to ClickHouse's HTTP interface is shown for comparison (the \
         rest is the collector: ClickHouse client, JSON).\n",
        h(q.collective_rows as f64),
        h(q.loaded_rows as f64),
        q.load_s,
        h(q.verdict_versions as f64),
        h(q.verdicts as f64),
        q.collectives_16k_ms.len(),
        q.breakdown_ms.len()
    );
    let _ = writeln!(
        s,
        "| route | answer | API cold ms | API warm median ms | API p90 ms | API max ms | SQL alone median ms |\n|---|---|---|---|---|---|---|"
    );
    let row = |s: &mut String, name: &str, answer: String, cold: f64, v: &[f64], sql: &[f64]| {
        let _ = writeln!(
            s,
            "| {name} | {answer} | {cold:.1} | {:.1} | {:.1} | {:.1} | {} |",
            median(v),
            percentile(v, 90.0),
            min_max(v).1,
            if sql.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.1}", median(sql))
            }
        );
    };
    row(
        s,
        "`breakdown?step=50`, 4,096 ranks",
        format!(
            "{} rows, {} kB",
            q.breakdown_rows,
            q.breakdown_response_bytes / 1000
        ),
        q.breakdown_cold_ms,
        &q.breakdown_ms,
        &q.sql_breakdown_ms,
    );
    row(
        s,
        "`breakdown?step=50`, 16,384 ranks",
        format!(
            "{} rows, {} kB",
            q.breakdown_16k_rows,
            q.breakdown_16k_response_bytes / 1000
        ),
        q.breakdown_16k_cold_ms,
        &q.breakdown_16k_ms,
        &q.sql_breakdown_16k_ms,
    );
    row(
        s,
        "`stragglers`, 16,384 ranks x 100 steps",
        format!("{} verdicts", q.verdicts),
        q.stragglers_cold_ms,
        &q.stragglers_ms,
        &q.sql_stragglers_ms,
    );
    row(
        s,
        "`collectives`, 16,384 ranks x 100 steps (job-wide)",
        format!("{} calls", h(q.collective_rows as f64)),
        q.collectives_16k_cold_ms,
        &q.collectives_16k_ms,
        &q.sql_collectives_16k_ms,
    );
    if !q.collectives_rank_16k_ms.is_empty() {
        row(
            s,
            "`collectives?rank=777`, 16,384 ranks x 100 steps",
            format!("{} calls of the rank", q.collectives_rank_calls),
            q.collectives_rank_16k_cold_ms,
            &q.collectives_rank_16k_ms,
            &[],
        );
    }
    s.push('\n');
}

fn import(s: &mut String, d: &Details) {
    let _ = writeln!(
        s,
        "## 6. Trace import\n\n\
         `rankscope import --job <set> --ingest <collector>` once per trace set of \
         `cli/tests/fixtures/kineto` (each set one job, its files imported in parallel) and once on a \
         synthetic single-rank trace of {} MB uncompressed (`bench/src/synth.rs`: Kineto's \
         layout and event mix: CPU ops, launches, `ac2g` flows, kernels with full args, \
         memcpys, NCCL kernels with collective metadata). The command parses, orders, converts \
         and sends every event and exits once the collector acknowledged it (stored); the \
         clock then runs on until the job's analytics are final (the breakdown of its last \
         step is queryable for every rank that ended it). MB = 10^6 bytes of uncompressed \
         JSON. `import_mb_per_s` is the wall-clock figure: all sets plus the synthetic trace, \
         MB / seconds from each import's start until its analytics were final, median of {} \
         runs. A step is final when every rank of the job ended it or \
         `stream.step_timeout_ms` ({} ms) after the first did, so a set that holds only some \
         ranks of its job (most of the real ones) waits for that timeout. *Per core* = MB / \
         CPU seconds of the import process, the importer's own work, as detail.\n",
        h(d.synthetic_bytes as f64 / 1e6),
        d.imports.len(),
        rankscope_collector::Config::default().stream.step_timeout_ms
    );
    let Some(first) = d.imports.first() else {
        return;
    };
    if let Some(syn) = first.iter().find(|r| r.name == "synthetic") {
        let _ = writeln!(
            s,
            "Wall time is {:.1}x CPU time on the synthetic trace: `rankscope import` sends up \
             to four chunks (10,000 events each) of a file at a time, each waiting for its \
             acknowledgement, which the collector gives after the writer's next flush (up to \
             `flush_interval_ms` = {} ms), so a single file imports at about four chunks per \
             flush however fast the parser is. The per-core figure is the import process's \
             own work (read, parse, order, convert, send).\n",
            syn.elapsed_s / syn.cpu_s,
            super::default_flush_ms()
        );
    }
    let _ = writeln!(
        s,
        "| trace | files | JSON MB | until final s | MB/s until final | import exits s | CPU s | MB/s per core |\n|---|---|---|---|---|---|---|---|"
    );
    for (i, r) in first.iter().enumerate() {
        let runs: Vec<_> = d.imports.iter().filter_map(|run| run.get(i)).collect();
        let fin = median(&runs.iter().map(|x| x.final_s).collect::<Vec<_>>());
        let wall = median(&runs.iter().map(|x| x.elapsed_s).collect::<Vec<_>>());
        let cpu = median(&runs.iter().map(|x| x.cpu_s).collect::<Vec<_>>());
        let mb = r.json_bytes as f64 / 1e6;
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.2} | {:.1} | {:.2} | {:.2} | {:.1} |",
            r.name,
            r.files,
            mb,
            fin,
            mb / fin,
            wall,
            cpu,
            mb / cpu
        );
    }
    let _ = writeln!(
        s,
        "\nAll sets: {:.1} MB/s until final (the JSON figure), {:.1} MB per importer CPU second.",
        median(&d.import_mb_per_final_s()),
        median(&d.import_mb_per_cpu_s())
    );
    s.push('\n');
}

fn hta(s: &mut String, d: &Details) {
    let Some(sbs) = &d.hta else {
        return;
    };
    let med = |v: Vec<f64>| median(&v);
    let (Some(first_hta), Some(first_ours)) = (sbs.hta.first(), sbs.ours.first()) else {
        return;
    };
    let _ = writeln!(
        s,
        "## 6b. Import and analysis side by side with HTA\n\n\
         One job of {} ranks x {} steps written by `bench/src/synth.rs` (one Kineto trace per \
         rank, {} MB of JSON in all, NCCL all-reduces over all ranks; rank {} a compute \
         straggler: its kernels take 1.5x as long). *HTA*: Holistic Trace Analysis {} with \
         pandas {} in a venv the bench makes from `bench/hta/requirements.txt`; \
         `bench/hta/side_by_side.py` times `TraceAnalysis(trace_dir=...)` (parses every \
         trace), `get_temporal_breakdown()`, `get_comm_comp_overlap()` and the potential \
         stragglers on its own clock (interpreter start and module imports left out). \
         *rankscope*: spawn `rankscope import --job <job> --ingest <collector> <dir>` (it \
         returns once the job's analytics are final) and then `GET /api/v1/jobs/{{job}}/ranks` \
         (per-rank temporal breakdown with overlap) and `GET /api/v1/jobs/{{job}}/stragglers`; \
         the clock runs from the spawn to the last answer. The collector and ClickHouse run \
         on the same 2 cores. `import_vs_hta_speedup` = HTA s / rankscope s, medians of {} \
         run(s), the two tools alternating.\n",
        sbs.ranks,
        sbs.steps,
        h(sbs.json_bytes as f64 / 1e6),
        crate::hta::SLOW_RANK,
        first_hta.hta_version,
        first_hta.pandas_version,
        sbs.hta.len()
    );
    let _ = writeln!(
        s,
        "| tool | load / import s | temporal breakdown s | overlap s | stragglers s | total s | process CPU s | peak RSS MiB | stragglers named |\n|---|---|---|---|---|---|---|---|---|"
    );
    let _ = writeln!(
        s,
        "| HTA {} | {:.2} | {:.2} | {:.2} | {:.2} | **{:.2}** | {:.1} | {:.0} | {:?} |",
        first_hta.hta_version,
        med(sbs.hta.iter().map(|r| r.load_s).collect()),
        med(sbs.hta.iter().map(|r| r.temporal_breakdown_s).collect()),
        med(sbs.hta.iter().map(|r| r.comm_comp_overlap_s).collect()),
        med(sbs.hta.iter().map(|r| r.stragglers_s).collect()),
        med(sbs.hta.iter().map(|r| r.total_s).collect()),
        med(sbs.hta.iter().map(|r| r.process_cpu_s).collect()),
        med(sbs.hta.iter().map(|r| r.process_peak_rss_mib).collect()),
        first_hta.stragglers,
    );
    let _ = writeln!(
        s,
        "| rankscope | {:.2} (until final) | {:.3} (both routes) | - | - | **{:.2}** | {:.1} (importer {:.1}, collector {:.1}, ClickHouse {:.1}) | - | {:?} |",
        med(sbs.ours.iter().map(|r| r.import_s).collect()),
        med(sbs.ours.iter().map(|r| r.answers_s).collect()),
        med(sbs.ours.iter().map(|r| r.total_s).collect()),
        med(sbs
            .ours
            .iter()
            .map(|r| r.import_cpu_s + r.collector_cpu_s + r.clickhouse_cpu_s)
            .collect()),
        med(sbs.ours.iter().map(|r| r.import_cpu_s).collect()),
        med(sbs.ours.iter().map(|r| r.collector_cpu_s).collect()),
        med(sbs.ours.iter().map(|r| r.clickhouse_cpu_s).collect()),
        first_ours.stragglers,
    );
    let _ = writeln!(s, "\nSpeedup: **{:.1}x**.\n", sbs.speedup());
}

const REPRODUCE: &str = "\
## Reproduce\n\n\
```sh\n\
make bench   # release build, every section; writes bench/results.json and bench/RESULTS.md\n\
target/release/rankscope-bench --help   # sizes, repetitions, --quick, --sections\n\
target/release/rankscope-bench-fleet    # the fleet query at 10,000 nodes x 90 days (bench/RESULTS-fleet.md)\n\
```\n\n\
Needs `clickhouse-server` and `clickhouse-client` (`make bench` installs missing ones with \
apt), a C compiler for the NVML stand-in, and optionally `perf` for the profile.\n";

/// The agent's default `queue_max_events` and `backlog_max_bytes`.
fn rankscope_agent_defaults() -> (usize, usize) {
    let c = rankscope_agent::Config::default();
    (c.queue_max_events, c.backlog_max_bytes)
}
