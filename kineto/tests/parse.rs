//! `parse_trace_file`: the agent's entry point. A real trace parses with the
//! caller's identity; a truncated file, a file that is not JSON and a file
//! over the size cap fail with the matching problem, naming the file.

use std::io::Write;
use std::path::{Path, PathBuf};

use rankscope_kineto::{parse_trace_file, Problem};
use rankscope_proto::v1 as proto;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/fixtures/kineto")
        .join(rel)
}

fn rank(job: &str, rank: u32, world_size: u32) -> proto::RankIdentity {
    proto::RankIdentity {
        job_id: job.into(),
        rank,
        world_size,
        node: "node-a".into(),
        pid: 4242,
        labels: [("trace_id".to_owned(), "t-1".to_owned())].into(),
        ..Default::default()
    }
}

const CAP: u64 = 64 << 20;

fn gunzip(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let f = std::fs::File::open(path).expect("fixture");
    std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(f), &mut out)
        .expect("gunzip");
    out
}

#[test]
fn a_real_trace_parses_with_the_callers_identity() {
    let path = fixture("hta_trace_filter_2rank_sm80/sampled_rank-0.json.gz");
    // The trace says rank 0 of 128; the caller's identity wins.
    let r = parse_trace_file(&path, &rank("job-x", 1, 2), CAP).expect("parse");
    assert_eq!(r.identity.job_id, "job-x");
    assert_eq!((r.identity.rank, r.identity.world_size), (1, 2));
    assert_eq!(r.identity.node, "node-a");
    assert_eq!(r.identity.pid, 4242);
    assert_eq!(
        r.identity.labels.get("trace_id").map(String::as_str),
        Some("t-1")
    );
    assert_eq!(
        r.identity.labels.get("source").map(String::as_str),
        Some("kineto")
    );
    let count = |f: fn(&proto::event::Kind) -> bool| {
        r.events
            .iter()
            .filter(|e| e.kind.as_ref().is_some_and(f))
            .count()
    };
    assert!(count(|k| matches!(k, proto::event::Kind::StepBegin(_))) > 0);
    assert!(count(|k| matches!(k, proto::event::Kind::Kernel(_))) > 100);
    assert!(count(|k| matches!(k, proto::event::Kind::Collective(_))) > 0);
    // Every name id the events use is defined.
    assert!(!r.names.is_empty());
}

#[test]
fn a_truncated_file_is_reported_as_truncated() {
    let json = gunzip(&fixture(
        "hta_trace_filter_2rank_sm80/sampled_rank-0.json.gz",
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("cut.json");
    std::fs::write(&plain, &json[..json.len() / 2]).expect("write");
    let err = parse_trace_file(&plain, &rank("j", 0, 2), CAP).expect_err("truncated");
    assert!(matches!(err.problem, Problem::Truncated { .. }), "{err}");
    assert_eq!(err.path, plain);
    assert!(err.to_string().contains("truncated"), "{err}");

    // A gzip file cut short: the gzip stream ends early.
    let gz = std::fs::read(fixture(
        "hta_trace_filter_2rank_sm80/sampled_rank-0.json.gz",
    ))
    .expect("read");
    let cut = dir.path().join("cut.json.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).expect("write");
    let err = parse_trace_file(&cut, &rank("j", 0, 2), CAP).expect_err("truncated gzip");
    assert!(matches!(err.problem, Problem::TruncatedGzip), "{err}");
}

#[test]
fn a_file_that_is_not_json_is_reported_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("trace.json");
    let mut f = std::fs::File::create(&path).expect("create");
    f.write_all(b"STAGE:2024-01-01 profiler log, not a trace\n")
        .expect("write");
    drop(f);
    let err = parse_trace_file(&path, &rank("j", 0, 1), CAP).expect_err("not json");
    assert!(
        matches!(err.problem, Problem::NotJson { line: 1, .. }),
        "{err}"
    );
    assert!(
        err.to_string().starts_with(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_file_over_the_cap_is_refused_before_reading() {
    let path = fixture("hta_trace_filter_2rank_sm80/sampled_rank-0.json.gz");
    let size = std::fs::metadata(&path).expect("size").len();
    let err = parse_trace_file(&path, &rank("j", 0, 2), size - 1).expect_err("too large");
    match err.problem {
        Problem::TooLarge { bytes, max_bytes } => {
            assert_eq!((bytes, max_bytes), (size, size - 1));
        }
        other => panic!("wrong problem: {other}"),
    }
    // Exactly at the cap is fine.
    parse_trace_file(&path, &rank("j", 0, 2), size).expect("at the cap");
}

/// Every real trace: the one-read path (the scan keeps every output event)
/// and the ordering passes that read the file again (a small window) give
/// the same stream, names and counts.
#[test]
fn one_read_and_several_passes_give_the_same_stream() {
    use rankscope_kineto::{discover, import_to_memory, ImportOptions};
    let sets: Vec<PathBuf> = std::fs::read_dir(fixture(""))
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    let files = discover(&sets).expect("fixtures");
    assert!(files.len() >= 10, "{} fixture files", files.len());
    for file in files {
        let opts = ImportOptions::new("same");
        let one = import_to_memory(&file, &opts).expect("imports");
        assert_eq!(one.stats.passes, 1, "{}", file.display());
        // A fifth of the ordered stream per window: several passes. The
        // operator and memory views' events are computed by the scan and
        // appended at the end, never buffered by an ordering window.
        use proto::event::Kind;
        let ordered = one
            .events
            .iter()
            .filter(|e| {
                !matches!(
                    e.kind,
                    Some(
                        Kind::OperatorStat(_)
                            | Kind::MemoryOpStat(_)
                            | Kind::MemoryPeak(_)
                            | Kind::MemorySample(_)
                    )
                )
            })
            .count();
        let window = (ordered / 5).max(1);
        let passes = import_to_memory(
            &file,
            &ImportOptions {
                max_buffered_events: window,
                ..opts
            },
        )
        .expect("imports");
        assert!(passes.stats.passes > 2, "{}", file.display());
        assert!(passes.stats.max_buffered_events <= window as u64);
        assert!(one.events == passes.events, "{}", file.display());
        assert_eq!(one.names, passes.names, "{}", file.display());
        assert_eq!(one.stats.events_by_kind, passes.stats.events_by_kind);
    }
}

/// Every chunk carries the digest of the file's bytes as stored (gzip
/// included), taken while the scan read them.
#[test]
fn chunks_carry_the_digest_of_the_files_bytes() {
    use rankscope_kineto::{import_file, Digest, ImportOptions};
    let path = fixture("hta_trace_filter_2rank_sm80/sampled_rank-0.json.gz");
    let mut want = Digest::default();
    want.write(&std::fs::read(&path).expect("read"));
    let mut opts = ImportOptions::new("digest");
    opts.chunk_events = 100;
    let mut digests = Vec::new();
    import_file(&path, &opts, |c| {
        digests.push(c.file_digest);
        Ok::<(), std::convert::Infallible>(())
    })
    .expect("imports");
    assert!(digests.len() > 3, "{} chunks", digests.len());
    assert!(digests.iter().all(|&d| d == want.finish()), "{digests:x?}");
}
