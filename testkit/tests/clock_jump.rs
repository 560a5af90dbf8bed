//! A clock jump on one node: rank 3's clock steps forward one hour inside
//! step 20 (an NTP step, a VM resumed) and stays there. Analytics compare
//! durations and match collectives by (process group, seq), never raw times
//! across ranks, so only that one rank-step's wall time changes: every other
//! breakdown column of every (step, rank), and the straggler verdicts, equal
//! the same job without the jump; every event is stored once.
//!
//! The batches are the simulator's model sent straight to the collector's
//! gRPC service, one per step, with rank 3's times shifted.

use crate::common;

use common::*;
use rankscope_cli::simulate::{plan, Straggler};
use rankscope_proto::v1 as proto;

const JUMP_NS: u64 = 3_600_000_000_000;

fn shift(e: &mut proto::Event, d: u64) {
    use proto::event::Kind;
    match e.kind.as_mut() {
        Some(Kind::StepBegin(s)) => s.ts_ns += d,
        Some(Kind::StepEnd(s)) => s.ts_ns += d,
        Some(Kind::Span(s)) => (s.start_ns, s.end_ns) = (s.start_ns + d, s.end_ns + d),
        Some(Kind::Kernel(k)) => (k.start_ns, k.end_ns) = (k.start_ns + d, k.end_ns + d),
        Some(Kind::Collective(c)) => (c.start_ns, c.end_ns) = (c.start_ns + d, c.end_ns + d),
        Some(Kind::MemorySample(m)) => m.ts_ns += d,
        Some(_) | None => {}
    }
}

/// Sends the job, one batch per step; with `jump`, rank 3's clock jumps
/// before its StepEnd of step 20.
async fn send(stack: &Stack, job: &str, jump: bool) -> u64 {
    let mut sim = sim_config(job, 8, 60);
    sim.layers = 2;
    sim.stragglers = vec![Straggler {
        rank: 5,
        factor: 1.3,
    }];
    let names = all_sim_names();
    let mut total = 0;
    for (i, step) in plan(&sim).steps.into_iter().enumerate() {
        let ranks = step
            .ranks
            .into_iter()
            .map(|mut rs| {
                if jump && rs.rank == 3 {
                    let last = rs.events.len() - 1;
                    for (j, e) in rs.events.iter_mut().enumerate() {
                        if step.step > 20 || (step.step == 20 && j == last) {
                            shift(e, JUMP_NS);
                        }
                    }
                }
                total += rs.events.len() as u64;
                proto::RankEvents {
                    identity: Some(rankscope_cli::simulate::model::identity(&sim, rs.rank)),
                    names: names.clone(),
                    events: rs.events,
                    ..Default::default()
                }
            })
            .collect();
        let batch = proto::AgentBatch {
            agent_id: format!("{job}-agent"),
            agent_session: 1,
            seq: i as u64 + 1,
            node: "n".into(),
            sent_at_ns: 1,
            ranks,
            ..Default::default()
        };
        stack.ingest(batch).await.expect("stored");
    }
    total
}

/// Breakdowns without the rank-step start (the one thing a jump moves).
fn breakdowns(stack: &Stack, job: &str) -> Vec<String> {
    stack
        .clickhouse
        .query(&format!(
            "SELECT step, rank, step_time_ns, gpu_span_ns, gpu_busy_ns, idle_ns, compute_ns, \
             comm_ns, memory_ns, overlap_ns, exposed_comm_ns, non_compute_ns, dataloader_ns, \
             comm_wait_ns, comm_transfer_ns, gpu_events FROM {}.step_breakdown FINAL \
             WHERE job_id = '{job}' ORDER BY step, rank",
            stack.database
        ))
        .expect("breakdowns")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn verdicts(stack: &Stack, job: &str) -> String {
    stack
        .clickhouse
        .query(&format!(
            "SELECT rank, first_step, last_step, steps_flagged, slowdown, score, cause, active \
             FROM {}.straggler_verdicts FINAL WHERE job_id = '{job}' ORDER BY rank, first_step",
            stack.database
        ))
        .expect("verdicts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_jump_on_one_node_changes_only_that_rank_step() {
    let stack = Stack::start_without_agent().await;
    let total = send(&stack, "clock-steady", false).await;
    assert_eq!(send(&stack, "clock-jump", true).await, total);
    let complete = |job: &str| breakdowns(&stack, job).len() == 8 * 60;
    eventually(60, "both jobs' analytics final", || {
        complete("clock-steady") && complete("clock-jump")
    })
    .await;
    for job in ["clock-steady", "clock-jump"] {
        assert_eq!(stack.counts(job).await.total(), total, "{job}");
        assert_eq!(
            stack.distinct_event_keys(job).await,
            total,
            "{job} stored once"
        );
    }
    let (steady, jumped) = (
        breakdowns(&stack, "clock-steady"),
        breakdowns(&stack, "clock-jump"),
    );
    let differing: Vec<(&String, &String)> =
        steady.iter().zip(&jumped).filter(|(a, b)| a != b).collect();
    assert_eq!(differing.len(), 1, "{differing:?}");
    let (a, b) = differing[0];
    assert!(a.starts_with("20\t3\t"), "{a}");
    let step_time = |row: &str| -> u64 { row.split('\t').nth(2).unwrap().parse().unwrap() };
    assert_eq!(step_time(b) - step_time(a), JUMP_NS, "{a} / {b}");
    let want = verdicts(&stack, "clock-steady");
    assert!(want.lines().any(|l| l.starts_with("5\t")), "{want}");
    // The last verdict version goes out beside the last breakdowns, as
    // another INSERT of the same flush.
    eventually(30, "the jumped job's verdicts as the steady job's", || {
        verdicts(&stack, "clock-jump") == want
    })
    .await;
    assert_eq!(verdicts(&stack, "clock-jump"), want);
    stack.stop().await;
}
