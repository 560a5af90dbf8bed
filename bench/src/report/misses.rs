//! "Where goals are missed": for each missed goal, by how much and what the
//! measurements and the profile say the bottleneck is.
//!
//! In: [`Details`] and its [`Results`]. Out: a markdown section. Every
//! sentence is built from the run's own numbers.

use std::fmt::Write as _;

use super::{fig, human, rows, Details, Results};
use crate::stats::median;

fn h(v: f64) -> String {
    human(fig(v))
}

pub(super) fn misses(s: &mut String, d: &Details, r: &Results) {
    let _ = writeln!(s, "## Where goals are missed\n");
    let mut any = false;
    for (name, v, _, goal) in rows(r) {
        let (Some(g), Some(v)) = (goal, v) else {
            continue;
        };
        if g.met(v) {
            continue;
        }
        any = true;
        let by = if g.at_least {
            format!("{:.0} % below the goal", 100.0 * (1.0 - v / g.limit))
        } else {
            format!("{:.1}x the goal", v / g.limit)
        };
        let _ = writeln!(
            s,
            "- **`{name}`** = {} ({by}, goal {}). {}",
            human(Some(v)),
            g.text(),
            why(name, d)
        );
    }
    if !any {
        let _ = writeln!(s, "Every goal was met in this run.");
    }
    s.push('\n');
}

fn why(name: &str, d: &Details) -> String {
    let med =
        |f: &dyn Fn(&crate::e2e::E2eRun) -> f64| median(&d.e2e.iter().map(f).collect::<Vec<_>>());
    match name {
        "e2e_ratio_vs_clickhouse" => {
            let pipeline = med(&|r| {
                (r.collector_cpu_s + r.agent_cpu_s + r.simulate_cpu_s + r.clickhouse_cpu_s)
                    / r.events as f64
                    * 1e6
            });
            let bulk = med(&|r| r.bulk.clickhouse_cpu_s / r.bulk.rows as f64 * 1e6);
            let bound = d.machine.cores as f64 / pipeline * 1e6;
            let bulk_rate = med(&|r| r.bulk.rows_per_s);
            format!(
                "The four processes of the pipeline need {pipeline:.2} CPU s per million events \
                 together (ClickHouse {:.2}, collector {:.2}, agent {:.2}, simulator {:.2}), the \
                 bulk load {bulk:.2} ClickHouse CPU s per million rows. On {} shared cores that \
                 caps the pipeline at {} events/s even with every core busy, {:.2} of the bulk \
                 rate: the goal cannot be met on this machine by tuning alone. ClickHouse \
                 itself works harder per row than in bulk ({:.1}x): {} INSERTs per run make \
                 small parts to create and merge{}. {}",
                med(&|r| r.clickhouse_cpu_s / r.events as f64 * 1e6),
                med(&|r| r.collector_cpu_s / r.events as f64 * 1e6),
                med(&|r| r.agent_cpu_s / r.events as f64 * 1e6),
                med(&|r| r.simulate_cpu_s / r.events as f64 * 1e6),
                d.machine.cores,
                h(bound),
                bound / bulk_rate,
                med(&|r| r.clickhouse_cpu_s / r.events as f64)
                    / med(&|r| r.bulk.clickhouse_cpu_s / r.bulk.rows as f64),
                med(&|r| r.inserts as f64),
                ch_kernel_note(d),
                busy_note(d)
            )
        }
        "rankscope_cpu_vs_clickhouse" => format!(
            "Per million events: agent {:.3} + collector {:.3} = {:.3} CPU s against \
             ClickHouse's {:.3} for the same rows (its merges so far included). The \
             section 1 profile names where the agent's and collector's time goes.",
            med(&|r| r.agent_cpu_s / r.events as f64 * 1e6),
            med(&|r| r.collector_cpu_s / r.events as f64 * 1e6),
            med(&|r| (r.agent_cpu_s + r.collector_cpu_s) / r.events as f64 * 1e6),
            med(&|r| r.clickhouse_cpu_s / r.events as f64 * 1e6),
        ),
        "pipeline_utilisation" => format!(
            "The four processes kept {:.2} of the {} cores busy on median (the machine as a \
             whole {:.0} %, other users included); the rest of the time a stage waited for \
             another (acknowledgement windows, flush cadence, single-task stages). {}",
            med(&|r| {
                (r.collector_cpu_s + r.agent_cpu_s + r.simulate_cpu_s + r.clickhouse_cpu_s)
                    / r.elapsed_s
            }),
            d.machine.cores,
            med(&|r| r.machine_busy_pct),
            busy_note(d)
        ),
        "clickhouse_cpu_per_row_vs_bulk" => format!(
            "Every end-to-end INSERT is a part, a directory of two files per column and \
             about six more (18 to 50 files for these tables): median {:.0} INSERTs for {:.0} \
             events ({}), against the bulk load's 4 parts{}. Creating a file makes ext4 \
             allocate an inode, and it passes over inodes freed in the last minute by \
             reading their inode table blocks (`recently_deleted`, `find_inode_bit`), so \
             the cost per file grows after mass deletions on the same disk (other users \
             of this VM delete files too; the bench now drops the runs' databases only \
             after the section): five back-to-back runs that each dropped their \
             predecessor's took 3.9, 3.5, 3.1, 1.7 and 1.4 ClickHouse CPU s for the same \
             rows, and the first run after a 90 s quiet period 1.6 s, while the bulk load \
             stayed at 1.2-1.4 s. Fewer parts is the lever: `ranks` gets a row only when \
             a rank's identity changes or every 5 s (one INSERT per run instead of one per \
             window), and the breakdowns of steps finalized while later ones are open are \
             written relaxed (about half the `step_breakdown` INSERTs). Longer \
             ingest windows did not help: with a 1 s flush interval one agent's \
             `max_in_flight_batches` unacknowledged batches cannot fill them (acks only \
             after commit), and 400 ms windows made runs longer (0.77 M events/s \
             instead of 1.05 M). Rows streamed into open INSERTs as they arrive would not \
             need to be held, but ClickHouse 18.16 commits a truncated chunked INSERT \
             when its client dies, so a killed collector would store rows before their \
             batch's intent (tried; the restart test found duplicates). {}",
            med(&|r| r.inserts as f64),
            med(&|r| r.events as f64),
            inserts_by_table(d),
            ch_kernel_note(d),
            busy_note(d)
        ),
        "agent_cpu_pct_8_ranks_realtime" => format!(
            "For scale: sampling 8 GPUs and the host at 10 Hz alone costs {:.2} % (the idle \
             figure) and the agent with nothing to do {:.3} %; the rest is relaying {:.0} \
             events/s ({:.2} CPU s per million events in the end-to-end runs).",
            crate::idle::median_pct(&d.idle),
            d.idle.baseline_cpu_pct,
            d.idle.realtime_events_per_s,
            median(
                &d.e2e
                    .iter()
                    .map(|r| r.agent_cpu_s / r.events as f64 * 1e6)
                    .collect::<Vec<_>>()
            )
        ),
        "agent_rss_mib_full_relay" => {
            let c = rankscope_agent::Config::default();
            let event = std::mem::size_of::<rankscope_proto::v1::Event>();
            format!(
                "The agent's default buffers allow {:.1} MiB of events (queue {} x {event} B, \
                 the batch being built {} x {event} B, backlog {} MiB encoded); the rest is \
                 the runtime, the gRPC buffers of the calls in flight and allocator slack.",
                ((c.queue_max_events + c.batch_max_events) * event + c.backlog_max_bytes) as f64
                    / (1 << 20) as f64,
                c.queue_max_events,
                c.batch_max_events,
                c.backlog_max_bytes >> 20
            )
        }
        "collector_cpu_s_per_million_events" => format!(
            "The collector's profile (section 1) by category: {}. The work per event is decoding the protobuf batch, converting it to row \
             structs (strings cloned per row: job, run, node, agent id), serialising them to \
             RowBinary, LZ4-compressing the INSERT bodies and copying buffers along the way; \
             fewer allocations per row (interned or borrowed strings, reused buffers) and \
             cheaper compression are where the cost can come down.",
            d.profile
                .iter()
                .find(|p| p.name.starts_with("rankscope-col"))
                .map_or_else(|| "not profiled in this run".to_owned(), categories)
        ),
        "straggler_latency_p99_ms_16384_ranks" => {
            let t = &d.straggler_16k;
            let ms = |f: fn(&crate::straggler::StragglerTrial) -> f64| {
                median(&t.iter().map(f).collect::<Vec<_>>())
            };
            let (lat, det, stored) = (
                ms(|x| x.latency_ms),
                ms(|x| x.detected_ms),
                ms(|x| x.stored_ms),
            );
            let events = t.first().map_or(0, |x| x.step_events);
            format!(
                "At 16,384 ranks the median is {lat:.0} ms. The collector decodes and \
                 assembles the decisive step's {events} events from 2,048 node batches and \
                 raises the verdict {det:.0} ms after the last batch; the API answers with it \
                 {:.0} ms later (the route serves the verdict and its what-if gain from \
                 memory; what remains is its read of the job's stored verdicts and evidence, \
                 queued behind the ingest on the collector's runtime and ClickHouse, and the \
                 poll), while ClickHouse stores the step's raw events on the same cores \
                 ({stored:.0} ms until the last batch was acknowledged). What was tried to put this path \
                 ahead of storage, and what it cost: bench/RESULTS-alternations.md (session 24).",
                lat - det
            )
        }
        n if n.starts_with("straggler") => {
            let ms = |t: &[crate::straggler::StragglerTrial], f: fn(&crate::straggler::StragglerTrial) -> f64| {
                median(&t.iter().map(f).collect::<Vec<_>>())
            };
            let (agent, direct) = (&d.straggler_agent, &d.straggler_default);
            let (e2e, e2e_det) = (ms(agent, |x| x.latency_ms), ms(agent, |x| x.detected_ms));
            let (lat, det, stored) = (
                ms(direct, |x| x.latency_ms),
                ms(direct, |x| x.detected_ms),
                ms(direct, |x| x.stored_ms),
            );
            format!(
                "End to end the median is {e2e:.0} ms: the verdict is raised {e2e_det:.0} ms \
                 after the last rank handed over its decisive step (the agent cuts the batch \
                 when the node's last rank ended the step and relays it; the collector's \
                 analytics take a batch as soon as its writer holds it, not after the flush), \
                 and the API answers with it \
                 {:.0} ms later (served from memory before its row is stored: the route's \
                 queries and the 5 ms poll). Sent straight to the collector \
                 the verdict is raised {det:.0} ms after the last batch and answered at \
                 {lat:.0} ms: ClickHouse is storing the step's raw events meanwhile ({stored:.0} \
                 ms until acknowledged, `writer.flush_interval_ms` = {} ms) on the same two \
                 cores as the route's reads.",
                e2e - e2e_det,
                super::default_flush_ms()
            )
        }
        "query_collectives_16384x100_ms" => format!(
            "The route aggregates all {} collectives of the job per call in ClickHouse, which \
             also computes each group's exact nearest-rank percentiles, so only per-call sums \
             travel: that SQL alone takes {:.0} ms at the median; the rest is the collector \
             (ClickHouse client, statistics, JSON).",
            human(Some(d.query.collective_rows as f64)),
            median(&d.query.sql_collectives_16k_ms)
        ),
        n if n.starts_with("query") => format!(
            "The same SQL sent straight to ClickHouse takes {:.1} ms (breakdown, 4,096 ranks), \
             {:.1} ms (breakdown, 16,384 ranks) and {:.1} ms (the stragglers' verdicts) at the \
             median; the rest is the collector: its ClickHouse client, the what-if gains' two \
             queries (stragglers) and JSON.",
            median(&d.query.sql_breakdown_ms),
            median(&d.query.sql_breakdown_16k_ms),
            median(&d.query.sql_stragglers_ms)
        ),
        n if n.starts_with("fleet") => "The collector keeps each answer for one \
             `repeat_offender` tick (`fleet::cache`), so a warm request is served from memory; \
             the first request of a window computes it: SQL counts each unit's exposure in the \
             rollup of migration 0014 ((unit, job) rows: per placement by GPU) and only the \
             flagged placements travel, then the collector groups the verdicts and writes \
             every unit's row (bench/RESULTS-fleet.md)."
            .to_owned(),
        n if n.starts_with("overview") => format!(
            "A warm request reads only the job's input summary (`job_view_inputs.sql`) and \
             serves the per-rank figures kept since the first (`api::overview::cache`). The \
             first request reads every GPU activity of the job into the collector ({} per \
             rank and step: {} rows, as many launch calls and the kernels' launch figures) and \
             computes each rank's figures there; the answer is one row per rank. The figures \
             it computes are kept in ClickHouse (`overview_ranks`), so a restarted collector or \
             another replica reads one row per rank (`overview_1024x100_kept_ms`); the first \
             request after a job's rows change still computes from every row. Meeting the cold \
             goal needs the per-rank sums kept as activities are stored (the live path per \
             step, imports per file), not a faster read.",
            crate::views::KERNELS_PER_STEP,
            human(Some(
                (d.views.ranks * d.views.steps * crate::views::KERNELS_PER_STEP) as f64
            ))
        ),
        n if n.starts_with("memory") => format!(
            "The UI's request (`ops`, `curve` and `events` for every rank) answers {} KiB of \
             JSON: every rank's memory curve and the live per-(step, rank) peaks ({} each).",
            d.views.route("memory").map_or(0, |r| r.response_bytes / 1024),
            human(Some((d.views.ranks * d.views.steps) as f64))
        ),
        "import_vs_hta_speedup" => {
            let Some(h) = &d.hta else {
                return String::new();
            };
            let med = |f: fn(&crate::hta::OursRun) -> f64| {
                median(&h.ours.iter().map(f).collect::<Vec<_>>())
            };
            let hta_cpu = median(&h.hta.iter().map(|r| r.process_cpu_s).collect::<Vec<_>>());
            let ours_cpu = med(|r| r.import_cpu_s + r.collector_cpu_s + r.clickhouse_cpu_s);
            let mb = h.json_bytes as f64 / 1e6;
            format!(
                "HTA used {hta_cpu:.1} CPU s (its parser runs one process per core); rankscope \
                 {ours_cpu:.1} CPU s in all: the importer {:.1} (parse, order, convert, send: \
                 {:.0} MB of JSON per CPU second), the collector {:.1} and ClickHouse {:.1}, \
                 which store every event as well, on the same {} cores. The goal asks for \
                 the whole job in {:.2} s, i.e. {:.0} MB/s of JSON parsed and stored on this \
                 machine: the whole pipeline would have to be {:.1}x faster. The importer \
                 reads each file once (the scan keeps the output events' fields and takes \
                 the content digest) and reads Kineto's flat event objects with its own \
                 cursor (`kineto::flat`, serde_json only for what it leaves), about 1 GB of \
                 JSON per CPU second for the parse alone; the three processes share the \
                 same cores, so the wall time follows their CPU time together. The \
                 collector and ClickHouse store every event (Native INSERTs).",
                med(|r| r.import_cpu_s),
                mb / med(|r| r.import_cpu_s),
                med(|r| r.collector_cpu_s),
                med(|r| r.clickhouse_cpu_s),
                d.machine.cores,
                median(&h.hta.iter().map(|r| r.total_s).collect::<Vec<_>>()) / HTA_GOAL,
                mb / (median(&h.hta.iter().map(|r| r.total_s).collect::<Vec<_>>()) / HTA_GOAL),
                h.speedup().recip() * HTA_GOAL,
            )
        }
        _ => String::new(),
    }
}

/// `import_vs_hta_speedup`'s goal (issue 38, goal 4; round 2: 20).
const HTA_GOAL: f64 = 40.0;

/// How busy the machine was and how much of it was the pipeline.
fn busy_note(d: &Details) -> String {
    let med =
        |f: &dyn Fn(&crate::e2e::E2eRun) -> f64| median(&d.e2e.iter().map(f).collect::<Vec<_>>());
    let ours = med(&|r| {
        100.0 * (r.collector_cpu_s + r.agent_cpu_s + r.simulate_cpu_s + r.clickhouse_cpu_s)
            / (r.elapsed_s * d.machine.cores as f64)
    });
    let busy = med(&|r| r.machine_busy_pct);
    let mut s = format!(
        "During the runs the pipeline used {ours:.0} % of the machine's CPU time and the \
         machine was {busy:.0} % busy"
    );
    if busy - ours > 10.0 {
        s.push_str(
            " (the difference is other users' processes on this shared machine, which slowed \
             the pipeline down)",
        );
    }
    if busy < 85.0 {
        let a = rankscope_agent::Config::default();
        let _ = write!(
            s,
            "; the idle rest is latency: the agent keeps at most `max_in_flight_batches` ({}) x \
             `batch_max_events` ({}) events unacknowledged and the collector acknowledges a \
             batch only after its window committed, so the agent waits while ClickHouse inserts",
            a.max_in_flight_batches,
            h(a.batch_max_events as f64)
        );
    }
    s.push('.');
    s
}

/// What the kernel share of ClickHouse's profile says, if profiled.
/// Median INSERTs per run by table, e.g. "kernels 9, ranks 1".
fn inserts_by_table(d: &Details) -> String {
    let Some(first) = d.e2e.first() else {
        return "no runs".to_owned();
    };
    first
        .inserts_by_table
        .iter()
        .map(|(table, _)| {
            let n = median(
                &d.e2e
                    .iter()
                    .map(|r| {
                        r.inserts_by_table
                            .iter()
                            .find(|(t, _)| t == table)
                            .map_or(0.0, |(_, n)| *n as f64)
                    })
                    .collect::<Vec<_>>(),
            );
            format!("{table} {n:.0}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn ch_kernel_note(d: &Details) -> String {
    d.profile
        .iter()
        .find(|p| p.name.starts_with("clickhouse"))
        .map(|p| {
            format!(
                " ({:.0} % of ClickHouse's samples are in the kernel, {:.0} % in file system \
                 functions (ext4, block and inode lookups): a part is a directory with files per \
                 column)",
                p.share(&["[kernel"]),
                p.share(&FS_SYMBOLS)
            )
        })
        .unwrap_or_default()
}

/// Kernel symbols of file system work.
const FS_SYMBOLS: [&str; 7] = [
    "ext4",
    "find_get_block",
    "recently_deleted",
    "inode",
    "dentry",
    "filemap",
    "jbd2",
];

/// One process's profile by what the code does.
pub(super) fn categories(p: &crate::profile::ProcessProfile) -> String {
    format!(
        "allocator {:.0} %, copying / buffers {:.0} %, LZ4 {:.0} %, protobuf {:.0} %, kernel {:.0} %",
        p.share(&["malloc", "_int_free", "cfree", "unlink_chunk", "realloc"]),
        p.share(&["memmove", "memcpy", "put_slice", "BytesMut", "reserve_inner"]),
        p.share(&["lz4", "LZ4"]),
        p.share(&["prost::"]),
        p.share(&["[kernel"])
    )
}

/// Shares of the profile by what the code does, every process.
pub(super) fn profile_summary(d: &Details) -> String {
    if d.profile.is_empty() {
        return "(No `perf` profile was taken in this run.)".into();
    }
    let parts: Vec<String> = d
        .profile
        .iter()
        .map(|p| format!("{}: {}", p.name, categories(p)))
        .collect();
    format!(
        "By category (sums over the symbols above 0.5 % of each process's samples): {}.",
        parts.join("; ")
    )
}
