use super::*;
use crate::v1::{event::Kind, Event};
use std::collections::HashMap;

fn ident(rank: u32, world: u32) -> proto::RankIdentity {
    proto::RankIdentity {
        job_id: "j".into(),
        rank,
        world_size: world,
        ..Default::default()
    }
}

fn ev(k: Kind) -> Event {
    Event { kind: Some(k) }
}

fn kernel(name_id: u32, start_ns: u64, end_ns: u64) -> Event {
    ev(Kind::Kernel(proto::Kernel {
        kind: proto::KernelKind::Kernel as i32,
        name_id,
        start_ns,
        end_ns,
        ..Default::default()
    }))
}

fn begin(step: u64, ts_ns: u64) -> Event {
    ev(Kind::StepBegin(proto::StepBegin { step, ts_ns }))
}

fn end(step: u64, ts_ns: u64) -> Event {
    ev(Kind::StepEnd(proto::StepEnd { step, ts_ns }))
}

fn name(id: u32, n: &str) -> proto::InternedName {
    proto::InternedName { id, name: n.into() }
}

#[test]
fn identity_rules() {
    assert_eq!(
        validate_identity(None).unwrap_err(),
        ValidationError::MissingIdentity
    );
    let err = validate_identity(Some(&ident(8, 8))).unwrap_err();
    assert_eq!(err.reason(), "rank_out_of_range");
    assert!(err.to_string().contains("rank = 8"), "{err}");
    assert_eq!(
        validate_identity(Some(&ident(0, 0))).unwrap_err(),
        ValidationError::ZeroWorldSize
    );
    let mut no_job = ident(0, 1);
    no_job.job_id.clear();
    assert_eq!(
        validate_identity(Some(&no_job)).unwrap_err(),
        ValidationError::EmptyJobId
    );
    assert!(validate_identity(Some(&ident(7, 8))).is_ok());
    let err = check_same_identity(&ident(1, 8), &ident(2, 8)).unwrap_err();
    assert_eq!(err.reason(), "identity_changed");
}

#[test]
fn intervals_and_names() {
    let known: HashMap<u32, String> = HashMap::from([(1, "gemm".to_string())]);
    let ok = validate_events(&[kernel(1, 10, 20)], &[], &known, StepState::default());
    assert!(ok.is_ok());
    let err = validate_events(&[kernel(1, 20, 10)], &[], &known, StepState::default()).unwrap_err();
    assert_eq!(err.reason(), "end_before_start");
    assert!(err.to_string().contains("end_ns = 10"), "{err}");
    let err = validate_events(&[kernel(2, 1, 2)], &[], &known, StepState::default()).unwrap_err();
    assert_eq!(err.reason(), "unknown_name_id");
    assert!(err.to_string().contains("name_id = 2"), "{err}");
    // Defined in the same message: fine.
    assert!(validate_events(
        &[kernel(2, 1, 2)],
        &[name(2, "nccl")],
        &known,
        StepState::default()
    )
    .is_ok());
    assert_eq!(
        validate_names(&[name(1, "other")], &known)
            .unwrap_err()
            .reason(),
        "bad_name"
    );
    assert!(validate_names(&[name(1, "gemm"), name(3, "x")], &known).is_ok());
    assert!(validate_names(&[name(0, "x")], &known).is_err());
}

#[test]
fn steps_never_go_backwards() {
    let names: HashMap<u32, String> = HashMap::new();
    let st = validate_events(
        &[begin(1, 100), end(1, 200), begin(2, 200)],
        &[],
        &names,
        StepState::default(),
    )
    .unwrap();
    assert_eq!(st.open, Some((2, 200)));
    assert_eq!(st.last_step, Some(2));
    let err = validate_events(&[end(2, 300), begin(1, 400)], &[], &names, st).unwrap_err();
    assert_eq!(err.reason(), "step_backwards");
    assert!(err.to_string().contains("step = 1"), "{err}");
    // End before the step's begin.
    let err = validate_events(&[end(2, 150)], &[], &names, st).unwrap_err();
    assert_eq!(err.reason(), "end_before_start");
    // End of another step while step 2 is open.
    let err = validate_events(&[end(3, 300)], &[], &names, st).unwrap_err();
    assert_eq!(err.reason(), "step_mismatch");
    // Begin not seen (joined mid-step): accepted.
    assert!(validate_events(&[end(7, 1)], &[], &names, StepState::default()).is_ok());
}

#[test]
fn required_enums() {
    let names: HashMap<u32, String> = HashMap::new();
    let bad = ev(Kind::Collective(proto::Collective {
        op: 0,
        group_size: 2,
        ..Default::default()
    }));
    let err = validate_events(&[bad], &[], &names, StepState::default()).unwrap_err();
    assert_eq!(err.reason(), "missing_field");
    assert!(err.to_string().contains("op"), "{err}");
    let err =
        validate_events(&[Event { kind: None }], &[], &names, StepState::default()).unwrap_err();
    assert_eq!(err.reason(), "empty_event");
}

#[test]
fn dropping_unpaired_markers_keeps_a_gapped_stream_valid() {
    // Forwarded so far: step 18 begun. The events of steps 18 (its end)
    // to 195 were dropped; the stream goes on inside step 196.
    let mut state = StepState {
        last_step: Some(18),
        open: Some((18, 1_000)),
    };
    let mut events = vec![
        kernel(1, 5_000, 6_000),
        end(196, 7_000),
        begin(197, 8_000),
        end(197, 9_000),
        end(197, 9_500),
        begin(150, 9_600),
    ];
    let removed = drop_unpaired_markers(&mut events, &mut state);
    assert_eq!(removed, 3, "end(196), the second end(197), begin(150)");
    assert_eq!(
        events,
        vec![kernel(1, 5_000, 6_000), begin(197, 8_000), end(197, 9_000)]
    );
    assert_eq!(
        state,
        StepState {
            last_step: Some(197),
            open: None
        }
    );
    // What is left is valid for a receiver that saw only the forwarded part.
    let before = StepState {
        last_step: Some(18),
        open: Some((18, 1_000)),
    };
    assert_eq!(
        validate_events(
            &events,
            &[],
            &HashMap::from([(1u32, "k".to_owned())]),
            before
        ),
        Ok(state)
    );
    // A stream without a gap loses nothing.
    let mut clean = vec![begin(1, 10), kernel(0, 11, 12), end(1, 13)];
    assert_eq!(
        drop_unpaired_markers(&mut clean, &mut StepState::default()),
        0
    );
    assert_eq!(clean.len(), 3);
}
