//! Target `kineto`: the Kineto trace importer
//! (`rankscope_kineto::import_bytes`, the in-memory twin of
//! `import_to_memory` / `parse_trace_file`).
//!
//! Corpus: small cuts of the real traces in `fuzz/corpus/kineto/` (the
//! metadata and ~60 events of each fixture set, one of each kind). Inputs:
//! mutated JSON (tokens of the Kineto format, odd numbers, deep nesting),
//! sometimes gzip'd, sometimes a damaged gzip stream, rarely a gzip bomb
//! (`BOMB_JSON_BYTES` of JSON in ~100 KiB of gzip). Options vary with the
//! input's length (overrides on / off, small chunks and ordering buffers so
//! several passes run), so each input replays the same way.
//!
//! Checked besides "no panic": an import either fails with a `Problem` or
//! yields events whose intervals have `end_ns >= start_ns` and whose name
//! ids are all defined (the importer's documented output invariants).

use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

use flate2::write::GzEncoder;
use flate2::Compression;
use rand::rngs::SmallRng;
use rand::Rng;
use rankscope_kineto::{import_bytes, ImportOptions};
use rankscope_proto::v1::event::Kind;

use crate::mutate::{edit, mutate};
use crate::Target;

/// The cap on decompressed JSON this target imports with (a gzip bomb
/// must fail with `JsonTooLarge` after this many bytes).
pub const MAX_JSON_BYTES: u64 = 16 << 20;
/// Decompressed size of the gzip bomb.
const BOMB_JSON_BYTES: usize = 64 << 20;

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "true",
    "\"ts\":",
    "\"dur\":",
    "\"ph\":\"X\",",
    "\"ph\":\"M\",",
    "\"ph\":\"f\",",
    "\"cat\":\"kernel\",",
    "\"cat\":\"cuda_runtime\",",
    "\"cat\":\"user_annotation\",",
    "\"cat\":\"gpu_user_annotation\",",
    "\"cat\":\"gpu_memcpy\",",
    "\"name\":\"ProfilerStep#3\",",
    "\"name\":\"ProfilerStep#18446744073709551615\",",
    "\"name\":\"ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)\",",
    "\"name\":\"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)\",",
    "\"name\":\"c10d::allreduce_\",",
    "\"name\":\"record_param_comms\",",
    "\"args\":{\"correlation\":1,\"stream\":7,\"device\":0},",
    "\"correlation\":",
    "\"External id\":",
    "\"Collective name\":\"allreduce\",",
    "\"In msg nelems\":",
    "\"Group size\":",
    "\"dtype\":\"Float\",",
    "\"Process Group Ranks\":\"[0, 1]\",",
    "\"Process Group Name\":\"0\",",
    "\"Input Dims\":[[1,2],[3]],",
    "\"pid\":",
    "\"tid\":",
    "\"distributedInfo\":{\"rank\":0,\"world_size\":2},",
    "\"pg_config\":[{\"pg_name\":\"0\",\"ranks\":[0,1],\"pg_size\":2}],",
    "\"baseTimeNanoseconds\":",
    "\"traceEvents\":[",
    "\"deviceProperties\":[{\"id\":0,\"name\":\"X\"}],",
    "\\u0000",
    "\\ud800",
    "\u{feff}",
    "1e309",
    "-1",
    "18446744073709551615",
];

pub fn target() -> Target {
    Target {
        name: "kineto",
        corpus: corpus(),
        generate,
        run,
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/kineto");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    let mut out: Vec<Vec<u8>> = files.iter().filter_map(|p| std::fs::read(p).ok()).collect();
    let gz: Vec<_> = out.iter().take(2).map(|j| gzip(j)).collect();
    out.extend(gz);
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(data).expect("gzip to memory");
    e.finish().expect("gzip to memory")
}

/// `{"traceEvents":[` and 64 MiB of spaces, gzip'd once per process.
pub fn gzip_bomb() -> &'static [u8] {
    static BOMB: OnceLock<Vec<u8>> = OnceLock::new();
    BOMB.get_or_init(|| {
        let mut e = GzEncoder::new(Vec::new(), Compression::best());
        e.write_all(b"{\"traceEvents\":[").expect("gzip");
        let spaces = vec![b' '; 1 << 20];
        for _ in 0..BOMB_JSON_BYTES >> 20 {
            e.write_all(&spaces).expect("gzip");
        }
        e.finish().expect("gzip")
    })
}

fn generate(rng: &mut SmallRng, corpus: &[Vec<u8>]) -> Vec<u8> {
    match rng.random_range(0..1000) {
        0 if rng.random_ratio(1, 20) => gzip_bomb().to_vec(),
        0..=59 => gzip(&mutate(rng, corpus, TOKENS)),
        60..=79 => {
            // A damaged gzip stream of a valid trace.
            let mut z = gzip(&corpus[rng.random_range(0..corpus.len())]);
            for _ in 0..rng.random_range(1..=3) {
                edit(rng, &mut z, &[]);
            }
            z
        }
        _ => mutate(rng, corpus, TOKENS),
    }
}

fn run(input: &[u8]) -> String {
    let mut opts = ImportOptions::new("fuzz");
    opts.max_json_bytes = Some(MAX_JSON_BYTES);
    if input.len().is_multiple_of(2) {
        opts.rank_override = Some(1);
        opts.world_size_override = Some(2);
    }
    if input.len().is_multiple_of(3) {
        opts.chunk_events = 5;
        opts.max_buffered_events = 8;
    }
    match import_bytes(Path::new("fuzz.pt.trace.json"), input, &opts) {
        Ok(r) => {
            let defined: std::collections::HashSet<u32> = r.names.iter().map(|n| n.id).collect();
            for e in &r.events {
                let (start, end, names) = match &e.kind {
                    Some(Kind::Span(s)) => (s.start_ns, s.end_ns, vec![s.name_id]),
                    Some(Kind::Kernel(k)) => {
                        assert!(
                            k.launch_end_ns >= k.launch_start_ns,
                            "launch ends first: {k:?}"
                        );
                        (k.start_ns, k.end_ns, vec![k.name_id, k.launch_name_id])
                    }
                    Some(Kind::Collective(c)) => (c.start_ns, c.end_ns, vec![]),
                    _ => (0, 0, vec![]),
                };
                assert!(end >= start, "interval ends before it starts: {e:?}");
                for id in names {
                    assert!(
                        id == 0 || defined.contains(&id),
                        "undefined name id {id}: {e:?}"
                    );
                }
            }
            "ok".into()
        }
        Err(e) => crate::kind(&e.problem),
    }
}

/// Runs one saved input (regression tests).
pub fn replay(input: &[u8]) -> String {
    run(input)
}
