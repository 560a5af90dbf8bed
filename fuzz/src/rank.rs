//! Target `rank`: the agent's rank-facing decode, as its `RankIngest`
//! server runs it: `RankMessageIn::decode` of the message bytes (every
//! event decoded, each one's byte range kept), then the stream rules the
//! agent applies to a first message (`validate_identity`, `validate_names`,
//! `validate_events`).
//!
//! Property checked on every input that decodes (a panic fails the run):
//! the agent forwards each event as the bytes it came in, so those bytes
//! must decode to the event it validated, and a batch built from them
//! (`AgentBatchWire`) must decode, as the collector decodes it, to exactly
//! the validated events, in order, whatever the sender's encoding
//! (non-canonical varints, unknown or repeated fields).
//!
//! Corpus: rank messages built from the Kineto corpus (real event streams).
//! Inputs: half a decoded seed with fields mutated (as the `ingest` target
//! mutates a rank group), re-encoded; half raw byte mutations.

use std::path::Path;

use prost::Message;
use rand::rngs::SmallRng;
use rand::Rng;
use rankscope_kineto::{import_bytes, ImportOptions};
use rankscope_proto::v1 as proto;
use rankscope_proto::validate::{
    validate_events, validate_identity, validate_names, Names, StepState,
};
use rankscope_proto::wire::{AgentBatchWire, RankEventsWire, RankMessageIn};

use crate::mutate::mutate;
use crate::Target;

/// Events per seed message (a rank message is a slice of its stream).
const SEED_EVENTS: usize = 400;

pub fn target() -> Target {
    Target {
        name: "rank",
        corpus: corpus(),
        generate,
        run,
    }
}

/// No names known before the message (a stream's first message).
struct NoNames;

impl Names for NoNames {
    fn contains(&self, _: u32) -> bool {
        false
    }
    fn get(&self, _: u32) -> Option<&str> {
        None
    }
}

fn run(input: &[u8]) -> String {
    let msg = match RankMessageIn::decode(prost::bytes::Bytes::copy_from_slice(input)) {
        Ok(m) => m,
        Err(_) => return "decode_error".into(),
    };
    check_forwarded_bytes(&msg);
    let names = msg.names.as_ref().map_or(&[][..], |t| &t.names[..]);
    let outcome = validate_identity(msg.identity.as_ref())
        .and_then(|_| validate_names(names, &NoNames))
        .and_then(|()| validate_events(&msg.events, names, &NoNames, StepState::default()));
    match outcome {
        Ok(_) => "ok".into(),
        Err(e) => format!("invalid:{}", e.reason()),
    }
}

/// The property of the module docs.
fn check_forwarded_bytes(msg: &RankMessageIn) {
    assert_eq!(msg.raw.len(), msg.events.len(), "a range per event");
    for (i, (raw, event)) in msg.raw.iter().zip(&msg.events).enumerate() {
        let again = proto::Event::decode(raw).expect("forwarded bytes decode");
        assert_eq!(&again, event, "event {i}: its bytes are another event");
    }
    let batch = AgentBatchWire {
        agent_id: "agent-1".into(),
        agent_session: 1,
        seq: 1,
        ranks: vec![RankEventsWire {
            identity: msg.identity.clone(),
            events: vec![msg.raw.clone()],
            ..Default::default()
        }],
        ..Default::default()
    };
    let got = proto::AgentBatch::decode(&batch.encode_to_vec()[..]).expect("the batch decodes");
    assert_eq!(got.ranks.len(), 1);
    assert_eq!(
        got.ranks[0].events, msg.events,
        "the batch holds other events"
    );
}

/// Runs one saved input (regression tests).
pub fn replay(input: &[u8]) -> String {
    run(input)
}

fn corpus() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, trace) in crate::kineto::target().corpus.iter().enumerate() {
        let mut opts = ImportOptions::new(format!("job-{i}"));
        opts.rank_override = Some(i as u32 % 4);
        opts.world_size_override = Some(4);
        if let Ok(r) = import_bytes(Path::new("seed.json"), trace, &opts) {
            let events: Vec<proto::Event> = r.events.into_iter().take(SEED_EVENTS).collect();
            out.push(
                proto::RankMessage {
                    identity: Some(r.identity),
                    seq: i as u64 + 1,
                    names: Some(proto::NameTable { names: r.names }),
                    events,
                }
                .encode_to_vec(),
            );
        }
    }
    out.push(proto::RankMessage::default().encode_to_vec());
    out
}

fn generate(rng: &mut SmallRng, corpus: &[Vec<u8>]) -> Vec<u8> {
    if rng.random_bool(0.5) {
        return mutate(rng, corpus, &[]);
    }
    let seed = &corpus[rng.random_range(0..corpus.len())];
    let m = proto::RankMessage::decode(seed.as_slice()).expect("corpus decodes");
    let mut group = proto::RankEvents {
        identity: m.identity,
        names: m.names.map(|t| t.names).unwrap_or_default(),
        events: m.events,
        ..Default::default()
    };
    for _ in 0..rng.random_range(1..=4) {
        crate::ingest::mutate_group(rng, &mut group);
    }
    // A sender's own encoding: an event made of two encodings one after
    // the other (protobuf merges them), an unknown field.
    let merged: Option<Vec<u8>> = match &group.events[..] {
        [a, b, ..] if rng.random_ratio(1, 8) => {
            Some([a.encode_to_vec(), b.encode_to_vec()].concat())
        }
        _ => None,
    };
    let mut bytes = proto::RankMessage {
        identity: group.identity,
        seq: m.seq,
        names: Some(proto::NameTable { names: group.names }),
        events: group.events,
    }
    .encode_to_vec();
    if let Some(both) = merged {
        prost::encoding::bytes::encode(4, &both, &mut bytes);
    }
    if rng.random_ratio(1, 8) {
        bytes.extend_from_slice(&[0x78, 0x01]);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_is_accepted_and_forwarded_intact() {
        let t = target();
        assert!(t.corpus.len() > 2);
        let ok = t.corpus.iter().filter(|c| run(c) == "ok").count();
        assert!(ok >= t.corpus.len() - 1, "{ok} of {}", t.corpus.len());
    }

    #[test]
    #[should_panic(expected = "its bytes are another event")]
    fn a_wrong_range_is_caught() {
        let msg = proto::RankMessage {
            events: vec![
                proto::Event {
                    kind: Some(proto::event::Kind::StepBegin(proto::StepBegin {
                        step: 1,
                        ts_ns: 2,
                    })),
                },
                proto::Event {
                    kind: Some(proto::event::Kind::StepEnd(proto::StepEnd {
                        step: 1,
                        ts_ns: 3,
                    })),
                },
            ],
            ..Default::default()
        };
        let mut m = RankMessageIn::from(msg);
        m.raw.keep(&[1, 0]);
        check_forwarded_bytes(&m);
    }
}
