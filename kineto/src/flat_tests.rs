//! The flat reader against `EventSeed` (the definition): wherever it
//! returns an event, `EventSeed` gives the same event and ends at the same
//! byte, starting from an event that still holds every field of another
//! one. Checked on every event of real traces (most of which it must
//! read itself), on every cut and on byte substitutions of events with
//! every construct, and on numbers of every shape.

use serde::de::{DeserializeSeed, IgnoredAny};

use super::*;
use crate::fixtures::fixture;
use crate::raw::EventSeed;

/// `EventSeed` over `b`: the event and where it ended.
fn reference(b: &[u8]) -> Option<(RawEvent, usize)> {
    let mut ev = RawEvent::default();
    let mut de = serde_json::Deserializer::from_slice(b);
    EventSeed(&mut ev).deserialize(&mut de).ok()?;
    Some((ev, de.into_iter::<IgnoredAny>().byte_offset()))
}

/// An event with every field the reader writes set (strings where it
/// keeps buffers), as the previous element leaves it.
fn stale() -> RawEvent {
    let mut ev = RawEvent::default();
    let text = br#"{"ph": "X", "cat": "kernel", "name": "stale kernel", "ts": 1.5, "dur": 2,
        "pid": "p", "tid": "stream 3", "args": {"correlation": 1, "External id": 2,
        "device": 3, "stream": 4, "bytes": 5, "memory bandwidth (GB/s)": 6.5,
        "Collective name": "allreduce", "In msg nelems": 8, "Out msg nelems": 9,
        "Group size": 10, "dtype": "Float", "Process Group Name": "0",
        "Process Group Ranks": [0, 1], "Input Dims": [[1, 2]], "Input type": ["float"]}}"#;
    let mut de = serde_json::Deserializer::from_slice(text);
    EventSeed(&mut ev)
        .deserialize(&mut de)
        .expect("stale event");
    ev
}

/// Reads `b` with the flat reader (from a stale event) and checks it
/// against the reference; whether the flat reader took it.
fn agrees(b: &[u8]) -> bool {
    let mut ev = stale();
    let Some(n) = event(b, &mut ev) else {
        return false;
    };
    let text = || String::from_utf8_lossy(&b[..b.len().min(2000)]).into_owned();
    match reference(b) {
        Some((want, end)) => {
            assert!(ev == want, "{ev:?} != {want:?} for {}", text());
            assert!(n == end, "ends at {n}, not {end}: {}", text());
        }
        None => panic!("the flat reader took what serde rejects: {}", text()),
    }
    true
}

/// The start of every element of the document's `traceEvents` (found
/// with `serde_json`).
fn element_starts(doc: &[u8]) -> Vec<usize> {
    let key = b"\"traceEvents\"";
    let at = doc
        .windows(key.len())
        .position(|w| w == key)
        .expect("traceEvents");
    let mut pos = at + key.len();
    let skip = |pos: &mut usize, what: u8| {
        while doc[*pos].is_ascii_whitespace() {
            *pos += 1;
        }
        let found = doc[*pos];
        if found == what {
            *pos += 1;
        }
        while doc[*pos].is_ascii_whitespace() {
            *pos += 1;
        }
        found
    };
    skip(&mut pos, b':');
    assert_eq!(skip(&mut pos, b'['), b'[');
    let mut starts = Vec::new();
    while doc[pos] != b']' {
        starts.push(pos);
        let mut de = serde_json::Deserializer::from_slice(&doc[pos..]).into_iter::<IgnoredAny>();
        de.next().expect("an element").expect("valid JSON");
        pos += de.byte_offset();
        skip(&mut pos, b',');
    }
    starts
}

#[test]
fn real_trace_events_read_as_serde_reads_them() {
    for rel in [
        "hta_trace_filter_2rank_sm80/sampled_rank-0.json.gz",
        "hta_nccl_parser_rank0_a100/nccl_data.json.gz",
        "hta_negative_queue_rank0_a100/rank0.json.gz",
        "cpu_gloo_2rank/rank0.pt.trace.json.gz",
        "cpu_gloo_2rank/rank1.pt.trace.json.gz",
        "tracelens_b200_eager_rank0/eager_trace.json.gz",
        "tracelens_mi300_resnet_rank0/resnet_act_checkpoint.json.gz",
        "param_dlrm_8rank_v100/worker3_step_12.1694128201557.pt.trace.json.gz",
    ] {
        let doc = fixture(rel);
        let starts = element_starts(&doc);
        assert!(starts.len() > 100, "{rel}: {} events", starts.len());
        // From each element to the document's end, as the window holds it.
        let taken = starts.iter().filter(|&&s| agrees(&doc[s..])).count();
        // The fast path must carry real traces, not just fall back.
        assert!(
            taken * 100 >= starts.len() * 95,
            "{rel}: the flat reader took {taken} of {} events",
            starts.len()
        );
    }
}

/// Events with every construct the reader meets or refuses.
const EVENTS: &[&str] = &[
    r#"{"ph": "X", "cat": "kernel", "name": "void k<128>(float*)", "pid": 0, "tid": 7, "ts": 4458676416788.066, "dur": 3.25, "args": {"correlation": 7, "External id": 99, "device": 0, "stream": 7, "grid": [132, 1, 1], "blocks per SM": 0.87}}"#,
    r#"{"ph":"X","cat":"cpu_op","name":"aten::mm","ts":-4,"dur":0,"pid":-0,"tid":"stream 7","args":{"Input Dims":[[8192,4096],[4096],[]],"Input type":["c10::BFloat16","float",""],"Ev Idx":1}}"#,
    r#"{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "ts": 12, "dur": 1, "args": {"Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576, "Group size": 8, "dtype": "BFloat16", "Process Group Name": "0", "Process Group Ranks": [0, 1, 2, 3, 4, 5, 6, 7], "bytes": 2097152, "memory bandwidth (GB/s)": 102.5}}"#,
    r#"{"ph": "i", "name": "nul\u0000l", "ts": 1e3, "s": "t", "args": {"x": {"y": [true, false, null, -1.5e-3, "a\"b"]}}}"#,
    r#"{"name": "k\u00e9 caf\u00e9 \"q\"", "cat": "gpu_memcpy", "ts": 00, "dur": 18446744073709551615}"#,
    r#"{"name": "é ünïcödé ✓", "ts": 9223372036854775808, "dur": -9223372036854775808, "pid": -9223372036854775809, "tid": 12345678901234567890}"#,
    r#"{"ts": 0.1234567890123456789, "dur": 1.0, "pid": 123456789012345678.9, "tid": 0.0000000000000000001}"#,
    r#"{"args": {"correlation": 1}, "args": 5, "name": "a", "name": "b", "ph": null, "cat": true, "ts": [1, "2", 3.0, -4], "dur": {"a": 1}}"#,
    r#"{"args": {"correlation": 1, "Process Group Ranks": "[0, 1]"}, "args": {"stream": 2}, "args": {}}"#,
    r#"{ "ph" : "X" ,
  "args" : { "Input Dims" : [ [ ] , [ [ 256 ] , [ 2 , 3 ] ] ] , "Input type" : "x" } , "x" : [ [ [ [ ] ] ] ] }"#,
    r#"{}"#,
    r#"{"a": [], "b": {}, "c": "", "d": 0, "e": -0.0, "f": 1E5, "g": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
    r#"{"ph": "X", "cat": "kernel", "name": "k", "args": {"device": "0", "stream": null, "bytes": true, "dtype": ["a"], "Process Group Name": {"n": 1}}}"#,
];

#[test]
fn events_of_every_construct_read_as_serde_reads_them_or_fall_back() {
    let mut taken = 0;
    for text in EVENTS {
        // Followed by what the window holds after an element.
        let doc = format!("{text},\n{{\"ph\": \"X\"}}]}}");
        taken += usize::from(agrees(doc.as_bytes()));
    }
    // The first three and the empty object are plain Kineto.
    assert!(taken >= 4, "{taken} taken");
    for doc in &EVENTS[..3] {
        assert!(agrees(doc.as_bytes()), "not taken: {doc}");
    }
}

#[test]
fn every_cut_and_substitution_reads_as_serde_or_falls_back() {
    for text in EVENTS {
        let doc = format!("{text}, {{}}");
        let doc = doc.as_bytes();
        for cut in 0..doc.len() {
            agrees(&doc[..cut]);
        }
        for at in 0..doc.len() {
            for sub in [
                b'x', b'"', b'}', b']', b',', b':', b'1', b'\n', b'\\', b'-', b'.', b'e', b'0',
                b'[', b'{', b't', b'n', b' ', 0x01, 0xc3, 0xff,
            ] {
                let mut bad = doc.to_vec();
                bad[at] = sub;
                agrees(&bad);
            }
        }
    }
}

#[test]
fn numbers_of_every_shape_read_as_serde_reads_them() {
    // A fixed pseudo-random sequence (xorshift), so the test is repeatable.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut taken = 0usize;
    for _ in 0..20_000 {
        let r = next();
        let digits = next().to_string();
        let int_len = 1 + (r % 20) as usize;
        let frac_len = ((r >> 8) % 21) as usize;
        let mut num = String::new();
        if r & (1 << 20) != 0 {
            num.push('-');
        }
        let int = &digits[..int_len.min(digits.len())];
        num.push_str(int.trim_start_matches('0'));
        if num.is_empty() || num == "-" {
            num.push('0');
        }
        if frac_len > 0 {
            num.push('.');
            let frac = next().to_string();
            num.push_str(&frac[..frac_len.min(frac.len())]);
        }
        let doc = format!(r#"{{"ts": {num}, "dur": 1}}"#);
        // Taken exactly when it has at most 19 digits.
        let short = num.bytes().filter(u8::is_ascii_digit).count() <= 19;
        assert_eq!(agrees(doc.as_bytes()), short, "{num}");
        taken += usize::from(short);
    }
    assert!(taken > 5_000, "{taken} of 20000 taken");
}

#[test]
fn string_fields_keep_their_buffers_and_absent_fields_are_reset() {
    let mut ev = stale();
    let Scalar::Str(name) = &ev.name else {
        panic!("stale name");
    };
    let buffer = name.as_ptr();
    let doc = br#"{"name": "short", "ts": 1}"#;
    assert_eq!(event(doc, &mut ev), Some(doc.len()));
    assert_eq!(ev, reference(doc).expect("valid").0);
    assert_eq!(ev.name.as_str(), Some("short"));
    assert!(matches!(ev.name, Scalar::Str(ref s) if s.as_ptr() == buffer));
    assert_eq!(ev.args, RawArgs::default());
    assert_eq!(ev.cat, Scalar::Absent);
}

#[test]
fn eight_digits_at_a_time_read_as_one_at_a_time() {
    for text in [
        "00000000",
        "12345678",
        "99999999",
        "10000001",
        "1234567",
        "1234567x",
        "123456789012345678",
        "12345678/",
        "1234:678",
        "0123456789",
        "",
    ] {
        let b = text.as_bytes();
        let count = b.iter().take_while(|c| c.is_ascii_digit()).count();
        let value = b[..count].iter().fold(7u64, |v, &d| {
            v.wrapping_mul(10).wrapping_add(u64::from(d - b'0'))
        });
        assert_eq!(super::digits(b, 7), (count, value), "{text}");
    }
    // Every byte value in every lane of an otherwise all-digit word.
    for lane in 0..8 {
        for byte in 0..=255u8 {
            let mut b = *b"31415926";
            b[lane] = byte;
            let w = u64::from_le_bytes(b);
            assert_eq!(
                super::eight_digits(w),
                byte.is_ascii_digit(),
                "lane {lane} byte {byte}"
            );
        }
    }
}
