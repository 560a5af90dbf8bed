//! Telemetry tests of the agent: the real nvml-wrapper code path against the
//! stand-in `libnvidia-ml.so.1` built from `tests/nvml_stub/nvml_stub.c`
//! (values, unsupported metrics, lost GPUs, init failure, GPM, Xid, rank
//! mapping, `--check`) and host sampling on this machine's real /proc.
//! Samples are observed where they leave the agent: at a fake collector.

#[path = "../nvml_stub/stub.rs"]
mod stub;
#[path = "../agent/support.rs"]
#[allow(dead_code)]
mod support;

mod check;
mod gpu;
mod host;
mod util;
