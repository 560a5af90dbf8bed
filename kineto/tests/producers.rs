//! PaddlePaddle and ONNX Runtime traces, written at test time by the real
//! producers (the venv `make producers` builds: PyPI `paddlepaddle`,
//! `onnxruntime`, `onnx`, and torch from `make py`'s venv), imported:
//! - Paddle: a small training loop with `profile_memory=True` in 2
//!   processes (CPU): steps, operators, the rank from the file name; each
//!   operator's host time (`op_summary`'s `total_ns`) equals the CPU Total
//!   of Paddle's own Operator Summary of the same run within 1 %;
//! - ORT: a small model exported from torch, run 3 times with profiling:
//!   steps from `model_run`, per-op-type host time equal to the profile's
//!   own totals;
//! - bad input: truncated Paddle and ORT files and an unknown format fail
//!   with errors naming the file and the formats read.
//!
//! The producer scripts are in `tests/producers/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use rankscope_kineto::{import_to_memory, op_summary, ImportOptions, ImportedRank, Problem};
use rankscope_proto::v1 as proto;
use serde_json::Value;

use proto::event::Kind;

/// The producers venv's Python; panics naming `make producers` without it.
fn python() -> PathBuf {
    let venv = std::env::var_os("RANKSCOPE_PRODUCERS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv-producers"));
    let py = venv.join("bin/python");
    let ok = py.exists()
        && Command::new(&py)
            .args(["-c", "import paddle, onnxruntime, onnx, torch"])
            .status()
            .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the producers venv {} is missing or lacks paddlepaddle / onnxruntime / onnx / torch: \
         run `make producers` (or set RANKSCOPE_PRODUCERS_VENV)",
        venv.display()
    );
    py
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/producers")
        .join(name)
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("start the producer");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where the producers wrote (once per test binary).
struct Written {
    _dir: tempfile::TempDir,
    paddle: Vec<PathBuf>,
    ort: PathBuf,
    ort_totals: Value,
}

fn written() -> &'static Written {
    static W: OnceLock<Written> = OnceLock::new();
    W.get_or_init(|| {
        let py = python();
        let dir = tempfile::tempdir().expect("tempdir");
        let pd = dir.path().join("paddle");
        std::fs::create_dir_all(&pd).expect("mkdir");
        // Two ranks, two processes at once: both spawned, then waited for.
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                Command::new(&py)
                    .arg(script("paddle_train.py"))
                    .arg(&pd)
                    .args([r.to_string(), "4".into()])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("start paddle")
            })
            .collect();
        for (r, child) in ranks.into_iter().enumerate() {
            let out = child.wait_with_output().expect("wait for paddle");
            assert!(
                out.status.success(),
                "paddle rank {r}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut paddle: Vec<PathBuf> = std::fs::read_dir(&pd)
            .expect("paddle dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".paddle_trace.json"))
            .collect();
        paddle.sort();
        assert_eq!(paddle.len(), 2, "{paddle:?}");
        let ort_dir = dir.path().join("ort");
        std::fs::create_dir_all(&ort_dir).expect("mkdir");
        let model = ort_dir.join("model.onnx");
        run(Command::new(&py)
            .arg(script("ort_profile.py"))
            .arg("export")
            .arg(&model));
        run(Command::new(&py)
            .arg(script("ort_profile.py"))
            .arg("run")
            .arg(&model)
            .arg(&ort_dir)
            .arg("3"));
        let ort_totals: Value = serde_json::from_slice(
            &std::fs::read(ort_dir.join("ort_totals.json")).expect("totals"),
        )
        .expect("totals json");
        let ort = ort_dir.join(ort_totals["profile"].as_str().expect("profile name"));
        Written {
            _dir: dir,
            paddle,
            ort,
            ort_totals,
        }
    })
}

fn steps(r: &ImportedRank) -> Vec<u64> {
    r.events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(Kind::StepBegin(s)) => Some(s.step),
            _ => None,
        })
        .collect()
}

/// (calls, total ns) per CPU operator over the whole file.
fn host_ops(path: &Path) -> BTreeMap<String, (u64, u64)> {
    let mut ops = BTreeMap::new();
    for s in op_summary(path, &[(0, u64::MAX)]).expect("op summary") {
        if s.category == "CPU_OP" {
            let e = ops.entry(s.name).or_insert((0, 0));
            e.0 += s.calls;
            e.1 += s.total_ns;
        }
    }
    ops
}

#[test]
fn paddle_traces_import_with_steps_ranks_and_paddles_operator_times() {
    let w = written();
    let mut opts = ImportOptions::new("paddle-job");
    opts.world_size_override = Some(2);
    for (rank, path) in w.paddle.iter().enumerate() {
        let r = import_to_memory(path, &opts).expect("import paddle");
        // The rank comes from the file name (worker_name="rank{R}").
        assert_eq!((r.identity.rank, r.identity.world_size), (rank as u32, 2));
        assert_eq!(r.identity.labels["source"], "paddle");
        let peak: u64 = r.identity.labels["peak_allocated_bytes"]
            .parse()
            .expect("peak");
        assert!(peak > 0);
        // prof.start() opens step 0, each of the 4 prof.step() one more.
        assert_eq!(steps(&r), [0, 1, 2, 3, 4]);
        let phases: Vec<i32> = r
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                Some(Kind::Span(s)) => Some(s.category),
                _ => None,
            })
            .collect();
        for c in [
            proto::SpanCategory::Forward,
            proto::SpanCategory::Backward,
            proto::SpanCategory::Optimizer,
        ] {
            assert!(phases.contains(&(c as i32)), "no {c:?} span");
        }

        let summary_path = path.with_file_name(format!("rank{rank}.summary.json"));
        let summary: Value =
            serde_json::from_slice(&std::fs::read(summary_path).expect("summary")).expect("json");
        let want = summary["operators"].as_object().expect("operators");
        let got = host_ops(path);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>(),
            "operator names"
        );
        for (name, item) in want {
            let (calls, total) = got[name];
            assert_eq!(calls, item["calls"].as_u64().unwrap(), "{name} calls");
            let paddle = item["cpu_total_ns"].as_u64().unwrap() as f64;
            let diff = (total as f64 - paddle).abs() / paddle;
            assert!(
                diff <= 0.01,
                "{name}: ours {total} ns, Paddle's {paddle} ns"
            );
        }
    }
}

#[test]
fn an_onnx_runtime_profile_imports_as_one_rank_with_the_profiles_op_totals() {
    let w = written();
    let r = import_to_memory(&w.ort, &ImportOptions::new("ort-job")).expect("import ort");
    assert_eq!((r.identity.rank, r.identity.world_size), (0, 1));
    assert_eq!(r.identity.labels["source"], "onnxruntime");
    assert_eq!(r.identity.labels["providers"], "CPUExecutionProvider");
    let runs = w.ort_totals["model_runs"].as_u64().unwrap();
    assert_eq!(steps(&r), (0..runs).collect::<Vec<_>>());
    let got = host_ops(&w.ort);
    let want = w.ort_totals["op_types"].as_object().expect("op types");
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (op, t) in want {
        let dur_ns = t["dur_us"].as_u64().unwrap() * 1000;
        assert_eq!(
            got[op],
            (t["calls"].as_u64().unwrap(), dur_ns),
            "{op}: (calls, host ns)"
        );
    }
}

#[test]
fn truncated_paddle_and_ort_files_and_unknown_formats_fail_clearly() {
    let w = written();
    let dir = tempfile::tempdir().expect("tempdir");
    for (src, name) in [
        (&w.paddle[0], "rank0_cut.paddle_trace.json"),
        (&w.ort, "ort_cut.json"),
    ] {
        let bytes = std::fs::read(src).expect("read");
        let cut = dir.path().join(name);
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
        let mut opts = ImportOptions::new("j");
        opts.world_size_override = Some(2);
        let e = import_to_memory(&cut, &opts).expect_err("truncated");
        assert!(matches!(e.problem, Problem::Truncated { .. }), "{e}");
        assert!(e.to_string().contains(name), "{e}");
    }
    // A JSON array of something else is no trace either.
    let list = dir.path().join("list.json");
    std::fs::write(&list, br#"[{"id": 1}, {"id": 2}]"#).expect("write");
    let e = import_to_memory(&list, &ImportOptions::new("j")).expect_err("unknown");
    assert!(matches!(e.problem, Problem::NotKinetoTrace(_)), "{e}");
    assert!(e.to_string().contains("ONNX Runtime"), "{e}");
    let odd = dir.path().join("results.json");
    std::fs::write(&odd, br#"{"model": "resnet", "images_per_s": 1234}"#).expect("write");
    let e = import_to_memory(&odd, &ImportOptions::new("j")).expect_err("unknown");
    let msg = e.to_string();
    for needle in ["results.json", "Kineto", "PaddlePaddle", "ONNX Runtime"] {
        assert!(msg.contains(needle), "{needle} not in {msg}");
    }
    // A Paddle trace without a world size (nor rank in its name) says what to pass.
    let anon = dir.path().join("host_xpid_1.paddle_trace.json");
    std::fs::copy(&w.paddle[1], &anon).expect("copy");
    let e = import_to_memory(&anon, &ImportOptions::new("j")).expect_err("no rank");
    assert!(matches!(e.problem, Problem::NoRank("paddle")), "{e}");
}
