//! Reads of the GPU activities of a job with their launch calls, for the
//! HTA-style views (kernel breakdown, idle time, queue length, memcpy).
//!
//! In: a job id. Out: [`RankOps`] per rank (ascending), each activity with
//! its launch call when `kernel_launches` has one. The launch calls are
//! read (in no order), sorted by (rank, kernel start, correlation) and the
//! activities, in (rank, start) order, matched to them here in one forward
//! pass ([`super::by_kernel`]): ClickHouse 18.16 joins are avoided on
//! purpose (see ARCHITECTURE.md). SQL in `collector/queries/job_gpu_ops.sql` and
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

use super::by_kernel::{self, ByKernel, RankBuckets};
use super::sql::{query_file, QueryFile, ReadTask};
use super::{Store, StoreError};

const JOB_GPU_OPS_SQL: QueryFile = query_file!("job_gpu_ops");
const JOB_GPU_OPS_NAMED_SQL: QueryFile = query_file!("job_gpu_ops_named");
const JOB_GPU_OP_NAMES_SQL: QueryFile = query_file!("job_gpu_op_names");
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

/// An activity with its name's cityHash64 (`job_gpu_ops.sql`).
#[derive(Debug, Row, Deserialize)]
struct OpRow {
    rank: u32,
    kind: i8,
    name_hash: u64,
    stream: u32,
    start_ns: u64,
    end_ns: u64,
    correlation: u64,
    bytes: u64,
}

/// An activity with its name (`job_gpu_ops_named.sql`).
#[derive(Debug, Row, Deserialize)]
struct NamedOpRow {
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
struct NameRow {
    name_hash: u64,
    name: String,
}

type Launches = ByKernel<(LaunchCall, Arc<str>)>;

/// One `Arc<str>` per distinct name read.
#[derive(Default)]
struct Names(foldhash::HashMap<String, Arc<str>>);

impl Names {
    fn intern(&mut self, s: String) -> Arc<str> {
        self.0
            .entry(s)
            .or_insert_with_key(|k| Arc::from(k.as_str()))
            .clone()
    }
}

/// One activity as read, without its launch call ([`attach_launches`]).
fn stored_op(
    kind: i8,
    name: Arc<str>,
    stream: u32,
    (start_ns, end_ns): (u64, u64),
    correlation: u64,
    bytes: u64,
) -> StoredOp {
    let kind = match kind {
        2 => GpuEventKind::Memcpy,
        3 => GpuEventKind::Memset,
        _ => GpuEventKind::Kernel,
    };
    StoredOp {
        name,
        kind,
        stream,
        start_ns,
        end_ns,
        bytes,
        correlation,
        launch: None,
    }
}

/// Activities gathered per rank in the order they arrive, each with a tag
/// (its name's hash, or 0), then sorted per rank ([`ByRank::finish`]).
///
/// Why here and not `ORDER BY` in SQL: the rows of one rank arrive as a few
/// runs already sorted (each part of `kernels` is in (job_id, rank,
/// start_ns) order), so a per-rank stable sort is nearly linear, where
/// ClickHouse sorted every row of the job: 0.5 of its 0.8 CPU s for the
/// 2.9 M activities of 1,024 ranks x 100 steps.
#[derive(Default)]
struct ByRank(RankBuckets<(StoredOp, u64)>);

impl ByRank {
    fn push(&mut self, rank: u32, op: StoredOp, tag: u64) {
        self.0.push(rank, (op, tag));
    }

    /// Ranks ascending, each rank's activities by (start, stream, end,
    /// correlation), the order `job_gpu_ops.sql` asked ClickHouse for; then
    /// by kind, tag, bytes and name, so equal keys come out the same way
    /// whatever order they arrived in.
    fn finish(self) -> Vec<(u32, Vec<(StoredOp, u64)>)> {
        let mut ranks = self.0.into_sorted();
        for (_, ops) in &mut ranks {
            ops.sort_by(|(a, ta), (b, tb)| {
                (a.start_ns, a.stream, a.end_ns, a.correlation)
                    .cmp(&(b.start_ns, b.stream, b.end_ns, b.correlation))
                    .then((a.kind as u8).cmp(&(b.kind as u8)))
                    .then(ta.cmp(tb))
                    .then(a.bytes.cmp(&b.bytes))
                    .then(a.name.cmp(&b.name))
            });
        }
        ranks
    }
}

/// Gives each activity of `out` its launch call, in the activities' order
/// (by rank, then start: [`ByKernel`]'s forward pass).
fn attach_launches(out: &mut [RankOps], launches: &mut Launches) {
    for r in out.iter_mut() {
        for op in &mut r.ops {
            op.launch = launches.take((r.rank, op.start_ns, op.correlation));
        }
    }
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
        let launches = self.spawn_launch_calls(job);
        let mut names = Names::default();
        let Some(mut out) = self.ops_by_hash(job, &mut names).await? else {
            // Two names with one hash: read again, with the names.
            drop(launches);
            return self.gpu_ops_named(job).await;
        };
        attach_launches(&mut out, &mut launches.joined().await?);
        self.with_stream_ops(job, out, &mut names).await
    }

    /// [`Store::gpu_ops`] read with each activity's name on its row, what
    /// it falls back to when two of a job's names share a cityHash64.
    pub async fn gpu_ops_named(&self, job: &str) -> Result<Vec<RankOps>, StoreError> {
        let launches = self.spawn_launch_calls(job);
        let mut names = Names::default();
        let mut out = self.ops_named(job, &mut names).await?;
        attach_launches(&mut out, &mut launches.joined().await?);
        self.with_stream_ops(job, out, &mut names).await
    }

    /// [`Store::launch_calls`] on a task of its own: it decodes as many rows
    /// as the activities' read, on another core.
    fn spawn_launch_calls(&self, job: &str) -> ReadTask<Launches> {
        let (store, job) = (self.clone(), job.to_owned());
        ReadTask::spawn(async move { store.launch_calls(&job).await })
    }

    /// The launch calls of `job` by (rank, kernel start, correlation).
    async fn launch_calls(&self, job: &str) -> Result<Launches, StoreError> {
        let mut names = Names::default();
        let mut rows = by_kernel::Builder::default();
        let what = "kernel launches";
        let mut cursor = self
            .read(JOB_KERNEL_LAUNCHES_SQL)
            .bind(job)
            .fetch::<LaunchReadRow>()
            .map_err(StoreError::query(what))?;
        while let Some(l) = cursor.next().await.map_err(StoreError::query(what))? {
            let call = LaunchCall {
                start_ns: l.start_ns,
                end_ns: l.end_ns,
                enqueues: is_enqueue_launch(&l.api),
            };
            rows.push(
                (l.rank, l.kernel_start_ns, l.correlation),
                (call, names.intern(l.api)),
            );
        }
        Ok(rows.finish())
    }

    /// The activities with their names' hashes (`job_gpu_ops.sql`), then the
    /// names (`job_gpu_op_names.sql`, read after them, so it holds every
    /// name read); `None` when two of the job's names share a hash.
    async fn ops_by_hash(
        &self,
        job: &str,
        names: &mut Names,
    ) -> Result<Option<Vec<RankOps>>, StoreError> {
        let what = "GPU activities";
        let placeholder: Arc<str> = Arc::from("");
        let mut by_rank = ByRank::default();
        let mut cursor = self
            .read(JOB_GPU_OPS_SQL)
            .bind(job)
            .fetch::<OpRow>()
            .map_err(StoreError::query(what))?;
        while let Some(r) = cursor.next().await.map_err(StoreError::query(what))? {
            let t = (r.start_ns, r.end_ns);
            let op = stored_op(
                r.kind,
                placeholder.clone(),
                r.stream,
                t,
                r.correlation,
                r.bytes,
            );
            by_rank.push(r.rank, op, r.name_hash);
        }
        let rows: Vec<NameRow> = self
            .read(JOB_GPU_OP_NAMES_SQL)
            .bind(job)
            .fetch_all()
            .await
            .map_err(StoreError::query("GPU activity names"))?;
        let mut by_hash: foldhash::HashMap<u64, Arc<str>> = foldhash::HashMap::default();
        for r in rows {
            let name = names.intern(r.name);
            if by_hash
                .insert(r.name_hash, name.clone())
                .is_some_and(|o| o != name)
            {
                return Ok(None);
            }
        }
        let mut out = Vec::new();
        for (rank, ops) in by_rank.finish() {
            let mut named = Vec::with_capacity(ops.len());
            for (mut op, hash) in ops {
                // Only an activity removed between the two reads (a re-import
                // replacing the job's rows) has no name.
                op.name = by_hash.get(&hash).cloned().ok_or_else(|| {
                    StoreError::ChangedWhileRead(format!(
                        "job {job:?}: a GPU activity was replaced while the job was read; ask again"
                    ))
                })?;
                named.push(op);
            }
            out.push(RankOps {
                rank,
                ops: named,
                ..RankOps::default()
            });
        }
        Ok(Some(out))
    }

    /// The activities with their names on every row (`job_gpu_ops_named.sql`).
    async fn ops_named(&self, job: &str, names: &mut Names) -> Result<Vec<RankOps>, StoreError> {
        let what = "GPU activities";
        let mut by_rank = ByRank::default();
        let mut cursor = self
            .read(JOB_GPU_OPS_NAMED_SQL)
            .bind(job)
            .fetch::<NamedOpRow>()
            .map_err(StoreError::query(what))?;
        while let Some(r) = cursor.next().await.map_err(StoreError::query(what))? {
            let t = (r.start_ns, r.end_ns);
            let op = stored_op(
                r.kind,
                names.intern(r.name),
                r.stream,
                t,
                r.correlation,
                r.bytes,
            );
            by_rank.push(r.rank, op, 0);
        }
        Ok(by_rank
            .finish()
            .into_iter()
            .map(|(rank, ops)| RankOps {
                rank,
                ops: ops.into_iter().map(|(op, _)| op).collect(),
                ..RankOps::default()
            })
            .collect())
    }

    /// `out` with the host events that carry a stream (module doc).
    async fn with_stream_ops(
        &self,
        job: &str,
        mut out: Vec<RankOps>,
        names: &mut Names,
    ) -> Result<Vec<RankOps>, StoreError> {
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
                name: names.intern(r.name),
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
