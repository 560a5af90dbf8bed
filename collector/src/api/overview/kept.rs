//! The overview's per-rank figures kept in ClickHouse (`overview_ranks`,
//! migration 0018), so that a cold request (no answer in the collector's
//! [`super::cache`]: a restarted collector, another replica, an evicted
//! entry) reads one row per rank instead of every GPU activity of the job.
//!
//! In: the job, the rank filter. Out: the ranks' [`RankOverview`]s, from
//! the kept rows when every asked rank with GPU activities has one computed
//! from the inputs it has now, otherwise computed from the stored rows
//! ([`super::from_stored_rows`], today's path) and kept for the next cold
//! request.
//!
//! Exactness: a kept row holds exactly the figures the stored-rows path
//! gave (the same code, floats stored as Float64), with each input table's
//! rows and time sum for the rank (`Store::overview_inputs`) read before
//! that computation. It is used only while the same read gives the same
//! vectors: any INSERT into a rank's input tables raises a count (re-imports,
//! later steps, unmerged duplicates), and merges or retention change them
//! too; such a rank's kept row is then not used and the job's figures are
//! computed from the rows again (and kept anew). Jobs stored before the
//! migration simply have no kept rows. `?exact=true` always computes from
//! the stored rows (the tests compare both answers).

use std::collections::BTreeMap;

use crate::store::overview_kept::{KeptRank, RankInputs};
use rankscope_analysis::tb_plugin::GpuSummary;

use super::{from_stored_rows, KernelCounts, RankOverview};
use crate::api::{ApiError, ApiState};

/// Where the figures of an answer came from (the answer's `figures_from`).
pub const FROM_KEPT: &str = "kept";
/// See [`FROM_KEPT`].
pub const FROM_ROWS: &str = "stored_rows";

/// The kept form of `o`, computed after `inputs` were read.
pub fn to_kept(o: &RankOverview, inputs: &RankInputs, computed_ns: u64) -> KeptRank {
    let s = &o.summary;
    KeptRank {
        rank: o.rank,
        computed_ns,
        input_n: inputs.n.to_vec(),
        input_sum: inputs.sum.to_vec(),
        steps: o.steps,
        span_from: o.span_from.to_owned(),
        gpu_util_pct: s.gpu_util_pct,
        sm_efficiency_pct: s.sm_efficiency_pct,
        achieved_occupancy_pct: s.achieved_occupancy_pct,
        tensor_core_pct: s.tensor_core_pct,
        roles_us: o.roles_us.to_vec(),
        step_us: o.step_us,
        kernel_total_ns: o.kernels.total_ns,
        gemm_conv_ns: o.kernels.gemm_conv_ns,
        launched: o.kernels.launched,
        short_launches: o.kernels.short,
    }
}

/// The [`RankOverview`] of a kept row (`None`: a row this build cannot
/// read, e.g. another number of roles).
pub fn from_kept(k: &KeptRank) -> Option<RankOverview> {
    let span_from = ["profiler_steps", "steps", "gpu_activities"]
        .into_iter()
        .find(|s| *s == k.span_from)?;
    Some(RankOverview {
        rank: k.rank,
        summary: GpuSummary {
            gpu_util_pct: k.gpu_util_pct,
            sm_efficiency_pct: k.sm_efficiency_pct,
            achieved_occupancy_pct: k.achieved_occupancy_pct,
            tensor_core_pct: k.tensor_core_pct,
        },
        steps: k.steps,
        span_from,
        roles_us: k.roles_us.as_slice().try_into().ok()?,
        step_us: k.step_us,
        kernels: KernelCounts {
            total_ns: k.kernel_total_ns,
            gemm_conv_ns: k.gemm_conv_ns,
            launched: k.launched,
            short: k.short_launches,
        },
        from_kept: true,
    })
}

/// The figures of the ranks with GPU activities (`rank` alone when given)
/// from `kept`, when each has a row computed from its `inputs` now.
pub fn usable(
    kept: &BTreeMap<u32, KeptRank>,
    inputs: &BTreeMap<u32, RankInputs>,
    rank: Option<u32>,
) -> Option<Vec<RankOverview>> {
    let ranks: Vec<u32> = inputs
        .iter()
        .filter(|(r, i)| i.n[0] > 0 && rank.is_none_or(|x| x == **r))
        .map(|(r, _)| *r)
        .collect();
    if ranks.is_empty() {
        return None;
    }
    ranks
        .iter()
        .map(|r| {
            let k = kept.get(r).filter(|k| k.computed_from(&inputs[r]))?;
            from_kept(k)
        })
        .collect()
}

/// The figures of `job` (module doc): kept when usable and not `exact`.
pub(super) async fn figures(
    st: &ApiState,
    job: &str,
    rank: Option<u32>,
    exact: bool,
) -> Result<Vec<RankOverview>, ApiError> {
    // Both reads side by side (the kept rows are few; the inputs' read
    // scans the input tables).
    let kept = async {
        if exact {
            None
        } else {
            Some(st.store.kept_overviews(job).await)
        }
    };
    let (inputs, kept) = tokio::join!(st.store.overview_inputs(job), kept);
    let inputs = inputs?;
    match kept {
        Some(Ok(kept)) => {
            if let Some(rows) = usable(&kept, &inputs, rank) {
                return Ok(rows);
            }
        }
        Some(Err(e)) => {
            tracing::warn!(job, error = %e, "kept overview figures unread; computing them")
        }
        None => {}
    }
    let rows = from_stored_rows(st, job, rank).await?;
    let now = crate::store::now_ns();
    let keep: Vec<KeptRank> = rows
        .iter()
        .filter_map(|o| Some(to_kept(o, inputs.get(&o.rank)?, now)))
        .collect();
    if let Err(e) = st.store.keep_overviews(job, &keep).await {
        tracing::warn!(job, error = %e, "overview figures not kept");
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overview(rank: u32) -> RankOverview {
        RankOverview {
            rank,
            summary: GpuSummary {
                gpu_util_pct: Some(0.1 + f64::from(rank)),
                sm_efficiency_pct: None,
                achieved_occupancy_pct: Some(1.0 / 3.0),
                tensor_core_pct: Some(12.5),
            },
            steps: 3,
            span_from: "steps",
            roles_us: [1.5, 0.0, 2.0, 3.0, 4.0, 5.0, 0.0, 7.25],
            step_us: 22.75,
            kernels: KernelCounts {
                total_ns: 10,
                gemm_conv_ns: 4,
                launched: 3,
                short: 1,
            },
            from_kept: false,
        }
    }

    fn inputs(n: u64) -> RankInputs {
        RankInputs {
            n: [n, 1, 1, 0, 3, 0],
            sum: [7, 8, 9, 0, 10, 0],
        }
    }

    #[test]
    fn a_kept_row_gives_back_the_figures() {
        let o = overview(2);
        let back = from_kept(&to_kept(&o, &inputs(5), 1)).expect("readable");
        assert_eq!(back.summary, o.summary);
        assert_eq!(
            (
                back.rank,
                back.steps,
                back.span_from,
                back.roles_us,
                back.step_us
            ),
            (o.rank, o.steps, o.span_from, o.roles_us, o.step_us)
        );
        assert_eq!(back.kernels, o.kernels);
        assert!(back.from_kept);
    }

    #[test]
    fn kept_rows_are_used_only_for_the_inputs_they_were_computed_from() {
        let now: BTreeMap<u32, RankInputs> = [(0, inputs(5)), (1, inputs(6))].into();
        let kept = |n1: u64| -> BTreeMap<u32, KeptRank> {
            [
                (0, to_kept(&overview(0), &inputs(5), 1)),
                (1, to_kept(&overview(1), &inputs(n1), 1)),
            ]
            .into()
        };
        let all = usable(&kept(6), &now, None).expect("every rank kept");
        assert_eq!(all.iter().map(|o| o.rank).collect::<Vec<_>>(), [0, 1]);
        // Rank 1 got a row since: the job is computed again, rank 0 alone not.
        assert!(usable(&kept(5), &now, None).is_none());
        assert_eq!(usable(&kept(5), &now, Some(0)).map(|v| v.len()), Some(1));
        assert!(usable(&kept(5), &now, Some(1)).is_none());
        // A rank without a kept row, and a rank without GPU activities.
        let mut more = now.clone();
        more.insert(2, inputs(1));
        assert!(usable(&kept(6), &more, None).is_none());
        more.insert(2, inputs(0));
        assert_eq!(usable(&kept(6), &more, None).map(|v| v.len()), Some(2));
        assert!(usable(&kept(6), &more, Some(2)).is_none());
        assert!(usable(&BTreeMap::new(), &BTreeMap::new(), None).is_none());
    }
}
