//! `rankscope-agent --check` as an operator runs it.

use std::process::Command;

use crate::stub::Stub;

fn check(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rankscope-agent"))
        .arg("--check")
        .args(args)
        .env_remove("RANKSCOPE_NVML_LIBRARY")
        .env_remove("RANKSCOPE_AGENT_CONFIG")
        .output()
        .expect("run rankscope-agent --check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn check_lists_gpus_gpm_and_missing_metrics() {
    let stub = Stub::new("device_count 3\ngpu 1 gpm 1\ngpu 0 unsupported power\ngpu 2 lost 1");
    let out = check(&["--nvml-library", &stub.path()]);
    assert!(out.contains("nvml: ok ("), "{out}");
    assert!(out.contains("driver 550.54.15"), "{out}");
    assert!(out.contains("gpus: 3"), "{out}");
    let gpu = |i: usize| -> Vec<&str> {
        let at = out
            .find(&format!("  gpu {i}:"))
            .unwrap_or_else(|| panic!("gpu {i}: {out}"));
        out[at..].lines().take(3).collect()
    };
    assert!(gpu(0)[0].contains("state=ok gpm=no"), "{out}");
    assert!(
        gpu(0)[2].contains("power") && !gpu(0)[1].contains(" power "),
        "{out}"
    );
    assert!(gpu(1)[0].contains("gpm=yes"), "{out}");
    assert!(gpu(2)[0].contains("state=lost"), "{out}");
    assert!(out.contains("host: ok"), "{out}");
}

#[test]
fn check_explains_why_nvml_is_unavailable() {
    let out = check(&["--nvml-library", "/nonexistent/libnvidia-ml.so.1"]);
    assert!(
        out.contains("nvml: unavailable (/nonexistent/libnvidia-ml.so.1): cannot load"),
        "{out}"
    );
    assert!(
        out.contains("gpus: 0 (the agent samples the host only)"),
        "{out}"
    );
    assert!(out.contains("host: ok"), "{out}");
    // The environment variable backs the flag.
    let stub = Stub::new("init_error 9");
    let out = Command::new(env!("CARGO_BIN_EXE_rankscope-agent"))
        .arg("--check")
        .env("RANKSCOPE_NVML_LIBRARY", stub.path())
        .output()
        .unwrap();
    let out = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.contains("the NVIDIA kernel driver is not loaded"),
        "{out}"
    );
}

#[test]
fn check_runs_on_a_one_thread_runtime() {
    // worker_threads = 1 makes the binary build a current-thread runtime.
    let stub = Stub::new("device_count 1");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "worker_threads = 1\nunix_socket_path = \"\"\n").unwrap();
    let out = check(&[
        "--config",
        config.to_str().unwrap(),
        "--nvml-library",
        &stub.path(),
    ]);
    assert!(out.contains("gpus: 1"), "{out}");
}
