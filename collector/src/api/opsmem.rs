//! The Operator and Memory views of traced ranks (issue 29):
//!
//! - `GET /api/v1/jobs/{job}/ops[?rank=R][&group_by=name|shape|stack][&top=N]`:
//!   per rank and operator the TensorBoard plugin 0.4.3's columns
//!   (`rankscope_analysis::optree`: calls, host/device self and total,
//!   tensor cores) and Paddle's per-call min / max / mean and ratio columns
//!   (`paddle.profiler` 3.3.1 Operator Summary: ratio = the row's total /
//!   Σ totals of the rank's operators). Without `rank`: one row per operator
//!   with the median over ranks, the max and its rank. Sorted like the
//!   plugin: device self time descending when the job has device time, else
//!   host self. Answer `{"job", "rank", "group_by", "rows", "notes"}`.
//!   `group_by=shape`: rows per (operator, input shape), the plugin's
//!   "Operator + Input Shape" (`operator_shapes`; `input_shape` = `Input
//!   Dims` as Python prints the list); a job whose traces have no shapes
//!   gets name rows and a note.
//! - `GET /api/v1/jobs/{job}/memory[?rank=R][&ops=true][&curve=true][&full=true]`: per
//!   rank and device the peak allocated / reserved bytes of its traces'
//!   `[memory]` events, with `ops` the plugin's per-operator memory table,
//!   with `curve` (or a `rank`) the down-sampled curve, with `events` a page
//!   of the allocation/release events (`events`, `&limit=`, `&offset=`).
//!   Answer `{"job", "rank", "peaks", "ops", "ops_total", "curve",
//!   "curve_points_total", "live", "notes"}` (+ `events`, `events_total`);
//!   a job without memory events answers empty lists and a note. Job-wide
//!   (no `rank`) the answer is bounded ([`bounded`]: the curve of the 8
//!   ranks with the largest peaks, min/max down-sampled to <= 2,000 points;
//!   the 2,000 operator rows with the largest size increase; `live.steps`
//!   only while <= 2,000, `live.steps_total` counting them); `rank=R`
//!   answers all of that rank's, `full=true` all of every rank's.
//!
//! 400 for a bad parameter (`top` outside 1..=10000, `limit` outside
//! 1..=100000, an unknown `group_by`), 404 for an unknown job or a rank the job has no rows of.

mod bounded;
mod events;
mod live;
mod memory;
mod ops;

pub(super) use memory::{job_live, memory, MemoryQuery};
pub(super) use ops::{ops, OpsQuery};
