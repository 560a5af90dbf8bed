//! One rank's timelines during one step: the host, the compute stream and
//! the NCCL stream, and the events placed on them.
//!
//! In: durations already jittered by the caller. Out: proto events in
//! `Lane::events` (unsorted) and the stream "free at" times the cross-rank
//! step model reads.
//!
//! Invariant: every event a lane records ends no earlier than it starts, and
//! kernels on one stream never overlap.

use super::catalog::{KernelStep, Name, COMM_STREAM, COMPUTE_STREAM, LAUNCH_GAP_NS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rankscope_proto::v1 as proto;

/// A rank's state within one step.
pub(super) struct Lane {
    pub rank: u32,
    pub device: i32,
    /// Compute slowdown of this rank (straggler factor, 1.0 otherwise).
    pub slowdown: f64,
    /// When the compute stream is free again.
    pub compute_free_ns: u64,
    /// When the NCCL stream is free again.
    pub comm_free_ns: u64,
    /// Correlation id of the next kernel (per rank, never reused).
    pub next_correlation: u64,
    /// Jitter source of this rank for this step.
    pub rng: StdRng,
    /// Compute factor of the current phase (jitter x slowdown).
    pub phase_factor: f64,
    /// When the rank issued the next forward all-gather.
    pub issued_ns: u64,
    /// Phase boundaries of the step.
    pub marks: Marks,
    pub events: Vec<proto::Event>,
}

/// Phase boundaries of one rank's step, ns.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Marks {
    pub begin_ns: u64,
    pub fwd_begin_ns: u64,
    pub fwd_end_ns: u64,
    pub opt_begin_ns: u64,
    pub end_ns: u64,
}

impl Lane {
    pub fn new(
        rank: u32,
        device: i32,
        slowdown: f64,
        begin_ns: u64,
        correlation: u64,
        seed: u64,
    ) -> Self {
        Self {
            rank,
            device,
            slowdown,
            compute_free_ns: begin_ns,
            comm_free_ns: begin_ns,
            next_correlation: correlation,
            rng: StdRng::seed_from_u64(seed),
            phase_factor: 1.0,
            issued_ns: begin_ns,
            marks: Marks::default(),
            events: Vec::new(),
        }
    }

    /// A host-side span (stream 0, device -1).
    pub fn host_span(
        &mut self,
        category: proto::SpanCategory,
        name: Name,
        start_ns: u64,
        end_ns: u64,
    ) {
        self.push(proto::event::Kind::Span(proto::Span {
            category: category as i32,
            name_id: name.id(),
            start_ns,
            end_ns,
            stream: 0,
            device: -1,
        }));
    }

    /// A device range on the compute stream.
    pub fn device_span(
        &mut self,
        category: proto::SpanCategory,
        name: Name,
        start_ns: u64,
        end_ns: u64,
    ) {
        self.push(proto::event::Kind::Span(proto::Span {
            category: category as i32,
            name_id: name.id(),
            start_ns,
            end_ns,
            stream: COMPUTE_STREAM,
            device: self.device,
        }));
    }

    /// Runs one activity on the compute stream, no earlier than
    /// `not_before_ns` and one launch gap after the previous one; returns its
    /// start.
    pub fn compute(
        &mut self,
        kind: proto::KernelKind,
        name: Name,
        duration_ns: u64,
        bytes: u64,
        not_before_ns: u64,
    ) -> u64 {
        let start_ns = (self.compute_free_ns + LAUNCH_GAP_NS).max(not_before_ns);
        let end_ns = start_ns + duration_ns.max(1);
        self.kernel(kind, name, COMPUTE_STREAM, start_ns, end_ns, bytes);
        self.compute_free_ns = end_ns;
        start_ns
    }

    /// Runs one layer's kernels at the phase factor with per-kernel jitter
    /// `sigma`, the first no earlier than `not_before_ns`; returns the first
    /// kernel's start.
    pub fn layer(&mut self, kernels: &[KernelStep], sigma: f64, not_before_ns: u64) -> u64 {
        let mut first = None;
        for k in kernels {
            let d = scale_ns(k.base_ns, self.phase_factor * self.jitter(sigma));
            let start = self.compute(proto::KernelKind::Kernel, k.name, d, 0, not_before_ns);
            first.get_or_insert(start);
        }
        first.unwrap_or(self.compute_free_ns)
    }

    /// Records a kernel-like activity with its own correlation id.
    pub fn kernel(
        &mut self,
        kind: proto::KernelKind,
        name: Name,
        stream: u32,
        start_ns: u64,
        end_ns: u64,
        bytes: u64,
    ) {
        let correlation = self.next_correlation;
        self.next_correlation += 1;
        self.push(proto::event::Kind::Kernel(proto::Kernel {
            kind: kind as i32,
            name_id: name.id(),
            stream,
            device: self.device,
            start_ns,
            end_ns,
            correlation,
            bytes,
            ..Default::default()
        }));
    }

    /// Records a collective on the NCCL stream (a `Collective` event plus its
    /// NCCL kernel) and marks the stream busy until `end_ns`. The group is
    /// the world, sent as the empty `group_ranks` as the rank SDK sends it
    /// (`rankscope_proto::group_ranks_or_world`; events.proto allows it): naming it
    /// would cost 16,384 rank numbers per rank stream at 16k ranks.
    pub fn collective(&mut self, spec: &CollectiveSpec, start_ns: u64, end_ns: u64) {
        self.push(proto::event::Kind::Collective(proto::Collective {
            op: spec.op as i32,
            process_group_id: Name::DefaultPg.id(),
            group_ranks: Vec::new(),
            group_size: spec.group_size,
            dtype: spec.dtype as i32,
            count: spec.count,
            bytes: spec.bytes,
            seq: spec.seq,
            stream: COMM_STREAM,
            device: self.device,
            start_ns,
            end_ns,
            peer: 0,
        }));
        self.kernel(
            proto::KernelKind::Kernel,
            spec.kernel,
            COMM_STREAM,
            start_ns,
            end_ns,
            0,
        );
        self.comm_free_ns = end_ns;
    }

    /// A log-normal factor exp(sigma * z), 1.0 when sigma is 0.
    pub fn jitter(&mut self, sigma: f64) -> f64 {
        lognormal(&mut self.rng, sigma)
    }

    fn push(&mut self, kind: proto::event::Kind) {
        self.events.push(proto::Event { kind: Some(kind) });
    }
}

/// What one collective moves; the same on every rank of the group.
#[derive(Debug, Clone, Copy)]
pub(super) struct CollectiveSpec {
    pub op: proto::CollectiveOp,
    pub dtype: proto::DataType,
    pub kernel: Name,
    pub count: u64,
    pub bytes: u64,
    pub group_size: u32,
    pub seq: u64,
}

/// A log-normal factor exp(sigma * z) with z standard normal (Box-Muller);
/// exactly 1.0 without drawing when sigma is 0.
pub(super) fn lognormal(rng: &mut StdRng, sigma: f64) -> f64 {
    if sigma <= 0.0 {
        return 1.0;
    }
    // u1 in (0, 1] so ln(u1) is finite.
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (sigma * z.clamp(-4.0, 4.0)).exp()
}

/// Scales a duration, rounding to whole ns, at least 1 ns.
pub(super) fn scale_ns(base_ns: u64, factor: f64) -> u64 {
    ((base_ns as f64) * factor).round().max(1.0) as u64
}

/// SplitMix64 mixing of several words into one seed.
pub(super) fn mix_seed(words: &[u64]) -> u64 {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    for w in words {
        state ^= *w;
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        state = z ^ (z >> 31);
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lognormal_is_centred_and_bounded() {
        let mut rng = StdRng::seed_from_u64(7);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|_| lognormal(&mut rng, 0.03)).collect();
        let mean_log = xs.iter().map(|x| x.ln()).sum::<f64>() / n as f64;
        assert!(mean_log.abs() < 0.002, "{mean_log}");
        assert!(xs.iter().all(|x| (0.88..1.13).contains(x)));
        assert_eq!(lognormal(&mut rng, 0.0), 1.0);
    }

    #[test]
    fn mix_seed_separates_inputs() {
        assert_ne!(mix_seed(&[1, 0, 0]), mix_seed(&[1, 0, 1]));
        assert_ne!(mix_seed(&[1, 2]), mix_seed(&[2, 1]));
        assert_eq!(mix_seed(&[3, 4]), mix_seed(&[3, 4]));
    }

    #[test]
    fn compute_serialises_with_launch_gap() {
        let mut lane = Lane::new(0, 0, 1.0, 1_000, 1, 1);
        let a = lane.compute(proto::KernelKind::Kernel, Name::GemmQkv, 100, 0, 0);
        let b = lane.compute(proto::KernelKind::Kernel, Name::GemmQkv, 100, 0, 0);
        assert_eq!(a, 1_000 + LAUNCH_GAP_NS);
        assert_eq!(b, a + 100 + LAUNCH_GAP_NS);
        let c = lane.compute(proto::KernelKind::Kernel, Name::GemmQkv, 100, 0, 1_000_000);
        assert_eq!(c, 1_000_000);
        assert_eq!(lane.next_correlation, 4);
    }
}
