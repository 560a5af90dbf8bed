//! Goodput: where a job's wall time went.
//!
//! In: per finalized step the step time (median over its ranks) and the
//! ranks' mean compute, input (dataloader) and exposed communication time
//! (HTA's temporal breakdown terms, per rank-step), the time the step lost
//! waiting on stragglers (their what-if gain, see
//! [`crate::straggler::gain`]), the job's wall time (first step begin to
//! last step end) and the longest suspected hang. Out: [`Goodput`], whose
//! parts add up to the wall time exactly.
//!
//! Per step, in this order and each capped by what is left of the step:
//! productive `compute`, `input_stall`, `straggler_wait` (taken out of the
//! exposed communication: it is the part of the others' collective wait the
//! stragglers cause), the rest of the `exposed_communication`, and `idle`
//! for what remains. The wait on stragglers of cause `other` (time outside
//! the straggler's phases, which the step breakdown leaves in its idle
//! time) that the exposed communication does not hold is taken from what
//! remains after it, before `idle`: it is still the straggler's time. Time between steps (wall time minus the steps' time)
//! is `hung` up to the longest hang suspect's silence, `idle` beyond.
//!
//! MFU (model FLOPs utilisation, PaLM's definition: achieved model FLOPs per
//! second over the peak of the devices): `flops_per_step * steps /
//! (wall_time * devices * peak_flops_per_device)`.

/// One finalized step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTime {
    pub step_time_ns: u64,
    /// Means over the step's ranks.
    pub compute_ns: f64,
    pub input_ns: f64,
    pub exposed_comm_ns: f64,
    /// The step's what-if gain from its active stragglers.
    pub straggler_wait_ns: f64,
    /// Of `straggler_wait_ns`, the gain of stragglers of cause `other`.
    pub straggler_other_ns: f64,
}

/// Where the wall time went, ns (the parts sum to `wall_ns`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Goodput {
    pub wall_ns: u64,
    pub steps: u64,
    pub compute_ns: f64,
    pub exposed_communication_ns: f64,
    pub straggler_wait_ns: f64,
    pub input_stall_ns: f64,
    pub idle_ns: f64,
    pub hung_ns: f64,
}

impl Goodput {
    /// The parts, named, in a fixed order.
    pub fn parts(&self) -> [(&'static str, f64); 6] {
        [
            ("compute", self.compute_ns),
            ("exposed_communication", self.exposed_communication_ns),
            ("straggler_wait", self.straggler_wait_ns),
            ("input_stall", self.input_stall_ns),
            ("idle", self.idle_ns),
            ("hung", self.hung_ns),
        ]
    }

    /// MFU in percent, when the inputs are known and non-zero.
    pub fn mfu_pct(&self, flops_per_step: f64, devices: u32, peak_flops: f64) -> Option<f64> {
        let denom = self.wall_ns as f64 / 1e9 * f64::from(devices) * peak_flops;
        (denom > 0.0 && flops_per_step > 0.0)
            .then(|| 100.0 * flops_per_step * self.steps as f64 / denom)
    }
}

/// Splits `wall_ns` (see the module doc).
pub fn goodput(steps: &[StepTime], wall_ns: u64, longest_hang_ns: u64) -> Goodput {
    let mut g = Goodput {
        wall_ns,
        steps: steps.len() as u64,
        ..Goodput::default()
    };
    let mut in_steps = 0f64;
    for s in steps {
        let t = s.step_time_ns as f64;
        let mut left = t;
        let mut take = |want: f64| {
            let v = want.max(0.0).min(left);
            left -= v;
            v
        };
        let compute = take(s.compute_ns);
        let input = take(s.input_ns);
        let wait = take(s.straggler_wait_ns.min(s.exposed_comm_ns));
        let comm = take(s.exposed_comm_ns - wait);
        let outside = take(s.straggler_other_ns.min(s.straggler_wait_ns - wait));
        g.compute_ns += compute;
        g.input_stall_ns += input;
        g.straggler_wait_ns += wait + outside;
        g.exposed_communication_ns += comm;
        g.idle_ns += left;
        in_steps += t;
    }
    let wall = wall_ns as f64;
    if in_steps > wall {
        // Steps overlap the wall clock's ends (ranks' clocks differ): scale
        // the parts onto the wall time.
        let k = if in_steps > 0.0 { wall / in_steps } else { 0.0 };
        g.compute_ns *= k;
        g.input_stall_ns *= k;
        g.straggler_wait_ns *= k;
        g.exposed_communication_ns *= k;
        g.idle_ns *= k;
    } else {
        let gaps = wall - in_steps;
        g.hung_ns = gaps.min(longest_hang_ns as f64);
        g.idle_ns += gaps - g.hung_ns;
    }
    g
}

/// Dense BF16/FP16 tensor peak per GPU, FLOP/s, by NVML product name
/// (NVIDIA data sheets: V100 125 TFLOPS FP16 tensor; A100 312 BF16; A10 125;
/// A30 165; L4 121; L40S 362; T4 65 FP16; H100 SXM 989 and PCIe 756 BF16;
/// H200 989; B200 2,250). The longest matching key wins ("H100 PCIe" over
/// "H100").
pub fn peak_flops(gpu_name: &str) -> Option<(f64, &'static str)> {
    const TABLE: &[(&str, f64)] = &[
        ("B200", 2250e12),
        ("H200", 989e12),
        ("H100 PCIe", 756e12),
        ("H100", 989e12),
        ("A100", 312e12),
        ("A30", 165e12),
        ("A10", 125e12),
        ("L40S", 362e12),
        ("L4", 121e12),
        ("V100", 125e12),
        ("T4", 65e12),
    ];
    let name = gpu_name.to_ascii_uppercase();
    TABLE
        .iter()
        .filter(|(k, _)| name.contains(&k.to_ascii_uppercase()))
        .max_by_key(|(k, _)| k.len())
        .map(|(k, v)| (*v, *k))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(t: u64, c: f64, i: f64, x: f64, w: f64) -> StepTime {
        StepTime {
            step_time_ns: t,
            compute_ns: c,
            input_ns: i,
            exposed_comm_ns: x,
            straggler_wait_ns: w,
            straggler_other_ns: 0.0,
        }
    }

    fn total(g: &Goodput) -> f64 {
        g.parts().iter().map(|p| p.1).sum()
    }

    #[test]
    fn the_parts_add_up_to_the_wall_time() {
        let steps = [
            step(1000, 600.0, 50.0, 300.0, 200.0),
            step(1000, 900.0, 0.0, 400.0, 0.0),
        ];
        let g = goodput(&steps, 2500, 300);
        assert!((total(&g) - 2500.0).abs() < 1e-6, "{g:?}");
        assert_eq!(g.compute_ns, 1500.0);
        assert_eq!(g.input_stall_ns, 50.0);
        assert_eq!(g.straggler_wait_ns, 200.0);
        // Step 1: 300 - 200 of comm; step 2: 100 left of 400.
        assert_eq!(g.exposed_communication_ns, 200.0);
        assert_eq!(g.hung_ns, 300.0);
        assert_eq!(g.idle_ns, 50.0 + 200.0);
        // Steps longer than the wall clock: scaled, still adding up.
        let g = goodput(&steps, 1500, 0);
        assert!((total(&g) - 1500.0).abs() < 1e-6, "{g:?}");
    }

    #[test]
    fn an_other_stragglers_time_beyond_the_exposed_comm_comes_from_idle() {
        // 4 ranks, rank 3 works 400 ns outside its phases: the others'
        // exposed comm averages 300 (3 x 400 / 4), its extra time sits in
        // its idle time. The gain (400) is straggler wait in full.
        let mut s = step(1000, 500.0, 0.0, 300.0, 400.0);
        s.straggler_other_ns = 400.0;
        let g = goodput(&[s], 1000, 0);
        assert_eq!(g.straggler_wait_ns, 400.0);
        assert_eq!(g.exposed_communication_ns, 0.0);
        assert_eq!(g.idle_ns, 100.0);
        assert!((total(&g) - 1000.0).abs() < 1e-9);
        // The same gain from a compute straggler stays capped at the comm.
        let g = goodput(&[step(1000, 500.0, 0.0, 300.0, 400.0)], 1000, 0);
        assert_eq!((g.straggler_wait_ns, g.idle_ns), (300.0, 200.0));
        // Never more than the step holds.
        let mut s = step(1000, 900.0, 0.0, 50.0, 400.0);
        s.straggler_other_ns = 400.0;
        let g = goodput(&[s], 1000, 0);
        assert_eq!((g.straggler_wait_ns, g.idle_ns), (100.0, 0.0));
    }

    #[test]
    fn mfu_and_peaks() {
        let g = Goodput {
            wall_ns: 2_000_000_000,
            steps: 10,
            ..Goodput::default()
        };
        // 10 steps x 1e15 FLOP in 2 s on 8 GPUs of 1e15 peak: 62.5 %.
        assert_eq!(g.mfu_pct(1e15, 8, 1e15), Some(62.5));
        assert_eq!(g.mfu_pct(0.0, 8, 1e15), None);
        assert_eq!(peak_flops("NVIDIA H100 PCIe").unwrap().1, "H100 PCIe");
        assert_eq!(peak_flops("NVIDIA H100 80GB HBM3").unwrap().0, 989e12);
        assert_eq!(peak_flops("NVIDIA A100-SXM4-80GB").unwrap().0, 312e12);
        assert!(peak_flops("cpu").is_none());
    }
}
