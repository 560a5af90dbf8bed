//! The importer's Operator and Memory views equal torch-tb-profiler 0.4.3
//! on the real trace sets (`cli/tests/fixtures/expected-tbp/`, made
//! by `make_expected.py` there, which names the versions).
//!
//! What is compared, per file and operator name:
//! - always: `calls` and host total (the plugin's Host Total Duration);
//! - where 0.4.3 links runtime calls to operators (their `External id`
//!   names an operator: `links` in the expected file), against the run
//!   with runtime events renamed to `runtime` (0.4.3 knows no
//!   `cuda_runtime`): host self, device self and device total (host self
//!   not for the few operators holding a runtime call whose External id is
//!   not theirs, `ops_with_a_runtime_call_linked_elsewhere`: 0.4.3 gives
//!   that call's time to another operator or to none);
//! - elsewhere 0.4.3 links nothing, so its host self keeps the runtime
//!   calls' time and its device times are 0 (its known limit, not
//!   copied): host self there equals ours plus the runtime calls' time.
//! - memory (the set with `[memory]` events): the per-operator table and
//!   the peaks, exactly.
//! - per (operator, input shape), the "Operator + Input Shape" table: calls,
//!   host total and (where 0.4.3 links nothing) host self, on every set
//!   taken with `record_shapes=True`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rankscope_kineto::{import_to_memory, ImportOptions};
use rankscope_proto::v1 as proto;
use serde_json::Value;

fn sets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/fixtures/kineto")
}

#[derive(Default, Debug)]
struct Op {
    calls: u64,
    host_total: f64,
    host_self: f64,
    runtime: f64,
    device_self: f64,
    device_total: f64,
}

fn ours(
    path: &Path,
) -> (
    BTreeMap<String, Op>,
    Vec<proto::Event>,
    BTreeMap<u32, String>,
) {
    let mut opts = ImportOptions::new("tbp");
    opts.rank_override = Some(0);
    opts.world_size_override = Some(1);
    let r = import_to_memory(path, &opts).expect("import");
    let names: BTreeMap<u32, String> = r.names.iter().map(|n| (n.id, n.name.clone())).collect();
    let mut ops: BTreeMap<String, Op> = BTreeMap::new();
    let mut rest = Vec::new();
    for ev in r.events {
        match &ev.kind {
            Some(proto::event::Kind::OperatorStat(o)) if o.by_shape => rest.push(ev),
            Some(proto::event::Kind::OperatorStat(o)) => {
                let e = ops.entry(names[&o.name_id].clone()).or_default();
                let us = |ns: u64| ns as f64 / 1000.0;
                e.calls += o.calls;
                e.host_total += us(o.host_total_ns);
                e.host_self += o.host_self_ns as f64 / 1000.0;
                e.runtime += us(o.runtime_ns);
                e.device_self += us(o.device_self_ns);
                e.device_total += us(o.device_total_ns);
            }
            Some(
                proto::event::Kind::MemoryOpStat(_)
                | proto::event::Kind::MemoryPeak(_)
                | proto::event::Kind::MemorySample(_),
            ) => rest.push(ev),
            _ => {}
        }
    }
    (ops, rest, names)
}

fn close(what: &str, op: &str, ours: f64, theirs: f64, calls: u64) {
    // The plugin sums float microseconds (differences of large float
    // timestamps); we sum whole nanoseconds.
    let tol = 0.05 + 1e-3 * calls as f64 + 1e-9 * theirs.abs();
    assert!(
        (ours - theirs).abs() <= tol,
        "{op}: {what} {ours} vs torch-tb-profiler {theirs} ({calls} calls)"
    );
}

/// "Group By: Operator + Input Shape" (`ops --group-by shape`): per (name,
/// `Input Dims` as Python prints it) the calls and host total equal 0.4.3's
/// (`as_is.ops_by_shape`, run as is), and where
/// 0.4.3 links no runtime call its host self equals ours plus the runtime
/// calls' time, as by name.
fn check_shapes(
    set: &str,
    file: &str,
    exp: &Value,
    rows: &[proto::Event],
    names: &BTreeMap<u32, String>,
    linked: bool,
) {
    let want = exp["as_is"]["ops_by_shape"].as_object().unwrap();
    let mut got: BTreeMap<String, Op> = BTreeMap::new();
    for ev in rows {
        if let Some(proto::event::Kind::OperatorStat(o)) = &ev.kind {
            let e = got
                .entry(format!("{}###{}", names[&o.name_id], o.input_shape))
                .or_default();
            e.calls += o.calls;
            e.host_total += o.host_total_ns as f64 / 1000.0;
            e.host_self += o.host_self_ns as f64 / 1000.0;
            e.runtime += o.runtime_ns as f64 / 1000.0;
        }
    }
    if got.is_empty() {
        // No operator of the file has `Input Dims` (taken without
        // record_shapes): the importer sends no shape rows (the API groups
        // by name and says so); the plugin's table is the name table with
        // every shape `[]`.
        assert!(
            want.keys().all(|k| k.ends_with("###[]")),
            "{set}/{file}: shapes we did not see: {want:?}"
        );
        return;
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{set}/{file}: (operator, input shape) keys"
    );
    for (key, o) in &got {
        let t = &want[key];
        let f = |k: &str| t[k].as_f64().unwrap();
        assert_eq!(o.calls, t["calls"].as_u64().unwrap(), "{set}/{file} {key}");
        close("host_total", key, o.host_total, f("host_total"), o.calls);
        if !linked {
            close(
                "host_self + runtime",
                key,
                o.host_self + o.runtime,
                f("host_self"),
                o.calls,
            );
        }
    }
}

fn check(set: &str, file: &str) {
    let stem = file.split('.').next().unwrap();
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(sets().join(format!("../expected-tbp/{set}__{stem}.tbp.json")))
            .expect("expected file"),
    )
    .expect("json");
    let (ops, mem, names) = ours(&sets().join(set).join(file));
    let links = &exp["links"];
    let n = links["runtime_calls_with_device_work"].as_u64().unwrap();
    let hit = links["external_id_names_an_op"].as_u64().unwrap();
    let linked = n > 0 && hit * 100 >= n * 99;
    let fixed = exp["runtime_fixed"]["ops"].as_object().unwrap();
    let as_is = exp["as_is"]["ops"].as_object().unwrap();
    assert_eq!(
        ops.keys().collect::<Vec<_>>(),
        as_is.keys().collect::<Vec<_>>(),
        "{set}/{file}: operator names"
    );
    for (name, o) in &ops {
        let t = if linked { &fixed[name] } else { &as_is[name] };
        let f = |k: &str| t[k].as_f64().unwrap();
        assert_eq!(
            o.calls,
            t["calls"].as_u64().unwrap(),
            "{set}/{file} {name}: calls"
        );
        close("host_total", name, o.host_total, f("host_total"), o.calls);
        let elsewhere = links["ops_with_a_runtime_call_linked_elsewhere"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == name.as_str());
        if linked {
            if !elsewhere {
                close("host_self", name, o.host_self, f("host_self"), o.calls);
            }
            close(
                "device_self",
                name,
                o.device_self,
                f("device_self"),
                o.calls,
            );
            close(
                "device_total",
                name,
                o.device_total,
                f("device_total"),
                o.calls,
            );
        } else {
            close(
                "host_self + runtime",
                name,
                o.host_self + o.runtime,
                f("host_self"),
                o.calls,
            );
            assert_eq!(f("device_total"), 0.0, "0.4.3 links nothing here");
        }
    }
    check_shapes(set, file, &exp, &mem, &names, linked);
    let mem: Vec<proto::Event> = mem
        .into_iter()
        .filter(|e| !matches!(e.kind, Some(proto::event::Kind::OperatorStat(_))))
        .collect();
    let Some(exp_mem) = exp["as_is"]["memory_ops"].as_object() else {
        assert!(
            mem.is_empty(),
            "{set}/{file}: no [memory] events, no memory rows"
        );
        return;
    };
    let dev_name = |d: i32| {
        if d < 0 {
            "CPU".to_owned()
        } else {
            format!("GPU{d}")
        }
    };
    let mut table: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut peaks: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for ev in &mem {
        match &ev.kind {
            Some(proto::event::Kind::MemoryOpStat(m)) => table
                .entry(dev_name(m.device))
                .or_default()
                .push(serde_json::json!([
                    names[&m.name_id],
                    m.calls,
                    m.size_increase_bytes as f64,
                    m.self_size_increase_bytes as f64,
                    m.allocation_count,
                    m.self_allocation_count,
                    m.allocation_size_bytes as f64,
                    m.self_allocation_size_bytes as f64
                ])),
            Some(proto::event::Kind::MemoryPeak(p)) => {
                peaks.insert(
                    dev_name(p.device),
                    vec![p.peak_allocated_bytes, p.peak_reserved_bytes],
                );
            }
            _ => {}
        }
    }
    for (dev, rows) in exp_mem {
        let mut want = rows.as_array().unwrap().clone();
        want.sort_by_key(|r| r[0].as_str().unwrap().to_owned());
        let mut got = table.remove(dev).unwrap_or_default();
        got.sort_by_key(|r| r[0].as_str().unwrap().to_owned());
        let norm = |v: &Vec<Value>| -> Vec<String> {
            v.iter()
                .map(|r| {
                    r.as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().map_or(x.to_string(), |f| format!("{f}")))
                        .collect::<Vec<_>>()
                        .join("|")
                })
                .collect()
        };
        assert_eq!(
            norm(&got),
            norm(&want),
            "{set}/{file}: memory table on {dev}"
        );
    }
    assert!(
        table.is_empty(),
        "{set}/{file}: extra memory rows {table:?}"
    );
    let want: BTreeMap<String, Vec<i64>> = exp["as_is"]["memory_peaks"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as i64)
                    .collect(),
            )
        })
        .collect();
    assert_eq!(peaks, want, "{set}/{file}: peaks");
}

#[test]
fn dlrm_ops_equal_the_plugin_which_links_no_runtime_call_there() {
    for (i, f) in [
        "worker0_step_12.1694128201545.pt.trace.json.gz",
        "worker1_step_12.1694128201556.pt.trace.json.gz",
    ]
    .iter()
    .enumerate()
    {
        let _ = i;
        check("param_dlrm_8rank_v100", f);
    }
}

#[test]
fn nccl_parser_set_ops_equal_the_plugin_device_times_included() {
    check("hta_nccl_parser_rank0_a100", "nccl_data.json.gz");
}

#[test]
fn b200_eager_ops_equal_the_plugin_device_times_included() {
    check("tracelens_b200_eager_rank0", "eager_trace.json.gz");
}

#[test]
fn mi300_resnet_ops_equal_the_plugin_device_times_included() {
    check(
        "tracelens_mi300_resnet_rank0",
        "resnet_act_checkpoint.json.gz",
    );
}

#[test]
fn cpu_gloo_ops_equal_the_plugin() {
    check("cpu_gloo_2rank", "rank0.pt.trace.json.gz");
}

#[test]
fn trace_filter_ops_equal_the_plugin() {
    check("hta_trace_filter_2rank_sm80", "sampled_rank-0.json.gz");
}

#[test]
fn df_index_resolver_ops_memory_table_and_peaks_equal_the_plugin() {
    check(
        "hta_df_index_resolver_rank1_v100",
        "df_index_resolver.json.gz",
    );
}

#[test]
fn negative_queue_ops_equal_the_plugin() {
    check("hta_negative_queue_rank0_a100", "rank0.json.gz");
}

#[test]
fn h200_sets_ops_equal_the_plugin() {
    // The GPU capture kit's run on an H200 (torch 2.11, CUDA 13.0, CUPTI
    // 13.0.1): on-demand (daemon) traces, no ProfilerStep annotation.
    for r in 0..4 {
        check(
            "gpukit_ddp_4rank_h200",
            &format!("rank{r}.local-1-r{r}-{}_{}.json.gz", 627 + r, 627 + r),
        );
    }
    check("gpukit_nccl1_h200", "rank0.local-2-r0-719_719.json.gz");
}

#[test]
fn cpu_memory_stack_set_ops_memory_table_and_peaks_equal_the_plugin() {
    // A real torch 2.15 CPU DDP job (profile_memory=True, with_stack=True).
    check("cpu_memory_stack_2rank", "rank0.pt.trace.json.gz");
    check("cpu_memory_stack_2rank", "rank1.pt.trace.json.gz");
}
