//! Workload generators: identities, name tables and events of rank streams.

use rankscope_proto::v1::{self as proto, event::Kind};

pub fn identity(job: &str, rank: u32, world_size: u32) -> proto::RankIdentity {
    proto::RankIdentity {
        job_id: job.into(),
        rank,
        world_size,
        local_rank: rank % 8,
        pid: 1000 + rank,
        ..Default::default()
    }
}

pub fn names(defs: &[(u32, &str)]) -> Option<proto::NameTable> {
    Some(proto::NameTable {
        names: defs
            .iter()
            .map(|(id, name)| proto::InternedName {
                id: *id,
                name: (*name).into(),
            })
            .collect(),
    })
}

pub fn ev(kind: Kind) -> proto::Event {
    proto::Event { kind: Some(kind) }
}

pub fn step_begin(step: u64, ts_ns: u64) -> proto::Event {
    ev(Kind::StepBegin(proto::StepBegin { step, ts_ns }))
}

pub fn step_end(step: u64, ts_ns: u64) -> proto::Event {
    ev(Kind::StepEnd(proto::StepEnd { step, ts_ns }))
}

pub fn span(name_id: u32, start_ns: u64, end_ns: u64) -> proto::Event {
    ev(Kind::Span(proto::Span {
        category: proto::SpanCategory::Forward as i32,
        name_id,
        start_ns,
        end_ns,
        device: -1,
        ..Default::default()
    }))
}

/// A kernel whose `correlation` tags it uniquely within its stream.
pub fn kernel(name_id: u32, start_ns: u64, correlation: u64) -> proto::Event {
    ev(Kind::Kernel(proto::Kernel {
        kind: proto::KernelKind::Kernel as i32,
        name_id,
        stream: 7,
        start_ns,
        end_ns: start_ns + 500,
        correlation,
        ..Default::default()
    }))
}

/// `n` kernels tagged `first_tag..first_tag + n`, referencing name 1.
pub fn kernels(n: u64, first_tag: u64) -> Vec<proto::Event> {
    (0..n)
        .map(|i| kernel(1, 1_000 + first_tag + i, first_tag + i))
        .collect()
}

/// Names used by [`step_messages`]; defined only in the first message.
pub const STEP_NAMES: &[(u32, &str)] = &[
    (
        1,
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
    ),
    (2, "forward"),
    (3, "backward"),
    (4, "dp_group"),
];

/// A realistic rank stream: an identity+names message, then one message per
/// step (begin, forward/backward spans, kernels, an all-reduce, end).
pub fn step_messages(identity: proto::RankIdentity, steps: u64) -> Vec<proto::RankMessage> {
    let mut out = vec![proto::RankMessage {
        identity: Some(identity),
        seq: 0,
        names: names(STEP_NAMES),
        events: Vec::new(),
    }];
    let mut tag = 0;
    for step in 0..steps {
        let t = 1_000_000 * (step + 1);
        let mut events = vec![
            step_begin(step, t),
            span(2, t, t + 100),
            span(3, t + 100, t + 300),
        ];
        for _ in 0..5 {
            events.push(kernel(1, t + tag % 100, tag));
            tag += 1;
        }
        events.push(ev(Kind::Collective(proto::Collective {
            op: proto::CollectiveOp::AllReduce as i32,
            process_group_id: 4,
            group_size: 8,
            dtype: proto::DataType::Bfloat16 as i32,
            count: 1 << 20,
            bytes: 2 << 20,
            seq: step,
            start_ns: t + 200,
            end_ns: t + 290,
            ..Default::default()
        })));
        events.push(step_end(step, t + 400));
        out.push(proto::RankMessage {
            identity: None,
            seq: step + 1,
            names: None,
            events,
        });
    }
    out
}

/// Name ids referenced by an event (0 excluded).
pub fn referenced(e: &proto::Event) -> Option<u32> {
    let id = match e.kind.as_ref()? {
        Kind::Span(s) => s.name_id,
        Kind::Collective(c) => c.process_group_id,
        Kind::Kernel(k) => k.name_id,
        _ => 0,
    };
    (id != 0).then_some(id)
}
