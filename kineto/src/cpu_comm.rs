//! CPU-side collectives: gloo (and other host backends) calls, one per call.
//!
//! In: the host communication records of the scan ([`HostComm`]): `c10d::*`
//! ops (`c10d::allreduce_`, `c10d::allgather_`, `c10d::barrier`, ...),
//! `record_param_comms` ops (NCCL metadata args: `Collective name`,
//! `In msg nelems`, `dtype`, `Process Group Name`, ...), `gloo:*`
//! annotations (the work on a gloo worker thread, with `Input Dims` /
//! `Input type`) and `nccl:*` annotations; plus the launch times and
//! `External id`s of the trace's NCCL kernels. Out: [`Call`]s: op, time,
//! metadata and element count of every host collective call that launched
//! no NCCL kernel.
//!
//! Rules:
//! - a call is an outermost `c10d::*` or `record_param_comms` op with a
//!   known op on its thread; the ops nested in it (a `record_param_comms`
//!   child, an inner `c10d::` op) add metadata, never a second call;
//! - a call that contains an `nccl:*` annotation or an NCCL kernel's launch
//!   (by time, on any thread of the trace), or whose (or a nested op's)
//!   `External id` is an NCCL kernel's, is an NCCL collective: its kernel is
//!   the collective (see `nccl`), the call yields nothing; except a call
//!   of a 1-rank NCCL group (`Group size` 1) with no NCCL kernel: NCCL
//!   runs none for a 1-rank communicator (its all-reduce is a device copy,
//!   seen on an H200 with NCCL 2.28.9), so the call is the collective;
//! - the `gloo:*` annotation of a call is, per op, the first one not yet
//!   taken that starts at or after the call (gloo runs a process group's
//!   work in call order) and whose input has the call's element count when
//!   both are known; it extends the call's end to the end of the work and
//!   gives dtype and shape when the call's ops do not. A
//!   `gloo:*` annotation without a call (its call was before the trace) is
//!   not a collective;
//! - metadata: `record_param_comms` args, then the `c10d::` op's first
//!   shaped argument, then the `gloo:*` annotation's first input (the
//!   `c10d::` op records a tensor list's shape but not its dtype).
//!
//! Limits: without `record_param_comms` the trace does not name the process
//! group of a gloo call: such calls are in the unnamed group "" and counted
//! together (matching across ranks holds when every rank issues the same
//! calls in the same order, as with whole-world groups).

use std::collections::HashSet;

use rankscope_proto::v1 as proto;

use proto::{CollectiveOp as Op, DataType as Dt};

use super::nccl::{op_from_collective_name, CommMeta};

/// What a host communication record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostKind {
    C10d,
    ParamComms,
    Gloo,
    NcclAnnotation,
}

/// One host communication record from the scan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HostComm {
    pub kind: HostKind,
    pub ordinal: u64,
    pub start: u64,
    pub end: u64,
    pub pid: u64,
    pub tid: u64,
    pub op: Option<Op>,
    pub ext: Option<u64>,
    pub meta: Option<CommMeta>,
    /// Elements of the first shaped input.
    pub elems: Option<u64>,
    /// Element type and size of that input.
    pub dtype: Option<(Dt, u64)>,
}

impl HostComm {
    /// The record for an event named `name`, if it is one.
    pub(crate) fn kind_of(name: &str, is_op: bool) -> Option<(HostKind, Option<Op>)> {
        if is_op {
            if let Some(rest) = name.strip_prefix("c10d::") {
                let op = op_from_collective_name(rest)?;
                return Some((HostKind::C10d, Some(op)));
            }
            return (name == "record_param_comms").then_some((HostKind::ParamComms, None));
        }
        if let Some(rest) = name.strip_prefix("gloo:") {
            return Some((HostKind::Gloo, Some(op_from_collective_name(rest)?)));
        }
        name.starts_with("nccl:")
            .then_some((HostKind::NcclAnnotation, None))
    }
}

/// One host collective call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    /// Trace ordinal of the outermost op.
    pub ordinal: u64,
    pub start: u64,
    pub end: u64,
    pub op: Op,
    pub meta: CommMeta,
    pub elems: Option<u64>,
    pub dtype: Option<(Dt, u64)>,
}

struct Open {
    call: Call,
    pid: u64,
    tid: u64,
    /// It (or an op in it) has an NCCL kernel's `External id`.
    nccl_kernel: bool,
    /// It contains an `nccl:*` annotation.
    nccl_annotated: bool,
}

/// The host collective calls of a trace (see the module doc), by start.
pub(crate) fn calls(
    mut host: Vec<HostComm>,
    nccl_launches: &[u64],
    nccl_ext: &HashSet<u64>,
) -> Vec<Call> {
    let (mut gloo, mut ops): (Vec<HostComm>, Vec<HostComm>) =
        host.drain(..).partition(|h| h.kind == HostKind::Gloo);
    ops.sort_by_key(|h| (h.pid, h.tid, h.start, std::cmp::Reverse(h.end), h.ordinal));
    let mut open: Vec<Open> = Vec::new();
    for h in ops {
        // Sorted by start, outer first: inside iff it ends by the call's end.
        let inside = open
            .last_mut()
            .filter(|o| o.pid == h.pid && o.tid == h.tid && h.end <= o.call.end);
        if let Some(o) = inside {
            o.nccl_annotated |= h.kind == HostKind::NcclAnnotation;
            o.nccl_kernel |= h.ext.is_some_and(|e| nccl_ext.contains(&e));
            if let Some(m) = &h.meta {
                // The nested record_param_comms knows more than the op.
                let mut m = m.clone();
                m.fill_from(&o.call.meta);
                o.call.meta = m;
            }
            o.call.elems = o.call.elems.or(h.elems);
            o.call.dtype = o.call.dtype.or(h.dtype);
            continue;
        }
        let op = h
            .meta
            .as_ref()
            .and_then(|m| m.collective_name.as_deref())
            .and_then(op_from_collective_name)
            .or(h.op);
        let Some(op) = op.filter(|_| h.kind != HostKind::NcclAnnotation) else {
            continue;
        };
        open.push(Open {
            call: Call {
                ordinal: h.ordinal,
                start: h.start,
                end: h.end,
                op,
                meta: h.meta.unwrap_or_default(),
                elems: h.elems,
                dtype: h.dtype,
            },
            pid: h.pid,
            tid: h.tid,
            nccl_kernel: h.ext.is_some_and(|e| nccl_ext.contains(&e)),
            nccl_annotated: false,
        });
    }
    let mut calls: Vec<Call> = open
        .into_iter()
        .filter(|o| {
            !o.nccl_kernel
                && !launches_within(nccl_launches, o.call.start, o.call.end)
                && (!o.nccl_annotated || o.call.meta.group_size == Some(1))
        })
        .map(|o| o.call)
        .collect();
    calls.sort_by_key(|c| (c.start, c.ordinal));
    gloo.sort_by_key(|g| (g.start, g.ordinal));
    attach_gloo(&mut calls, &gloo);
    calls
}

/// Whether an NCCL kernel was launched in `[start, end]` (sorted times).
fn launches_within(sorted: &[u64], start: u64, end: u64) -> bool {
    let i = sorted.partition_point(|t| *t < start);
    sorted.get(i).is_some_and(|t| *t <= end)
}

/// Gives each call (by start) the first free `gloo:` annotation of its op
/// that starts at or after it.
fn attach_gloo(calls: &mut [Call], gloo: &[HostComm]) {
    let mut taken = vec![false; gloo.len()];
    // Per op, the index below which every annotation is taken or too early.
    let mut floor: Vec<(Op, usize)> = Vec::new();
    for c in calls.iter_mut() {
        let f = match floor.iter_mut().find(|(op, _)| *op == c.op) {
            Some((_, f)) => f,
            None => {
                floor.push((c.op, 0));
                &mut floor.last_mut().expect("just pushed").1
            }
        };
        let found = (*f..gloo.len()).find(|&i| {
            let g = &gloo[i];
            !taken[i]
                && g.op == Some(c.op)
                && g.start >= c.start
                && (c.elems.is_none() || g.elems.is_none() || c.elems == g.elems)
        });
        let Some(i) = found else { continue };
        taken[i] = true;
        // Calls come by start: an earlier annotation can never match.
        while *f < gloo.len()
            && (taken[*f] || gloo[*f].op != Some(c.op) || gloo[*f].start < c.start)
        {
            *f += 1;
        }
        let g = &gloo[i];
        c.end = c.end.max(g.end);
        c.elems = c.elems.or(g.elems);
        c.dtype = c.dtype.or(g.dtype);
    }
}

/// nccl-tests element count of a call without `In/Out msg nelems`, from
/// the elements of its first shaped input.
pub(crate) fn count_from_input(op: Op, elems: u64, group_size: u32) -> u64 {
    match op {
        // The input is one rank's part (all_gather) or the output
        // (reduce_scatter's first argument); the buffer is the whole.
        Op::AllGather | Op::ReduceScatter => elems.saturating_mul(u64::from(group_size)),
        Op::Barrier => 0,
        _ => elems,
    }
}

#[cfg(test)]
#[path = "cpu_comm_tests.rs"]
mod tests;
