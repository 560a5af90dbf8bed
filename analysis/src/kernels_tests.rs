//! Tests of `kernels` (HTA 0.5.0's kernel breakdown and table).
use super::*;

fn op(name: &str, start_ns: u64, end_ns: u64) -> GpuOp<'_> {
    GpuOp {
        name,
        kind: GpuEventKind::Kernel,
        stream: 7,
        start_ns,
        end_ns,
        launch: None,
    }
}

#[test]
fn overlapping_time_is_its_own_type() {
    let ops = [
        op("gemm", 0, 100),
        op("relu", 50, 120),
        op("ncclKernel_AllReduce", 80, 300),
        op("Memcpy DtoD", 290, 310),
    ];
    let t = kernel_type_times(&ops);
    let get = |n: &str| t.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
    assert_eq!(get("COMPUTATION"), Some(80));
    assert_eq!(get("COMPUTATION overlapping COMMUNICATION"), Some(40));
    assert_eq!(get("COMMUNICATION"), Some(170));
    assert_eq!(get("COMMUNICATION overlapping MEMORY"), Some(10));
    assert_eq!(get("MEMORY"), Some(10));
    // The parts add up to the union of all GPU time.
    assert_eq!(t.iter().map(|(_, v)| v).sum::<u64>(), 310);
    let mut rev = ops.to_vec();
    rev.reverse();
    assert_eq!(kernel_type_times(&rev), t);
}

#[test]
fn an_interval_rounded_below_zero_counts_as_in_hta() {
    // HTA rounds a 0.5 us memset at 5.3 us to [6, 5): alone in its
    // group, its end comes before its start in the sweep, and the
    // stretch between them counts for no type (COMPUTATION loses it).
    let ops = [op("gemm", 0, 10_000), op("Memset (Device)", 6_000, 5_000)];
    let t = kernel_type_times(&ops);
    assert_eq!(t, vec![("COMPUTATION".to_owned(), 9_000)]);
    // Inside a longer one of its type it merges away.
    let ops = [
        op("Memset (Device)", 1_000, 8_000),
        op("Memset (Device)", 6_000, 5_000),
    ];
    assert_eq!(kernel_type_times(&ops), vec![("MEMORY".to_owned(), 7_000)]);
    // Its duration is -1 us in the table, as HTA sums it.
    let rows = kernel_table(&ops, 0.8, 10);
    assert_eq!((rows[0].sum_ns, rows[0].min_ns), (6_000, -1_000));
}

#[test]
fn table_folds_the_tail_into_others_as_hta() {
    // 12 names, sums 12, 11, ..., 1: more than 10, so folding applies.
    let names: Vec<String> = (1..=12).map(|i| format!("k{i:02}")).collect();
    let mut ops = Vec::new();
    let mut t = 0;
    for (i, n) in names.iter().enumerate() {
        let d = 12 - i as u64;
        ops.push(op(n, t, t + d));
        t += 100;
    }
    let rows = kernel_table(&ops, 0.8, 10);
    // Running sums 12, 23, 33, 42, 50, 57, 63, 68, 72, 75, 77, 78; the
    // 0.8 quantile is 72 + 0.8 * 3 = 74.4: k10.. go to others.
    let names_kept: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names_kept,
        ["k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09", "others"]
    );
    let others = rows.last().unwrap();
    assert_eq!((others.sum_ns, others.calls), (3 + 2 + 1, 3));
    let h = others.hta;
    assert_eq!((h.max_ns, h.min_ns, h.mean_ns), (3, 1, 2.0));
    // HTA's kept rows show their sum as max / min / mean ...
    assert_eq!((rows[0].hta.max_ns, rows[0].hta.stddev_ns), (12, 0.0));
    // ... ours stay per call (issue 29).
    assert_eq!((rows[0].max_ns, rows[0].min_ns), (12, 12));

    // Two calls of a kept name in a folded type: per-call statistics.
    let mut ops = ops.clone();
    ops.push(op("k01", 5_000, 5_004));
    let rows = kernel_table(&ops, 0.8, 10);
    let k01 = rows.iter().find(|r| r.name == "k01").unwrap();
    assert_eq!((k01.calls, k01.sum_ns), (2, 16));
    assert_eq!((k01.max_ns, k01.min_ns, k01.mean_ns), (12, 4, 8.0));
    assert!((k01.stddev_ns - 32f64.sqrt()).abs() < 1e-9);
    assert_eq!(
        (k01.hta.max_ns, k01.hta.min_ns, k01.hta.mean_ns),
        (16, 16, 16.0)
    );
    let others = rows.last().unwrap();
    assert_eq!(others.name, "others");
    assert_eq!((others.max_ns, others.min_ns, others.mean_ns), (3, 1, 2.0));
    // Few names: real per-call statistics, no folding.
    let rows = kernel_table(&[op("a", 0, 10), op("a", 20, 40)], 0.8, 10);
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].calls, rows[0].max_ns, rows[0].min_ns), (2, 20, 10));
    assert!((rows[0].stddev_ns - 50f64.sqrt()).abs() < 1e-9);
}

#[test]
fn a_name_summing_below_zero_is_never_folded_as_in_hta() {
    // HTA 0.5.0's `keep_idx = sum < 0`: 12 names, the last one's calls
    // rounded below zero (end before start), past num_kernels: its own row.
    let names = [
        "k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09", "k10",
    ];
    let mut ops: Vec<GpuOp<'_>> = (0..11u64)
        .map(|i| op(names[i as usize], i * 100, i * 100 + 12 - i))
        .collect();
    ops.push(op("neg", 5_000, 4_996));
    let rows = kernel_table(&ops, 0.8, 10);
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert!(names.contains(&"neg"), "{names:?}");
    assert_eq!(names.last(), Some(&"others"), "{names:?}");
    let neg = rows.iter().find(|r| r.name == "neg").unwrap();
    assert_eq!((neg.sum_ns, neg.hta.max_ns, neg.hta.min_ns), (-4, -4, -4));
}
