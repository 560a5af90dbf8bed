//! Target `query`: the HTTP API's query strings
//! (`rankscope_collector::api::check_query`: each route's `*Query` type
//! parsed as axum's `Query` extractor does, then the route's checks), no
//! store involved.
//!
//! An input is `<route>?<query string>`; bytes that cannot appear in a
//! URI are percent-encoded first, so every input reaches the parser.
//! Corpus: valid query strings of every route. Inputs: mutations with the
//! parameter names, `&`, `=`, `%` escapes and odd numbers.

use rand::rngs::SmallRng;
use rankscope_collector::api::{check_query, QUERY_ROUTES};

use crate::mutate::mutate;
use crate::Target;

const TOKENS: &[&str] = &[
    "&",
    "=",
    "%",
    "%00",
    "%FF",
    "%zz",
    "+",
    ",",
    "[]",
    "[0]",
    "from_step=",
    "to_step=",
    "last=",
    "rank=",
    "ranks=",
    "top=",
    "ratio=",
    "kernel_delay_us=",
    "runtime_cutoff_us=",
    "launch_delay_cutoff_us=",
    "fields=",
    "max_events=",
    "job=",
    "active=",
    "node=",
    "since_ns=",
    "flops_per_step=",
    "step=",
    "vs_rank=",
    "vs_job=",
    "trace_id=",
    "true",
    "NaN",
    "inf",
    "1e308",
    "-0",
    "0x10",
    "steps?",
    "gpu/launches?",
    "timeline?",
    "fleet?",
    "since=",
    "by=",
    "min_jobs=",
    "7d",
];

pub fn target() -> Target {
    let corpus = [
        "steps?from_step=1&to_step=9&last=3",
        "gpu/kernels?rank=0&top=5&ratio=0.8",
        "gpu/idle?kernel_delay_us=30",
        "gpu/launches?runtime_cutoff_us=50&launch_delay_cutoff_us=100",
        "timeline?from_step=2&to_step=4&ranks=0,1,3&max_events=1000",
        "matrix?last=5&fields=step_time_ns,idle_ns",
        "alerts?job=j&active=true",
        "goodput?flops_per_step=1.5e12",
        "breakdown?step=3",
        "collectives?rank=1",
        "gpus?node=n1&job=j&since_ns=17",
        "diff?rank=0&vs_rank=1&vs_job=k&from_step=1&to_step=2",
        "traces/list?trace_id=abc",
        "traces/diff?rank=2",
        "fleet?since=7d&by=gpu&min_jobs=2",
    ];
    Target {
        name: "query",
        corpus: corpus.iter().map(|s| s.as_bytes().to_vec()).collect(),
        generate: |rng: &mut SmallRng, corpus: &[Vec<u8>]| {
            let mut q = mutate(rng, corpus, TOKENS);
            q.truncate(4096);
            q
        },
        run,
    }
}

fn run(input: &[u8]) -> String {
    let split = input.iter().position(|b| *b == b'?').unwrap_or(input.len());
    let route = String::from_utf8_lossy(&input[..split]);
    let Some(route) = QUERY_ROUTES.iter().find(|r| **r == route) else {
        return "unknown_route".into();
    };
    let query = input.get(split + 1..).unwrap_or_default();
    let mut uri = String::from("/api/x?");
    for &b in query {
        if b.is_ascii_alphanumeric() || b"&=%+,.-_~[]:".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    let uri: http::Uri = match uri.parse() {
        Ok(u) => u,
        Err(_) => return "bad_uri".into(),
    };
    match check_query(route, &uri) {
        Ok(()) => format!("{route}:ok"),
        Err(e) => format!("{route}:{}", e.split(':').next().unwrap_or("")),
    }
}

/// Runs one saved input (regression tests).
pub fn replay(input: &[u8]) -> String {
    run(input)
}
