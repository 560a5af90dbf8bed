//! The pure job model: a [`SimConfig`] in, every rank's events out.
//!
//! In: a validated [`SimConfig`]. Out: [`StepPlan`]s (one per step, holding
//! each rank's [`RankStep`]), generated lazily by [`PlanIter`] so a long job
//! never has all its events in memory; [`plan`] collects them into a
//! [`JobPlan`] for tests and small jobs.
//!
//! Invariants: no I/O, no clock, no global state: the same config gives the
//! same events. Name ids in events are [`catalog::Name`] ids; the client
//! interns them per stream. Per rank: step numbers increase from 0, each
//! step's events are StepBegin, then the body sorted by start, then StepEnd,
//! and the next step begins when the previous one ended. Collectives carry
//! one job-wide sequence (the single process group `default_pg`), equal on all
//! ranks, with equal op, bytes and count.

pub mod catalog;
mod lane;
mod step;

use crate::simulate::SimConfig;
use rankscope_proto::v1 as proto;
use std::collections::HashMap;
use step::{JobShape, RankCarry};

/// First process-group sequence number.
pub const FIRST_SEQ: u64 = 1;

/// One rank's part of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct RankStep {
    /// Global rank.
    pub rank: u32,
    /// Step number.
    pub step: u64,
    /// StepBegin time, ns.
    pub start_ns: u64,
    /// StepEnd time, ns.
    pub end_ns: u64,
    /// StepBegin, the step's spans / collectives / kernels by start, StepEnd.
    pub events: Vec<proto::Event>,
}

/// One step of every rank, ranks in order 0..world_size.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPlan {
    /// Step number.
    pub step: u64,
    /// Per rank, index = rank.
    pub ranks: Vec<RankStep>,
}

/// Every event of a job, step by step.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    /// World size.
    pub ranks: u32,
    /// Steps in order.
    pub steps: Vec<StepPlan>,
}

/// Events by kind, as the store counts them per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EventCounts {
    /// Step markers (StepBegin + StepEnd).
    pub steps: u64,
    /// Spans.
    pub spans: u64,
    /// Collectives.
    pub collectives: u64,
    /// Kernels, memcpys and memsets.
    pub kernels: u64,
}

impl EventCounts {
    /// Counts one event.
    pub fn add(&mut self, event: &proto::Event) {
        use proto::event::Kind;
        match &event.kind {
            Some(Kind::StepBegin(_) | Kind::StepEnd(_)) => self.steps += 1,
            Some(Kind::Span(_)) => self.spans += 1,
            Some(Kind::Collective(_)) => self.collectives += 1,
            Some(Kind::Kernel(_)) => self.kernels += 1,
            // Trace views: the simulator does not send them.
            Some(_) | None => {}
        }
    }

    /// Counts a sequence of events.
    pub fn of<'a>(events: impl IntoIterator<Item = &'a proto::Event>) -> Self {
        let mut c = Self::default();
        for e in events {
            c.add(e);
        }
        c
    }

    /// All events.
    pub fn total(&self) -> u64 {
        self.steps + self.spans + self.collectives + self.kernels
    }

    /// What a whole job generates, in closed form (no generation needed).
    pub fn expected(cfg: &SimConfig) -> Self {
        let layers = u64::from(cfg.layers);
        let per_rank_step = Self {
            steps: 2,
            spans: 4,
            collectives: 2 * layers + 1,
            // memcpy + memset + layer kernels + one NCCL kernel per
            // collective + grad norm + clip + one Adam kernel per layer.
            kernels: 2
                + layers * (catalog::FORWARD_LAYER.len() + catalog::BACKWARD_LAYER.len()) as u64
                + (2 * layers + 1)
                + 2
                + layers,
        };
        let n = u64::from(cfg.ranks) * cfg.steps;
        Self {
            steps: per_rank_step.steps * n,
            spans: per_rank_step.spans * n,
            collectives: per_rank_step.collectives * n,
            kernels: per_rank_step.kernels * n,
        }
    }
}

impl JobPlan {
    /// `(step, rank, start_ns, end_ns)` of every rank's every step, by step
    /// then rank.
    pub fn step_times(&self) -> Vec<(u64, u32, u64, u64)> {
        self.steps
            .iter()
            .flat_map(|s| {
                s.ranks
                    .iter()
                    .map(|r| (r.step, r.rank, r.start_ns, r.end_ns))
            })
            .collect()
    }

    /// Events of the whole job by kind.
    pub fn event_counts(&self) -> EventCounts {
        EventCounts::of(
            self.steps
                .iter()
                .flat_map(|s| s.ranks.iter().flat_map(|r| &r.events)),
        )
    }

    /// Every event of one rank, in stream order.
    pub fn rank_events(&self, rank: u32) -> impl Iterator<Item = &proto::Event> + '_ {
        self.steps
            .iter()
            .filter_map(move |s| s.ranks.get(rank as usize))
            .flat_map(|r| &r.events)
    }
}

/// Lazy generator of a job's steps.
#[derive(Debug, Clone)]
pub struct PlanIter {
    shape: JobShape,
    steps: u64,
    next_step: u64,
    carry: Vec<RankCarry>,
    seq: u64,
    /// Per rank, the clock shift of its node (`--node-clock-offset`); empty: none.
    shifts: Vec<i64>,
}

impl Iterator for PlanIter {
    type Item = StepPlan;

    fn next(&mut self) -> Option<StepPlan> {
        if self.next_step >= self.steps {
            return None;
        }
        let plan = step::simulate_step(&self.shape, self.next_step, &mut self.carry, &mut self.seq);
        self.next_step += 1;
        let mut plan = plan;
        for (r, d) in plan.ranks.iter_mut().zip(&self.shifts) {
            if *d != 0 {
                r.start_ns = r.start_ns.saturating_add_signed(*d);
                r.end_ns = r.end_ns.saturating_add_signed(*d);
                for e in &mut r.events {
                    super::clock::shift_event(e, *d);
                }
            }
        }
        Some(plan)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.steps - self.next_step).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

impl ExactSizeIterator for PlanIter {}

/// Generates the job step by step. `cfg` must have passed
/// [`SimConfig::validate`].
pub fn plan_iter(cfg: &SimConfig) -> PlanIter {
    let carry = RankCarry {
        next_begin_ns: cfg.start_ns,
        next_correlation: 1,
    };
    // Every step runs 2 * layers + 1 collectives in the one process group:
    // a continued run goes on with the sequence numbers where it left off.
    let collectives_per_step = 2 * u64::from(cfg.layers) + 1;
    PlanIter {
        shape: JobShape::new(cfg),
        steps: cfg.first_step.saturating_add(cfg.steps),
        next_step: cfg.first_step,
        carry: vec![carry; cfg.ranks as usize],
        seq: FIRST_SEQ + cfg.first_step.saturating_mul(collectives_per_step),
        shifts: super::clock::shifts(cfg),
    }
}

/// Generates the whole job in memory (tests, small jobs).
pub fn plan(cfg: &SimConfig) -> JobPlan {
    JobPlan {
        ranks: cfg.ranks,
        steps: plan_iter(cfg).collect(),
    }
}

/// The identity rank `rank` of the simulated job sends.
pub fn identity(cfg: &SimConfig, rank: u32) -> proto::RankIdentity {
    let per_node = cfg.ranks_per_node.max(1);
    let mut labels = HashMap::from([("simulated".to_string(), "true".to_string())]);
    if let Some(p) = cfg.placed(rank) {
        if !p.gpu_uuid.is_empty() {
            let key = super::placement::GPU_UUID_LABEL.to_string();
            labels.insert(key, p.gpu_uuid.clone());
        }
        if !p.link.is_empty() {
            let key = super::placement::LINK_LABEL.to_string();
            labels.insert(key, p.link.clone());
        }
    }
    let node = super::clock::node_of(cfg, rank);
    proto::RankIdentity {
        job_id: cfg.job.clone(),
        rank,
        world_size: cfg.ranks,
        local_rank: rank % per_node,
        node,
        pid: 10_000 + rank,
        run_id: cfg.run_id.clone(),
        labels,
    }
}

/// The text of an interned name id the model uses.
pub fn name_text(id: u32) -> Option<&'static str> {
    catalog::Name::from_id(id).map(catalog::Name::text)
}

/// When an event starts (its timestamp for step markers), ns.
pub fn event_start_ns(event: &proto::Event) -> u64 {
    use proto::event::Kind;
    match &event.kind {
        Some(Kind::StepBegin(b)) => b.ts_ns,
        Some(Kind::StepEnd(e)) => e.ts_ns,
        Some(Kind::Span(s)) => s.start_ns,
        Some(Kind::Collective(c)) => c.start_ns,
        Some(Kind::Kernel(k)) => k.start_ns,
        Some(Kind::MemorySample(m)) => m.ts_ns,
        Some(_) | None => 0,
    }
}

/// When an event ends (its timestamp for step markers), ns.
pub fn event_end_ns(event: &proto::Event) -> u64 {
    use proto::event::Kind;
    match &event.kind {
        Some(Kind::StepBegin(b)) => b.ts_ns,
        Some(Kind::StepEnd(e)) => e.ts_ns,
        Some(Kind::Span(s)) => s.end_ns,
        Some(Kind::Collective(c)) => c.end_ns,
        Some(Kind::Kernel(k)) => k.end_ns,
        Some(Kind::MemorySample(m)) => m.ts_ns,
        Some(_) | None => 0,
    }
}

/// The name id an event references (span / kernel name, process group);
/// 0 = none.
pub fn event_name_id(event: &proto::Event) -> u32 {
    use proto::event::Kind;
    match &event.kind {
        Some(Kind::Span(s)) => s.name_id,
        Some(Kind::Collective(c)) => c.process_group_id,
        Some(Kind::Kernel(k)) => k.name_id,
        _ => 0,
    }
}
