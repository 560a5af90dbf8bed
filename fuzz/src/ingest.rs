//! Target `ingest`: the collector's protobuf ingest path, as its gRPC
//! handler runs it: `AgentBatch::decode` of the request bytes, then
//! `convert::convert` (batch header, sample, identity, name and event
//! validation: `INVALID_ARGUMENT` on error) and, for an accepted batch,
//! `convert::stream_input` (what the live analysis receives).
//!
//! Corpus: batches built from the Kineto corpus (real event streams: steps,
//! spans, kernels, collectives) plus GPU and host samples. Inputs: half are
//! a decoded seed with fields mutated (times, ids, names, enums, dropped /
//! duplicated / reordered events, identities, sample values), re-encoded;
//! half are raw byte mutations of the encoded bytes.

use std::path::Path;

use prost::Message;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore};
use rankscope_collector::convert;
use rankscope_kineto::{import_bytes, ImportOptions};
use rankscope_proto::v1 as proto;
use rankscope_proto::v1::event::Kind;

use crate::mutate::mutate;
use crate::Target;

/// A fixed receive time, so that outcomes replay exactly.
const RECEIVED_NS: u64 = 1_790_000_000_000_000_000;

pub fn target() -> Target {
    Target {
        name: "ingest",
        corpus: corpus(),
        generate,
        run,
    }
}

fn run(input: &[u8]) -> String {
    let batch = match proto::AgentBatch::decode(input) {
        Ok(b) => b,
        Err(_) => return "decode_error".into(),
    };
    match convert::convert(&batch, RECEIVED_NS) {
        Ok(rows) => {
            let _ = convert::stream_input(&batch);
            std::hint::black_box(rows);
            "ok".into()
        }
        Err(e) => format!("invalid:{}", e.reason()),
    }
}

/// Runs one saved input (regression tests).
pub fn replay(input: &[u8]) -> String {
    run(input)
}

fn corpus() -> Vec<Vec<u8>> {
    let mut groups = Vec::new();
    for (i, trace) in crate::kineto::target().corpus.iter().enumerate() {
        let mut opts = ImportOptions::new(format!("job-{}", i % 2));
        opts.rank_override = Some(i as u32 % 4);
        opts.world_size_override = Some(4);
        opts.node = "node-a".into();
        if let Ok(r) = import_bytes(Path::new("seed.json"), trace, &opts) {
            groups.push(proto::RankEvents {
                identity: Some(r.identity),
                names: r.names,
                events: r.events,
                ..Default::default()
            });
        }
    }
    let mut out: Vec<Vec<u8>> = groups
        .chunks(2)
        .enumerate()
        .map(|(i, g)| batch(i as u64 + 1, g.to_vec()).encode_to_vec())
        .collect();
    out.push(batch(99, Vec::new()).encode_to_vec());
    out
}

fn batch(seq: u64, ranks: Vec<proto::RankEvents>) -> proto::AgentBatch {
    proto::AgentBatch {
        agent_id: "agent-1".into(),
        agent_session: 0x5eed,
        seq,
        node: "node-a".into(),
        sent_at_ns: RECEIVED_NS,
        ranks,
        gpu_samples: vec![proto::GpuSample {
            ts_ns: RECEIVED_NS,
            period_ns: 1_000_000_000,
            gpu_index: 0,
            uuid: "GPU-1".into(),
            name: "H100".into(),
            state: proto::GpuState::Ok as i32,
            gpu_util_pct: Some(50.0),
            power_w: Some(300.0),
            mem_used_bytes: Some(1 << 30),
            throttle_reasons: vec!["sw_power_cap".into()],
            processes: vec![proto::GpuProcess {
                pid: 7,
                used_memory_bytes: Some(1 << 20),
            }],
            ranks: vec![proto::RankRef {
                job_id: "job-0".into(),
                rank: 0,
            }],
            ..Default::default()
        }],
        host_samples: vec![proto::HostSample {
            ts_ns: RECEIVED_NS,
            period_ns: 1_000_000_000,
            cpu_util_pct: Some(12.5),
            cpu_core_util_pct: vec![10.0, 15.0],
            load1: Some(0.5),
            net: vec![proto::NetInterface {
                name: "eth0".into(),
                rx_bytes: 1,
                tx_bytes: 2,
            }],
            processes: vec![proto::ProcessSample {
                pid: 7,
                job_id: "job-0".into(),
                rank: 0,
                cpu_pct: Some(99.0),
                rss_bytes: Some(1 << 30),
            }],
            ..Default::default()
        }],
    }
}

/// Interesting integers for any field.
fn number(rng: &mut SmallRng) -> u64 {
    const N: &[u64] = &[
        0,
        1,
        2,
        u32::MAX as u64,
        u32::MAX as u64 + 1,
        i32::MAX as u64,
        i64::MAX as u64,
        i64::MAX as u64 + 1,
        u64::MAX,
        u64::MAX - 1,
        RECEIVED_NS,
    ];
    if rng.random_bool(0.7) {
        N[rng.random_range(0..N.len())]
    } else {
        rng.next_u64() >> rng.random_range(0..64)
    }
}

fn float(rng: &mut SmallRng) -> f32 {
    const F: &[f32] = &[
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -1.0,
        -0.0,
        100.0,
        100.1,
        f32::MAX,
        f32::MIN_POSITIVE,
    ];
    F[rng.random_range(0..F.len())]
}

fn string(rng: &mut SmallRng) -> String {
    const S: &[&str] = &["", " ", "\0", "a\u{fffd}b", "../..", "x\ny", "\u{202e}rtl"];
    match rng.random_range(0..3) {
        0 => "n".repeat(rng.random_range(0..70_000)),
        _ => S[rng.random_range(0..S.len())].into(),
    }
}

fn generate(rng: &mut SmallRng, corpus: &[Vec<u8>]) -> Vec<u8> {
    if rng.random_bool(0.5) {
        return mutate(rng, corpus, &[]);
    }
    let seed = &corpus[rng.random_range(0..corpus.len())];
    let mut b = proto::AgentBatch::decode(seed.as_slice()).expect("corpus decodes");
    for _ in 0..rng.random_range(1..=4) {
        mutate_batch(rng, &mut b);
    }
    b.encode_to_vec()
}

/// One field-level change of `b`.
fn mutate_batch(rng: &mut SmallRng, b: &mut proto::AgentBatch) {
    match rng.random_range(0..12) {
        0 => b.agent_id = string(rng),
        1 => b.agent_session = number(rng),
        2 => b.seq = number(rng),
        3 => {
            if let Some(s) = b.gpu_samples.first_mut() {
                match rng.random_range(0..5) {
                    0 => s.ts_ns = number(rng),
                    1 => s.state = number(rng) as i32,
                    2 => s.gpu_util_pct = Some(float(rng)),
                    3 => s.temp_c = Some(float(rng)),
                    _ => s.ranks.push(proto::RankRef {
                        job_id: string(rng),
                        rank: number(rng) as u32,
                    }),
                }
            }
        }
        4 => {
            if let Some(s) = b.host_samples.first_mut() {
                match rng.random_range(0..4) {
                    0 => s.ts_ns = number(rng),
                    1 => s.cpu_core_util_pct.push(float(rng)),
                    2 => s.load5 = Some(float(rng)),
                    _ => s.net.push(proto::NetInterface {
                        name: string(rng),
                        ..Default::default()
                    }),
                }
            }
        }
        5 => {
            // A copy of a rank group (same or other identity).
            if let Some(g) = b.ranks.first().cloned() {
                b.ranks.push(g);
            }
        }
        _ => {
            let n = b.ranks.len();
            if n > 0 {
                let g = &mut b.ranks[rng.random_range(0..n)];
                mutate_group(rng, g);
            }
        }
    }
}

/// One change of a rank group (the `rank` target mutates messages so too).
pub(crate) fn mutate_group(rng: &mut SmallRng, g: &mut proto::RankEvents) {
    let n = g.events.len();
    match rng.random_range(0..10) {
        0 => {
            let id = g.identity.get_or_insert_with(Default::default);
            match rng.random_range(0..5) {
                0 => id.job_id = string(rng),
                1 => id.rank = number(rng) as u32,
                2 => id.world_size = number(rng) as u32,
                3 => {
                    id.labels.insert(string(rng), string(rng));
                }
                _ => g.identity = None,
            }
        }
        1 if !g.names.is_empty() => {
            let i = rng.random_range(0..g.names.len());
            match rng.random_range(0..3) {
                0 => g.names[i].id = number(rng) as u32,
                1 => g.names[i].name = string(rng),
                _ => {
                    let copy = g.names[i].clone();
                    g.names.push(copy);
                }
            }
        }
        2 if n > 1 => g
            .events
            .swap(rng.random_range(0..n), rng.random_range(0..n)),
        3 if n > 0 => {
            g.events.remove(rng.random_range(0..n));
        }
        4 if n > 0 => {
            let e = g.events[rng.random_range(0..n)].clone();
            g.events.insert(rng.random_range(0..=n), e);
        }
        _ if n > 0 => {
            let e = &mut g.events[rng.random_range(0..n)];
            mutate_event(rng, e);
        }
        _ => g.events.push(proto::Event {
            kind: Some(Kind::StepBegin(proto::StepBegin {
                step: number(rng),
                ts_ns: number(rng),
            })),
        }),
    }
}

fn mutate_event(rng: &mut SmallRng, e: &mut proto::Event) {
    let v = number(rng);
    let f = rng.random_range(0..6);
    match &mut e.kind {
        None => {}
        Some(Kind::StepBegin(s)) => *[&mut s.step, &mut s.ts_ns][f % 2] = v,
        Some(Kind::StepEnd(s)) => *[&mut s.step, &mut s.ts_ns][f % 2] = v,
        Some(Kind::Span(s)) => match f {
            0 => s.category = v as i32,
            1 => s.name_id = v as u32,
            2 => s.start_ns = v,
            3 => s.end_ns = v,
            _ => s.device = v as i32,
        },
        Some(Kind::Kernel(k)) => match f {
            0 => k.kind = v as i32,
            1 => k.name_id = v as u32,
            2 => k.start_ns = v,
            3 => k.end_ns = v,
            4 => k.launch_start_ns = v,
            _ => k.launch_name_id = v as u32,
        },
        Some(Kind::Collective(c)) => match f {
            0 => c.op = v as i32,
            1 => c.dtype = v as i32,
            2 => c.start_ns = v,
            3 => c.end_ns = v,
            4 => c.group_ranks.push(v as u32),
            _ => c.group_size = v as u32,
        },
        Some(Kind::OperatorStat(o)) => match f {
            0 => o.name_id = v as u32,
            1 => o.calls = v,
            2 => o.device_self_ns = v,
            _ => o.device_total_ns = v,
        },
        Some(Kind::MemoryOpStat(m)) => m.name_id = v as u32,
        Some(Kind::MemoryPeak(p)) => p.device = v as i32,
        Some(Kind::MemorySample(m)) => m.ts_ns = v,
    }
    if rng.random_ratio(1, 20) {
        e.kind = None;
    }
}
