//! `rankscope._native`: the pyo3 binding of [`rankscope_sdk::Client`].
//!
//! In: calls from the `rankscope` Python package (typed arguments; pyo3
//! raises `TypeError` for wrong types before we run). Out: the same calls
//! on the Rust client. A full queue is a `False` return (dropped and
//! counted), a call out of order or with a bad value is a `ValueError`
//! whose text names the problem (the Python layer turns order problems into
//! warnings); nothing else raises. Blocking calls (`flush`, `shutdown`)
//! release the GIL so threads completing collectives can still record.

use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rankscope_sdk::{event, CallError, Client as SdkClient, CollectiveRecord, Options};

/// Whether the event was queued; errors become Python exceptions.
fn queued(r: Result<(), CallError>) -> PyResult<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(CallError::Dropped) => Ok(false),
        Err(CallError::Closed) => Ok(false),
        Err(e) => Err(PyValueError::new_err(e.to_string())),
    }
}

fn value_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// One rank's connection to its node's rankscope agent.
#[pyclass(frozen, module = "rankscope._native")]
struct Client {
    inner: SdkClient,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (agent=None, job_id=None, rank=None, world_size=None, local_rank=None, run_id=None, labels=None, queue_events=65536))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        agent: Option<String>,
        job_id: Option<String>,
        rank: Option<u32>,
        world_size: Option<u32>,
        local_rank: Option<u32>,
        run_id: Option<String>,
        labels: Option<Vec<(String, String)>>,
        queue_events: usize,
    ) -> PyResult<Self> {
        let mut o = Options {
            agent,
            queue_events,
            ..Default::default()
        };
        o.identity.job_id = job_id;
        o.identity.rank = rank;
        o.identity.world_size = world_size;
        o.identity.local_rank = local_rank;
        o.identity.run_id = run_id;
        o.identity.labels = labels.unwrap_or_default();
        let inner = SdkClient::start(o).map_err(value_err)?;
        Ok(Self { inner })
    }

    #[pyo3(signature = (step, ts_ns=None))]
    fn step_begin(&self, step: u64, ts_ns: Option<u64>) -> PyResult<bool> {
        queued(self.inner.step_begin(step, ts_ns))
    }

    #[pyo3(signature = (step, ts_ns=None))]
    fn step_end(&self, step: u64, ts_ns: Option<u64>) -> PyResult<bool> {
        queued(self.inner.step_end(step, ts_ns))
    }

    /// The step open now, or None.
    fn open_step(&self) -> Option<u64> {
        self.inner.open_step()
    }

    #[pyo3(signature = (category, name, start_ns, end_ns, device=-1, stream=0))]
    fn span(
        &self,
        category: &str,
        name: &str,
        start_ns: u64,
        end_ns: u64,
        device: i32,
        stream: u32,
    ) -> PyResult<bool> {
        let category = event::span_category(category).map_err(value_err)?;
        queued(
            self.inner
                .span(category, name, start_ns, end_ns, device, stream),
        )
    }

    #[pyo3(signature = (op, process_group, seq, group_size, dtype, count, nbytes, start_ns, end_ns, peer=0, device=-1, stream=0, group_ranks=None))]
    #[allow(clippy::too_many_arguments)]
    fn collective(
        &self,
        op: &str,
        process_group: &str,
        seq: u64,
        group_size: u32,
        dtype: &str,
        count: u64,
        nbytes: u64,
        start_ns: u64,
        end_ns: u64,
        peer: u32,
        device: i32,
        stream: u32,
        group_ranks: Option<Vec<u32>>,
    ) -> PyResult<bool> {
        let record = CollectiveRecord {
            op: event::collective_op(op).map_err(value_err)?,
            process_group: process_group.to_owned(),
            seq,
            group_size,
            group_ranks: group_ranks.unwrap_or_default(),
            dtype: event::dtype(dtype),
            count,
            bytes: nbytes,
            start_ns,
            end_ns,
            peer,
            device,
            stream,
        };
        queued(self.inner.collective(&record))
    }

    /// The peak allocated / reserved bytes of CUDA device `device` during
    /// step `step` (`device_total_bytes` 0 = unknown).
    #[pyo3(signature = (step, device, peak_allocated_bytes, peak_reserved_bytes, device_total_bytes=0))]
    fn memory_peak(
        &self,
        step: u64,
        device: i32,
        peak_allocated_bytes: u64,
        peak_reserved_bytes: u64,
        device_total_bytes: u64,
    ) -> PyResult<bool> {
        queued(self.inner.memory_peak(
            step,
            device,
            peak_allocated_bytes,
            peak_reserved_bytes,
            device_total_bytes,
        ))
    }

    /// Waits (GIL released) until the agent acknowledged everything so far.
    #[pyo3(signature = (timeout_ms=5000))]
    fn flush(&self, py: Python<'_>, timeout_ms: u64) -> bool {
        py.detach(|| self.inner.flush(Duration::from_millis(timeout_ms)))
    }

    /// Flushes, closes the stream and stops the sender (GIL released).
    #[pyo3(signature = (timeout_ms=2000))]
    fn shutdown(&self, py: Python<'_>, timeout_ms: u64) {
        py.detach(|| self.inner.shutdown(Duration::from_millis(timeout_ms)));
    }

    /// Counters: sent, dropped (and by reason), rejected, connected, ...
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("sent", s.sent)?;
        d.set_item("dropped", s.dropped)?;
        d.set_item("dropped_queue_full", s.dropped_queue_full)?;
        d.set_item("dropped_by_agent", s.dropped_by_agent)?;
        d.set_item("dropped_disconnected", s.dropped_disconnected)?;
        d.set_item("dropped_unpaired", s.dropped_unpaired)?;
        d.set_item("rejected", s.rejected)?;
        d.set_item("last_rejection", s.last_rejection)?;
        d.set_item("invalid_calls", s.invalid_calls)?;
        d.set_item("names_dropped", s.names_dropped)?;
        d.set_item("connected", s.connected)?;
        d.set_item("reconnects", s.reconnects)?;
        d.set_item("last_error", s.last_error)?;
        Ok(d)
    }

    /// The identity sent to the agent.
    fn identity<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let id = self.inner.identity();
        let d = PyDict::new(py);
        d.set_item("job_id", &id.job_id)?;
        d.set_item("rank", id.rank)?;
        d.set_item("world_size", id.world_size)?;
        d.set_item("local_rank", id.local_rank)?;
        d.set_item("run_id", &id.run_id)?;
        d.set_item("pid", id.pid)?;
        Ok(d)
    }

    #[getter]
    fn agent(&self) -> &str {
        self.inner.agent()
    }
}

/// Nanoseconds since the Unix epoch (the clock of every `*_ns`).
#[pyfunction]
fn now_ns() -> u64 {
    rankscope_sdk::now_ns()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_function(wrap_pyfunction!(now_ns, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // A type the Python layer can raise for a client that failed to start.
    m.add("NativeError", m.py().get_type::<PyRuntimeError>())?;
    Ok(())
}
