//! The operator tree of one rank's trace and its per-operator times: the
//! PyTorch Profiler TensorBoard plugin's Operator view (torch-tb-profiler
//! 0.4.3, `profiler/op_tree.py`, `node.py: OperatorNode.fill_stats`,
//! `op_agg.py`), with one deliberate difference in how a CUDA runtime call
//! finds its operator (below).
//!
//! In: host spans per thread ([`Host`]: operators and the other nodes the
//! plugin puts in its tree: ProfilerStep, Python, Module, nccl/gloo
//! annotations, DataLoader, Optimizer), runtime calls ([`Runtime`]) and
//! device activities ([`Device`], linked to their runtime call by
//! correlation id). Out: one [`OpNode`] per operator node (`counted`
//! hosts) with its host/device self and total times and tensor-core
//! figures, and the tree itself ([`Tree`]) for memory attribution
//! ([`memory`]).
//!
//! Definitions (plugin 0.4.3):
//! - per thread, hosts sorted by `(start, -end)` (ties in input order)
//!   nest by containment: child iff `start < parent.end` and
//!   `end <= parent.end`; a host overlapping its would-be parent is
//!   dropped (the plugin logs and drops it);
//! - an operator with exactly one child operator of the same name absorbs
//!   it (its children and runtime calls replace the parent's:
//!   `remove_dup_nodes`, as `torch.autograd.profiler` does);
//! - `host_total = end - start`; `host_self = host_total - Σ children's
//!   durations - Σ attached runtime calls' durations`;
//!   `device_self = Σ durations of the device activities of the attached
//!   runtime calls`; `device_total = device_self + Σ children's
//!   device_total`; `tc_self` / `tc_total` the same over tensor-core
//!   kernels; `tc_eligible` = name in the plugin's operator allowlist, or an
//!   operator with an eligible child or an attached tensor-core kernel.
//!
//! The one difference: 0.4.3 attaches a runtime call to the first operator
//! whose `External id` equals the call's. Several current traces give the
//! runtime call its correlation id as External id, so 0.4.3 attaches
//! nothing there and shows 0 device time for every operator. Here a
//! runtime call belongs to the **innermost operator that encloses it on its
//! thread** (`op.start <= rt.start` and `rt.end <= op.end`), which is the
//! operator with its External id wherever the plugin links at all (PyTorch
//! records the runtime call inside the `RecordFunction` of its operator).
//! Runtime calls outside every operator belong to no operator (the plugin's
//! `CallTreeRoot`).
//!
//! The nesting and merge rules above are [`TreeRules::PLUGIN`];
//! [`operator_tree_with`] takes [`TreeRules::PADDLE`] for PaddlePaddle
//! traces (no merge, a host ending after its parent kept as its child: the
//! numbers of Paddle's Operator Summary, see [`TreeRules`]).

pub mod memory;
mod rules;
#[cfg(test)]
mod tests;

pub use rules::TreeRules;

/// The plugin's operator allowlist for tensor-core eligibility
/// (`tensor_core.py: TC_OP_Allowlist`, exact names).
pub const TC_OP_ALLOWLIST: &[&str] = &[
    "aten::_convolution",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::conv_tbc",
    "aten::conv_transpose1d",
    "aten::conv_transpose2d",
    "aten::conv_transpose3d",
    "aten::convolution",
    "aten::cudnn_convolution",
    "aten::cudnn_convolution_transpose",
    "aten::prelu",
    "aten::addmm",
    "aten::addmv",
    "aten::addr",
    "aten::matmul",
    "aten::mm",
    "aten::mv",
    "aten::linear",
    "aten::addbmm",
    "aten::baddbmm",
    "aten::bmm",
    "aten::chain_matmul",
    "aten::linalg_multi_dot",
    "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_gru_cell",
    "aten::lstm_cell",
    "aten::gru_cell",
    "aten::rnn_tanh_cell",
    "aten::rnn_relu_cell",
    "CudnnConvolutionBackward",
    "BmmBackward0",
    "aten::cudnn_convolution_transpose_backward",
    "CudnnConvolutionTransposeBackward",
    "MmBackward",
    "aten::cudnn_convolution_backward_weight",
    "aten::addmm_",
    "AddmvBackward",
    "MvBackward",
    "aten::cudnn_convolution_transpose_backward_weight",
    "aten::cudnn_convolution_transpose_backward_input",
    "AddmmBackward",
    "aten::cudnn_convolution_backward_input",
    "AddbmmBackward",
    "aten::cudnn_convolution_backward",
];

/// Whether a kernel uses tensor cores by the plugin's name rule (one list,
/// [`crate::tb_plugin::TC_ALLOWLIST`], shared with the kernel view).
pub fn kernel_uses_tensor_cores(name: &str) -> bool {
    crate::tb_plugin::uses_tensor_cores(name)
}

/// Whether an operator name is on the plugin's tensor-core allowlist.
pub fn op_tc_allowlisted(name: &str) -> bool {
    TC_OP_ALLOWLIST.contains(&name)
}

/// Whether the plugin lists a host node of this name in its Operator and
/// Memory tables (`node.py: is_operator_node`), given that it is a
/// `cpu_op`: not ProfilerStep, DataLoader, Optimizer or the DP/DDP forward.
pub fn is_listed_operator(name: &str) -> bool {
    !(name.starts_with("ProfilerStep#")
        || name.starts_with("Optimizer.")
        || (name.starts_with("enumerate(DataLoader)#") && name.ends_with(".__next__"))
        || name.starts_with("enumerate(DataPipe)#")
        || name == "DataParallel.forward"
        || name == "DistributedDataParallel.forward")
}

/// A host span the plugin puts into its operator tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// Thread key (pid and tid folded by the caller).
    pub thread: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The caller's name id (equal ids = equal names).
    pub name: u32,
    /// A `cpu_op` (type Operator): absorbs same-name single children, takes
    /// runtime calls, inherits tensor-core eligibility.
    pub operator: bool,
    /// Listed in the Operator/Memory tables ([`is_listed_operator`]).
    pub counted: bool,
    /// Name on the plugin's tensor-core operator allowlist.
    pub tc_allowlisted: bool,
}

/// A CUDA (or other) runtime call on a host thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runtime {
    pub thread: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub correlation: u64,
}

/// A device activity (kernel, memcpy, memset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    pub correlation: u64,
    pub dur_ns: u64,
    /// A kernel whose name matches [`crate::tb_plugin::TC_ALLOWLIST`].
    pub tensor_cores: bool,
}

/// One operator node's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpNode {
    /// Index into the input hosts.
    pub host: usize,
    pub host_total_ns: u64,
    /// Signed as in the plugin: a runtime call inside a non-operator child
    /// (e.g. an `nccl:all_reduce` annotation) is subtracted with that child
    /// too.
    pub host_self_ns: i64,
    /// Σ durations of the runtime calls attached to it (what `host_self`
    /// leaves out besides the children).
    pub runtime_ns: u64,
    pub device_total_ns: u64,
    pub device_self_ns: u64,
    pub tc_self_ns: u64,
    pub tc_total_ns: u64,
    pub tc_eligible: bool,
}

/// The forest: per node its children (indices into `hosts`), roots per
/// thread, and the hosts the nesting dropped or the merge absorbed.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// Per thread (ascending key): the top-level nodes in time order.
    pub roots: Vec<(u64, Vec<usize>)>,
    /// Per host: its children in time order (empty for dropped ones).
    pub children: Vec<Vec<usize>>,
    /// Per host: in the tree (not dropped for overlap nor absorbed).
    pub live: Vec<bool>,
    /// Per host: the runtime calls (indices into the input) attached to it.
    pub runtimes: Vec<Vec<usize>>,
    /// Per thread: the plugin's root range (first top-level node's start,
    /// last top-level node's end).
    pub root_range: Vec<(u64, u64)>,
}

/// Builds the tree by the plugin's rules and computes every operator
/// node's figures.
pub fn operator_tree(
    hosts: &[Host],
    runtimes: &[Runtime],
    devices: &[Device],
) -> (Tree, Vec<OpNode>) {
    operator_tree_with(hosts, runtimes, devices, TreeRules::PLUGIN)
}

/// [`operator_tree`] with the given nesting and merging rules.
pub fn operator_tree_with(
    hosts: &[Host],
    runtimes: &[Runtime],
    devices: &[Device],
    rules: TreeRules,
) -> (Tree, Vec<OpNode>) {
    let tree = build(hosts, runtimes, rules);
    let nodes = fill(hosts, runtimes, devices, &tree);
    (tree, nodes)
}

fn build(hosts: &[Host], runtimes: &[Runtime], rules: TreeRules) -> Tree {
    let n = hosts.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| {
        let h = &hosts[i];
        (h.thread, h.start_ns, std::cmp::Reverse(h.end_ns))
    });
    let mut t = Tree {
        children: vec![Vec::new(); n],
        live: vec![false; n],
        runtimes: vec![Vec::new(); n],
        ..Default::default()
    };
    let mut k = 0;
    while k < order.len() {
        let thread = hosts[order[k]].thread;
        let mut top: Vec<usize> = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        while k < order.len() && hosts[order[k]].thread == thread {
            let i = order[k];
            k += 1;
            let h = &hosts[i];
            loop {
                match stack.last() {
                    None => {
                        top.push(i);
                        stack.push(i);
                        t.live[i] = true;
                        break;
                    }
                    Some(&p) if h.start_ns < hosts[p].end_ns => {
                        if h.end_ns <= hosts[p].end_ns || rules.keep_overlapping {
                            t.children[p].push(i);
                            stack.push(i);
                            t.live[i] = true;
                        }
                        break;
                    }
                    Some(_) => {
                        stack.pop();
                    }
                }
            }
        }
        let range = (
            top.first().map_or(0, |&i| hosts[i].start_ns),
            top.last().map_or(0, |&i| hosts[i].end_ns),
        );
        t.roots.push((thread, top));
        t.root_range.push(range);
    }
    attach_runtimes(hosts, runtimes, &mut t);
    if !rules.merge_same_name {
        return t;
    }
    // remove_dup_nodes, top-down.
    let mut work: Vec<usize> = t.roots.iter().flat_map(|r| r.1.clone()).collect();
    while let Some(i) = work.pop() {
        loop {
            let only = match t.children[i].as_slice() {
                [c] => Some(*c),
                _ => None,
            };
            match only {
                Some(c)
                    if hosts[i].operator && hosts[c].operator && hosts[c].name == hosts[i].name =>
                {
                    t.children[i] = std::mem::take(&mut t.children[c]);
                    t.runtimes[i] = std::mem::take(&mut t.runtimes[c]);
                    t.live[c] = false;
                }
                _ => break,
            }
        }
        work.extend(t.children[i].iter().copied());
    }
    t
}

/// Each runtime call goes to the innermost operator enclosing it on its
/// thread (descending from the thread's top-level nodes).
fn attach_runtimes(hosts: &[Host], runtimes: &[Runtime], t: &mut Tree) {
    for (r, rt) in runtimes.iter().enumerate() {
        let Ok(ti) = t.roots.binary_search_by_key(&rt.thread, |x| x.0) else {
            continue;
        };
        let mut level: &[usize] = &t.roots[ti].1;
        let mut best = None;
        loop {
            // Last node starting at or before the call.
            let k = level.partition_point(|&i| hosts[i].start_ns <= rt.start_ns);
            if k == 0 {
                break;
            }
            let i = level[k - 1];
            if rt.end_ns > hosts[i].end_ns {
                break;
            }
            if hosts[i].operator {
                best = Some(i);
            }
            level = &t.children[i];
        }
        if let Some(i) = best {
            t.runtimes[i].push(r);
        }
    }
}

fn fill(hosts: &[Host], runtimes: &[Runtime], devices: &[Device], t: &Tree) -> Vec<OpNode> {
    // Device work per correlation id.
    let mut dev: Vec<(u64, u64, u64)> = devices
        .iter()
        .map(|d| {
            (
                d.correlation,
                d.dur_ns,
                if d.tensor_cores { d.dur_ns } else { 0 },
            )
        })
        .collect();
    dev.sort_unstable();
    let dev_of = |corr: u64| -> (u64, u64) {
        let a = dev.partition_point(|x| x.0 < corr);
        let b = dev.partition_point(|x| x.0 <= corr);
        dev[a..b]
            .iter()
            .fold((0, 0), |acc, x| (acc.0 + x.1, acc.1 + x.2))
    };
    let n = hosts.len();
    let mut st: Vec<OpNode> = vec![OpNode::default(); n];
    // Post-order over each thread's tree.
    for (_, top) in &t.roots {
        let mut stack: Vec<(usize, bool)> = top.iter().rev().map(|&i| (i, false)).collect();
        while let Some((i, done)) = stack.pop() {
            if !done {
                stack.push((i, true));
                stack.extend(t.children[i].iter().rev().map(|&c| (c, false)));
                continue;
            }
            let h = &hosts[i];
            let mut s = OpNode {
                host: i,
                host_total_ns: h.end_ns - h.start_ns,
                tc_eligible: h.tc_allowlisted,
                ..Default::default()
            };
            let mut self_host = s.host_total_ns as i128;
            for &c in &t.children[i] {
                let cs = st[c];
                self_host -= (hosts[c].end_ns - hosts[c].start_ns) as i128;
                s.device_total_ns += cs.device_total_ns;
                s.tc_total_ns += cs.tc_total_ns;
                if h.operator && cs.tc_eligible {
                    s.tc_eligible = true;
                }
            }
            for &r in &t.runtimes[i] {
                let rt = &runtimes[r];
                let d = rt.end_ns.saturating_sub(rt.start_ns);
                self_host -= d as i128;
                s.runtime_ns += d;
                let (dd, tc) = dev_of(rt.correlation);
                s.device_total_ns += dd;
                s.device_self_ns += dd;
                s.tc_self_ns += tc;
                s.tc_total_ns += tc;
                if h.operator && tc > 0 {
                    s.tc_eligible = true;
                }
            }
            s.host_self_ns = self_host as i64;
            st[i] = s;
        }
    }
    (0..n)
        .filter(|&i| t.live[i] && hosts[i].counted)
        .map(|i| st[i])
        .collect()
}
