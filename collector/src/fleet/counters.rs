//! The GPUs' error counters in the fleet rows' hardware evidence (issue 37).
//!
//! In: the rows of [`super::assemble`] and the window's
//! [`GpuCounters`] (`Store::fleet_gpu_counters`, one per GPU with an error
//! in the window). Out: the rows with `hardware.{xid_errors, ecc_*_errors,
//! pcie_replays}` filled: by GPU the row's own GPU (by UUID alone, unique
//! per GPU by NVML's definition: a rank's node name need not be its agent's),
//! by node the sum over the GPUs the node's agent sampled; by link nothing
//! (the counters are the GPUs', not the NICs'). A GPU without a row (no
//! placement in the window) adds nothing: the counters are evidence on
//! units, not units.

use std::collections::HashMap;

use super::{By, FleetRow};
use crate::store::fleet_counters::GpuCounters;

/// Adds `counters` to the hardware evidence of `rows` grouped `by`.
pub fn attach(rows: &mut [FleetRow], counters: &[GpuCounters], by: By) {
    if by == By::Link || counters.is_empty() {
        return;
    }
    let mut sums: HashMap<(&str, &str), [u64; 4]> = HashMap::new();
    for c in counters {
        let key = match by {
            By::Gpu => ("", c.uuid.as_str()),
            _ => (c.node.as_str(), ""),
        };
        let s = sums.entry(key).or_default();
        let add = [
            c.xid_errors,
            c.ecc_corrected_errors,
            c.ecc_uncorrected_errors,
            c.pcie_replays,
        ];
        for (a, b) in s.iter_mut().zip(add) {
            *a = a.saturating_add(b);
        }
    }
    for row in rows {
        let key = match by {
            By::Gpu => ("", row.gpu_uuid.as_deref().unwrap_or("")),
            _ => (row.node.as_str(), ""),
        };
        if let Some([xid, ecc_c, ecc_u, replays]) = sums.get(&key) {
            let hw = &mut row.hardware;
            hw.xid_errors = *xid;
            hw.ecc_corrected_errors = *ecc_c;
            hw.ecc_uncorrected_errors = *ecc_u;
            hw.pcie_replays = *replays;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::Hardware;

    fn row(node: &str, gpu: Option<&str>) -> FleetRow {
        FleetRow {
            place: None,
            node: node.into(),
            gpu_uuid: gpu.map(str::to_owned),
            link: None,
            jobs: 1,
            placements: 1,
            rank_hours: 0.0,
            verdicts: 0,
            flagged_placements: 0,
            verdict_steps: 0,
            hang_suspects: 0,
            cost_gpu_hours: 0.0,
            score: 0.0,
            low_exposure: true,
            hardware: Hardware::default(),
            verdict_jobs: Vec::new(),
            timeline: Vec::new(),
        }
    }

    fn counters(node: &str, uuid: &str, v: [u64; 4]) -> GpuCounters {
        GpuCounters {
            node: node.into(),
            uuid: uuid.into(),
            xid_errors: v[0],
            ecc_corrected_errors: v[1],
            ecc_uncorrected_errors: v[2],
            pcie_replays: v[3],
        }
    }

    fn figures(r: &FleetRow) -> [u64; 4] {
        let h = &r.hardware;
        [
            h.xid_errors,
            h.ecc_corrected_errors,
            h.ecc_uncorrected_errors,
            h.pcie_replays,
        ]
    }

    #[test]
    fn by_gpu_each_row_gets_its_gpu_and_by_node_the_sum() {
        let c = [
            counters("n1", "GPU-a", [1, 0, 2, 0]),
            counters("n1", "GPU-b", [0, 5, 0, 9]),
            counters("n2", "GPU-d", [3, 0, 0, 0]),
        ];
        // The rank's node name ("rank-n1") need not be its agent's ("n1").
        let mut gpus = vec![
            row("rank-n1", Some("GPU-a")),
            row("n1", Some("GPU-b")),
            row("n1", Some("GPU-c")),
            row("n2", Some("GPU-d")),
        ];
        attach(&mut gpus, &c, By::Gpu);
        let got: Vec<[u64; 4]> = gpus.iter().map(figures).collect();
        assert_eq!(
            got,
            [[1, 0, 2, 0], [0, 5, 0, 9], [0, 0, 0, 0], [3, 0, 0, 0]]
        );
        let mut nodes = vec![row("n1", None), row("n2", None), row("n3", None)];
        attach(&mut nodes, &c, By::Node);
        let got: Vec<[u64; 4]> = nodes.iter().map(figures).collect();
        assert_eq!(got, [[1, 5, 2, 9], [3, 0, 0, 0], [0, 0, 0, 0]]);
    }

    #[test]
    fn links_get_no_gpu_counters() {
        let mut links = vec![row("n1", None)];
        links[0].link = Some("mlx5_0".into());
        attach(
            &mut links,
            &[counters("n1", "GPU-a", [1, 1, 1, 1])],
            By::Link,
        );
        assert_eq!(figures(&links[0]), [0, 0, 0, 0]);
    }
}
