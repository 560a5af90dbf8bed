//! Bad input: every broken file fails with an error naming the file and the
//! problem; a single bad event is skipped, counted and reported.

mod import_common;

use std::io::Write;
use std::path::{Path, PathBuf};

use import_common::{fixture, import_checked, write_synthetic, Synth};
use rankscope_cli::import::{self, ImportError, ImportOptions, Problem};

fn opts() -> ImportOptions {
    ImportOptions::new("bad")
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    p
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).expect("gzip");
    enc.finish().expect("gzip")
}

fn dlrm_rank0_json() -> Vec<u8> {
    let gz = std::fs::read(fixture(
        "param_dlrm_8rank_v100/worker0_step_12.1694128201545.pt.trace.json.gz",
    ))
    .expect("fixture");
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out)
        .expect("gunzip");
    out
}

/// Imports and returns the error, checking that its text names the file.
fn fail(path: &Path, opts: &ImportOptions) -> ImportError {
    let err = import::import_to_memory(path, opts).expect_err("must fail");
    assert_eq!(err.path, path);
    let text = err.to_string();
    assert!(text.starts_with(&path.display().to_string()), "{text}");
    err
}

/// A minimal trace with `events` (JSON texts) and `distributedInfo`.
fn trace(events: &[&str]) -> String {
    format!(
        r#"{{"distributedInfo": {{"rank": 0, "world_size": 2}}, "traceEvents": [{}]}}"#,
        events.join(",")
    )
}

const STEP: &str = r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 100, "dur": 100}"#;
const LAUNCH: &str = r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110, "dur": 5, "args": {"correlation": 7}}"#;
const KERNEL: &str = r#"{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 120, "dur": 10, "args": {"correlation": 7, "device": 0, "stream": 7}}"#;

#[test]
fn truncated_json_and_gzip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dlrm_rank0_json();
    let half = &json[..json.len() / 2];
    let p = write(dir.path(), "cut.json", half);
    let e = fail(&p, &opts());
    assert!(matches!(e.problem, Problem::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");

    // A complete gzip stream of truncated JSON, and a truncated gzip stream.
    let p = write(dir.path(), "cut_json.json.gz", &gzip(half));
    assert!(matches!(
        fail(&p, &opts()).problem,
        Problem::Truncated { .. }
    ));
    let gz = gzip(&json);
    let p = write(dir.path(), "cut.json.gz", &gz[..gz.len() / 2]);
    let e = fail(&p, &opts());
    assert!(matches!(e.problem, Problem::TruncatedGzip), "{e}");
    // Compression is detected by content, not by name.
    let p = write(dir.path(), "really_gzip.json", &gz);
    let ok = import::import_to_memory(&p, &opts()).expect("gzip named .json");
    assert_eq!(ok.stats.events_by_kind.step_begin, 1);
    let p = write(dir.path(), "really_plain.json.gz", &json);
    assert!(import::import_to_memory(&p, &opts()).is_ok());
}

#[test]
fn not_json_and_not_a_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(dir.path(), "text.json", b"hello, world\n");
    let e = fail(&p, &opts());
    assert!(matches!(e.problem, Problem::NotJson { line: 1, .. }), "{e}");
    assert!(e.to_string().contains("not JSON"), "{e}");
    let p = write(
        dir.path(),
        "garbage.json.gz",
        &[0x1f, 0x8b, 0, 1, 2, 3, 4, 5, 6, 7],
    );
    let e = fail(&p, &opts());
    assert!(
        matches!(e.problem, Problem::CorruptGzip(_) | Problem::TruncatedGzip),
        "{e}"
    );
    let p = write(dir.path(), "object.json", br#"{"temporal_breakdown": []}"#);
    let e = fail(&p, &opts());
    assert!(matches!(e.problem, Problem::NotKinetoTrace(_)), "{e}");
    assert!(e.to_string().contains("traceEvents"), "{e}");
    let p = write(dir.path(), "string.json", br#""trace""#);
    assert!(matches!(
        fail(&p, &opts()).problem,
        Problem::NotKinetoTrace(_)
    ));
    let p = write(
        dir.path(),
        "events_not_array.json",
        br#"{"traceEvents": 5}"#,
    );
    assert!(matches!(
        fail(&p, &opts()).problem,
        Problem::NotKinetoTrace(_)
    ));
    let p = write(
        dir.path(),
        "trailing.json",
        format!("{} x", trace(&[STEP])).as_bytes(),
    );
    assert!(matches!(fail(&p, &opts()).problem, Problem::NotJson { .. }));
    let p = write(dir.path(), "empty.json", trace(&[]).as_bytes());
    assert!(matches!(fail(&p, &opts()).problem, Problem::EmptyTrace));
    let missing = dir.path().join("missing.json");
    assert!(matches!(fail(&missing, &opts()).problem, Problem::Io(_)));
}

/// A real Kineto trace of an idle window (an H200 job whose steps ended
/// before its on-demand trace began: 53 metadata events and one instant):
/// the error says the trace holds no activity, not that the file is not a
/// trace.
#[test]
fn a_profilers_trace_without_activity() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200-idle-window.pt.trace.json.gz");
    let mut o = opts();
    o.rank_override = Some(0);
    o.world_size_override = Some(1);
    let e = fail(&p, &o);
    assert!(
        matches!(e.problem, Problem::NoActivity { events: 54 }),
        "{e}"
    );
    assert!(e.to_string().contains("holds no activity"), "{e}");
    // The same events without the profiler's top-level keys: not a trace.
    let dir = tempfile::tempdir().expect("tempdir");
    let bare = write(
        dir.path(),
        "bare.json",
        trace(&[r#"{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python3"}}"#])
            .as_bytes(),
    );
    assert!(
        matches!(fail(&bare, &opts()).problem, Problem::NotKinetoTrace(_)),
        "bare"
    );
}

/// rankscope-agent's daemon traces (real ones, from the H200 capture) carry
/// no distributedInfo; the agent names them `<trace>-r<rank>-<pid>...`:
/// with the job's --world-size each file is its named rank; without it
/// rank 0 is a single-process profile and another rank is an error that
/// says what to pass.
#[test]
fn agent_named_daemon_traces_take_their_rank_from_the_name() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testkit/fixtures/gpu-capture/h200-2026-11-27/traces/gpukit-ddp");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("capture traces")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    let mut o = opts();
    o.world_size_override = Some(4);
    let ranks: Vec<(u32, u32)> = files
        .iter()
        .map(|f| {
            let r = import::import_to_memory(f, &o).expect("import");
            (r.identity.rank, r.identity.world_size)
        })
        .collect();
    assert_eq!(ranks, [(0, 4), (1, 4), (2, 4), (3, 4)]);
    let r0 = import::import_to_memory(&files[0], &opts()).expect("rank 0 alone");
    assert_eq!((r0.identity.rank, r0.identity.world_size), (0, 1));
    let e = fail(&files[1], &opts());
    assert!(
        matches!(e.problem, Problem::NamedRankNeedsWorldSize(1)),
        "{e}"
    );
    assert!(e.to_string().contains("--world-size"), "{e}");
}

#[test]
fn missing_or_bad_distributed_info() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("nodist.json");
    let synth = Synth {
        steps: 2,
        kernels_per_step: 10,
        filler_per_step: 1,
        filler_bytes: 1,
        warm_up: 0,
        events_first: false,
        no_dist: true,
    };
    write_synthetic(&p, &synth);
    // A single-process profile (issue 29): rank 0 of 1, with a note.
    let s = import_checked(&p, &opts());
    assert_eq!((s.identity.rank, s.identity.world_size), (0, 1));
    let warnings = &s.stats.warnings;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("no distributedInfo") && w.contains("rank 0 of 1")),
        "{warnings:?}"
    );
    // --world-size alone: rank 0 of that world, no note.
    let mut o = opts();
    o.world_size_override = Some(4);
    let s = import_checked(&p, &o);
    assert_eq!((s.identity.rank, s.identity.world_size), (0, 4));
    // --rank alone is not enough; both are.
    let mut o = opts();
    o.rank_override = Some(5);
    let e = fail(&p, &o);
    assert!(matches!(e.problem, Problem::MissingDistributedInfo), "{e}");
    assert!(e.to_string().contains("--world-size"), "{e}");
    o.world_size_override = Some(8);
    let s = import_checked(&p, &o);
    assert_eq!((s.identity.rank, s.identity.world_size), (5, 8));
    // Overrides win over distributedInfo; the rank must fit the world.
    let p = write(
        dir.path(),
        "big_rank.json",
        trace(&[STEP])
            .replace("\"rank\": 0", "\"rank\": 2")
            .as_bytes(),
    );
    let e = fail(&p, &opts());
    assert!(matches!(e.problem, Problem::BadDistributedInfo(_)), "{e}");
    let mut o = opts();
    o.rank_override = Some(1);
    assert_eq!(
        import::import_to_memory(&p, &o)
            .expect("override")
            .identity
            .rank,
        1
    );
    let p = write(dir.path(), "no_rank.json", br#"{"distributedInfo": {"world_size": 2}, "traceEvents": [{"ph": "X", "ts": 1, "dur": 1}]}"#);
    let e = fail(&p, &opts());
    assert!(e.to_string().contains("rank is missing"), "{e}");
    let mut o = opts();
    o.job.clear();
    assert!(matches!(fail(&p, &o).problem, Problem::BadOptions(_)));
}

#[test]
fn events_lacking_ts_or_dur() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Every complete event lacks a usable time: the file fails.
    let no_ts = r#"{"ph": "X", "cat": "kernel", "name": "a", "dur": 3}"#;
    let no_dur = r#"{"ph": "X", "cat": "kernel", "name": "b", "ts": 3}"#;
    let p = write(
        dir.path(),
        "no_times.json",
        trace(&[no_ts, no_dur]).as_bytes(),
    );
    let e = fail(&p, &opts());
    assert!(
        matches!(
            e.problem,
            Problem::NoUsableEvents {
                events: 2,
                skipped: 2
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("ts and dur"), "{e}");

    // Single bad events (missing, negative, wrong type, not an object,
    // duplicate keys) are skipped, counted and reported; the rest imports.
    let bad = [
        no_ts,
        no_dur,
        r#"{"ph": "X", "cat": "kernel", "name": "neg", "ts": 5, "dur": -2}"#,
        r#"{"ph": "X", "cat": "kernel", "name": "str", "ts": "5", "dur": 1, "args": [1, 2]}"#,
        r#"{"ph": "X", "cat": "kernel", "name": "obj", "ts": {"a": [1]}, "dur": 1}"#,
    ];
    let odd_but_fine = [
        "17",
        r#"[1, {"a": 2}]"#,
        r#"{"ph": "X", "cat": "kernel", "name": "dup", "ts": 1, "ts": 125, "dur": 1, "args": 3, "pid": "GPU 0", "tid": "stream 7"}"#,
    ];
    let mut events = vec![STEP, LAUNCH, KERNEL];
    events.extend(bad);
    events.extend(odd_but_fine);
    let p = write(dir.path(), "some_bad.json", trace(&events).as_bytes());
    let s = import_checked(&p, &opts());
    assert_eq!(s.stats.skipped_bad_events, 5);
    assert!(
        s.stats
            .warnings
            .iter()
            .any(|w| w.contains("\"a\"") && w.contains("no numeric ts")),
        "{:?}",
        s.stats.warnings
    );
    assert!(s
        .stats
        .warnings
        .iter()
        .any(|w| w.contains("5 event(s) without a usable ts/dur")));
    // gemm in the step; "dup" (last ts wins: 125) has no launch: outside.
    assert_eq!(s.stats.events_by_kind.kernel, 2);
    assert_eq!(s.stats.gpu_events_unlinked, 1);
    let names: Vec<&str> = s.names.values().map(String::as_str).collect();
    assert!(
        names.contains(&"dup") && names.contains(&"gemm"),
        "{names:?}"
    );
}

#[test]
fn sink_errors_name_the_file_and_chunk() {
    let p = fixture("param_dlrm_8rank_v100/worker2_step_12.1694128201554.pt.trace.json.gz");
    let mut o = opts();
    o.chunk_events = 10;
    let mut seen = 0;
    let err = import::import_file(&p, &o, |_c| {
        seen += 1;
        if seen == 3 {
            Err("collector unavailable")
        } else {
            Ok(())
        }
    })
    .expect_err("sink fails");
    assert!(
        matches!(err.problem, Problem::Sink { chunk: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("collector unavailable"), "{err}");
    assert!(err.to_string().contains("worker2_step_12"), "{err}");
}

#[test]
fn discover_expands_folders() {
    let set = fixture("param_dlrm_8rank_v100");
    let files = import::discover(&[
        set.clone(),
        set.join("worker3_step_12.1694128201557.pt.trace.json.gz"),
    ])
    .expect("discover");
    assert_eq!(
        files.len(),
        8,
        "sorted, deduplicated, results file left out"
    );
    assert!(files.windows(2).all(|w| w[0] < w[1]));
    assert!(files
        .iter()
        .all(|f| f.to_string_lossy().ends_with(".pt.trace.json.gz")));
    // A file named explicitly is always taken.
    let explicit = import::discover(&[set.join("expected-hta.json")]).expect("explicit");
    assert_eq!(explicit.len(), 1);
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "notes.txt", b"x");
    let e = import::discover(&[dir.path().to_path_buf()]).expect_err("no traces");
    assert!(matches!(e.problem, Problem::NoTraceFiles));
    assert!(e.to_string().contains(&dir.path().display().to_string()));
    // Non-JSON .json files in a folder are kept, so importing reports them.
    write(dir.path(), "broken.json", b"not json");
    assert_eq!(
        import::discover(&[dir.path().to_path_buf()])
            .expect("kept")
            .len(),
        1
    );
    let e = import::discover(&[dir.path().join("absent")]).expect_err("absent");
    assert!(e.to_string().contains("absent"));
}
