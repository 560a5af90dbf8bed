//! Modern ClickHouse (issue 34): every query route answers the same on Debian's
//! ClickHouse 18.16 and on ClickHouse 26.x (chDB behind `testkit/chdb_front.py`), for
//! a simulated straggler job and for the DLRM 8-rank import; and a query whose result
//! types differ from its Rust row fails loudly, naming the query file.
//!
//! Each job runs once per engine, through a whole stack (agent or importer ->
//! collector -> ClickHouse); then every route's JSON is compared field by field.
//! Only wall-clock fields (when a verdict or alert was raised, a trace requested)
//! are left out, and floats computed inside ClickHouse may differ in the last bits
//! (summation order), so they compare to 1e-9 relative.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use rankscope_cli::import::{self, send};
use rankscope_cli::simulate::Straggler;
use rankscope_testkit::ClickHouse;
use serde_json::Value;

/// Job routes compared, relative to `/api/v1/jobs/{job}/`.
const JOB_ROUTES: &[&str] = &[
    "steps?last=1000",
    "breakdown?last=1000",
    "progress",
    "ranks",
    "ranks?exact=true",
    "collectives",
    "stragglers",
    "hangs",
    "kernel-types",
    "kernels",
    "idle",
    "queue",
    "memcpy",
    "launches",
    "traces",
    "goodput",
    "diff?rank=5&vs_rank=0",
    "timeline",
    "matrix",
    "collectives/steps",
    "overview",
    "advice",
    // Computes from the stored rows and keeps them (overview_ranks); the
    // rank filter's first request then reads the kept rows.
    "overview?exact=true",
    "overview?rank=0",
    "annotations",
    "kernels?by=kernel",
    "kernels?by=category",
    "ops",
    "ops?rank=0&group_by=stack",
    "memory?ops=true",
    "memory?events=true&limit=100",
    "memory?ops=true&curve=true",
    "ops?rank=0&group_by=shape",
    "clocks",
];

/// Keys whose values are wall-clock times of this run, not stored facts.
const WALL_CLOCK_KEYS: &[&str] = &[
    "updated_ns",
    "raised_ns",
    "fired_ns",
    "resolved_ns",
    "notified_ns",
    "requested_ns",
    "created_ns",
    "received_ns",
    "last_seen_ns",
    "started_at_ns",
    "first_seen_ns",
    "since_ns",
    "as_of_ns",
    "rank_hours",
    "cost_gpu_hours",
];

/// Every route's answer: route -> (HTTP status, JSON body).
type Answers = BTreeMap<String, (u16, Value)>;

async fn answers(stack: &Stack, job: &str) -> Answers {
    let http = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(60));
    let base = format!("http://{}", stack.http_addr());
    let mut routes: Vec<String> = JOB_ROUTES
        .iter()
        .map(|r| format!("/api/v1/jobs/{job}/{r}"))
        .collect();
    routes.push("/api/v1/jobs".into());
    routes.push(format!("/api/v1/alerts?job={job}"));
    routes.push("/api/v1/fleet?since=1d".into());
    routes.push("/api/v1/fleet?since=1d&by=gpu".into());
    routes.push("/api/v1/gpus".into());
    routes.push(format!(
        "/api/v1/jobs/{job}/diff?rank=5&vs_rank=5&vs_job={job}"
    ));
    let mut out = Answers::new();
    for route in routes {
        let (status, body) = http
            .get(&format!("{base}{route}"))
            .await
            .unwrap_or_else(|e| panic!("GET {route}: {e}"));
        let json: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("GET {route}: not JSON ({e}): {body:?}"));
        out.insert(route, (status.as_u16(), json));
    }
    out
}

/// Differences between `a` (18.16) and `b` (26.x) at `path`, appended to `diffs`.
fn diff(path: &str, a: &Value, b: &Value, diffs: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                if WALL_CLOCK_KEYS.contains(&k.as_str()) {
                    continue;
                }
                match y.get(k) {
                    Some(vb) => diff(&format!("{path}.{k}"), va, vb, diffs),
                    None => diffs.push(format!("{path}.{k}: only on 18.16")),
                }
            }
            for k in y.keys().filter(|k| !x.contains_key(*k)) {
                diffs.push(format!("{path}.{k}: only on 26.x"));
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), va, vb, diffs);
            }
        }
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            if (x - y).abs() > 1e-9 * x.abs().max(y.abs()) {
                diffs.push(format!("{path}: 18.16 {x}, 26.x {y}"));
            }
        }
        _ if a == b => {}
        _ => diffs.push(format!("{path}: 18.16 {a}, 26.x {b}")),
    }
}

fn assert_same(what: &str, old: &Answers, new: &Answers) {
    let mut diffs = Vec::new();
    for (route, (status, body)) in old {
        let (status_b, body_b) = &new[route];
        if (*status, *status_b) != (200, 200) {
            let short = |v: &Value| v.to_string().chars().take(400).collect::<String>();
            diffs.push(format!(
                "{route}: HTTP {status} on 18.16, {status_b} on 26.x: {} / {}",
                short(body),
                short(body_b)
            ));
            continue;
        }
        diff(route, body, body_b, &mut diffs);
    }
    assert!(
        diffs.is_empty(),
        "{what}: {} differences between ClickHouse 18.16 and 26.x:\n{}",
        diffs.len(),
        diffs[..diffs.len().min(40)].join("\n")
    );
}

async fn straggler_job(clickhouse: ClickHouse, start_ns: u64) -> Answers {
    let version = clickhouse.version().expect("version");
    let stack = Stack::start_on(clickhouse).await;
    let job = "modern-straggler";
    let mut sim = sim_config(job, 8, 30);
    sim.stragglers = vec![Straggler {
        rank: 5,
        factor: 1.3,
    }];
    sim.start_ns = start_ns;
    rankscope_cli::simulate::run(&sim, &stack.agent_url())
        .await
        .expect("simulate");
    stack.analytics_final(job, 8 * 30).await;
    stack.all_stored(&sim).await;
    // The verdict over (nearly) the whole run, then its alert: what the routes show.
    let live = stack
        .api_poll(
            &format!("/api/v1/jobs/{job}/stragglers"),
            "stragglers",
            |r| {
                r.iter().any(|s| {
                    s["rank"] == 5
                        && s["expected_gain_pct"].is_number()
                        && s["last_step"].as_u64() >= Some(29)
                })
            },
        )
        .await;
    // The route answers from the collector's memory; goodput and the fleet
    // read the stored version and its gain (each its own INSERT).
    let last = live
        .iter()
        .filter(|s| s["rank"] == 5)
        .filter_map(|s| s["last_step"].as_u64())
        .max()
        .expect("rank 5's verdict");
    for table in ["straggler_verdicts", "straggler_gains"] {
        let sql = format!(
            "SELECT max(last_step) FROM {}.{table} WHERE job_id = '{job}' AND rank = 5",
            stack.database
        );
        eventually(60, &format!("{table} stored to step {last}"), || {
            stack
                .clickhouse
                .query(&sql)
                .ok()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .is_some_and(|n| n >= last)
        })
        .await;
    }
    stack
        .api_poll(&format!("/api/v1/alerts?job={job}"), "alerts", |r| {
            r.iter().any(|a| a["rule"] == "straggler")
        })
        .await;
    let out = answers(&stack, job).await;
    eprintln!(
        "straggler job on ClickHouse {version}: {} routes",
        out.len()
    );
    stack.stop().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_straggler_job_answers_the_same_on_18_16_and_26() {
    let now = rankscope_testkit_now_ns();
    let start_ns = now - now % 3_600_000_000_000;
    let old = straggler_job(ClickHouse::start().expect("ClickHouse 18.16"), start_ns).await;
    let new = straggler_job(ClickHouse::start_chdb().expect("chDB"), start_ns).await;
    let goodput = &new["/api/v1/jobs/modern-straggler/goodput"].1;
    assert_eq!(goodput["devices"], 8, "{goodput}");
    assert_same("straggler job", &old, &new);
}

fn dlrm_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/fixtures/kineto/param_dlrm_8rank_v100")
}

async fn dlrm_job(clickhouse: ClickHouse) -> Answers {
    let stack = Stack::start_without_agent_on(clickhouse, |_| {}).await;
    let files = import::discover(&[dlrm_dir()]).expect("trace files");
    let opts = import::ImportOptions::new("dlrm");
    let send_opts = stack.send_options();
    let reports = send::import_and_send(files, &opts, &send_opts)
        .await
        .expect("import");
    let want: u64 = reports
        .iter()
        .map(|r| import::wait::rank_steps(&r.summary.stats))
        .sum();
    let http = rankscope_cli::query::http::HttpClient::new(Duration::from_secs(5));
    import::wait::until_final(
        &http,
        &format!("http://{}", stack.http_addr()),
        "dlrm",
        want,
        Duration::from_secs(120),
        false,
    )
    .await
    .expect("analytics final");
    let out = answers(&stack, "dlrm").await;
    stack.stop().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dlrm_import_answers_the_same_on_18_16_and_26() {
    let old = dlrm_job(ClickHouse::start().expect("ClickHouse 18.16")).await;
    let new = dlrm_job(ClickHouse::start_chdb().expect("chDB")).await;
    assert_same("DLRM import", &old, &new);
}

fn rankscope_testkit_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

/// `goodput_job.sql` as it was before issue 34: scalar subqueries, which ClickHouse 21+
/// types `Nullable(...)`; 18.16 read them fine, 26.x answered garbage without an error.
const OLD_GOODPUT_JOB_SQL: &str = "SELECT
    (SELECT minIf(ts_ns, kind = 'begin') FROM steps WHERE job_id = ?) AS first_ns,
    (SELECT maxIf(ts_ns, kind = 'end') FROM steps WHERE job_id = ?) AS last_ns,
    (SELECT max(world_size) FROM ranks WHERE job_id = ?) AS world_size,
    (SELECT max(silent_ns) FROM hang_suspects WHERE job_id = ?) AS longest_hang_ns";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_type_the_reader_does_not_expect_is_an_error_naming_the_query() {
    use rankscope_collector::store::goodput::GoodputJob;
    use rankscope_collector::store::{Store, StoreConfig};
    let ch = ClickHouse::start_chdb().expect("chDB");
    let database = ch.fresh_database("types").expect("database");
    let store = Store::connect(&StoreConfig {
        url: ch.http_url.clone(),
        database,
        ..StoreConfig::default()
    })
    .expect("connect");
    store.migrate().await.expect("migrate");
    assert_eq!(store.typed_reads(), Some(true), "26.x reports result types");
    let err = store
        .read_sql("goodput_job.sql", OLD_GOODPUT_JOB_SQL)
        .bind("j")
        .bind("j")
        .bind("j")
        .bind("j")
        .fetch_one::<GoodputJob>()
        .await
        .expect_err("a Nullable column read as a plain number must fail");
    let text = err.to_string();
    for part in ["goodput_job.sql", "first_ns", "Nullable(UInt64)", "u64"] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    // The shipped query reads cleanly on the same server.
    let job = store.goodput_job("j").await.expect("goodput_job.sql typed");
    assert_eq!((job.first_ns, job.world_size), (0, 0));
}
