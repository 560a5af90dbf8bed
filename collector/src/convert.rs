//! Conversion of one validated `AgentBatch` into ClickHouse rows.
//!
//! In: a `proto::AgentBatch` as received from an agent. Out: a
//! [`RowSet`] (one row per event, plus one `ranks` row per rank group, the
//! telemetry rows of its samples (see `samples`) and one `ingest_batches`
//! row), or a [`ConvertError`] naming the first invalid field.
//!
//! Invariants: the batch is validated as a whole before any row is produced
//! (all or nothing); every row carries the batch's identity (agent id,
//! session, seq) so duplicates can be found in the store; interned name ids
//! are resolved here, so proto types and name ids never travel further.

use std::collections::HashMap;
use std::sync::Arc;

use rankscope_proto::v1 as proto;
use rankscope_proto::validate::{self, StepState, ValidationError};

use crate::store::{
    BatchRow, CollectiveRow, Fields, Grouped, KernelConfigRow, KernelFields, LaunchFields,
    MemoryStatRow, OperatorShapeRow, OperatorStatRow, RankRow, RowIdent, RowSet, SpanFields,
    StepRow, Text,
};
use crate::stream::{RankInput, StreamEvent, StreamInput};

/// Why a batch was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A batch-level field is missing or invalid.
    #[error("batch: {0}")]
    Batch(String),
    /// One rank group of the batch failed validation.
    #[error("ranks[{index}] (job {job:?}, rank {rank}): {source}")]
    Rank {
        index: usize,
        job: String,
        rank: u32,
        source: ValidationError,
    },
    /// A telemetry sample failed validation.
    #[error(transparent)]
    Samples(#[from] validate::SampleError),
}

impl ConvertError {
    /// Short label for the `rankscope_collector_rejected_batches_total{reason}` counter.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Batch(_) => "bad_batch_header",
            Self::Rank { source, .. } => source.reason(),
            Self::Samples(e) => e.reason(),
        }
    }
}

/// Validates `batch` and converts it into rows.
pub fn convert(batch: &proto::AgentBatch, received_ns: u64) -> Result<RowSet, ConvertError> {
    if batch.agent_id.is_empty() {
        return Err(ConvertError::Batch("agent_id is empty".into()));
    }
    if batch.agent_session == 0 {
        return Err(ConvertError::Batch(
            "agent_session is 0; it must be a random non-zero id".into(),
        ));
    }
    if batch.seq == 0 {
        return Err(ConvertError::Batch(
            "seq is 0; batch sequence numbers start at 1".into(),
        ));
    }
    validate::validate_samples(&batch.gpu_samples, &batch.host_samples)?;
    let mut rows = RowSet::default();
    reserve::reserve(&mut rows, batch);
    for (index, group) in batch.ranks.iter().enumerate() {
        let (job, rank) = group
            .identity
            .as_ref()
            .map(|i| (i.job_id.clone(), i.rank))
            .unwrap_or_default();
        let wrap = |source| ConvertError::Rank {
            index,
            job: job.clone(),
            rank,
            source,
        };
        let identity = validate::validate_identity(group.identity.as_ref()).map_err(wrap)?;
        let no_names: HashMap<u32, String> = HashMap::new();
        validate::validate_names(&group.names, &no_names).map_err(wrap)?;
        validate::validate_events(&group.events, &group.names, &no_names, StepState::default())
            .map_err(wrap)?;
        push_group(&mut rows, batch, identity, group, received_ns);
    }
    rows.telemetry = sample_rows(batch);
    rows.batches.push(BatchRow {
        agent_id: batch.agent_id.clone(),
        agent_session: batch.agent_session,
        batch_seq: batch.seq,
        node: batch.node.clone(),
        received_ns,
        rows: rows.len() as u64,
    });
    Ok(rows)
}

/// Common columns of every event row of one rank group, each allocated once
/// per group and shared by its rows.
struct Ctx<'a> {
    batch: &'a proto::AgentBatch,
    id: &'a proto::RankIdentity,
    job_id: Text,
    run_id: Text,
    node: Text,
    agent_id: Text,
    /// The group's names, `""` first (an id the group did not name).
    name_list: Arc<Vec<Text>>,
    /// Name id -> index in `name_list`.
    names: NameTable<u32>,
}

impl Ctx<'_> {
    fn name_index(&self, id: u32) -> u32 {
        self.names.get(id).copied().unwrap_or(0)
    }

    fn name(&self, id: u32) -> Text {
        self.name_list[self.name_index(id) as usize].clone()
    }

    /// The columns the group's rows in column form share.
    fn ident(&self) -> RowIdent {
        RowIdent {
            job_id: self.job_id.clone(),
            run_id: self.run_id.clone(),
            rank: self.id.rank,
            node: self.node.clone(),
            agent_id: self.agent_id.clone(),
            agent_session: self.batch.agent_session,
            batch_seq: self.batch.seq,
        }
    }
}

fn push_group(
    rows: &mut RowSet,
    batch: &proto::AgentBatch,
    id: &proto::RankIdentity,
    group: &proto::RankEvents,
    received_ns: u64,
) {
    use proto::event::Kind;
    let node = if id.node.is_empty() {
        &batch.node
    } else {
        &id.node
    };
    let cx = Ctx {
        batch,
        id,
        job_id: names::intern(&id.job_id),
        run_id: names::intern(&id.run_id),
        node: names::intern(node),
        agent_id: names::intern(&batch.agent_id),
        name_list: Arc::new(
            std::iter::once(names::intern(""))
                .chain(group.names.iter().map(|n| names::intern(&n.name)))
                .collect(),
        ),
        names: NameTable::new(
            group
                .names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.id, i as u32 + 1)),
        ),
    };
    let (mut kernels_begun, mut launches_begun, mut spans_begun) = (false, false, false);
    let mut labels: Vec<(&String, &String)> = id.labels.iter().collect();
    labels.sort();
    rows.ranks.push(RankRow {
        job_id: id.job_id.clone(),
        run_id: id.run_id.clone(),
        rank: id.rank,
        world_size: id.world_size,
        local_rank: id.local_rank,
        node: node.to_owned(),
        pid: id.pid,
        label_keys: labels.iter().map(|(k, _)| (*k).clone()).collect(),
        label_values: labels.iter().map(|(_, v)| (*v).clone()).collect(),
        seen_ns: received_ns,
    });
    for ev in &group.events {
        match &ev.kind {
            Some(Kind::StepBegin(s)) => rows.steps.push(step_row(&cx, s.step, 1, s.ts_ns)),
            Some(Kind::StepEnd(s)) => rows.steps.push(step_row(&cx, s.step, 2, s.ts_ns)),
            Some(Kind::Span(s)) => {
                begun(&mut rows.spans, &mut spans_begun, &cx).push_fields(span_fields(&cx, s))
            }
            Some(Kind::Collective(c)) => rows.collectives.push(collective_row(&cx, c)),
            Some(Kind::Kernel(k)) => {
                begun(&mut rows.kernels, &mut kernels_begun, &cx)
                    .push_fields(kernel_fields(&cx, k));
                if k.launch_start_ns != 0 {
                    begun(&mut rows.launches, &mut launches_begun, &cx)
                        .push_fields(launch_fields(&cx, k));
                }
                if let Some(c) = &k.config {
                    rows.kernel_configs.push(config_row(&cx, k, c));
                }
            }
            Some(Kind::OperatorStat(o)) if o.by_shape => {
                rows.operator_shapes.push(shape_row(&cx, o, received_ns))
            }
            Some(Kind::OperatorStat(o)) => {
                rows.operator_stats.push(operator_row(&cx, o, received_ns))
            }
            Some(Kind::MemoryOpStat(_) | Kind::MemoryPeak(_) | Kind::MemorySample(_)) => {
                if let Some(r) = memory_row(&cx, ev, received_ns) {
                    rows.memory_stats.push(r);
                }
            }
            None => {} // rejected by validation
        }
    }
    // Each table's rows of the group in its `ORDER BY` time order (see
    // `Grouped::sort_group`).
    if kernels_begun {
        rows.kernels.sort_group();
    }
    if launches_begun {
        rows.launches.sort_group();
    }
    if spans_begun {
        rows.spans.sort_group();
    }
}

/// `rows` with the group of `cx` started (at its first row: `begun`).
fn begun<'r, F: Fields>(
    rows: &'r mut Grouped<F>,
    begun: &mut bool,
    cx: &Ctx<'_>,
) -> &'r mut Grouped<F> {
    if !*begun {
        rows.group(cx.ident(), Arc::clone(&cx.name_list));
        *begun = true;
    }
    rows
}

/// An `operator_shapes` row: [`operator_row`]'s figures keyed by input shape.
fn shape_row(cx: &Ctx<'_>, o: &proto::OperatorStat, received_ns: u64) -> OperatorShapeRow {
    let r = operator_row(cx, o, received_ns);
    OperatorShapeRow {
        job_id: r.job_id,
        run_id: r.run_id,
        rank: r.rank,
        node: r.node,
        name: r.name,
        input_shape: o.input_shape.clone(),
        calls: r.calls,
        host_self_ns: r.host_self_ns,
        host_total_ns: r.host_total_ns,
        device_self_ns: r.device_self_ns,
        device_total_ns: r.device_total_ns,
        tc_self_ns: r.tc_self_ns,
        tc_total_ns: r.tc_total_ns,
        tc_eligible: r.tc_eligible,
        runtime_ns: r.runtime_ns,
        host_total_min_ns: r.host_total_min_ns,
        host_total_max_ns: r.host_total_max_ns,
        device_total_min_ns: r.device_total_min_ns,
        device_total_max_ns: r.device_total_max_ns,
        ts_ns: r.ts_ns,
        agent_id: r.agent_id,
        agent_session: r.agent_session,
        batch_seq: r.batch_seq,
    }
}

fn operator_row(cx: &Ctx<'_>, o: &proto::OperatorStat, received_ns: u64) -> OperatorStatRow {
    OperatorStatRow {
        job_id: cx.job_id.clone(),
        run_id: cx.run_id.clone(),
        rank: cx.id.rank,
        node: cx.node.clone(),
        name: cx.name(o.name_id),
        call_stack: o.call_stack.clone(),
        calls: o.calls,
        host_self_ns: o.host_self_ns,
        host_total_ns: o.host_total_ns,
        device_self_ns: o.device_self_ns,
        device_total_ns: o.device_total_ns,
        tc_self_ns: o.tc_self_ns,
        tc_total_ns: o.tc_total_ns,
        tc_eligible: u8::from(o.tc_eligible),
        runtime_ns: o.runtime_ns,
        host_total_min_ns: o.host_total_min_ns,
        host_total_max_ns: o.host_total_max_ns,
        device_total_min_ns: o.device_total_min_ns,
        device_total_max_ns: o.device_total_max_ns,
        ts_ns: received_ns,
        agent_id: cx.agent_id.clone(),
        agent_session: cx.batch.agent_session,
        batch_seq: cx.batch.seq,
    }
}

fn memory_row(cx: &Ctx<'_>, ev: &proto::Event, received_ns: u64) -> Option<MemoryStatRow> {
    use proto::event::Kind;
    let mut r = MemoryStatRow {
        job_id: cx.job_id.clone(),
        run_id: cx.run_id.clone(),
        rank: cx.id.rank,
        node: cx.node.clone(),
        name: cx.name_list[0].clone(),
        ts_ns: received_ns,
        agent_id: cx.agent_id.clone(),
        agent_session: cx.batch.agent_session,
        batch_seq: cx.batch.seq,
        ..Default::default()
    };
    match &ev.kind {
        Some(Kind::MemoryOpStat(m)) => {
            r.kind = Text::from("op");
            r.device = m.device;
            r.name = cx.name(m.name_id);
            r.calls = m.calls;
            r.size_increase_bytes = m.size_increase_bytes;
            r.self_size_increase_bytes = m.self_size_increase_bytes;
            r.allocation_count = m.allocation_count;
            r.self_allocation_count = m.self_allocation_count;
            r.allocation_size_bytes = m.allocation_size_bytes;
            r.self_allocation_size_bytes = m.self_allocation_size_bytes;
        }
        Some(Kind::MemoryPeak(p)) => {
            r.kind = Text::from("peak");
            r.device = p.device;
            r.allocated_bytes = p.peak_allocated_bytes;
            r.reserved_bytes = p.peak_reserved_bytes;
            r.device_total_bytes = p.device_total_bytes;
            r.step = p.step;
            r.per_step = u8::from(p.per_step);
        }
        Some(Kind::MemorySample(s)) => {
            // A [memory] event: its bytes in `size_increase_bytes`, its
            // operator in `name`.
            r.kind = Text::from(if s.event { "event" } else { "sample" });
            r.device = s.device;
            r.allocated_bytes = s.allocated_bytes;
            r.reserved_bytes = s.reserved_bytes;
            r.ts_ns = s.ts_ns;
            if s.event {
                r.name = cx.name(s.name_id);
                r.size_increase_bytes = s.bytes;
            }
        }
        _ => return None,
    }
    Some(r)
}

fn step_row(cx: &Ctx<'_>, step: u64, kind: i8, ts_ns: u64) -> StepRow {
    StepRow {
        job_id: cx.job_id.clone(),
        run_id: cx.run_id.clone(),
        rank: cx.id.rank,
        step,
        kind,
        ts_ns,
        node: cx.node.clone(),
        local_rank: cx.id.local_rank,
        pid: cx.id.pid,
        agent_id: cx.agent_id.clone(),
        agent_session: cx.batch.agent_session,
        batch_seq: cx.batch.seq,
    }
}

fn span_fields(cx: &Ctx<'_>, s: &proto::Span) -> SpanFields {
    SpanFields {
        category: enum8(s.category),
        name: cx.name_index(s.name_id),
        start_ns: s.start_ns,
        end_ns: s.end_ns,
        stream: s.stream,
        device: s.device,
    }
}

fn collective_row(cx: &Ctx<'_>, c: &proto::Collective) -> CollectiveRow {
    // Unknown dtypes are stored as 'unspecified' rather than rejected: the
    // element type is descriptive, bytes are what the statistics use.
    let dtype = proto::DataType::try_from(c.dtype).map_or(0, |d| d as i32);
    CollectiveRow {
        job_id: cx.job_id.clone(),
        run_id: cx.run_id.clone(),
        rank: cx.id.rank,
        node: cx.node.clone(),
        op: enum8(c.op),
        process_group: cx.name(c.process_group_id),
        group_ranks: rankscope_proto::group_ranks_or_world(
            &c.group_ranks,
            c.group_size,
            cx.id.world_size,
        ),
        group_size: c.group_size,
        dtype: enum8(dtype),
        count: c.count,
        bytes: c.bytes,
        seq: c.seq,
        peer: c.peer,
        stream: c.stream,
        device: c.device,
        start_ns: c.start_ns,
        end_ns: c.end_ns,
        agent_id: cx.agent_id.clone(),
        agent_session: cx.batch.agent_session,
        batch_seq: cx.batch.seq,
    }
}

fn kernel_fields(cx: &Ctx<'_>, k: &proto::Kernel) -> KernelFields {
    KernelFields {
        kind: enum8(k.kind),
        name: cx.name_index(k.name_id),
        stream: k.stream,
        device: k.device,
        start_ns: k.start_ns,
        end_ns: k.end_ns,
        correlation: k.correlation,
        bytes: k.bytes,
    }
}

fn launch_fields(cx: &Ctx<'_>, k: &proto::Kernel) -> LaunchFields {
    LaunchFields {
        correlation: k.correlation,
        stream: k.stream,
        kernel_start_ns: k.start_ns,
        api: cx.name_index(k.launch_name_id),
        start_ns: k.launch_start_ns,
        end_ns: k.launch_end_ns,
    }
}

/// A figure of a kernel's configuration, -1 when not recorded (or not a
/// finite non-negative number).
fn figure(v: Option<f64>) -> f64 {
    v.filter(|x| x.is_finite() && *x >= 0.0).unwrap_or(-1.0)
}

fn config_row(cx: &Ctx<'_>, k: &proto::Kernel, c: &proto::KernelConfig) -> KernelConfigRow {
    KernelConfigRow {
        job_id: cx.job_id.clone(),
        run_id: cx.run_id.clone(),
        rank: cx.id.rank,
        node: cx.node.clone(),
        correlation: k.correlation,
        kernel_start_ns: k.start_ns,
        blocks_per_sm: figure(c.blocks_per_sm),
        est_achieved_occupancy_pct: figure(c.est_achieved_occupancy_pct),
        grid: c.grid.iter().take(3).copied().collect(),
        block: c.block.iter().take(3).copied().collect(),
        registers_per_thread: c.registers_per_thread,
        shared_memory_bytes: c.shared_memory_bytes,
        agent_id: cx.agent_id.clone(),
        agent_session: cx.batch.agent_session,
        batch_seq: cx.batch.seq,
    }
}

/// Proto enum numbers are small (validated against the generated enums) and
/// the Enum8 columns use the same numbers.
fn enum8(v: i32) -> i8 {
    i8::try_from(v).unwrap_or(0)
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;

/// The analytics input of a batch: per rank group, its events in stream order
/// as step assembly needs them (GPU events classified per HTA, dataloader
/// spans, collectives). Call only on a batch [`convert`] accepted.
pub fn stream_input(batch: &proto::AgentBatch) -> StreamInput {
    use proto::event::Kind;
    use rankscope_analysis::{
        classify_kernel, CollectiveObs, GpuEvent, GpuEventKind, Interval, KernelClass,
    };
    /// Name ids below this get their kernel class cached (a table of one
    /// byte per id).
    const MAX_CACHED_NAME_ID: usize = 1 << 16;
    let mut groups = Vec::with_capacity(batch.ranks.len());
    for group in &batch.ranks {
        let Some(id) = group.identity.as_ref() else {
            continue;
        };
        let names = NameTable::new(group.names.iter().map(|n| (n.id, n.name.as_str())));
        let name = |id: u32| names.get(id).copied().unwrap_or_default();
        let mut classes: Vec<Option<KernelClass>> = Vec::new();
        let mut events = Vec::with_capacity(group.events.len());
        for ev in &group.events {
            let e = match &ev.kind {
                Some(Kind::StepBegin(s)) => StreamEvent::StepBegin {
                    step: s.step,
                    ts_ns: s.ts_ns,
                },
                Some(Kind::StepEnd(s)) => StreamEvent::StepEnd {
                    step: s.step,
                    ts_ns: s.ts_ns,
                },
                Some(Kind::Span(s)) if s.category == proto::SpanCategory::Dataloader as i32 => {
                    StreamEvent::Dataloader(Interval::new(s.start_ns, s.end_ns))
                }
                Some(Kind::Span(s)) if is_compute_span(s.category) => {
                    let iv = Interval::new(s.start_ns, s.end_ns);
                    let phase = phase_label(s.category);
                    if s.device < 0 {
                        StreamEvent::HostCompute(iv, phase)
                    } else {
                        StreamEvent::DeviceCompute(iv, phase)
                    }
                }
                Some(Kind::Kernel(k)) => {
                    let kind = match proto::KernelKind::try_from(k.kind) {
                        Ok(proto::KernelKind::Memcpy) => GpuEventKind::Memcpy,
                        Ok(proto::KernelKind::Memset) => GpuEventKind::Memset,
                        _ => GpuEventKind::Kernel,
                    };
                    // Name classification scans the name; a group names
                    // each kernel once and runs it thousands of times.
                    let i = k.name_id as usize;
                    let class = match kind {
                        GpuEventKind::Kernel if i < MAX_CACHED_NAME_ID => {
                            if classes.len() <= i {
                                classes.resize(i + 1, None);
                            }
                            *classes[i]
                                .get_or_insert_with(|| classify_kernel(name(k.name_id), kind))
                        }
                        _ => classify_kernel(name(k.name_id), kind),
                    };
                    StreamEvent::Gpu(GpuEvent {
                        start_ns: k.start_ns,
                        end_ns: k.end_ns,
                        class,
                    })
                }
                Some(Kind::Collective(c)) => {
                    let Some(op) = coll_op(c.op) else { continue };
                    StreamEvent::Collective(CollectiveObs {
                        rank: id.rank,
                        process_group: name(c.process_group_id).to_owned(),
                        seq: c.seq,
                        op,
                        dtype: dtype_name(c.dtype).to_owned(),
                        group_size: c.group_size,
                        bytes: c.bytes,
                        start_ns: c.start_ns,
                        end_ns: c.end_ns,
                    })
                }
                _ => continue,
            };
            events.push(e);
        }
        groups.push(RankInput {
            job: id.job_id.clone(),
            run_id: id.run_id.clone(),
            rank: id.rank,
            world_size: id.world_size,
            node: if id.node.is_empty() {
                batch.node.clone()
            } else {
                id.node.clone()
            },
            events,
            closed: group.stream_closed,
        });
    }
    StreamInput {
        groups,
        gpu: gpu_obs(batch),
        memory: memory_obs(batch),
    }
}

/// Span categories that are computation (the SDK's forward / backward /
/// optimizer spans and user `compute` spans).
fn is_compute_span(category: i32) -> bool {
    use proto::SpanCategory as C;
    [C::Forward, C::Backward, C::Optimizer, C::Compute]
        .iter()
        .any(|c| *c as i32 == category)
}

/// The phase a compute span's category names (`is_compute_span` ones).
fn phase_label(category: i32) -> &'static str {
    use proto::SpanCategory as C;
    match C::try_from(category) {
        Ok(C::Forward) => "forward",
        Ok(C::Backward) => "backward",
        Ok(C::Optimizer) => "optimizer",
        _ => "compute",
    }
}

/// The analysis op of a proto collective op.
pub fn coll_op(op: i32) -> Option<rankscope_analysis::CollOp> {
    use proto::CollectiveOp as P;
    use rankscope_analysis::CollOp as A;
    Some(match P::try_from(op).ok()? {
        P::AllReduce => A::AllReduce,
        P::ReduceScatter => A::ReduceScatter,
        P::AllGather => A::AllGather,
        P::AllToAll => A::AllToAll,
        P::Broadcast => A::Broadcast,
        P::Reduce => A::Reduce,
        P::Send => A::Send,
        P::Recv => A::Recv,
        P::Barrier => A::Barrier,
        P::Unspecified => return None,
    })
}

/// The snake_case name of a proto data type, as stored in the `dtype` Enum8.
pub fn dtype_name(dtype: i32) -> &'static str {
    use proto::DataType as D;
    match D::try_from(dtype).unwrap_or(D::Unspecified) {
        D::Unspecified => "unspecified",
        D::Int8 => "int8",
        D::Uint8 => "uint8",
        D::Int32 => "int32",
        D::Uint32 => "uint32",
        D::Int64 => "int64",
        D::Uint64 => "uint64",
        D::Float16 => "float16",
        D::Float32 => "float32",
        D::Float64 => "float64",
        D::Bfloat16 => "bfloat16",
        D::Float8E4m3 => "float8_e4m3",
        D::Float8E5m2 => "float8_e5m2",
    }
}

mod memory;
mod names;
mod reserve;
mod samples;

pub use memory::memory_obs;
use names::NameTable;
pub use samples::{gpu_obs, sample_rows};
