//! ONNX Runtime profiles: `Session` / `Node` events, and the `Kernel`
//! events its GPU execution providers add, rewritten to read like Kineto's.
//!
//! Where they come from (microsoft/onnxruntime, main as of 2026):
//! - `onnxruntime/core/common/profiler.cc`, `Profiler::EndProfiling`: every
//!   event is written as `{"cat" : "<Session|Node|Kernel>","pid" :P,"tid"
//!   :T,"dur" :D,"ts" :S,"ph" : "X","name" :"N","args" : {..}}`, `ts` and
//!   `dur` whole µs relative to the profiling start, every arg value a
//!   string (`"key" : "value"`); the EP profilers' events are merged in
//!   first (`ep_profiler->EndProfiling(profiling_start_time_, events_)`).
//! - `onnxruntime/core/providers/cuda/cupti_manager.cc`,
//!   `CUPTIManager::ProcessActivityBuffers` (CUDA builds with
//!   `ENABLE_CUDA_PROFILING`, i.e. built `--enable_cuda_profiling`): one
//!   `KERNEL_EVENT` (cat `Kernel`) per CUPTI kernel record, pid and tid
//!   `-1`, the demangled kernel name, args `stream` (CUPTI `streamId`,
//!   decimal), `grid_x/y/z`, `block_x/y/z`; and per memcpy record the same
//!   category named by its kind (`MemcpyHostToDevice`, ...,
//!   `GetMemcpyKindString`) with grids of `-1`. The ROCm twin
//!   (`rocm/roctracer_manager.cc`) writes the stream as a hex pointer.
//! - `include/onnxruntime/core/common/gpu_profiler_common.h`,
//!   `GPUProfilerBase::MergeEvents`: each kernel is placed right after the
//!   `Node` event it ran under and gets that event's `op_name` and, as
//!   `parent_name`, the node event's name (`<node>_kernel_time`).
//!
//! Here: a `Session` `model_run` is step `ProfilerStep#k` (k = 0, 1, ... in
//! file order); a `Node` `<node>_kernel_time` is a `cpu_op` named by its
//! `op_name` (the operator type), its `provider` kept, and correlation id
//! `j` (its ordinal, from 1); a `Kernel` is a GPU kernel (a `Memcpy*` one a
//! memcpy) on its stream (decimal as written; a hex pointer becomes 1, 2,
//! ... in order of first appearance), device 0 (ORT writes none: a
//! session's CUDA provider runs on one device), with the correlation id of
//! the node its `parent_name` names (the latest node event of that name).
//! The operator view then gives each node its kernels' time as device time
//! (`views`: an operator carrying a correlation id takes the device
//! activities of that id itself).

use super::Normaliser;
use crate::raw::{Num, RawEvent, Scalar};

impl Normaliser {
    pub(super) fn ort(&mut self, ev: &mut RawEvent) {
        match (ev.cat.as_str(), ev.name.as_str()) {
            (Some("Session"), Some("model_run")) => {
                ev.name = Scalar::Str(format!("ProfilerStep#{}", self.runs));
                ev.cat = Scalar::Str("user_annotation".into());
                self.runs += 1;
            }
            (Some("Node"), Some(n)) if n.ends_with("_kernel_time") => {
                self.ort_nodes += 1;
                let id = self.ort_nodes;
                match self.ort_node_ids.get_mut(n) {
                    Some(v) => *v = id,
                    None => {
                        self.ort_node_ids.insert(n.to_owned(), id);
                    }
                }
                if let Some(op) = ev.args.op_name.as_str() {
                    ev.name = Scalar::Str(op.to_owned());
                }
                if let Some(p) = ev.args.provider.as_str() {
                    if !self.providers.contains(p) {
                        self.providers.insert(p.to_owned());
                    }
                }
                ev.cat = Scalar::Str("cpu_op".into());
                ev.args.correlation = Scalar::Num(Num::U(id));
            }
            (Some("Kernel"), Some(n)) => {
                let memcpy = n.starts_with("Memcpy");
                ev.cat = Scalar::Str(if memcpy { "gpu_memcpy" } else { "kernel" }.into());
                self.gpu_kernels += 1;
                ev.args.stream = match self.ort_stream(&ev.args.stream) {
                    Some(s) => Scalar::Num(Num::U(s)),
                    None => Scalar::Absent,
                };
                ev.args.device = Scalar::Num(Num::U(0));
                ev.args.correlation = match ev
                    .args
                    .parent_name
                    .as_str()
                    .and_then(|p| self.ort_node_ids.get(p))
                {
                    Some(&id) => Scalar::Num(Num::U(id)),
                    None => Scalar::Absent,
                };
            }
            _ => {}
        }
    }

    /// A kernel's `stream` arg: decimal (CUDA) as is, a hex pointer (ROCm)
    /// as its order of first appearance from 1.
    fn ort_stream(&mut self, s: &Scalar) -> Option<u64> {
        if let Some(n) = s.as_u64() {
            return Some(n);
        }
        let text = s.as_str()?.trim();
        if let Ok(n) = text.parse::<u64>() {
            return Some(n);
        }
        let hex = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))?;
        u64::from_str_radix(hex, 16).ok()?;
        let k = match self.ort_hex_streams.iter().position(|h| h == text) {
            Some(k) => k,
            None => {
                self.ort_hex_streams.push(text.to_owned());
                self.ort_hex_streams.len() - 1
            }
        };
        Some(k as u64 + 1)
    }
}

#[cfg(test)]
mod tests {
    use crate::format::tests::ev;
    use crate::format::{Format, Normaliser};
    use crate::raw::{Num, Scalar};

    #[test]
    fn runs_become_steps_and_nodes_operators() {
        let mut n = Normaliser::default();
        let mut e = ev("X", "Session", "model_run", Scalar::Num(Num::U(1)));
        n.apply(&mut e);
        assert_eq!(n.format(), Format::OnnxRuntime);
        assert_eq!(e.name.as_str(), Some("ProfilerStep#0"));
        let mut e = ev("X", "Node", "/0/Conv_kernel_time", Scalar::Num(Num::U(1)));
        e.args.op_name = Scalar::Str("Conv".into());
        e.args.provider = Scalar::Str("CPUExecutionProvider".into());
        n.apply(&mut e);
        assert_eq!(
            (e.cat.as_str(), e.name.as_str()),
            (Some("cpu_op"), Some("Conv"))
        );
        assert_eq!(e.args.correlation, Scalar::Num(Num::U(1)));
        assert!(n.providers.contains("CPUExecutionProvider"));
        let mut e = ev("X", "Session", "model_run", Scalar::Num(Num::U(1)));
        n.apply(&mut e);
        assert_eq!(e.name.as_str(), Some("ProfilerStep#1"));
    }

    #[test]
    fn kernels_take_their_stream_and_their_parent_nodes_correlation() {
        let mut n = Normaliser::default();
        let node = |n: &mut Normaliser, name: &str| {
            let mut e = ev("X", "Node", name, Scalar::Num(Num::U(1)));
            e.args.op_name = Scalar::Str("MatMul".into());
            n.apply(&mut e);
            e.args.correlation
        };
        let kernel = |n: &mut Normaliser, name: &str, parent: &str, stream: &str| {
            let mut e = ev("X", "Kernel", name, Scalar::Num(Num::I(-1)));
            e.args.parent_name = Scalar::Str(parent.into());
            e.args.stream = Scalar::Str(stream.into());
            n.apply(&mut e);
            e
        };
        assert_eq!(node(&mut n, "a_kernel_time"), Scalar::Num(Num::U(1)));
        assert_eq!(node(&mut n, "b_kernel_time"), Scalar::Num(Num::U(2)));
        let k = kernel(&mut n, "gemm", "a_kernel_time", "13");
        assert_eq!(k.cat.as_str(), Some("kernel"));
        assert_eq!(
            (k.args.stream, k.args.device, k.args.correlation),
            (
                Scalar::Num(Num::U(13)),
                Scalar::Num(Num::U(0)),
                Scalar::Num(Num::U(1))
            )
        );
        // The latest node of that name; ROCm's hex stream pointers number
        // from 1 in order of appearance.
        assert_eq!(node(&mut n, "a_kernel_time"), Scalar::Num(Num::U(3)));
        let k = kernel(&mut n, "MemcpyDeviceToHost", "a_kernel_time", "0x7f00aa");
        assert_eq!(k.cat.as_str(), Some("gpu_memcpy"));
        assert_eq!(
            (k.args.stream, k.args.correlation),
            (Scalar::Num(Num::U(1)), Scalar::Num(Num::U(3)))
        );
        let k = kernel(&mut n, "k", "unknown_kernel_time", "0x7f00bb");
        assert_eq!(
            (k.args.stream, k.args.correlation),
            (Scalar::Num(Num::U(2)), Scalar::Absent)
        );
        assert_eq!(n.gpu_kernels, 3);
    }
}
