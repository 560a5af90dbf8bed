//! How [`operator_tree`](super::operator_tree_with) nests and merges host
//! spans: the TensorBoard plugin's rules (every trace but Paddle's) or
//! PaddlePaddle's own (so a Paddle trace's Operator view shows the numbers
//! of Paddle's Operator Summary).
//!
//! PaddlePaddle 3.x builds its tree from nanosecond host times
//! (`paddle/fluid/platform/profiler/event_node.cc`, `NodeTrees::BuildTrees`)
//! and its summary counts **every** `Operator` node, each with its whole
//! duration (`python/paddle/profiler/profiler_statistic.py`:
//! `EventSummary.parse` -> `add_operator_item`, `GeneralItem.add_item`:
//! `call += 1`, `cpu_time += end_ns - start_ns`): no same-name merge. Its
//! Chrome-trace exporter (`chrometracing_logger.cc`,
//! `LogHostTraceEventNode`) writes `"ts": %lld` of `nsToUs(StartNs())`
//! (start truncated to whole µs) and `"dur": %.3f` (ns), so a child read
//! back from the file can end up to 1 µs after its parent. The plugin's
//! nesting drops such a child (and its calls); Paddle's rules keep it as
//! the child it is.

/// The nesting and merging rules of an operator tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeRules {
    /// An operator with exactly one child operator of the same name absorbs
    /// it (the plugin's `remove_dup_nodes`).
    pub merge_same_name: bool,
    /// A host starting inside its would-be parent but ending after it is
    /// kept as that parent's child (else dropped, as the plugin does).
    pub keep_overlapping: bool,
}

impl TreeRules {
    /// torch-tb-profiler 0.4.3 (`op_tree.py`).
    pub const PLUGIN: Self = Self {
        merge_same_name: true,
        keep_overlapping: false,
    };
    /// PaddlePaddle's Operator Summary (see the module doc).
    pub const PADDLE: Self = Self {
        merge_same_name: false,
        keep_overlapping: true,
    };
}

impl Default for TreeRules {
    fn default() -> Self {
        Self::PLUGIN
    }
}
