//! The frame reader against the reference (`serde` over the whole document
//! in memory, [`TopSeed`]): the same metadata and events for real traces
//! read a byte, a few bytes or a MiB at a time; the same outcome (kind of
//! fault and its line) for every truncation and for byte substitutions.

use serde::de::DeserializeSeed;

use super::*;
use crate::fixtures::fixture;
use crate::raw::TopSeed;

#[derive(Default)]
struct Collect(Vec<(u64, RawEvent)>);

impl EventHandler for Collect {
    fn event(&mut self, ordinal: u64, ev: &RawEvent) {
        self.0.push((ordinal, ev.clone()));
    }
}

/// What a read produced, comparable across the two readers: the metadata
/// and events, or the kind of fault with its line (and column where the
/// reference gives a syntax error).
#[derive(Debug, PartialEq)]
enum Outcome {
    Parsed {
        meta: String,
        events: Vec<(u64, RawEvent)>,
    },
    Truncated,
    NotJson {
        line: usize,
        column: usize,
    },
    NotTrace,
}

fn reference(doc: &[u8]) -> Outcome {
    let mut meta = TopMeta::default();
    let mut events = Collect::default();
    let mut de = serde_json::Deserializer::from_slice(doc);
    let done = TopSeed {
        meta: &mut meta,
        handler: &mut events,
        read_meta: true,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    match done {
        Ok(()) => Outcome::Parsed {
            meta: format!("{meta:?}"),
            events: events.0,
        },
        Err(e) if e.is_eof() => Outcome::Truncated,
        Err(e) if e.is_syntax() => Outcome::NotJson {
            line: e.line(),
            column: e.column(),
        },
        Err(_) => Outcome::NotTrace,
    }
}

fn framed(doc: &[u8], read_bytes: usize) -> Outcome {
    let mut meta = TopMeta::default();
    let mut events = Collect::default();
    let done = Frame::with_read_size(doc, false, u64::MAX, read_bytes).document(
        &mut meta,
        &mut events,
        true,
    );
    match done {
        Ok(()) => Outcome::Parsed {
            meta: format!("{meta:?}"),
            events: events.0,
        },
        Err(Problem::Truncated { .. }) => Outcome::Truncated,
        Err(Problem::NotJson { line, column, .. }) => Outcome::NotJson { line, column },
        Err(Problem::NotKinetoTrace(_)) => Outcome::NotTrace,
        Err(other) => panic!("unexpected problem {other}"),
    }
}

#[test]
fn real_traces_read_the_same_at_any_read_size() {
    for rel in [
        "hta_trace_filter_2rank_sm80/sampled_rank-0.json.gz",
        "hta_nccl_parser_rank0_a100/nccl_data.json.gz",
        "cpu_gloo_2rank/rank0.pt.trace.json.gz",
    ] {
        let doc = fixture(rel);
        let want = reference(&doc);
        let Outcome::Parsed { events, .. } = &want else {
            panic!("{rel}: the reference fails: {want:?}");
        };
        assert!(events.len() > 100, "{rel}: {} events", events.len());
        for read_bytes in [61, 4096, 1 << 20] {
            assert!(
                framed(&doc, read_bytes) == want,
                "{rel} at {read_bytes} bytes per read"
            );
        }
    }
}

/// A small document with every construct: metadata in both orders, escapes,
/// numbers of every kind, nested args, a bare number among the events.
const SMALL: &str = r#"{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU \"0\""}],
 "traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "k\u00e9", "pid": 0, "tid": 7, "ts": 12.5, "dur": 3,
   "args": {"correlation": 7, "device": 0, "stream": 7, "Input Dims": [[1, 2], []], "x": {"y": [true, null]}}},
  17,
  {"ph": "X", "cat": "cpu_op", "name": "op", "ts": -4, "dur": 1e3, "args": {"External id": 99}}
 ],
 "distributedInfo": {"rank": 1, "world_size": 2, "backend": "nccl"},
 "baseTimeNanoseconds": 1711964646000000000}
"#;

#[test]
fn every_truncation_and_substitution_fails_as_the_reference_does() {
    let doc = SMALL.as_bytes();
    assert!(matches!(reference(doc), Outcome::Parsed { .. }));
    for cut in 0..doc.len() {
        let want = reference(&doc[..cut]);
        for read_bytes in [1, 5, 1 << 20] {
            assert_eq!(
                framed(&doc[..cut], read_bytes),
                want,
                "cut at {cut}, {read_bytes} per read"
            );
        }
    }
    for at in 0..doc.len() {
        for sub in [b'x', b'"', b'}', b']', b',', b':', b'1', b'\n', b'\\'] {
            let mut bad = doc.to_vec();
            bad[at] = sub;
            let want = reference(&bad);
            for read_bytes in [1, 1 << 20] {
                let got = framed(&bad, read_bytes);
                match (&want, &got) {
                    // Both fail on the same line; the grammar around the
                    // values reports its own column.
                    (Outcome::NotJson { line: a, .. }, Outcome::NotJson { line: b, .. }) => {
                        assert_eq!(a, b, "byte {at} = {:?}", sub as char)
                    }
                    _ => assert_eq!(got, want, "byte {at} = {:?}", sub as char),
                }
            }
        }
    }
}

#[test]
fn errors_name_their_place_in_the_whole_document() {
    // A syntax error on line 3, past the first window.
    let doc = "{\"traceEvents\": [\n{\"ph\": \"X\"},\n  {\"ph\" \"X\"}]}";
    let got = framed(doc.as_bytes(), 4);
    assert_eq!(got, reference(doc.as_bytes()));
    assert!(matches!(got, Outcome::NotJson { line: 3, .. }), "{got:?}");
    // Values that are not a trace.
    assert_eq!(framed(b"\"trace\"", 3), Outcome::NotTrace);
    assert_eq!(framed(br#"{"traceEvents": 5}"#, 3), Outcome::NotTrace);
    assert_eq!(framed(b"", 3), Outcome::Truncated);
}
