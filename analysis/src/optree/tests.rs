//! The worked oracle of ../shared/SEED-VIEWS.md §5.3 (torch-tb-profiler
//! 0.4.3 run on a synthetic trace, runtime category `runtime`).

use super::memory::{op_memory_table, peaks, record_operators, MemDevice, MemOpRow, MemRecord};
use super::*;

const US: u64 = 1000;

fn host(name: u32, start: u64, end: u64, counted: bool) -> Host {
    Host {
        thread: 1,
        start_ns: start * US,
        end_ns: end * US,
        name,
        operator: counted,
        counted,
        tc_allowlisted: name == 1,
    }
}

fn example() -> (Vec<Host>, Vec<Runtime>, Vec<Device>) {
    // 0 = ProfilerStep#1, 1 = aten::mm, 2 = aten::add
    let hosts = vec![
        host(0, 100, 1100, false),
        host(1, 200, 500, true),
        host(2, 600, 700, true),
    ];
    let rts = vec![
        Runtime {
            thread: 1,
            start_ns: 250 * US,
            end_ns: 300 * US,
            correlation: 10,
        },
        Runtime {
            thread: 1,
            start_ns: 620 * US,
            end_ns: 650 * US,
            correlation: 11,
        },
    ];
    let devs = vec![
        Device {
            correlation: 10,
            dur_ns: 200 * US,
            tensor_cores: false,
        },
        Device {
            correlation: 11,
            dur_ns: 100 * US,
            tensor_cores: false,
        },
    ];
    (hosts, rts, devs)
}

#[test]
fn operator_times_equal_the_plugins_worked_example() {
    let (hosts, rts, devs) = example();
    let (_, nodes) = operator_tree(&hosts, &rts, &devs);
    let mm = nodes.iter().find(|n| n.host == 1).unwrap();
    assert_eq!(
        (mm.device_total_ns, mm.device_self_ns),
        (200 * US, 200 * US)
    );
    assert_eq!(
        (mm.host_total_ns, mm.host_self_ns),
        (300 * US, 250 * US as i64)
    );
    assert!(mm.tc_eligible);
    let add = nodes.iter().find(|n| n.host == 2).unwrap();
    assert_eq!(
        (add.device_total_ns, add.device_self_ns),
        (100 * US, 100 * US)
    );
    assert_eq!(
        (add.host_total_ns, add.host_self_ns),
        (100 * US, 70 * US as i64)
    );
    assert_eq!(nodes.len(), 2, "ProfilerStep is not listed");
}

#[test]
fn memory_table_equals_the_plugins_worked_example() {
    let (hosts, rts, devs) = example();
    let (tree, _) = operator_tree(&hosts, &rts, &devs);
    let rec = |ts: u64, bytes: i64, addr: u64, ta: f64| MemRecord {
        thread: 1,
        ts_ns: ts * US,
        bytes,
        device: Some(MemDevice::Gpu(0)),
        addr: Some(addr),
        total_allocated: ta,
        total_reserved: 128.0,
    };
    let recs = vec![
        rec(210, 64, 1000, 64.0),
        rec(610, 16, 2000, 80.0),
        rec(650, -64, 1000, 16.0),
    ];
    let t = op_memory_table(&hosts, &tree, &recs);
    let row = |calls, inc, self_inc, cnt, self_cnt, size, self_size| MemOpRow {
        calls,
        size_increase_bytes: inc,
        self_size_increase_bytes: self_inc,
        allocation_count: cnt,
        self_allocation_count: self_cnt,
        allocation_size_bytes: size,
        self_allocation_size_bytes: self_size,
    };
    assert_eq!(
        t,
        vec![
            (MemDevice::Gpu(0), 1, row(1, 64, 64, 1, 1, 64, 64)),
            (MemDevice::Gpu(0), 2, row(1, -48, -48, 1, 1, 16, 16)),
        ]
    );
    assert_eq!(peaks(&recs), vec![(MemDevice::Gpu(0), 80.0, 128.0)]);
    // Each record's operator (the plugin's memory events name the same):
    // the free at 650 happens inside aten::add (600-700); one at 900 is
    // outside every operator.
    let mut more = recs.clone();
    more.push(rec(900, 8, 3000, 24.0));
    assert_eq!(
        record_operators(&hosts, &tree, &more),
        vec![Some(1), Some(2), Some(2), None]
    );
}

#[test]
fn a_runtime_call_goes_to_the_innermost_enclosing_operator_and_same_name_children_merge() {
    // 0: aten::to [0,100) > 1: aten::to [10,90) > 2: aten::copy_ [20,80);
    // runtime in copy_; a host overlapping its parent is dropped.
    let h = |name, s, e| Host {
        thread: 7,
        start_ns: s,
        end_ns: e,
        name,
        operator: true,
        counted: true,
        tc_allowlisted: false,
    };
    let hosts = vec![h(0, 0, 100), h(0, 10, 90), h(2, 20, 80), h(3, 85, 120)];
    let rts = vec![Runtime {
        thread: 7,
        start_ns: 30,
        end_ns: 40,
        correlation: 5,
    }];
    let devs = vec![Device {
        correlation: 5,
        dur_ns: 7,
        tensor_cores: true,
    }];
    let (tree, nodes) = operator_tree(&hosts, &rts, &devs);
    assert!(!tree.live[1], "the single same-name child is absorbed");
    assert!(!tree.live[3], "an overlapping host is dropped");
    assert_eq!(nodes.len(), 2);
    let to = nodes.iter().find(|n| n.host == 0).unwrap();
    assert_eq!(
        (
            to.host_total_ns,
            to.host_self_ns,
            to.device_total_ns,
            to.device_self_ns
        ),
        (100, 40, 7, 0)
    );
    assert_eq!(to.tc_total_ns, 7);
    assert!(
        to.tc_eligible,
        "a child with a tensor-core kernel makes it eligible"
    );
    let copy = nodes.iter().find(|n| n.host == 2).unwrap();
    assert_eq!(
        (copy.host_self_ns, copy.runtime_ns, copy.device_self_ns),
        (50, 10, 7)
    );
}

#[test]
fn paddle_rules_keep_every_operator_with_its_whole_duration() {
    // The same hosts as above under PaddlePaddle's rules: no same-name
    // merge, and a host ending after its parent (Paddle's exporter
    // truncates `ts` to whole µs) stays as its child.
    let h = |name, s, e| Host {
        thread: 7,
        start_ns: s,
        end_ns: e,
        name,
        operator: true,
        counted: true,
        tc_allowlisted: false,
    };
    let hosts = vec![h(0, 0, 100), h(0, 10, 90), h(2, 20, 80), h(3, 85, 120)];
    let (tree, nodes) = operator_tree_with(&hosts, &[], &[], TreeRules::PADDLE);
    assert!(tree.live.iter().all(|&l| l), "every host is in the tree");
    assert_eq!(tree.children[0], [1]);
    assert_eq!(tree.children[1], [2, 3]);
    let mut totals: Vec<(usize, u64)> = nodes.iter().map(|n| (n.host, n.host_total_ns)).collect();
    totals.sort_unstable();
    // Paddle's summary: per node its whole duration, every node counted.
    assert_eq!(totals, [(0, 100), (1, 80), (2, 60), (3, 35)]);
    // The plugin's rules are the default.
    assert_eq!(TreeRules::default(), TreeRules::PLUGIN);
}
