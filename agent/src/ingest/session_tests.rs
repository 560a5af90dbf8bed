use super::*;
use rankscope_proto::wire::RankMessageIn;

fn identity(rank: u32) -> proto::RankIdentity {
    proto::RankIdentity {
        job_id: "job".into(),
        rank,
        world_size: 4,
        ..Default::default()
    }
}

fn span(name_id: u32, start_ns: u64, end_ns: u64) -> proto::Event {
    proto::Event {
        kind: Some(Kind::Span(proto::Span {
            category: proto::SpanCategory::Forward as i32,
            name_id,
            start_ns,
            end_ns,
            ..Default::default()
        })),
    }
}

fn names(defs: &[(u32, &str)]) -> Option<proto::NameTable> {
    Some(proto::NameTable {
        names: defs
            .iter()
            .map(|(id, n)| proto::InternedName {
                id: *id,
                name: (*n).to_owned(),
            })
            .collect(),
    })
}

#[test]
fn first_message_sets_identity_and_fills_node() {
    let mut s = Session::new(9, "node-a".into());
    let acc = s
        .accept(RankMessageIn::from(proto::RankMessage {
            identity: Some(identity(1)),
            ..Default::default()
        }))
        .unwrap();
    assert_eq!(acc.stream.id, 9);
    assert_eq!(acc.stream.identity.node, "node-a");
    assert_eq!(s.identity().unwrap().rank, 1);
}

#[test]
fn events_carry_names_defined_in_earlier_messages() {
    let mut s = Session::new(1, "n".into());
    s.accept(RankMessageIn::from(proto::RankMessage {
        identity: Some(identity(0)),
        names: names(&[(1, "fwd"), (2, "unused"), (3, "bwd")]),
        ..Default::default()
    }))
    .unwrap();
    let acc = s
        .accept(RankMessageIn::from(proto::RankMessage {
            events: vec![span(3, 1, 2), span(1, 2, 3), span(3, 3, 4), span(0, 4, 5)],
            ..Default::default()
        }))
        .unwrap();
    let got: Vec<(u32, &str)> = acc.names.iter().map(|(i, n)| (*i, &**n)).collect();
    assert_eq!(got, [(1, "fwd"), (3, "bwd")]);
    assert_eq!(acc.events.len(), 4);
}

#[test]
fn rejected_message_commits_nothing() {
    let mut s = Session::new(1, "n".into());
    s.accept(RankMessageIn::from(proto::RankMessage {
        identity: Some(identity(0)),
        ..Default::default()
    }))
    .unwrap();
    // Defines name 5 but has a bad event: name 5 must not become known.
    let err = s
        .accept(RankMessageIn::from(proto::RankMessage {
            names: names(&[(5, "x")]),
            events: vec![span(5, 1, 2), span(0, 9, 3)],
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(err.reason(), "end_before_start");
    let err = s
        .accept(RankMessageIn::from(proto::RankMessage {
            events: vec![span(5, 1, 2)],
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(err.reason(), "unknown_name_id");
}

#[test]
fn identity_must_not_change_and_is_required_first() {
    let mut s = Session::new(1, "n".into());
    let err = s.accept(RankMessageIn::default()).unwrap_err();
    assert_eq!(err.reason(), "missing_identity");
    s.accept(RankMessageIn::from(proto::RankMessage {
        identity: Some(identity(2)),
        ..Default::default()
    }))
    .unwrap();
    let err = s
        .accept(RankMessageIn::from(proto::RankMessage {
            identity: Some(identity(3)),
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(err.reason(), "identity_changed");
    assert_eq!(s.identity().unwrap().rank, 2);
}

fn marker(begin: bool, step: u64, ts_ns: u64) -> proto::Event {
    let kind = if begin {
        Kind::StepBegin(proto::StepBegin { step, ts_ns })
    } else {
        Kind::StepEnd(proto::StepEnd { step, ts_ns })
    };
    proto::Event { kind: Some(kind) }
}

#[test]
fn after_a_dropped_message_unpaired_step_markers_are_left_out_until_in_step_again() {
    let mut s = Session::new(1, "n".into());
    let msg = |events: Vec<proto::Event>| {
        RankMessageIn::from(proto::RankMessage {
            identity: Some(identity(0)),
            names: names(&[(1, "fwd")]),
            events,
            ..Default::default()
        })
    };
    // Queued: step 1 begins.
    let mut a = s
        .accept(msg(vec![marker(true, 1, 10), span(1, 11, 12)]))
        .unwrap();
    let (removed, fwd) = s.repair(&mut a);
    assert_eq!((removed, a.events.len()), (0, 2));
    s.forwarded(fwd);
    // Dropped (full queue): step 1 ends, step 2 begins.
    s.accept(msg(vec![marker(false, 1, 20), marker(true, 2, 21)]))
        .unwrap();
    s.dropped();
    // Next: the end of step 2 has no forwarded begin; step 3 begins.
    let mut a = s
        .accept(msg(vec![
            span(1, 30, 31),
            marker(false, 2, 32),
            marker(true, 3, 33),
        ]))
        .unwrap();
    let (removed, fwd) = s.repair(&mut a);
    assert_eq!(removed, 1, "end(2) left out");
    assert_eq!(
        a.events,
        vec![span(1, 30, 31), marker(true, 3, 33)],
        "the rest is forwarded"
    );
    let wire: Vec<Vec<u8>> = a
        .events
        .iter()
        .map(rankscope_proto::prost::Message::encode_to_vec)
        .collect();
    let raw: Vec<Vec<u8>> = a.raw.iter().map(<[u8]>::to_vec).collect();
    assert_eq!(raw, wire, "each forwarded event's bytes are its own");
    s.forwarded(fwd);
    // In step again: nothing more is left out.
    let mut a = s.accept(msg(vec![marker(false, 3, 40)])).unwrap();
    assert_eq!(s.repair(&mut a).0, 0);
    assert_eq!(a.events.len(), 1);
}
