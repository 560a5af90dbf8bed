//! One training step of every rank, with cross-rank synchronisation in the
//! collectives.
//!
//! In: the job's shape ([`JobShape`]), the step number and each rank's carry
//! (when its previous step ended, next correlation id), and the job-wide
//! process-group sequence counter. Out: a [`StepPlan`] with every rank's
//! events for the step, sorted by start time between StepBegin and StepEnd.
//!
//! Timing model (FSDP, reshard-after-forward off):
//! * host: dataloader span, then the batch's HtoD copy on the compute stream;
//! * forward: per layer an all-gather of its parameters on the NCCL stream,
//!   prefetched (layer l+1's all-gather is issued when layer l's compute
//!   starts); layer l's kernels wait for its all-gather;
//! * backward: layers in reverse, each followed by a reduce-scatter of its
//!   gradients on the NCCL stream, overlapping the next layer's backward;
//! * optimizer: local grad norm once all reduce-scatters are done, an fp32
//!   all-reduce of the norm, clip and fused Adam over the rank's shard.
//!
//! A collective with seq k starts on each rank when that rank reaches it (its
//! NCCL stream is free and the collective was issued) and ends on every rank
//! at `max(arrival) + transfer`, so ranks that arrive early wait. A
//! straggler's compute is `slowdown` times longer; the others wait for it.
//!
//! Invariant: all of a rank's events lie within [StepBegin, StepEnd], and
//! StepEnd of step s equals StepBegin of step s + 1 on the same rank.

use super::catalog::{
    Name, BACKWARD_LAYER, BUSBW_INTER_NODE, BUSBW_INTRA_NODE, DATALOADER_NS, FORWARD_LAYER, HBM_BW,
    NCCL_LATENCY_NS, PARAMS_PER_LAYER, PCIE_BW, TOKENS_PER_RANK,
};
use super::lane::{lognormal, mix_seed, scale_ns, CollectiveSpec, Lane};
use super::{RankStep, StepPlan};
use crate::simulate::SimConfig;
use proto::{CollectiveOp, DataType, KernelKind, SpanCategory};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rankscope_proto::v1 as proto;

/// What stays fixed for the whole job.
#[derive(Debug, Clone)]
pub(super) struct JobShape {
    pub ranks: u32,
    pub ranks_per_node: u32,
    pub layers: u32,
    pub seed: u64,
    pub jitter: f64,
    pub slowdown: Vec<f64>,
    /// Per rank, host time after backward and before the optimizer, ns.
    pub outside_ns: Vec<u64>,
    pub busbw: f64,
}

impl JobShape {
    pub fn new(cfg: &SimConfig) -> Self {
        let busbw = if cfg.ranks > cfg.ranks_per_node {
            BUSBW_INTER_NODE
        } else {
            BUSBW_INTRA_NODE
        };
        Self {
            ranks: cfg.ranks,
            ranks_per_node: cfg.ranks_per_node.max(1),
            layers: cfg.layers,
            seed: cfg.seed,
            jitter: cfg.jitter,
            slowdown: (0..cfg.ranks).map(|r| cfg.slowdown(r)).collect(),
            outside_ns: (0..cfg.ranks).map(|r| cfg.outside_ns(r)).collect(),
            busbw,
        }
    }

    /// Time a collective's data takes to move (nccl-tests bus bandwidth
    /// convention), ns.
    fn transfer_ns(&self, op: CollectiveOp, bytes: u64) -> u64 {
        let n = f64::from(self.ranks);
        let factor = match op {
            CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
            _ => (n - 1.0) / n,
        };
        NCCL_LATENCY_NS + (bytes as f64 * factor / self.busbw * 1e9).round() as u64
    }
}

/// What a rank carries from one step to the next.
#[derive(Debug, Clone, Copy)]
pub(super) struct RankCarry {
    pub next_begin_ns: u64,
    pub next_correlation: u64,
}

/// The ranks of one step, advanced in lock step.
struct StepSim<'a> {
    shape: &'a JobShape,
    lanes: Vec<Lane>,
    /// Jitter of the shared transfers (same for every rank).
    net_rng: StdRng,
    seq: &'a mut u64,
}

impl StepSim<'_> {
    /// Runs collective `op` across all ranks; `arrival_ns[r]` is when rank r
    /// reaches it. Returns the common end.
    fn collective(
        &mut self,
        op: CollectiveOp,
        dtype: DataType,
        kernel: Name,
        count: u64,
        arrival_ns: &[u64],
    ) -> u64 {
        let elem = match dtype {
            DataType::Float32 => 4,
            _ => 2,
        };
        let bytes = count * elem;
        let transfer = scale_ns(
            self.shape.transfer_ns(op, bytes),
            lognormal(&mut self.net_rng, self.shape.jitter / 2.0),
        );
        let end_ns = arrival_ns.iter().copied().max().unwrap_or(0) + transfer;
        let spec = CollectiveSpec {
            op,
            dtype,
            kernel,
            count,
            bytes,
            group_size: self.shape.ranks,
            seq: *self.seq,
        };
        *self.seq += 1;
        for (lane, &arrival) in self.lanes.iter_mut().zip(arrival_ns) {
            lane.collective(&spec, arrival, end_ns);
        }
        end_ns
    }

    fn arrivals(&self, issued_ns: impl Fn(&Lane) -> u64) -> Vec<u64> {
        self.lanes
            .iter()
            .map(|l| l.comm_free_ns.max(issued_ns(l)))
            .collect()
    }
}

/// Simulates step `step` for every rank.
pub(super) fn simulate_step(
    shape: &JobShape,
    step: u64,
    carry: &mut [RankCarry],
    seq: &mut u64,
) -> StepPlan {
    let lanes = carry
        .iter()
        .enumerate()
        .map(|(r, c)| {
            let rank = r as u32;
            let device = (rank % shape.ranks_per_node) as i32;
            let seed = mix_seed(&[shape.seed, step, u64::from(rank)]);
            let mut lane = Lane::new(
                rank,
                device,
                shape.slowdown[r],
                c.next_begin_ns,
                c.next_correlation,
                seed,
            );
            lane.marks.begin_ns = c.next_begin_ns;
            lane
        })
        .collect();
    let mut sim = StepSim {
        shape,
        lanes,
        net_rng: StdRng::seed_from_u64(mix_seed(&[shape.seed, step, u64::MAX])),
        seq,
    };
    sim.host();
    sim.forward();
    sim.backward();
    sim.optimizer();
    let mut ranks = Vec::with_capacity(sim.lanes.len());
    for (lane, c) in sim.lanes.into_iter().zip(carry.iter_mut()) {
        c.next_begin_ns = lane.marks.end_ns;
        c.next_correlation = lane.next_correlation;
        ranks.push(finish_rank(lane, step));
    }
    StepPlan { step, ranks }
}

impl StepSim<'_> {
    /// Host: the next batch (dataloader span), then its copy to the device.
    fn host(&mut self) {
        let sigma = self.shape.jitter;
        let batch_bytes = TOKENS_PER_RANK * 8 * 2; // int64 input ids + labels
        let copy_ns = 5_000 + (batch_bytes as f64 / PCIE_BW * 1e9) as u64;
        for lane in &mut self.lanes {
            let begin = lane.marks.begin_ns;
            let dl_end = begin + scale_ns(DATALOADER_NS, lane.jitter(sigma));
            lane.host_span(
                SpanCategory::Dataloader,
                Name::SpanDataloader,
                begin,
                dl_end,
            );
            lane.compute(
                KernelKind::Memcpy,
                Name::MemcpyHtoD,
                copy_ns,
                batch_bytes,
                dl_end,
            );
            lane.marks.fwd_begin_ns = dl_end;
            lane.issued_ns = dl_end; // layer 0's all-gather
        }
    }

    /// Forward: per layer a prefetched all-gather; the layer's kernels wait
    /// for it, and their start issues the next layer's all-gather.
    fn forward(&mut self) {
        let sigma = self.shape.jitter;
        for lane in &mut self.lanes {
            lane.phase_factor = lane.jitter(sigma) * lane.slowdown;
        }
        for _layer in 0..self.shape.layers {
            let arrivals = self.arrivals(|l| l.issued_ns);
            let gathered = self.collective(
                CollectiveOp::AllGather,
                DataType::Bfloat16,
                Name::NcclAllGather,
                PARAMS_PER_LAYER,
                &arrivals,
            );
            for lane in &mut self.lanes {
                lane.issued_ns = lane.layer(FORWARD_LAYER, sigma / 3.0, gathered);
            }
        }
        for lane in &mut self.lanes {
            lane.marks.fwd_end_ns = lane.compute_free_ns;
            let (b, e) = (lane.marks.fwd_begin_ns, lane.marks.fwd_end_ns);
            lane.device_span(SpanCategory::Forward, Name::SpanForward, b, e);
        }
    }

    /// Backward: layers in reverse, each followed by the reduce-scatter of
    /// its gradients, which overlaps the next layer's backward.
    fn backward(&mut self) {
        let sigma = self.shape.jitter;
        let grad_bytes = PARAMS_PER_LAYER * 2;
        let memset_ns = (grad_bytes as f64 / HBM_BW * 1e9) as u64;
        for lane in &mut self.lanes {
            lane.phase_factor = lane.jitter(sigma) * lane.slowdown;
            let d = scale_ns(memset_ns, lane.jitter(sigma / 3.0));
            lane.compute(KernelKind::Memset, Name::MemsetDevice, d, grad_bytes, 0);
        }
        for _layer in 0..self.shape.layers {
            for lane in &mut self.lanes {
                lane.layer(BACKWARD_LAYER, sigma / 3.0, 0);
            }
            let arrivals = self.arrivals(|l| l.compute_free_ns);
            self.collective(
                CollectiveOp::ReduceScatter,
                DataType::Bfloat16,
                Name::NcclReduceScatter,
                PARAMS_PER_LAYER,
                &arrivals,
            );
        }
        for lane in &mut self.lanes {
            let (b, e) = (lane.marks.fwd_end_ns, lane.compute_free_ns);
            lane.device_span(SpanCategory::Backward, Name::SpanBackward, b, e);
        }
    }

    /// Optimizer: local grad norm once the reduce-scatters are done, an
    /// all-reduce of it, then clip and fused Adam over this rank's shard.
    fn optimizer(&mut self) {
        let sigma = self.shape.jitter;
        let layers = u64::from(self.shape.layers);
        let shard_params = PARAMS_PER_LAYER.div_ceil(u64::from(self.shape.ranks));
        let adam_ns = 20_000 + (shard_params as f64 * 28.0 / HBM_BW * 1e9) as u64;
        for lane in &mut self.lanes {
            lane.phase_factor = lane.jitter(sigma) * lane.slowdown;
            let d = scale_ns(30_000 + 10_000 * layers, lane.phase_factor);
            // Time outside every span (`--outside`) delays the optimizer.
            let outside = self.shape.outside_ns[lane.rank as usize];
            let grads_ready = lane.comm_free_ns.max(lane.compute_free_ns) + outside;
            lane.marks.opt_begin_ns =
                lane.compute(KernelKind::Kernel, Name::GradNorm, d, 0, grads_ready);
        }
        let arrivals = self.arrivals(|l| l.compute_free_ns);
        let reduced = self.collective(
            CollectiveOp::AllReduce,
            DataType::Float32,
            Name::NcclAllReduce,
            1,
            &arrivals,
        );
        for lane in &mut self.lanes {
            let f = lane.phase_factor;
            let d = scale_ns(25_000 + 5_000 * layers, f * lane.jitter(sigma / 3.0));
            lane.compute(KernelKind::Kernel, Name::ClipScale, d, 0, reduced);
            for _layer in 0..layers {
                let d = scale_ns(adam_ns, f * lane.jitter(sigma / 3.0));
                lane.compute(KernelKind::Kernel, Name::FusedAdam, d, 0, 0);
            }
            lane.marks.end_ns = lane.compute_free_ns.max(lane.comm_free_ns);
            let (b, e) = (lane.marks.opt_begin_ns, lane.marks.end_ns);
            lane.device_span(SpanCategory::Optimizer, Name::SpanOptimizer, b, e);
        }
    }
}

/// Sorts a lane's events by start and frames them with the step markers.
fn finish_rank(lane: Lane, step: u64) -> RankStep {
    let (start_ns, end_ns) = (lane.marks.begin_ns, lane.marks.end_ns);
    let mut body = lane.events;
    body.sort_by_key(super::event_start_ns);
    let mut events = Vec::with_capacity(body.len() + 2);
    events.push(proto::Event {
        kind: Some(proto::event::Kind::StepBegin(proto::StepBegin {
            step,
            ts_ns: start_ns,
        })),
    });
    events.extend(body);
    events.push(proto::Event {
        kind: Some(proto::event::Kind::StepEnd(proto::StepEnd {
            step,
            ts_ns: end_ns,
        })),
    });
    RankStep {
        rank: lane.rank,
        step,
        start_ns,
        end_ns,
        events,
    }
}
