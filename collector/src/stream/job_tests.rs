use super::*;
use rankscope_analysis::{CollOp, KernelClass};

const MS: u64 = 1_000_000;

fn limits() -> AssemblyLimits {
    AssemblyLimits {
        step_timeout_ns: 10_000 * MS,
        max_pending_steps: 8,
        max_events_per_rank_step: 1_000,
        hang_after_ns: 5_000 * MS,
    }
}

/// One rank-step: compute kernel of `compute_ms`, then an all-reduce that
/// ends at the same time on every rank (`sync_end_ms` after the step start),
/// so a slow rank waits least.
fn rank_step(rank: u32, step: u64, compute_ms: u64, sync_end_ms: u64) -> RankInput {
    let t0 = 1_000_000 * MS + step * 1_000 * MS;
    let coll_start = t0 + compute_ms * MS;
    let coll_end = t0 + sync_end_ms * MS;
    RankInput {
        job: "j".into(),
        run_id: String::new(),
        rank,
        world_size: 4,
        node: format!("n{}", rank / 2),
        closed: false,
        events: vec![
            StreamEvent::StepBegin { step, ts_ns: t0 },
            StreamEvent::Gpu(GpuEvent {
                start_ns: t0,
                end_ns: coll_start,
                class: KernelClass::Computation,
            }),
            StreamEvent::Collective(CollectiveObs {
                rank,
                process_group: "pg".into(),
                seq: step,
                op: CollOp::AllReduce,
                dtype: "float32".into(),
                group_size: 4,
                bytes: 1 << 20,
                start_ns: coll_start,
                end_ns: coll_end,
            }),
            StreamEvent::StepEnd {
                step,
                ts_ns: coll_end + MS,
            },
        ],
    }
}

#[test]
fn complete_step_is_finalized_with_breakdown_and_wait() {
    let mut job = JobAssembler::new(4, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    for rank in 0..3 {
        job.push(rank_step(rank, 0, 100 + u64::from(rank), 130), 0, &mut out);
    }
    assert!(out.steps.is_empty(), "rank 3 missing: not final yet");
    job.push(rank_step(3, 0, 120, 130), 0, &mut out);
    assert_eq!(out.steps.len(), 4);
    let r0 = out.steps.iter().find(|s| s.rank == 0).unwrap();
    assert_eq!(r0.breakdown.compute_ns, 100 * MS);
    assert_eq!(r0.breakdown.comm_ns, 30 * MS);
    assert_eq!(r0.breakdown.overlap_ns, 0);
    assert_eq!(r0.step_time_ns, 131 * MS);
    // Transfer = shortest collective (rank 3: 10 ms); rank 0 waited 20 ms.
    assert_eq!(r0.comm_transfer_ns, 10 * MS);
    assert_eq!(r0.comm_wait_ns, 20 * MS);
    let r3 = out.steps.iter().find(|s| s.rank == 3).unwrap();
    assert_eq!(r3.comm_wait_ns, 0);
    assert_eq!(job.pending_steps(), 0);
}

#[test]
fn straggler_verdict_after_three_steps() {
    let mut job = JobAssembler::new(4, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    for step in 0..6 {
        for rank in 0..4 {
            let compute = if rank == 2 {
                130
            } else {
                100 + u64::from(rank)
            };
            job.push(rank_step(rank, step, compute, 140), 0, &mut out);
        }
        if step == 1 {
            assert!(out.verdicts.is_empty(), "not before the 3rd flagged step");
        }
    }
    let first = out.verdicts.first().expect("a verdict").verdict().clone();
    assert_eq!(first.rank, 2);
    assert_eq!(first.first_step, 0);
    assert_eq!(first.cause.as_str(), "compute");
    assert!(first.slowdown > 1.25, "{first:?}");
    assert!(matches!(out.verdicts[0], VerdictChange::Activated(_)));
}

#[test]
fn balanced_job_has_no_verdict() {
    let mut job = JobAssembler::new(4, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    for step in 0..50 {
        for rank in 0..4u32 {
            let jitter = (step * 7 + u64::from(rank) * 3) % 3;
            job.push(rank_step(rank, step, 100 + jitter, 140), 0, &mut out);
        }
    }
    assert_eq!(out.steps.len(), 200);
    assert!(out.verdicts.is_empty(), "{:?}", out.verdicts);
}

#[test]
fn missing_rank_times_out_and_is_a_hang_suspect() {
    let mut job = JobAssembler::new(4, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    for rank in 0..4 {
        job.push(rank_step(rank, 0, 100, 130), 0, &mut out);
    }
    // Rank 3 stops after step 0; the others go on.
    for step in 1..3 {
        for rank in 0..3 {
            job.push(rank_step(rank, step, 100, 130), 1_000 * MS * step, &mut out);
        }
    }
    assert_eq!(out.steps.len(), 4, "steps 1 and 2 wait for rank 3");
    assert!(out.hangs.is_empty());
    job.poll(6_000 * MS, &mut out);
    let hang = out.hangs.first().expect("hang suspect");
    assert_eq!((hang.rank, hang.last_step, hang.job_step), (3, Some(0), 2));
    job.poll(7_000 * MS, &mut out);
    assert_eq!(out.hangs.len(), 1, "reported once");
    job.poll(12_000 * MS, &mut out);
    assert_eq!(
        out.steps.len(),
        4 + 3 + 3,
        "partial steps finalized on timeout"
    );
    assert_eq!(job.partial_steps, 2);
    // Rank 3's late step 1 is counted, not re-finalized.
    job.push(rank_step(3, 1, 100, 130), 12_000 * MS, &mut out);
    assert_eq!(job.late_rank_steps, 1);
}

#[test]
fn pending_steps_are_bounded() {
    let mut job = JobAssembler::new(4, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    for step in 0..20 {
        job.push(rank_step(0, step, 100, 130), 0, &mut out);
        assert!(job.pending_steps() <= limits().max_pending_steps);
    }
}

#[test]
fn events_per_rank_step_are_bounded() {
    let mut l = limits();
    l.max_events_per_rank_step = 1;
    let mut job = JobAssembler::new(1, StragglerPolicy::default(), l);
    let mut out = JobOutput::default();
    let mut input = rank_step(0, 0, 100, 130);
    input.world_size = 1;
    job.push(input, 0, &mut out);
    assert_eq!(job.dropped_events, 1, "the collective beyond the limit");
    assert_eq!(out.steps[0].gpu_events, 1);
}

#[test]
fn whole_job_stall_is_reported_once_unless_all_streams_ended() {
    let mut job = JobAssembler::new(4, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    for rank in 0..4 {
        job.push(rank_step(rank, 0, 100, 130), 0, &mut out);
    }
    job.poll(4_000 * MS, &mut out);
    assert_eq!(out.stalled, None, "not silent long enough");
    job.poll(5_000 * MS, &mut out);
    assert_eq!(out.stalled, Some((0, 5_000 * MS)));
    let mut again = JobOutput::default();
    job.poll(6_000 * MS, &mut again);
    assert_eq!(again.stalled, None, "reported once");
    job.push(rank_step(0, 1, 100, 130), 7_000 * MS, &mut again);
    assert!(again.progressed);

    // A job whose ranks all closed their streams has ended, not hung.
    let mut done = JobAssembler::new(2, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    for rank in 0..2 {
        let mut input = rank_step(rank, 0, 100, 130);
        input.world_size = 2;
        input.closed = true;
        done.push(input, 0, &mut out);
    }
    done.poll(60_000 * MS, &mut out);
    assert_eq!(out.stalled, None);
}

/// A CPU-only DDP rank-step (gloo, no kernels): host forward of `fwd_ms`,
/// then backward until `sync_end_ms` with the gradient all-reduce in flight
/// from 5 ms into backward to its end (healthy ranks sit blocked in
/// backward while the slow rank computes).
fn cpu_rank_step(rank: u32, step: u64, fwd_ms: u64, sync_end_ms: u64) -> RankInput {
    let t0 = 1_000_000 * MS + step * 1_000 * MS;
    let bwd = t0 + fwd_ms * MS;
    let end = t0 + sync_end_ms * MS;
    RankInput {
        job: "j".into(),
        run_id: String::new(),
        rank,
        world_size: 4,
        node: "n".into(),
        closed: false,
        events: vec![
            StreamEvent::StepBegin { step, ts_ns: t0 },
            StreamEvent::HostCompute(Interval::new(t0, bwd), "forward"),
            StreamEvent::HostCompute(Interval::new(bwd, end), "backward"),
            StreamEvent::Collective(CollectiveObs {
                rank,
                process_group: "0".into(),
                seq: step,
                op: CollOp::AllReduce,
                dtype: "float32".into(),
                group_size: 4,
                bytes: 4 << 20,
                start_ns: bwd + 5 * MS,
                end_ns: end,
            }),
            StreamEvent::StepEnd { step, ts_ns: end },
        ],
    }
}

#[test]
fn host_spans_are_compute_minus_the_collective_wait_when_there_are_no_kernels() {
    let mut job = JobAssembler::new(4, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    for step in 0..4 {
        for rank in 0..4 {
            // Rank 2's forward takes 200 ms; everyone's all-reduce ends at 215 ms.
            let fwd = if rank == 2 { 200 } else { 10 };
            job.push(cpu_rank_step(rank, step, fwd, 215), 0, &mut out);
        }
    }
    let healthy = out.steps.iter().find(|s| s.rank == 0).unwrap();
    // 10 ms forward + 5 ms of backward before the all-reduce went out.
    assert_eq!(healthy.breakdown.compute_ns, 15 * MS);
    assert_eq!(healthy.breakdown.comm_ns, 200 * MS);
    assert_eq!(healthy.breakdown.overlap_ns, 0);
    let slow = out.steps.iter().find(|s| s.rank == 2).unwrap();
    assert_eq!(slow.breakdown.compute_ns, 205 * MS);
    assert_eq!(slow.comm_wait_ns, 0);
    let v = out
        .verdicts
        .iter()
        .find_map(|c| match c {
            VerdictChange::Activated(v) => Some(v),
            _ => None,
        })
        .expect("a verdict for rank 2");
    assert_eq!(v.rank, 2);
    assert_eq!(v.cause, rankscope_analysis::StragglerCause::Compute);
}

#[test]
fn kernels_win_over_compute_spans() {
    let mut job = JobAssembler::new(1, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    let mut input = cpu_rank_step(0, 0, 10, 50);
    input.world_size = 1;
    input.events.insert(
        1,
        StreamEvent::Gpu(GpuEvent {
            start_ns: 1_000_000 * MS,
            end_ns: 1_000_000 * MS + 3 * MS,
            class: KernelClass::Computation,
        }),
    );
    job.push(input, 0, &mut out);
    assert_eq!(out.steps[0].breakdown.compute_ns, 3 * MS);
}

/// A CPU rank-step of forward 10 ms, backward 20 ms, `extra_ms` outside any
/// span, optimizer 5 ms, then an all-reduce that ends at 215 ms on every
/// rank (the others wait there for the rank with extra time).
fn outside_rank_step(rank: u32, step: u64, extra_ms: u64) -> RankInput {
    let t0 = 1_000_000 * MS + step * 1_000 * MS;
    let at = |ms: u64| t0 + ms * MS;
    let opt = 30 + extra_ms;
    let end = at(215);
    RankInput {
        job: "j".into(),
        run_id: String::new(),
        rank,
        world_size: 4,
        node: "n".into(),
        closed: false,
        events: vec![
            StreamEvent::StepBegin { step, ts_ns: t0 },
            StreamEvent::HostCompute(Interval::new(at(0), at(10)), "forward"),
            StreamEvent::HostCompute(Interval::new(at(10), at(30)), "backward"),
            StreamEvent::HostCompute(Interval::new(at(opt), at(opt + 5)), "optimizer"),
            StreamEvent::Collective(CollectiveObs {
                rank,
                process_group: "0".into(),
                seq: step,
                op: CollOp::AllReduce,
                dtype: "float32".into(),
                group_size: 4,
                bytes: 4 << 20,
                start_ns: at(opt + 5),
                end_ns: end,
            }),
            StreamEvent::StepEnd { step, ts_ns: end },
        ],
    }
}

#[test]
fn time_outside_the_phases_is_named_other_with_where_it_sits() {
    let mut job = JobAssembler::new(4, StragglerPolicy::default(), limits());
    let mut out = JobOutput::default();
    for step in 0..4 {
        for rank in 0..4 {
            let extra = if rank == 2 { 170 } else { 0 };
            job.push(outside_rank_step(rank, step, extra), 0, &mut out);
        }
    }
    let slow = out.steps.iter().find(|s| s.rank == 2).unwrap();
    // Its compute is the others': the phases do not see the 170 ms.
    assert_eq!(slow.breakdown.compute_ns, 35 * MS);
    assert_eq!(slow.comm_wait_ns, 0);
    let gap = slow.gap.expect("a gap");
    assert_eq!(gap.len_ns, 170 * MS);
    assert_eq!(gap.describe(), "after backward, before optimizer");
    let healthy = out.steps.iter().find(|s| s.rank == 0).unwrap();
    assert_eq!(healthy.comm_wait_ns, 170 * MS);
    assert_eq!(healthy.gap, None, "covered from begin to end");
    let v = out
        .verdicts
        .iter()
        .find_map(|c| match c {
            VerdictChange::Activated(v) => Some(v),
            _ => None,
        })
        .expect("a verdict for rank 2");
    assert_eq!(
        (v.rank, v.cause),
        (2, rankscope_analysis::StragglerCause::Other)
    );
    assert_eq!(v.excess_ns, 170 * MS);
}
