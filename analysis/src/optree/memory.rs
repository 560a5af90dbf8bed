//! The Memory view of the PyTorch Profiler TensorBoard plugin
//! (torch-tb-profiler 0.4.3, `profiler/memory_parser.py`, `run.py`) over
//! the operator tree of [`super::operator_tree`].
//!
//! In: Kineto `[memory]` records ([`MemRecord`]) and the tree. Out:
//! per (device, operator name) the plugin's table ([`MemOpRow`]), and per
//! device the peak Total Allocated / Total Reserved ([`peaks`]).
//!
//! Attribution (`MemoryParser.find_memory_nodes`): a record belongs to
//! the **deepest** node of its thread's tree with `start <= ts < end` (end
//! exclusive); only operator nodes (`counted`) take records, any other
//! deepest node (ProfilerStep, Module, the root, ...) drops it. Records
//! before the thread's first top-level node or at/after the end of its last
//! one are dropped. `self_*` = the node's own records (`self_size_increase`
//! Σ bytes, allocations positive and frees negative; `self_allocation_*`
//! over allocations only); the non-self columns add the children's
//! (recursively, through non-operator nodes). Node values are summed by
//! operator name (nested same-name operators count at each level, as the
//! plugin does). `calls` = operator nodes of that name the traversal
//! reaches: it does not descend below a node that no record passed through
//! (`get_memory_statistics`). A row is kept only if a metric is non-zero.

use super::{Host, Tree};

/// `CPU` or `GPU{id}` (the plugin's `device_name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemDevice {
    Cpu,
    Gpu(u32),
}

impl MemDevice {
    /// From Kineto's `Device Type` (0 CPU, 1 CUDA; others: none) and
    /// `Device Id`.
    pub fn from_kineto(device_type: i64, device_id: i64) -> Option<Self> {
        match device_type {
            0 => Some(Self::Cpu),
            1 => u32::try_from(device_id).ok().map(Self::Gpu),
            _ => None,
        }
    }

    /// The plugin's name: `CPU`, `GPU0`, ...
    pub fn name(&self) -> String {
        match self {
            Self::Cpu => "CPU".to_owned(),
            Self::Gpu(i) => format!("GPU{i}"),
        }
    }
}

/// One `[memory]` instant event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemRecord {
    pub thread: u64,
    pub ts_ns: u64,
    /// `Bytes`: > 0 allocation, <= 0 release.
    pub bytes: i64,
    pub device: Option<MemDevice>,
    /// `Addr` (absent in pre-1.10 traces: such records draw no curve).
    pub addr: Option<u64>,
    /// `Total Allocated` / `Total Reserved` (NaN when absent).
    pub total_allocated: f64,
    pub total_reserved: f64,
}

/// One row of the per-operator memory table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemOpRow {
    pub calls: u64,
    pub size_increase_bytes: i64,
    pub self_size_increase_bytes: i64,
    pub allocation_count: u64,
    pub self_allocation_count: u64,
    pub allocation_size_bytes: i64,
    pub self_allocation_size_bytes: i64,
}

/// Per device, the peak Total Allocated and Total Reserved over records
/// with an `Addr` and finite totals (the plugin's curve records; its
/// "Peak Memory Usage" is the allocated one).
pub fn peaks(records: &[MemRecord]) -> Vec<(MemDevice, f64, f64)> {
    let mut out: Vec<(MemDevice, f64, f64)> = Vec::new();
    for r in records {
        let Some(d) = r.device else { continue };
        if r.addr.is_none() || !r.total_allocated.is_finite() || !r.total_reserved.is_finite() {
            continue;
        }
        match out.iter_mut().find(|x| x.0 == d) {
            Some(x) => {
                x.1 = x.1.max(r.total_allocated);
                x.2 = x.2.max(r.total_reserved);
            }
            None => out.push((d, r.total_allocated, r.total_reserved)),
        }
    }
    out.sort_by_key(|x| x.0);
    out
}

/// The deepest node of `r`'s thread tree with `start <= ts < end`, calling
/// `visit` on every node the descent passes through (it included).
fn descend(
    hosts: &[Host],
    tree: &Tree,
    r: &MemRecord,
    mut visit: impl FnMut(usize),
) -> Option<usize> {
    let ti = tree.roots.binary_search_by_key(&r.thread, |x| x.0).ok()?;
    let (rs, re) = tree.root_range[ti];
    if r.ts_ns < rs || r.ts_ns >= re {
        return None;
    }
    let mut level: &[usize] = &tree.roots[ti].1;
    let mut deepest = None;
    loop {
        let k = level.partition_point(|&i| hosts[i].start_ns <= r.ts_ns);
        if k == 0 {
            break;
        }
        let i = level[k - 1];
        if r.ts_ns >= hosts[i].end_ns {
            break;
        }
        visit(i);
        deepest = Some(i);
        level = &tree.children[i];
    }
    deepest
}

/// Per record (same order), the name id of the operator it is attributed
/// to by the table's rule ([`op_memory_table`]: the deepest node containing
/// it, if that is an operator); `None` for a record the table drops. Σ
/// `bytes` of the records of one name and device equals that row's
/// `self_size_increase_bytes`.
pub fn record_operators(hosts: &[Host], tree: &Tree, records: &[MemRecord]) -> Vec<Option<u32>> {
    records
        .iter()
        .map(|r| {
            let i = descend(hosts, tree, r, |_| {})?;
            hosts[i].counted.then_some(hosts[i].name)
        })
        .collect()
}

/// The per-operator table: `(device, name id, row)`, sorted by device then
/// name id.
pub fn op_memory_table(
    hosts: &[Host],
    tree: &Tree,
    records: &[MemRecord],
) -> Vec<(MemDevice, u32, MemOpRow)> {
    let n = hosts.len();
    let mut visited = vec![false; n];
    // Per node: its own records' (device, bytes).
    let mut own: Vec<Vec<(MemDevice, i64)>> = vec![Vec::new(); n];
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_by_key(|&i| (records[i].thread, records[i].ts_ns));
    for &ri in &order {
        let r = &records[ri];
        let deepest = descend(hosts, tree, r, |i| visited[i] = true);
        if let (Some(i), Some(d)) = (deepest, r.device) {
            if hosts[i].counted {
                own[i].push((d, r.bytes));
            }
        }
    }
    // Traversal: per node, per device, [self inc, self alloc size, self
    // alloc count, inc, alloc size, alloc count]; calls per name.
    type Metrics = Vec<(MemDevice, [i64; 6])>;
    let mut per_node: Vec<Metrics> = vec![Vec::new(); n];
    let mut calls: Vec<(u32, u64)> = Vec::new();
    let add =
        |m: &mut Metrics, d: MemDevice, i: usize, v: i64| match m.iter_mut().find(|x| x.0 == d) {
            Some(x) => x.1[i] += v,
            None => {
                let mut a = [0; 6];
                a[i] = v;
                m.push((d, a));
            }
        };
    for (_, top) in &tree.roots {
        let mut stack: Vec<(usize, bool)> = top.iter().rev().map(|&i| (i, false)).collect();
        while let Some((i, done)) = stack.pop() {
            if !done {
                if hosts[i].counted {
                    match calls.iter_mut().find(|x| x.0 == hosts[i].name) {
                        Some(x) => x.1 += 1,
                        None => calls.push((hosts[i].name, 1)),
                    }
                }
                if !visited[i] {
                    continue;
                }
                if hosts[i].counted {
                    let mut m = Metrics::new();
                    for &(d, b) in &own[i] {
                        add(&mut m, d, 0, b);
                        add(&mut m, d, 3, b);
                        if b > 0 {
                            add(&mut m, d, 1, b);
                            add(&mut m, d, 2, 1);
                            add(&mut m, d, 4, b);
                            add(&mut m, d, 5, 1);
                        }
                    }
                    per_node[i] = m;
                }
                stack.push((i, true));
                stack.extend(tree.children[i].iter().rev().map(|&c| (c, false)));
                continue;
            }
            let mut m = std::mem::take(&mut per_node[i]);
            for &c in &tree.children[i] {
                for (d, cm) in &per_node[c] {
                    for (k, v) in cm.iter().enumerate().skip(3) {
                        add(&mut m, *d, k, *v);
                    }
                }
            }
            per_node[i] = m;
        }
    }
    let mut by_name: Vec<((MemDevice, u32), [i64; 6])> = Vec::new();
    for i in 0..n {
        if !hosts[i].counted || !tree.live[i] {
            continue;
        }
        for (d, m) in &per_node[i] {
            let key = (*d, hosts[i].name);
            match by_name.iter_mut().find(|x| x.0 == key) {
                Some(x) => (0..6).for_each(|k| x.1[k] += m[k]),
                None => by_name.push((key, *m)),
            }
        }
    }
    by_name.sort_by_key(|x| x.0);
    by_name
        .into_iter()
        .filter(|x| x.1.iter().any(|&v| v != 0))
        .map(|((d, name), m)| {
            let calls = calls.iter().find(|x| x.0 == name).map_or(0, |x| x.1);
            (
                d,
                name,
                MemOpRow {
                    calls,
                    self_size_increase_bytes: m[0],
                    self_allocation_size_bytes: m[1],
                    self_allocation_count: m[2] as u64,
                    size_increase_bytes: m[3],
                    allocation_size_bytes: m[4],
                    allocation_count: m[5] as u64,
                },
            )
        })
        .collect()
}
