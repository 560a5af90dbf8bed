//! Compares rankscope's HTA-style views of one imported trace set with HTA
//! 0.5.0's own output on the same files (`expected-hta-analyses.json`
//! beside the set, written by `testkit/hta/expected_hta.py`).
//!
//! In: a running stack with the set imported as `job`, the expected file.
//! Out: panics naming the first value that differs; returns the largest
//! difference seen per measure, for the report.

use std::collections::HashMap;

use serde_json::Value;

use super::{f, rows, Stack};

/// Largest |ours - theirs| seen per measure.
#[derive(Default, Debug)]
pub struct Worst(pub HashMap<&'static str, f64>);

impl Worst {
    pub fn check(&mut self, what: &'static str, ours: f64, theirs: f64, tol: f64, key: &str) {
        let d = (ours - theirs).abs();
        assert!(d <= tol, "{what} {key}: ours {ours}, HTA {theirs}");
        let w = self.0.entry(what).or_default();
        *w = w.max(d);
    }
}

/// HTA's values are whole microseconds, ours whole microseconds in ns once
/// HTA's rounding is applied: equal up to float noise.
const EXACT: f64 = 1e-6;

fn find<'a>(ours: &'a [Value], h: &Value, keys: &[(&str, &str)]) -> &'a Value {
    ours.iter()
        .find(|o| keys.iter().all(|(ok, hk)| o[*ok] == h[*hk]))
        .unwrap_or_else(|| panic!("missing {h}"))
}

/// Kernel types per rank and over the job (HTA's kernel_type_df).
pub async fn kernel_types(stack: &Stack, job: &str, a: &Value, set: &str, worst: &mut Worst) {
    let types = rows(stack, job, "kernel-types").await;
    // HTA's sweep (`BreakdownAnalysis._get_gpu_kernel_type_time`) sorts the
    // +type / -type boundaries with pandas' unstable sort: a zero-length
    // interval (a sub-microsecond kernel after HTA's inward rounding) may
    // have its end before its start, and the running sum passes through a
    // combination no kernel forms for no time, e.g. "COMPUTATION
    // overlapping COMMUNICATION" in a job without one communication kernel
    // (the H200 gloo set, ranks 0 and 1). Such a row has sum 0 and is not
    // a kernel type of the trace: left out. Every other row must match.
    let real = |v: &Value| f(&v["sum"]) != 0.0;
    let per_rank: Vec<&Value> = a["kernel_type_exclusive_time_per_rank"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| real(v))
        .collect();
    assert_eq!(types.len(), per_rank.len(), "{set}: {types:?}");
    let mut job_sum: HashMap<String, f64> = HashMap::new();
    for t in &types {
        *job_sum
            .entry(t["kernel_type"].as_str().unwrap().to_owned())
            .or_default() += f(&t["sum_ns"]) / 1e3;
    }
    for h in per_rank {
        let ours = find(
            &types,
            h,
            &[("rank", "rank"), ("kernel_type", "kernel_type")],
        );
        let key = format!("{set} {h}");
        worst.check(
            "type sum us",
            f(&ours["sum_ns"]) / 1e3,
            f(&h["sum"]),
            EXACT,
            &key,
        );
    }
    let total: f64 = job_sum.values().sum();
    let job_types: Vec<&Value> = a["gpu_kernel_breakdown"]["kernel_type_df"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| real(v))
        .collect();
    assert_eq!(job_sum.len(), job_types.len(), "{set}");
    for h in job_types {
        let ours = job_sum[h["kernel_type"].as_str().unwrap()];
        let key = format!("{set} {h}");
        worst.check("job type sum us", ours, f(&h["sum"]), EXACT, &key);
        // HTA rounds the share to 0.1.
        let pct = 100.0 * ours / total;
        worst.check("job type pct", pct, f(&h["percentage"]), 0.05 + 1e-9, &key);
    }
}

/// The kernel table (HTA's kernel_df).
pub async fn kernels(stack: &Stack, job: &str, a: &Value, set: &str, worst: &mut Worst) {
    let kernels = rows(stack, job, "kernels").await;
    let hta = a["gpu_kernel_breakdown"]["kernel_df"].as_array().unwrap();
    let key = |v: &Value, name: &str| format!("{} {} {}", v["rank"], v["kernel_type"], v[name]);
    let ours_keys: std::collections::BTreeSet<String> =
        kernels.iter().map(|v| key(v, "name")).collect();
    let hta_keys: std::collections::BTreeSet<String> = hta.iter().map(|v| key(v, "name")).collect();
    assert_eq!(
        kernels.len(),
        hta.len(),
        "{set}: only ours {:?}; only HTA's {:?}",
        ours_keys.difference(&hta_keys).collect::<Vec<_>>(),
        hta_keys.difference(&ours_keys).collect::<Vec<_>>()
    );
    for h in hta {
        let ours = find(
            &kernels,
            h,
            &[
                ("rank", "rank"),
                ("kernel_type", "kernel_type"),
                ("name", "name"),
            ],
        );
        let key = format!("{set} rank {} {}", h["rank"], h["name"]);
        for (o, t) in [
            ("sum_ns", "sum (us)"),
            ("hta_max_ns", "max (us)"),
            ("hta_min_ns", "min (us)"),
            ("hta_mean_ns", "mean (us)"),
            ("hta_stddev_ns", "stddev"),
        ] {
            let what = "kernel stat us";
            worst.check(
                what,
                f(&ours[o]) / 1e3,
                f(&h[t]),
                EXACT,
                &format!("{key} {o}"),
            );
        }
    }
}

/// The idle-time breakdown and the statistics of the gaps.
pub async fn idle(stack: &Stack, job: &str, a: &Value, set: &str, worst: &mut Worst) {
    let idle = rows(stack, job, "idle").await;
    let b = &a["idle_time_breakdown"];
    let hta_idle = b["idle_time_df"].as_array().unwrap();
    assert_eq!(idle.len(), hta_idle.len(), "{set}");
    let keys = [
        ("rank", "rank"),
        ("stream", "stream"),
        ("category", "idle_category"),
    ];
    for h in hta_idle {
        let ours = find(&idle, h, &keys);
        let key = format!("{set} {h}");
        worst.check(
            "idle us",
            f(&ours["idle_ns"]) / 1e3,
            f(&h["idle_time"]),
            EXACT,
            &key,
        );
        // HTA's ratio is NaN (null) for a stream without idle time (0 / 0):
        // ours is null there too.
        if h["idle_time_ratio"].is_null() {
            assert!(ours["ratio"].is_null(), "{key}: ours {}", ours["ratio"]);
            continue;
        }
        let ratio = ours["ratio"].as_f64().unwrap_or(0.0);
        // HTA rounds the ratio to 2 decimals.
        worst.check(
            "idle ratio",
            ratio,
            f(&h["idle_time_ratio"]),
            0.005 + 1e-9,
            &key,
        );
    }
    for h in b["idle_interval_stats_df"].as_array().unwrap() {
        let ours = find(&idle, h, &keys);
        let key = format!("{set} {h}");
        assert_eq!(
            ours["count"].as_u64(),
            h["count"].as_f64().map(|c| c as u64),
            "{key}"
        );
        for (o, t) in [
            ("mean_ns", "mean"),
            ("std_ns", "std"),
            ("min_ns", "min"),
            ("p25_ns", "25%"),
            ("p50_ns", "50%"),
            ("p75_ns", "75%"),
            ("max_ns", "max"),
        ] {
            if h[t].is_null() {
                assert!(ours[o].is_null(), "{key} {o}");
            } else {
                // HTA rounds these to 2 decimals.
                let what = "idle gap stat us";
                worst.check(
                    what,
                    f(&ours[o]) / 1e3,
                    f(&h[t]),
                    0.005 + 1e-9,
                    &format!("{key} {o}"),
                );
            }
        }
    }
}

/// Queue length. Launch and kernel-start times tie at whole microseconds;
/// HTA orders ties as numpy's unstable sort leaves them, we put launches
/// first, so statistics move by at most the ties' share.
pub async fn queue(stack: &Stack, job: &str, a: &Value, set: &str, worst: &mut Worst) {
    let queue = rows(stack, job, "queue").await;
    let hta = a["queue_length_summary"]["rows"].as_array().unwrap();
    assert_eq!(queue.len(), hta.len(), "{set}: {queue:?}");
    for h in hta {
        let ours = find(&queue, h, &[("rank", "rank"), ("stream", "stream")]);
        let key = format!("{set} {h}");
        assert_eq!(
            ours["count"].as_f64(),
            h["queue_length.count"].as_f64(),
            "{key}"
        );
        for (s, t, tol) in [
            ("mean", "mean", 0.05),
            ("std", "std", 0.25),
            ("min", "min", 1.0),
            ("p25", "25%", 1.0),
            ("p50", "50%", 1.0),
            ("p75", "75%", 1.0),
            ("max", "max", 1.0),
        ] {
            let theirs = f(&h[format!("queue_length.{t}")]);
            worst.check(
                "queue stat",
                f(&ours[s]),
                theirs,
                tol,
                &format!("{key} {s}"),
            );
        }
    }
}

/// The temporal breakdown (`get_temporal_breakdown`) and the
/// compute/communication overlap (`get_comm_comp_overlap`) per rank: the
/// `ranks` route. Times equal to the microsecond; HTA rounds the
/// percentages to 2 decimals.
pub async fn temporal(stack: &Stack, job: &str, a: &Value, set: &str, worst: &mut Worst) {
    let ranks = rows(stack, job, "ranks").await;
    let hta = a["temporal_breakdown"]["rows"].as_array().unwrap();
    assert_eq!(ranks.len(), hta.len(), "{set}: {ranks:?}");
    for h in hta {
        let ours = find(&ranks, h, &[("rank", "rank")]);
        let key = format!("{set} {h}");
        for (o, t) in [
            ("gpu_span_ns", "kernel_time(us)"),
            ("idle_ns", "idle_time(us)"),
            ("compute_ns", "compute_time(us)"),
            ("non_compute_ns", "non_compute_time(us)"),
        ] {
            let what = "temporal us";
            worst.check(
                what,
                f(&ours[o]) / 1e3,
                f(&h[t]),
                EXACT,
                &format!("{key} {o}"),
            );
        }
        for (o, t) in [
            ("idle_pct", "idle_time_pctg"),
            ("compute_pct", "compute_time_pctg"),
            ("non_compute_pct", "non_compute_time_pctg"),
        ] {
            let what = "temporal pct";
            worst.check(
                what,
                f(&ours[o]),
                f(&h[t]),
                0.005 + 1e-9,
                &format!("{key} {o}"),
            );
        }
    }
    for h in a["comm_comp_overlap"]["rows"].as_array().unwrap() {
        let ours = find(&ranks, h, &[("rank", "rank")]);
        let key = format!("{set} {h}");
        let theirs = &h["comp_comm_overlap_pctg"];
        if theirs.is_null() {
            assert!(ours["overlap_pct"].is_null(), "{key}: {ours}");
        } else {
            let o = f(&ours["overlap_pct"]);
            worst.check("overlap pct", o, f(theirs), 0.005 + 1e-9, &key);
        }
    }
}

/// CUDA kernel launch statistics (`get_cuda_kernel_launch_stats`, default
/// cutoffs): the counts of HTA's three filters exactly, and the sums of the
/// launch calls' durations and the launch delays (ours: mean × count).
pub async fn launches(stack: &Stack, job: &str, a: &Value, set: &str, worst: &mut Worst) {
    let ours = rows(stack, job, "launches").await;
    let hta = a["cuda_kernel_launch_stats"]["rows"].as_array().unwrap();
    assert_eq!(ours.len(), hta.len(), "{set}: {ours:?}");
    for h in hta {
        let o = find(&ours, h, &[("rank", "rank")]);
        let key = format!("{set} {h}");
        for k in [
            "launches",
            "short_kernels",
            "runtime_outliers",
            "launch_delay_outliers",
        ] {
            assert_eq!(o[k].as_u64(), h[k].as_u64(), "{key} {k}: ours {o}");
        }
        let n = f(&h["launches"]);
        if n == 0.0 {
            continue;
        }
        for (m, t) in [
            ("mean_cpu_ns", "cpu_duration_sum"),
            ("mean_launch_delay_ns", "launch_delay_sum"),
        ] {
            // Sums of whole microseconds; ours from a float mean.
            let (sum, theirs) = (f(&o[m]) * n / 1e3, f(&h[t]));
            worst.check("launch sum us", sum, theirs, 1e-6 * theirs.max(1.0), &key);
        }
    }
}
