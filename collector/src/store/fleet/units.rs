//! The rollup path of the fleet view's reads ([`Store::fleet_facts_by`],
//! issue 38): one grouping of the rollup of migration 0014 per unit kind
//! (`fleet_units.sql`) gives every unit's exposure, the placements of the
//! window's verdicts and hang suspects and, by node, the verdict jobs' world
//! sizes; the verdicts, evidence and hang suspects are read beside it.
//!
//! In: a window start and a grouping. Out: [`FleetFacts`] with `exposure`
//! set, `placements` ordered by (job, rank, node, unit) and `worlds` by job,
//! as `crate::fleet::assemble` expects.

use clickhouse::Row;
use serde::Deserialize;

use super::{
    all, month_start, timed, Count, FleetExposure, FleetFacts, FleetPlacement, FleetWorld,
    EVIDENCE_SQL, HANGS_SQL, HAS_SAMPLES_SQL, UNITS_SQL, VERDICTS_SQL, WORLDS_SQL,
};
use crate::fleet::By;
use crate::store::{Store, StoreError};

/// One unit from the rollup's single pass (`fleet_units.sql`): its
/// exposure, its flagged (job, ranks, first seen, last seen) and, by node,
/// the highest rank of each verdict job there.
#[derive(Debug, Clone, PartialEq, Row, Deserialize)]
struct UnitPass {
    node: String,
    unit: String,
    jobs: u64,
    placements: u64,
    rank_ns: u64,
    flagged: Vec<(String, Vec<u32>, u64, u64)>,
    tops: Vec<(String, u32)>,
}

impl Store {
    /// The fleet view's facts since `since_ns` for one grouping, from the
    /// rollup (see the module docs); `by = gpu` while NVML samples in the
    /// window name GPUs reads [`Store::fleet_facts`] with samples.
    pub async fn fleet_facts_by(&self, since_ns: u64, by: By) -> Result<FleetFacts, StoreError> {
        // `by = gpu`: whether NVML samples name GPUs in the window, probed
        // side by side with the rollup's reads (their answer is dropped in
        // the rare case that samples exist).
        let has_samples = async {
            if by != By::Gpu {
                return Ok(false);
            }
            let has: Vec<Count> = timed(
                HAS_SAMPLES_SQL.name,
                self.read(HAS_SAMPLES_SQL).bind(since_ns).fetch_all(),
            )
            .await?;
            Ok(has.first().is_some_and(|c| c.n > 0))
        };
        let kind = match by {
            By::Node => "node",
            By::Gpu => "gpu",
            By::Link => "link",
        };
        let month = month_start(since_ns);
        // By node every rank of a job has a node row, so the same pass gives
        // the verdict jobs' world sizes; by GPU or link it reads the node rows
        // (`fleet_job_worlds.sql`), side by side.
        let by_node = by == By::Node;
        let units = timed(
            UNITS_SQL.name,
            self.read(UNITS_SQL)
                .bind(since_ns)
                .bind(since_ns)
                .bind(since_ns)
                .bind(since_ns)
                .bind(since_ns)
                .bind(u8::from(by_node))
                .bind(since_ns)
                .bind(kind)
                .bind(month)
                .bind(since_ns)
                .fetch_all::<UnitPass>(),
        );
        let worlds = async {
            if by_node {
                return Ok(Vec::new());
            }
            timed(
                WORLDS_SQL.name,
                self.read(WORLDS_SQL)
                    .bind(month)
                    .bind(since_ns)
                    .bind(since_ns)
                    .fetch_all::<FleetWorld>(),
            )
            .await
        };
        // Independent reads, run side by side.
        let (has_samples, units, worlds, mut facts) = tokio::try_join!(
            has_samples,
            units,
            worlds,
            self.fleet_facts_without_placements(since_ns)
        )?;
        if has_samples {
            return self.fleet_facts(since_ns, true).await;
        }
        let (exposure, placements, tops) = split_units(units, by);
        facts.worlds = if by_node { tops } else { worlds };
        facts.placements = placements;
        facts.exposure = Some(exposure);
        Ok(facts)
    }

    /// Verdicts, evidence and hang suspects since `since_ns`.
    async fn fleet_facts_without_placements(
        &self,
        since_ns: u64,
    ) -> Result<FleetFacts, StoreError> {
        let (verdicts, evidence, hangs) = tokio::try_join!(
            all(self, VERDICTS_SQL, since_ns),
            all(self, EVIDENCE_SQL, since_ns),
            all(self, HANGS_SQL, since_ns)
        )?;
        Ok(FleetFacts {
            verdicts,
            evidence,
            hangs,
            ..FleetFacts::default()
        })
    }
}

/// The units' exposure, their flagged placements (ordered by job, rank,
/// node, unit) and the world sizes from the `tops` (ordered by job) of one
/// pass (`fleet_units.sql`).
fn split_units(
    units: Vec<UnitPass>,
    by: By,
) -> (Vec<FleetExposure>, Vec<FleetPlacement>, Vec<FleetWorld>) {
    let mut exposure = Vec::with_capacity(units.len());
    let mut placements = Vec::new();
    let mut worlds: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    for u in units {
        for (job_id, ranks, first_ns, last_ns) in u.flagged {
            for rank in ranks {
                let (gpu_label, link_label) = match by {
                    By::Node => (String::new(), String::new()),
                    By::Gpu => (u.unit.clone(), String::new()),
                    By::Link => (String::new(), u.unit.clone()),
                };
                placements.push(FleetPlacement {
                    job_id: job_id.clone(),
                    rank,
                    node: u.node.clone(),
                    gpu_label,
                    link_label,
                    first_ns,
                    last_ns,
                });
            }
        }
        for (job_id, top) in u.tops {
            let w = worlds.entry(job_id).or_insert(0);
            *w = (*w).max(top + 1);
        }
        exposure.push(FleetExposure {
            node: u.node,
            unit: u.unit,
            jobs: u.jobs,
            placements: u.placements,
            rank_ns: u.rank_ns,
        });
    }
    placements.sort_by(|a, b| {
        (&a.job_id, a.rank, &a.node, &a.gpu_label, &a.link_label).cmp(&(
            &b.job_id,
            b.rank,
            &b.node,
            &b.gpu_label,
            &b.link_label,
        ))
    });
    let mut worlds: Vec<FleetWorld> = worlds
        .into_iter()
        .map(|(job_id, world)| FleetWorld { job_id, world })
        .collect();
    worlds.sort_by(|a, b| a.job_id.cmp(&b.job_id));
    (exposure, placements, worlds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(node: &str, unit: &str, flagged: &[(&str, &[u32])], tops: &[(&str, u32)]) -> UnitPass {
        UnitPass {
            node: node.into(),
            unit: unit.into(),
            jobs: 2,
            placements: 5,
            rank_ns: 7,
            flagged: flagged
                .iter()
                .map(|(j, rs)| (j.to_string(), rs.to_vec(), 1, 2))
                .collect(),
            tops: tops.iter().map(|(j, t)| (j.to_string(), *t)).collect(),
        }
    }

    #[test]
    fn one_pass_splits_into_exposure_ordered_placements_and_worlds() {
        let units = vec![
            unit(
                "n1",
                "G1",
                &[("j2", &[5]), ("j1", &[3, 1])],
                &[("j1", 3), ("j2", 7)],
            ),
            unit("n0", "G0", &[("j1", &[2]), ("j3", &[])], &[("j1", 9)]),
        ];
        let (exposure, placements, worlds) = split_units(units, By::Gpu);
        assert_eq!(
            exposure
                .iter()
                .map(|e| (e.node.as_str(), e.unit.as_str()))
                .collect::<Vec<_>>(),
            [("n1", "G1"), ("n0", "G0")],
            "the units in the query's order"
        );
        assert_eq!(
            (
                exposure[0].jobs,
                exposure[0].placements,
                exposure[0].rank_ns
            ),
            (2, 5, 7)
        );
        let got: Vec<_> = placements
            .iter()
            .map(|p| {
                (
                    p.job_id.as_str(),
                    p.rank,
                    p.node.as_str(),
                    p.gpu_label.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("j1", 1, "n1", "G1"),
                ("j1", 2, "n0", "G0"),
                ("j1", 3, "n1", "G1"),
                ("j2", 5, "n1", "G1")
            ],
            "ordered by job, rank, node, unit; a pair with no named rank adds none"
        );
        assert!(placements
            .iter()
            .all(|p| p.link_label.is_empty() && p.first_ns == 1 && p.last_ns == 2));
        let worlds: Vec<_> = worlds
            .iter()
            .map(|w| (w.job_id.as_str(), w.world))
            .collect();
        assert_eq!(
            worlds,
            [("j1", 10), ("j2", 8)],
            "highest rank over the units + 1"
        );
        let (_, by_link, _) = split_units(vec![unit("n", "L", &[("j", &[0])], &[])], By::Link);
        assert_eq!(
            (
                by_link[0].gpu_label.as_str(),
                by_link[0].link_label.as_str()
            ),
            ("", "L")
        );
    }
}
