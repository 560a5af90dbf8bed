//! Live analytics on simulated jobs: the collector's conversion and step
//! assembly name the straggler (and nobody on a balanced job), and the full
//! pipeline serves breakdown, ranks, collectives and stragglers.

use crate::common;

use common::*;
use rankscope_analysis::VerdictChange;
use rankscope_cli::simulate::{self, SimConfig, Straggler};
use rankscope_collector::convert;
use rankscope_collector::stream::job::{AssemblyLimits, JobAssembler, JobOutput};
use rankscope_proto::v1 as proto;

/// Every name of the simulator's catalog (ids are dense from 1).
fn all_names() -> Vec<proto::InternedName> {
    (1..)
        .map_while(|id| {
            simulate::model::name_text(id).map(|n| proto::InternedName {
                id,
                name: n.to_string(),
            })
        })
        .collect()
}

/// Feeds a simulated job through validation, conversion and step assembly,
/// one agent batch per (step, rank), as the collector does after storing.
fn assemble(cfg: &SimConfig) -> (JobOutput, u64) {
    let names = all_names();
    let limits = AssemblyLimits {
        step_timeout_ns: u64::MAX,
        max_pending_steps: 64,
        max_events_per_rank_step: 1_000_000,
        hang_after_ns: u64::MAX,
    };
    let mut job = JobAssembler::new(cfg.ranks, Default::default(), limits);
    let mut out = JobOutput::default();
    let mut seq = 0;
    for step in simulate::plan_iter(cfg) {
        for r in step.ranks {
            seq += 1;
            let batch = proto::AgentBatch {
                agent_id: "sim".into(),
                agent_session: 1,
                seq,
                node: "n".into(),
                sent_at_ns: 0,
                ranks: vec![proto::RankEvents {
                    identity: Some(simulate::model::identity(cfg, r.rank)),
                    names: names.clone(),
                    events: r.events,
                    ..Default::default()
                }],
                ..Default::default()
            };
            convert::convert(&batch, 0).expect("simulated batches are valid");
            for group in convert::stream_input(&batch).groups {
                job.push(group, 0, &mut out);
            }
        }
    }
    (out, seq)
}

#[test]
fn simulated_straggler_is_named_with_cause_compute_within_three_steps() {
    let cfg = SimConfig {
        job: "s".into(),
        ranks: 8,
        steps: 12,
        layers: 2,
        stragglers: vec![Straggler {
            rank: 3,
            factor: 1.3,
        }],
        ..Default::default()
    };
    let (out, _) = assemble(&cfg);
    assert_eq!(out.steps.len(), 8 * 12);
    let first = out.verdicts.first().expect("a verdict");
    assert!(matches!(first, VerdictChange::Activated(_)), "{first:?}");
    let v = first.verdict();
    assert_eq!(v.rank, 3);
    assert_eq!(v.cause.as_str(), "compute");
    assert!(v.last_step <= 2, "activated at step {}", v.last_step);
    assert!(v.slowdown > 1.15, "{v:?}");
    assert!(
        out.verdicts.iter().all(|c| c.verdict().rank == 3),
        "only rank 3: {:?}",
        out.verdicts
    );
    // The other ranks wait for rank 3 in the collectives.
    let wait = |rank| -> u64 {
        out.steps
            .iter()
            .filter(|s| s.rank == rank)
            .map(|s| s.comm_wait_ns)
            .sum()
    };
    assert!(wait(0) > 2 * wait(3), "{} vs {}", wait(0), wait(3));
}

#[test]
fn balanced_16_ranks_200_steps_have_no_verdict() {
    let cfg = SimConfig {
        job: "b".into(),
        ranks: 16,
        steps: 200,
        layers: 1,
        ..Default::default()
    };
    assert!(cfg.jitter > 0.0, "the default simulation has jitter");
    let (out, _) = assemble(&cfg);
    assert_eq!(out.steps.len(), 16 * 200);
    assert!(out.verdicts.is_empty(), "{:?}", out.verdicts);
}

/// The whole pipeline: simulate with a straggler, then read every analytics
/// view back through the HTTP API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analytics_views_through_the_pipeline() {
    let mut stack = Stack::start().await;
    let mut sim = sim_config("e2e-straggler", 8, 12);
    sim.layers = 2;
    sim.stragglers = vec![Straggler {
        rank: 5,
        factor: 1.3,
    }];
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    let report = stack.stop_agent().await;
    assert_eq!(report.undelivered_events, 0);

    let stragglers = stack
        .api_poll("/api/v1/jobs/e2e-straggler/stragglers", "stragglers", |v| {
            !v.is_empty()
        })
        .await;
    let v = &stragglers[0];
    assert_eq!(v["rank"], 5);
    assert_eq!(v["cause"], "compute");
    assert_eq!(v["active"], true);
    assert!(v["first_step"].as_u64().unwrap() <= 2, "{v}");
    assert_eq!(v["node"], "sim-node-0");

    let rows = stack
        .api_poll("/api/v1/jobs/e2e-straggler/breakdown", "breakdown", |v| {
            v.len() == 8 * 12
        })
        .await;
    for r in &rows {
        let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
        assert!(n("gpu_busy_ns") <= n("gpu_span_ns"));
        assert!(n("overlap_ns") <= n("comm_ns").min(n("compute_ns")));
        assert_eq!(n("exposed_comm_ns"), n("comm_ns") - n("overlap_ns"));
        assert_eq!(n("idle_ns"), n("gpu_span_ns") - n("gpu_busy_ns"));
        assert!(n("step_time_ns") > 0);
    }
    let last = stack
        .api_get("/api/v1/jobs/e2e-straggler/breakdown?last=2")
        .await;
    assert_eq!(last["breakdown"].as_array().unwrap().len(), 16);

    let ranks = stack.api_get("/api/v1/jobs/e2e-straggler/ranks").await;
    let ranks = ranks["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 8);
    let compute = |r: &serde_json::Value| r["compute_ns"].as_u64().unwrap();
    let slowest = ranks.iter().max_by_key(|r| compute(r)).unwrap();
    assert_eq!(slowest["rank"], 5, "rank 5 computes longest");

    let colls = stack
        .api_get("/api/v1/jobs/e2e-straggler/collectives")
        .await;
    let colls = colls["collectives"].as_array().unwrap();
    assert!(!colls.is_empty());
    for c in colls {
        assert!(c["rank"].is_null(), "job-wide rows");
        assert!(c["calls"].as_u64().unwrap() > 0);
        if c["op"] != "barrier" {
            assert!(c["busbw_gbps"].as_f64().unwrap() > 0.0, "{c}");
        }
    }
    let per_rank = stack
        .api_get("/api/v1/jobs/e2e-straggler/collectives?rank=5")
        .await;
    assert!(per_rank["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["rank"] == 5));
    stack.stop().await;
}

/// A verdict is answered as soon as the live analytics raise it, before its
/// row is stored: here the results writer holds its rows for an hour, and
/// the stragglers route still names the rank while `straggler_verdicts` has
/// nothing for the job; the row lands at shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_straggler_is_answered_before_its_verdict_row_is_stored() {
    let mut stack = Stack::start_with(|c| c.writer.results_flush_interval_ms = 3_600_000).await;
    let mut sim = sim_config("live-verdict", 8, 10);
    sim.stragglers = vec![Straggler {
        rank: 2,
        factor: 1.4,
    }];
    simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    let stragglers = stack
        .api_poll("/api/v1/jobs/live-verdict/stragglers", "stragglers", |v| {
            !v.is_empty()
        })
        .await;
    assert_eq!(stragglers[0]["rank"], 2, "{stragglers:?}");
    assert_eq!(stragglers[0]["active"], true);
    assert_eq!(
        stack.rows_now("straggler_verdicts", "live-verdict"),
        0,
        "served before stored"
    );
    // Shutdown flushes the results writer.
    stack.stop_agent().await;
    stack.collector.take().expect("running").shutdown().await;
    assert!(
        stack.rows_now("straggler_verdicts", "live-verdict") > 0,
        "stored at shutdown"
    );
}
