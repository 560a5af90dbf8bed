use super::super::{LiveVerdicts, HORIZON_NS, MAX_VERSIONS};
use super::*;
use crate::store::VerdictRow;

/// An active verdict version (`live`'s tests' helper).
fn version(job: &str, rank: u32, first_step: u64, updated_ns: u64) -> VerdictRow {
    super::super::tests::version(job, rank, first_step, true, updated_ns)
}

fn evidence(job: &str, rank: u32, first_step: u64, text: &str, updated_ns: u64) -> EvidenceRow {
    EvidenceRow {
        job_id: job.into(),
        rank,
        first_step,
        node: "n".into(),
        evidence: text.into(),
        gpu_indexes: vec![0],
        gpu_uuids: vec!["GPU-0".into()],
        sm_clock_mhz: Some(1200.0),
        peer_sm_clock_mhz: Some(1980.0),
        throttle_reasons: vec![],
        temp_c: None,
        peer_temp_c: None,
        power_w: None,
        peer_power_w: None,
        samples: 4,
        peer_gpus: 7,
        first_seen_ns: 1,
        updated_ns,
    }
}

fn stored(v: &VerdictRow) -> StragglerRow {
    super::super::straggler_row(v)
}

/// The route's stored path: a stored read, then memory, then the mark.
fn verify(
    live: &LiveVerdicts,
    job: &str,
    rows: &[StragglerRow],
    ev: &[EvidenceReadRow],
    now: u64,
) -> bool {
    let snap = live.snapshot(job, now);
    live.verify(job, &snap, rows, ev)
}

#[test]
fn a_held_job_with_nothing_stored_is_answered_from_memory() {
    let live = LiveVerdicts::default();
    let t = 10 * HORIZON_NS;
    // Not held by the stream: never from memory, even with nothing stored.
    assert!(!verify(&live, "a", &[], &[], t));
    assert!(live.memory_of("a", t).is_none());
    live.begin("a");
    assert!(live.memory_of("a", t).is_none(), "not verified yet");
    assert!(verify(&live, "a", &[], &[], t));
    let m = live.memory_of("a", t).expect("verified");
    assert!(m.versions.is_empty() && m.evidence.is_empty());
    // Whether the job's rows are stored is asked until the store says so.
    assert!(!m.stored);
    live.found_stored("a");
    assert!(live.memory_of("a", t).unwrap().stored);
    // Versions and evidence raised later are in the answer: the newest
    // version per verdict, the latest evidence (a later row on a tie).
    live.record(&version("a", 7, 3, t + 1), Some(Some(4.0)), t + 1);
    live.record(&version("a", 7, 3, t + 2), Some(Some(5.0)), t + 2);
    live.record_evidence(&evidence("a", 7, 3, "old", t + 1));
    live.record_evidence(&evidence("a", 7, 3, "hardware", t + 2));
    live.record_evidence(&evidence("a", 7, 3, "outside", t + 2));
    live.record_evidence(&evidence("a", 7, 3, "late older", t));
    let m = live.memory_of("a", t + 3).expect("still verified");
    assert_eq!(m.versions.len(), 1);
    assert_eq!(m.versions[0].row.updated_ns, t + 2);
    assert_eq!(m.versions[0].gain, Some(Some(5.0)));
    assert_eq!(m.evidence.len(), 1);
    assert_eq!(m.evidence[0].evidence, "outside");
    assert_eq!(m.evidence[0].peer_gpus, 7);
    // Evidence of a job the stream does not hold is not kept.
    live.record_evidence(&evidence("b", 1, 0, "x", t));
    live.begin("b");
    assert!(verify(&live, "b", &[], &[], t));
    assert!(live.memory_of("b", t).unwrap().evidence.is_empty());
}

#[test]
fn stored_rows_memory_lacks_keep_the_stored_read() {
    let live = LiveVerdicts::default();
    let t = 10 * HORIZON_NS;
    live.begin("a");
    let v = version("a", 7, 3, t);
    live.record(&v, None, t);
    // A stored verdict memory does not hold (e.g. stored before the
    // collector took the job up).
    let other = stored(&version("a", 9, 0, t - 5));
    assert!(!verify(&live, "a", &[stored(&v), other], &[], t));
    assert!(live.memory_of("a", t).is_none());
    // A stored version newer than memory's (another writer).
    assert!(!verify(
        &live,
        "a",
        &[stored(&version("a", 7, 3, t + 1))],
        &[],
        t
    ));
    // Stored evidence of a verdict memory holds no evidence of.
    let ev = read_row(&evidence("a", 7, 3, "stored", t));
    assert!(!verify(
        &live,
        "a",
        &[stored(&v)],
        std::slice::from_ref(&ev),
        t
    ));
    assert!(live.memory_of("a", t).is_none());
    // What is stored is held: verified.
    live.record_evidence(&evidence("a", 7, 3, "held", t));
    assert!(verify(&live, "a", &[stored(&v)], &[ev], t));
    assert_eq!(live.memory_of("a", t).unwrap().versions.len(), 1);
}

#[test]
fn forgetting_pruning_or_dropping_clears_the_mark() {
    let live = LiveVerdicts::default();
    let t = 10 * HORIZON_NS;
    // Forgotten (idle or released), then taken up again: not verified.
    live.begin("a");
    assert!(verify(&live, "a", &[], &[], t));
    live.end("a");
    assert!(live.memory_of("a", t).is_none());
    live.begin("a");
    assert!(live.memory_of("a", t).is_none());
    live.found_stored("a");
    assert!(verify(&live, "a", &[], &[], t));
    live.end("a");
    live.found_stored("a");
    live.begin("a");
    assert!(verify(&live, "a", &[], &[], t));
    assert!(
        !live.memory_of("a", t).unwrap().stored,
        "asked again once taken up again"
    );
    live.end("a");
    live.begin("a");
    // A change between the memory read and the mark: no mark.
    let snap = live.snapshot("a", t);
    live.end("a");
    live.begin("a");
    assert!(!live.verify("a", &snap, &[], &[]));
    assert!(live.memory_of("a", t).is_none());
    // A version past the horizon is not served from memory...
    assert!(verify(&live, "a", &[], &[], t));
    live.record(&version("a", 1, 0, t), None, t);
    live.record_evidence(&evidence("a", 1, 0, "e", t));
    assert!(live.memory_of("a", t + HORIZON_NS).is_some());
    assert!(live.memory_of("a", t + HORIZON_NS + 1).is_none());
    // ...and pruning it clears the mark for good.
    live.begin("b");
    live.record(
        &version("b", 1, 0, t + 2 * HORIZON_NS),
        None,
        t + 2 * HORIZON_NS,
    );
    let now = t + 2 * HORIZON_NS;
    assert!(live.memory_of("a", now).is_none());
    // The pruned version is stored: memory no longer holds all.
    assert!(!verify(
        &live,
        "a",
        &[stored(&version("a", 1, 0, t))],
        &[],
        now
    ));
    assert!(live.memory_of("a", now).is_none());
    // A new verdict of a verified job that is not held (the cap): cleared.
    let big = LiveVerdicts::default();
    big.begin("big");
    for rank in 0..MAX_VERSIONS as u32 {
        big.record(&version("big", rank, 0, t), None, t);
    }
    big.begin("c");
    assert!(verify(&big, "c", &[], &[], t));
    assert!(!big.record(&version("c", 1, 0, t), None, t));
    assert!(big.memory_of("c", t).is_none());
}
