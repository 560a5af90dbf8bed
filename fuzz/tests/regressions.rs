//! Replays the inputs in `fuzz/regressions/<target>/` (cases the fuzzer
//! found, and the gzip / JSON bombs) and checks their outcomes.

use std::path::Path;

use rankscope_fuzz::{config, ingest, kineto, query, rank};

fn cases(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("regressions")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| {
                    let p = e.path();
                    let name = p
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned();
                    (name, std::fs::read(&p).expect("read case"))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn every_saved_case_replays_without_panic() {
    for (target, run) in [
        ("kineto", kineto::replay as fn(&[u8]) -> String),
        ("ingest", ingest::replay),
        ("rank", rank::replay),
        ("config", config::replay),
        ("query", query::replay),
    ] {
        for (name, input) in cases(target) {
            let outcome = run(&input);
            eprintln!("{target}/{name}: {outcome}");
        }
    }
}

#[test]
fn bombs_are_rejected_within_the_limits() {
    let bomb = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions/kineto/gzip-bomb-64mib.json.gz"),
    )
    .expect("bomb");
    assert_eq!(kineto::replay(&bomb), "JsonTooLarge");
    let nested = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions/kineto/nesting-bomb.json"),
    )
    .expect("nesting bomb");
    // 100,000 levels inside traceEvents: rejected, no stack overflow.
    let outcome = kineto::replay(&nested);
    assert_ne!(outcome, "ok");
}

#[test]
fn launch_cutoffs_that_overflow_are_a_400() {
    assert_eq!(
        query::replay(b"gpu/launches?runtime_cutoff_us=18446744073709551615"),
        "gpu/launches:invalid"
    );
    assert_eq!(
        query::replay(b"gpu/launches?launch_delay_cutoff_us=18446744073709552"),
        "gpu/launches:invalid"
    );
    assert_eq!(
        query::replay(b"gpu/launches?runtime_cutoff_us=7"),
        "gpu/launches:ok"
    );
}
