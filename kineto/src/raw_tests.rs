use super::*;

/// Collects every event.
#[derive(Default)]
struct Collect(Vec<(u64, RawEvent)>);

impl EventHandler for Collect {
    fn event(&mut self, ordinal: u64, ev: &RawEvent) {
        self.0.push((ordinal, ev.clone()));
    }
}

/// The reference reader ([`TopSeed`], `serde` alone) over `text`.
fn parse(text: &str) -> Result<(TopMeta, Vec<(u64, RawEvent)>), serde_json::Error> {
    let mut meta = TopMeta::default();
    let mut events = Collect::default();
    let mut de = serde_json::Deserializer::from_str(text);
    TopSeed {
        meta: &mut meta,
        handler: &mut events,
        read_meta: true,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok((meta, events.0))
}

#[test]
fn reads_the_needed_fields_in_any_key_order() {
    let text = r#"{
        "traceEvents": [
            {"args": {"correlation": 7, "Input Dims": [[1, 2]], "device": 1, "stream": 14,
                      "Collective name": "allreduce", "In msg nelems": 10,
                      "Process Group Ranks": "[0, 1]", "dtype": "Float"},
             "ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": "stream 14",
             "ts": 4458676416788.066, "dur": 5, "extra": {"deep": [1, [2, {"x": null}]]}}
        ],
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2,
            "pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1]}]},
        "deviceProperties": [{"id": 0, "name": "GPU A", "totalGlobalMem": 1}],
        "baseTimeNanoseconds": 1711964646000000000
    }"#;
    let (meta, events) = parse(text).expect("parses");
    assert!(meta.has_events);
    assert_eq!(meta.event_count, 1);
    assert_eq!(meta.base_time_ns, Some(1_711_964_646_000_000_000));
    let dist = meta.dist.expect("dist");
    assert_eq!(
        (dist.rank.as_u64(), dist.world_size.as_u64()),
        (Some(1), Some(2))
    );
    let pg = &dist.pg_config.expect("pg_config")[0];
    assert_eq!(pg.ranks.as_ranks(), Some(vec![0, 1]));
    assert_eq!(meta.devices[0].name.as_str(), Some("GPU A"));
    let (ordinal, e) = &events[0];
    assert_eq!(*ordinal, 0);
    assert_eq!(e.ph.as_str(), Some("X"));
    assert_eq!(e.ts, Scalar::Num(Num::F(4458676416788.066)));
    assert_eq!(e.tid.as_u64_loose(), Some(14));
    assert_eq!(e.args.correlation.as_u64(), Some(7));
    assert_eq!(e.args.coll_name.as_str(), Some("allreduce"));
    assert_eq!(e.args.pg_ranks.as_ranks(), Some(vec![0, 1]));
    assert_eq!(e.args.dtype.as_str(), Some("Float"));
}

#[test]
fn odd_values_are_lenient() {
    let text = r#"[
        17, "x", null, [1, 2], {"ph": true, "ts": "12", "dur": {"a": 1}, "args": [1]},
        {"ph": "X", "ts": 1, "ts": 2, "args": {"correlation": -3, "bytes": 2.5}}
    ]"#;
    let (meta, events) = parse(text).expect("parses");
    assert_eq!(meta.event_count, 6);
    assert!(meta.dist.is_none());
    assert_eq!(events[0].1, RawEvent::default());
    assert_eq!(events[3].1, RawEvent::default());
    let e = &events[4].1;
    assert_eq!(e.ph, Scalar::Other);
    assert_eq!(e.ts, Scalar::Str("12".into()));
    assert_eq!(e.ts.num(), None);
    assert_eq!(e.dur, Scalar::Other);
    let e = &events[5].1;
    assert_eq!(e.ts.as_u64(), Some(2), "the last duplicate wins");
    assert_eq!(e.args.correlation.as_u64(), None);
    assert_eq!(e.args.bytes.as_u64(), None);
    assert_eq!(e.args.bytes.as_f64(), Some(2.5));
}

#[test]
fn scalar_conversions() {
    assert_eq!(Scalar::Num(Num::F(3.0)).as_u64(), Some(3));
    assert_eq!(Scalar::Num(Num::F(3.5)).as_u64(), None);
    assert_eq!(Scalar::Num(Num::I(-1)).as_u64(), None);
    assert_eq!(Scalar::Str("GPU 3".into()).as_u64_loose(), Some(3));
    assert_eq!(Scalar::Str("Spans".into()).as_u64_loose(), None);
    assert_eq!(Scalar::Str("[]".into()).as_ranks(), Some(vec![]));
    assert_eq!(Scalar::Str("[0, x]".into()).as_ranks(), None);
    assert_eq!(Scalar::Ints(vec![1, 5_000_000_000]).as_ranks(), None);
}

#[test]
fn structural_errors_fail_the_parse() {
    assert!(parse(r#"{"traceEvents": [{"ph": "X"}"#)
        .unwrap_err()
        .is_eof());
    assert!(parse(r#"{"traceEvents": [1 2]}"#).unwrap_err().is_syntax());
    assert!(parse(r#"{"traceEvents": {"a": 1}}"#).unwrap_err().is_data());
    assert!(parse("3").unwrap_err().is_data());
    let (meta, events) = parse(r#"{"other": [1]}"#).expect("parses");
    assert!(!meta.has_events && events.is_empty());
}

#[test]
fn a_repeated_args_object_replaces_the_first() {
    let text = r#"[
        {"ph": "X", "args": {"correlation": 1, "device": 3}, "args": {"stream": 2}},
        {"ph": "X", "args": {"correlation": 1}, "args": 5}
    ]"#;
    let (_, events) = parse(text).expect("parses");
    let a = &events[0].1.args;
    assert_eq!(
        (a.correlation.as_u64(), a.device.as_u64(), a.stream.as_u64()),
        (None, None, Some(2))
    );
    assert_eq!(events[1].1.args, RawArgs::default());
}
