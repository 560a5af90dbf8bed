//! Capacity of a batch's row vectors.
//!
//! In: an `AgentBatch` and the empty [`RowSet`] it converts into. Out: the
//! set's event row vectors reserved for exactly the rows the batch makes.

use rankscope_proto::v1 as proto;

use crate::store::RowSet;

/// Sizes the event row vectors of `rows` for `batch` (one pass over the
/// events' kinds): grown by doubling instead, they would copy every row
/// about once more and hold up to twice their rows' memory while they wait
/// in the writer (one agent batch is tens of thousands of rows).
pub(super) fn reserve(rows: &mut RowSet, batch: &proto::AgentBatch) {
    use proto::event::Kind;
    let (mut steps, mut spans, mut collectives, mut kernels, mut launches, mut configs) =
        (0, 0, 0, 0, 0, 0);
    for ev in batch.ranks.iter().flat_map(|g| &g.events) {
        match &ev.kind {
            Some(Kind::StepBegin(_) | Kind::StepEnd(_)) => steps += 1,
            Some(Kind::Span(_)) => spans += 1,
            Some(Kind::Collective(_)) => collectives += 1,
            Some(Kind::Kernel(k)) => {
                kernels += 1;
                launches += usize::from(k.launch_start_ns != 0);
                configs += usize::from(k.config.is_some());
            }
            _ => {}
        }
    }
    rows.steps.reserve_exact(steps);
    rows.spans.reserve_exact(spans);
    rows.collectives.reserve_exact(collectives);
    rows.kernels.reserve_exact(kernels);
    rows.launches.reserve_exact(launches);
    rows.kernel_configs.reserve_exact(configs);
}
