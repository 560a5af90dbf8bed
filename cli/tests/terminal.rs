//! The CLI on a terminal, as a newcomer meets it: a closed pipe
//! (`rankscope kernels ... | head -1`) ends it quietly, and kernel tables
//! with names of 300+ characters fit 200 columns while JSON and CSV keep the
//! names whole. The real `rankscope` binary against a real axum server on
//! 127.0.0.1:0 serving the API's `kernels` rows.

use std::io::Read;
use std::process::{Command, Stdio};

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

/// A CUTLASS-style name of 300+ characters.
fn long_name(i: usize) -> String {
    format!(
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_{i}_256x128_32x3_nn_align4<{}>>(cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4::Params)",
        "cutlass::gemm::GemmShape<256, 128, 32>, ".repeat(8)
    )
}

fn kernels() -> Value {
    let rows: Vec<Value> = (0..2000)
        .map(|i| {
            json!({"rank": i % 8, "kernel_type": "COMPUTATION", "name": long_name(i),
                   "calls": 10, "sum_ns": 1_000_000, "max_ns": 200_000, "min_ns": 50_000,
                   "mean_ns": 100_000, "stddev_ns": 10_000})
        })
        .collect();
    json!({ "kernels": rows })
}

/// The API on 127.0.0.1:0 in a runtime of its own thread; its base URL.
fn serve() -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let app = Router::new().route(
                "/api/v1/jobs/{job}/kernels",
                get(|| async { Json(kernels()) }),
            );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    format!("http://{}", rx.recv().expect("server address"))
}

fn rankscope(base: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rankscope"));
    c.args(["--collector", base, "kernels", "--job", "j"])
        .args(extra)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    c
}

#[test]
fn a_closed_pipe_ends_the_cli_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let base = serve();
    // The reader is gone before the CLI writes a byte: every write fails.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = rankscope(&base, &[])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("rankscope runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "stderr not quiet: {stderr}");
    // Ended by SIGPIPE, as `cat` or `grep` are; never a panic (exit 101).
    assert_eq!(
        out.status.signal(),
        Some(libc_sigpipe()),
        "{:?}",
        out.status
    );
}

/// SIGPIPE's number on Linux.
fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn head_one_reads_the_header_and_the_cli_ends_quietly() {
    let base = serve();
    let mut child = rankscope(&base, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rankscope runs");
    // `head -1`: one line, then the pipe is closed.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = Vec::new();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte).expect("read") == 1 && byte[0] != b'\n' {
        first.push(byte[0]);
    }
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    assert!(
        String::from_utf8_lossy(&first).starts_with("rank"),
        "{first:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "stderr not quiet: {stderr}");
}

#[test]
fn kernel_tables_fit_200_columns_and_json_csv_keep_names_whole() {
    let base = serve();
    let table = rankscope(&base, &[]).output().expect("runs");
    assert!(table.status.success(), "{table:?}");
    let text = String::from_utf8(table.stdout).expect("UTF-8");
    assert_eq!(text.lines().count(), 2001, "header + every row");
    for line in text.lines() {
        assert!(line.chars().count() <= 200, "{} wide: {line}", line.len());
    }
    assert!(text.contains("cutlass::Kernel"), "{}", &text[..400]);
    for format in ["json", "csv"] {
        let out = rankscope(&base, &["--format", format])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{out:?}");
        let body = String::from_utf8(out.stdout).expect("UTF-8");
        assert!(body.contains(&long_name(1999)), "{format} cut a name");
    }
}
