//! Benchmark: what one SDK call costs the calling (training) thread.
//!
//! Starts a real agent in-process (Unix socket, no collector behind it),
//! connects a client, and times `span()` and `collective()` calls from one
//! thread in rounds of 1,000 calls: the median and p99 of the per-call
//! average over rounds, and the overall mean. The queue never fills (the
//! sender drains it into the agent), so this is the cost of the accepted
//! path, the one a training step pays. Prints one JSON object.
//!
//! `cargo run --release -p rankscope-sdk --example enqueue_cost [-- EVENTS]`

use std::time::{Duration, Instant};

use rankscope_sdk::{event, Client, CollectiveRecord, Options};

const ROUND: usize = 1000;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let events: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(2_000_000);
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let agent = rt.block_on(rankscope_agent::start(rankscope_agent::Config {
        listen_addr: "127.0.0.1:0".into(),
        metrics_listen_addr: "127.0.0.1:0".into(),
        unix_socket_path: dir.path().join("a.sock").to_string_lossy().into_owned(),
        collector_url: "http://127.0.0.1:9".into(),
        queue_max_events: 100_000_000,
        shutdown_flush_timeout_ms: 100,
        ..Default::default()
    }))?;
    let mut o = Options {
        agent: Some(format!(
            "unix:{}",
            agent.unix_path.clone().ok_or("no socket")?.display()
        )),
        queue_events: 1 << 20,
        ..Default::default()
    };
    o.identity.job_id = Some("bench".into());
    o.identity.rank = Some(0);
    o.identity.world_size = Some(1);
    let c = Client::start(o)?;
    let forward = event::span_category("forward")?;
    let coll = CollectiveRecord {
        op: event::collective_op("all_reduce")?,
        process_group: "0".into(),
        group_size: 8,
        dtype: event::dtype("bfloat16"),
        count: 1 << 20,
        bytes: 2 << 20,
        device: -1,
        ..Default::default()
    };
    let mut results = Vec::new();
    for (what, collective) in [("span", false), ("collective", true)] {
        let mut per_call_ns = Vec::new();
        let mut timed = Duration::ZERO;
        let mut seq = 0u64;
        for round in 0..events / ROUND {
            // Let the sender drain between bursts (outside the timed rounds),
            // as a real step's compute would: this measures the accepted path.
            if round % 100 == 99 && !c.flush(Duration::from_secs(60)) {
                return Err("flush failed".into());
            }
            let t = Instant::now();
            for _ in 0..ROUND {
                let now = rankscope_sdk::now_ns();
                if collective {
                    seq += 1;
                    let r = CollectiveRecord {
                        seq,
                        start_ns: now,
                        end_ns: now + 1000,
                        ..coll.clone()
                    };
                    let _ = c.collective(&r);
                } else {
                    let _ = c.span(forward, "forward", now, now + 1000, -1, 0);
                }
            }
            let round_time = t.elapsed();
            timed += round_time;
            per_call_ns.push(round_time.as_nanos() as f64 / ROUND as f64);
            if c.stats().dropped > 0 {
                return Err("the queue filled: the benchmark measured drops".into());
            }
        }
        let total = timed;
        per_call_ns.sort_by(f64::total_cmp);
        results.push(format!(
            "\"{what}\": {{\"calls\": {}, \"mean_ns\": {:.1}, \"p50_ns\": {:.1}, \"p99_ns\": {:.1}}}",
            per_call_ns.len() * ROUND,
            total.as_nanos() as f64 / (per_call_ns.len() * ROUND) as f64,
            percentile(&per_call_ns, 50.0),
            percentile(&per_call_ns, 99.0),
        ));
        c.flush(Duration::from_secs(60));
    }
    let s = c.stats();
    println!(
        "{{{}, \"sent\": {}, \"dropped\": {}}}",
        results.join(", "),
        s.sent,
        s.dropped
    );
    c.shutdown(Duration::from_secs(5));
    rt.block_on(agent.shutdown());
    Ok(())
}
