//! Operator figures summed per (operator name, key) over a file's operator
//! nodes: the key is the call stack (`ops --group-by name|stack`) or the
//! input shape (`--group-by shape`, the TensorBoard plugin 0.4.3's
//! "Operator + Input Shape", `op_agg.py`). In: `optree`'s nodes and a key
//! per node. Out: rows sorted by name text, then key.

use std::collections::HashMap;

use rankscope_analysis::optree::{Host, OpNode};

#[derive(Default)]
pub(super) struct Agg {
    pub(super) calls: u64,
    pub(super) host_self: i64,
    pub(super) host_total: u64,
    pub(super) runtime: u64,
    pub(super) device_self: u64,
    pub(super) device_total: u64,
    pub(super) tc_self: u64,
    pub(super) tc_total: u64,
    pub(super) tc_eligible: bool,
    pub(super) host_min: u64,
    pub(super) host_max: u64,
    pub(super) dev_min: u64,
    pub(super) dev_max: u64,
}

/// The operator nodes summed by (name, `keys[node]`), sorted by name
/// text then key.
pub(super) fn aggregate(
    hosts: &[Host],
    name_list: &[String],
    nodes: &[OpNode],
    keys: Vec<String>,
) -> Vec<((u32, String), Agg)> {
    let mut agg: HashMap<(u32, String), Agg> = HashMap::new();
    for (n, key) in nodes.iter().zip(keys) {
        let h = &hosts[n.host];
        let a = agg.entry((h.name, key)).or_default();
        if a.calls == 0 {
            a.host_min = u64::MAX;
            a.dev_min = u64::MAX;
            a.tc_eligible = n.tc_eligible;
        }
        a.calls += 1;
        a.host_self += n.host_self_ns;
        a.host_total += n.host_total_ns;
        a.runtime += n.runtime_ns;
        a.device_self += n.device_self_ns;
        a.device_total += n.device_total_ns;
        a.tc_self += n.tc_self_ns;
        a.tc_total += n.tc_total_ns;
        a.host_min = a.host_min.min(n.host_total_ns);
        a.host_max = a.host_max.max(n.host_total_ns);
        a.dev_min = a.dev_min.min(n.device_total_ns);
        a.dev_max = a.dev_max.max(n.device_total_ns);
    }
    let mut rows: Vec<((u32, String), Agg)> = agg.into_iter().collect();
    rows.sort_by(|a, b| {
        (&name_list[a.0 .0 as usize], &a.0 .1).cmp(&(&name_list[b.0 .0 as usize], &b.0 .1))
    });
    rows
}
