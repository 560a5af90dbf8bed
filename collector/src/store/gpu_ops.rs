//! Reads of the GPU activities of a job with their launch calls, for the
//! HTA-style views (kernel breakdown, idle time, queue length, memcpy).
//!
//! In: a job id. Out: [`RankOps`] per rank (ascending), each activity with
//! its launch call when `kernel_launches` has one. The launch calls are
//! read into a map (in no order) and the activities, in (rank, start)
//! order, matched to them here by (rank, correlation, kernel start):
//! ClickHouse 18.16 joins are avoided on purpose (see ARCHITECTURE.md). SQL in `collector/queries/job_gpu_ops.sql` and
//! `job_kernel_launches.sql`.
//!
//! HTA's loading rules ([`rankscope_analysis::hta_load`]) are applied by
//! [`RankOps::hta_loaded`] with each rank's window ([`Store::hta_windows`],
//! `job_hta_windows.sql`: the `hta_last_step_end_ns` label the importer
//! writes). HTA also counts a host event that carries a `stream` argument
//! (a Triton launcher `cpu_op`) as GPU work in its kernel breakdown,
//! temporal breakdown and overlap: the importer stores those as `other`
//! spans with device -2 (`job_hta_stream_ops.sql`), read here as
//! [`RankOps::stream_ops`] and taken by [`RankOps::hta_gpu_ops`];
//! [`RankOps::exact`] leaves them out (GPU activities only).

use std::collections::HashMap;
use std::sync::Arc;

use clickhouse::Row;
use rankscope_analysis::hta_load::{keeps, round_inward_us, HtaWindow};
use rankscope_analysis::{is_enqueue_launch, GpuEventKind, GpuOp, LaunchCall};
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

const JOB_GPU_OPS_SQL: QueryFile = query_file!("job_gpu_ops");
const JOB_KERNEL_LAUNCHES_SQL: QueryFile = query_file!("job_kernel_launches");
const JOB_HTA_WINDOWS_SQL: QueryFile = query_file!("job_hta_windows");
const JOB_HTA_STREAM_OPS_SQL: QueryFile = query_file!("job_hta_stream_ops");

#[derive(Debug, Row, Deserialize)]
struct StreamOpRow {
    rank: u32,
    name: String,
    stream: u32,
    start_ns: u64,
    end_ns: u64,
}

#[derive(Debug, Row, Deserialize)]
struct WindowRow {
    rank: u32,
    end_ns: String,
}

#[derive(Debug, Row, Deserialize)]
struct OpRow {
    rank: u32,
    kind: i8,
    name: String,
    stream: u32,
    start_ns: u64,
    end_ns: u64,
    correlation: u64,
    bytes: u64,
}

#[derive(Debug, Row, Deserialize)]
struct LaunchReadRow {
    rank: u32,
    correlation: u64,
    kernel_start_ns: u64,
    api: String,
    start_ns: u64,
    end_ns: u64,
}

/// One stored GPU activity.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredOp {
    pub name: Arc<str>,
    pub kind: GpuEventKind,
    pub stream: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    /// CUPTI correlation id (0 = none).
    pub correlation: u64,
    /// The launch call and its name.
    pub launch: Option<(LaunchCall, Arc<str>)>,
}

/// The GPU activities of one rank, by start.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RankOps {
    pub rank: u32,
    pub ops: Vec<StoredOp>,
    /// Host events with a `stream` argument, as kernels on that stream
    /// without a launch call (module doc), by start.
    pub stream_ops: Vec<StoredOp>,
}

impl RankOps {
    /// The analysis' view of the activities.
    pub fn gpu_ops(&self) -> Vec<GpuOp<'_>> {
        self.ops
            .iter()
            .map(|o| GpuOp {
                name: &o.name,
                kind: o.kind,
                stream: o.stream,
                start_ns: o.start_ns,
                end_ns: o.end_ns,
                launch: o.launch.as_ref().map(|l| l.0),
            })
            .collect()
    }

    /// What HTA 0.5.0 takes as GPU kernels in its kernel breakdown,
    /// temporal breakdown and overlap: every row with a stream
    /// (`trace_df["stream"].ne(-1)`), the activities and [`Self::stream_ops`].
    pub fn hta_gpu_ops(&self) -> Vec<GpuOp<'_>> {
        let mut out = self.gpu_ops();
        out.extend(self.stream_ops.iter().map(|o| GpuOp {
            name: &o.name,
            kind: o.kind,
            stream: o.stream,
            start_ns: o.start_ns,
            end_ns: o.end_ns,
            launch: None,
        }));
        out
    }

    /// rankscope's own reading (`exact`): GPU activities only.
    pub fn exact(mut self) -> Self {
        self.stream_ops.clear();
        self
    }
}

impl RankOps {
    /// The activities as HTA 0.5.0 loads them (module doc): those the
    /// window keeps, with their and their launch calls' times rounded inward
    /// to whole microseconds.
    /// A host event with a `stream` is a CPU event to HTA's window: kept
    /// when it starts by the window's end.
    pub fn hta_loaded(mut self, window: HtaWindow) -> Self {
        self.ops
            .retain(|o| keeps(window, o.launch.as_ref().map(|l| l.0.start_ns)));
        self.stream_ops.retain(|o| keeps(window, Some(o.start_ns)));
        for o in &mut self.stream_ops {
            (o.start_ns, o.end_ns) = round_inward_us(o.start_ns, o.end_ns);
        }
        for o in &mut self.ops {
            (o.start_ns, o.end_ns) = round_inward_us(o.start_ns, o.end_ns);
            if let Some((call, _)) = o.launch.as_mut() {
                (call.start_ns, call.end_ns) = round_inward_us(call.start_ns, call.end_ns);
            }
        }
        self
    }
}

impl Store {
    /// The HTA step window of each rank of `job` that has one.
    pub async fn hta_windows(&self, job: &str) -> Result<HashMap<u32, HtaWindow>, StoreError> {
        let rows: Vec<WindowRow> = self
            .read(JOB_HTA_WINDOWS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("HTA step windows"))?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                let end = r.end_ns.parse().ok()?;
                Some((
                    r.rank,
                    HtaWindow {
                        last_step_end_ns: Some(end),
                    },
                ))
            })
            .collect())
    }

    /// Every GPU activity of `job` with its launch call, per rank.
    pub async fn gpu_ops(&self, job: &str) -> Result<Vec<RankOps>, StoreError> {
        // foldhash: SipHash dominated the overview's profile at 1,024 ranks
        // x 100 steps (2.9 M activities matched to their launch calls).
        let mut names: foldhash::HashMap<String, Arc<str>> = foldhash::HashMap::default();
        let mut intern = |s: String| -> Arc<str> {
            names
                .entry(s)
                .or_insert_with_key(|k| Arc::from(k.as_str()))
                .clone()
        };
        // Straight into the map: no row vector of millions in between.
        let mut launches: foldhash::HashMap<(u32, u64, u64), (LaunchCall, Arc<str>)> =
            foldhash::HashMap::default();
        let mut rows = self
            .read(JOB_KERNEL_LAUNCHES_SQL)
            .bind(job)
            .fetch::<LaunchReadRow>()
            .map_err(StoreError::query("kernel launches"))?;
        while let Some(l) = rows
            .next()
            .await
            .map_err(StoreError::query("kernel launches"))?
        {
            let call = LaunchCall {
                start_ns: l.start_ns,
                end_ns: l.end_ns,
                enqueues: is_enqueue_launch(&l.api),
            };
            launches.insert(
                (l.rank, l.correlation, l.kernel_start_ns),
                (call, intern(l.api)),
            );
        }
        let mut cursor = self
            .read(JOB_GPU_OPS_SQL)
            .bind(job)
            .fetch::<OpRow>()
            .map_err(StoreError::query("GPU activities"))?;
        let mut out: Vec<RankOps> = Vec::new();
        while let Some(r) = cursor
            .next()
            .await
            .map_err(StoreError::query("GPU activities"))?
        {
            if out.last().is_none_or(|l| l.rank != r.rank) {
                out.push(RankOps {
                    rank: r.rank,
                    ..RankOps::default()
                });
            }
            let kind = match r.kind {
                2 => GpuEventKind::Memcpy,
                3 => GpuEventKind::Memset,
                _ => GpuEventKind::Kernel,
            };
            let launch = launches.remove(&(r.rank, r.correlation, r.start_ns));
            let op = StoredOp {
                name: intern(r.name),
                kind,
                stream: r.stream,
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                bytes: r.bytes,
                correlation: r.correlation,
                launch,
            };
            if let Some(last) = out.last_mut() {
                last.ops.push(op);
            }
        }
        let stream_rows: Vec<StreamOpRow> = self
            .read(JOB_HTA_STREAM_OPS_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("host events with a stream"))?;
        for r in stream_rows {
            let i = match out.binary_search_by_key(&r.rank, |o| o.rank) {
                Ok(i) => i,
                Err(i) => {
                    out.insert(
                        i,
                        RankOps {
                            rank: r.rank,
                            ..RankOps::default()
                        },
                    );
                    i
                }
            };
            out[i].stream_ops.push(StoredOp {
                name: intern(r.name),
                kind: GpuEventKind::Kernel,
                stream: r.stream,
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                bytes: 0,
                correlation: 0,
                launch: None,
            });
        }
        Ok(out)
    }
}
