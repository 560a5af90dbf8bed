use super::*;
use crate::test_rng::Rng;
use KernelClass::*;

fn ev(start_ns: u64, end_ns: u64, class: KernelClass) -> GpuEvent {
    GpuEvent {
        start_ns,
        end_ns,
        class,
    }
}

#[test]
fn empty_input_is_all_zero() {
    let b = breakdown(&[]);
    assert_eq!(b, Breakdown::default());
    assert_eq!(b.overlap_pct, None);
    assert_eq!(b.idle_pct, None);
}

#[test]
fn hand_computed_step() {
    // t:   0    10   20   30   40   50   60   70   80   90  100
    // comp [0,30)          [40,60)
    // comp      [10,20)  (nested)
    // comm           [20,          50)
    // mem                                [70,75)
    // other (Sync)                             [80,100)
    let events = [
        ev(40, 60, Computation),
        ev(0, 30, Computation),
        ev(10, 20, Computation),
        ev(20, 50, Communication),
        ev(70, 75, Memory),
        ev(80, 100, Other),
    ];
    let b = breakdown(&events);
    assert_eq!(b.gpu_span_ns, 100);
    // busy: [0,60) + [70,75) + [80,100) = 60 + 5 + 20
    assert_eq!(b.gpu_busy_ns, 85);
    assert_eq!(b.idle_ns, 15);
    assert_eq!(b.compute_ns, 30 + 20);
    assert_eq!(b.comm_ns, 30);
    assert_eq!(b.memory_ns, 5);
    // comm [20,50) ∩ comp {[0,30),[40,60)} = [20,30) + [40,50)
    assert_eq!(b.overlap_ns, 20);
    assert_eq!(b.exposed_comm_ns, 10);
    assert_eq!(b.non_compute_ns, 100 - 50 - 15);
    assert_eq!(b.overlap_pct, Some(100.0 * 20.0 / 30.0));
    assert_eq!(b.idle_pct, Some(15.0));
    assert_eq!(b.compute_pct, Some(50.0));
    assert_eq!(b.non_compute_pct, Some(35.0));
}

#[test]
fn no_comm_means_no_overlap_pct_and_zero_span_means_no_pcts() {
    let b = breakdown(&[ev(5, 9, Computation)]);
    assert_eq!(b.overlap_pct, None);
    assert_eq!(b.compute_pct, Some(100.0));
    let z = breakdown(&[ev(5, 5, Computation), ev(5, 3, Communication)]);
    assert_eq!(z.gpu_span_ns, 0);
    assert_eq!(z.compute_pct, None);
    assert_eq!(z.overlap_pct, None);
}

#[test]
fn empty_events_extend_span_like_hta() {
    // A zero-length kernel at t=50 still ends the span (HTA kernel_time).
    let b = breakdown(&[ev(0, 10, Computation), ev(50, 50, Computation)]);
    assert_eq!(b.gpu_span_ns, 50);
    assert_eq!(b.gpu_busy_ns, 10);
    assert_eq!(b.idle_ns, 40);
}

#[test]
fn hta_rank7_numbers() {
    // expected-hta.json (param_dlrm_8rank_v100), rank 7, in µs: kernel_time
    // 10967, idle 8308, compute 1059, non-compute 1600; HTA prints
    // round(100 * x / kernel_time, 2) = 75.75 / 9.66 / 14.59.
    let us = 1_000;
    let events = [
        ev(0, 1059 * us, Computation),
        ev(1059 * us, 2559 * us, Communication),
        ev(10_867 * us, 10_967 * us, Memory),
    ];
    let b = breakdown(&events);
    assert_eq!(b.gpu_span_ns, 10_967 * us);
    assert_eq!(b.idle_ns, 8308 * us);
    assert_eq!(b.compute_ns, 1059 * us);
    assert_eq!(b.non_compute_ns, 1600 * us);
    let round2 = |x: f64| (x * 100.0).round() / 100.0;
    assert_eq!(b.idle_pct.map(round2), Some(75.75));
    assert_eq!(b.compute_pct.map(round2), Some(9.66));
    assert_eq!(b.non_compute_pct.map(round2), Some(14.59));
    assert_eq!(b.overlap_pct, Some(0.0));
}

#[test]
fn assign_by_start_time() {
    let steps = [(1, 100, 200), (2, 200, 300), (3, 300, 350)];
    let events = [
        ev(50, 120, Computation),    // before any step: dropped
        ev(100, 150, Computation),   // step 1 (start inclusive)
        ev(199, 260, Communication), // step 1 by start
        ev(200, 210, Memory),        // step 2 (end exclusive)
        ev(349, 400, Computation),   // step 3
        ev(350, 360, Computation),   // after: dropped
    ];
    let got = assign_to_steps(&steps, &events);
    let starts: Vec<(u64, Vec<u64>)> = got
        .iter()
        .map(|(s, evs)| (*s, evs.iter().map(|e| e.start_ns).collect()))
        .collect();
    assert_eq!(
        starts,
        vec![(1, vec![100, 199]), (2, vec![200]), (3, vec![349])]
    );
    // No steps: nothing assigned; a step with no events: empty entry.
    assert!(assign_to_steps(&[], &events).is_empty());
    assert_eq!(assign_to_steps(&[(9, 0, 10)], &events), vec![(9, vec![])]);
}

#[test]
fn assign_with_overlapping_steps_prefers_latest_start() {
    let steps = [(1, 0, 1000), (2, 100, 200)];
    let events = [
        ev(150, 160, Computation),
        ev(250, 260, Computation),
        ev(50, 60, Computation),
    ];
    let got = assign_to_steps(&steps, &events);
    assert_eq!(
        got[0].1.iter().map(|e| e.start_ns).collect::<Vec<_>>(),
        vec![250, 50]
    );
    assert_eq!(
        got[1].1.iter().map(|e| e.start_ns).collect::<Vec<_>>(),
        vec![150]
    );
}

fn random_events(rng: &mut Rng) -> Vec<GpuEvent> {
    let classes = [Computation, Communication, Memory, Other];
    let n = 1 + rng.below(60) as usize;
    (0..n)
        .map(|_| {
            let s = rng.below(10_000);
            let e = s + rng.below(800);
            ev(s, e, classes[rng.below(4) as usize])
        })
        .collect()
}

#[test]
fn property_invariants_and_order_independence() {
    let mut rng = Rng::new(7);
    for _ in 0..400 {
        let mut events = random_events(&mut rng);
        let b = breakdown(&events);
        assert!(b.gpu_busy_ns <= b.gpu_span_ns);
        assert!(b.compute_ns <= b.gpu_busy_ns);
        assert!(b.comm_ns <= b.gpu_busy_ns && b.memory_ns <= b.gpu_busy_ns);
        assert!(b.overlap_ns <= b.compute_ns.min(b.comm_ns));
        assert_eq!(b.idle_ns + b.compute_ns + b.non_compute_ns, b.gpu_span_ns);
        assert_eq!(b.exposed_comm_ns + b.overlap_ns, b.comm_ns);
        if let Some(p) = b.overlap_pct {
            assert!((0.0..=100.0).contains(&p));
        }
        let sum = b.idle_pct.unwrap() + b.compute_pct.unwrap() + b.non_compute_pct.unwrap();
        assert!((sum - 100.0).abs() < 1e-9);
        rng.shuffle(&mut events);
        assert_eq!(breakdown(&events), b);
    }
}

#[test]
fn property_non_overlapping_steps_partition_events() {
    let mut rng = Rng::new(11);
    for _ in 0..200 {
        let events = random_events(&mut rng);
        // Contiguous steps covering [0, 12_000) partition all events by start.
        let mut cuts: Vec<u64> = (0..rng.below(6)).map(|_| rng.below(12_000)).collect();
        cuts.extend([0, 12_000]);
        cuts.sort_unstable();
        cuts.dedup();
        let steps: Vec<(u64, u64, u64)> = cuts
            .windows(2)
            .enumerate()
            .map(|(i, w)| (i as u64, w[0], w[1]))
            .collect();
        let got = assign_to_steps(&steps, &events);
        let total: usize = got.iter().map(|(_, e)| e.len()).sum();
        assert_eq!(total, events.len());
        for ((_, s, e), (_, evs)) in steps.iter().zip(&got) {
            assert!(evs.iter().all(|x| *s <= x.start_ns && x.start_ns < *e));
        }
    }
}

/// HTA 0.5.0 on param_dlrm_8rank_v100 (`expected-hta.json`), in µs:
/// (rank, kernel_time, idle, compute, non_compute, merge(COMM), merge(MEMORY),
/// idle %, compute %, non-compute %, comm/comp overlap %).
type HtaRow = (u32, u64, u64, u64, u64, u64, u64, f64, f64, f64, f64);

#[rustfmt::skip]
const HTA_DLRM: [HtaRow; 8] = [
    (0, 13009, 6419, 1034, 5556, 5798, 19, 49.34, 7.95, 42.71, 4.5),
    (1, 18749, 6428, 1246, 11075, 11336, 19, 34.28, 6.65, 59.07, 2.47),
    (2, 11350, 7046, 1068, 3236, 3492, 19, 62.08, 9.41, 28.51, 7.88),
    (3, 18853, 8145, 1240, 9468, 9774, 28, 43.2, 6.58, 50.22, 3.31),
    (4, 16589, 8887, 1126, 6576, 6587, 26, 53.57, 6.79, 39.64, 0.56),
    (5, 16392, 9121, 1041, 6230, 6251, 19, 55.64, 6.35, 38.01, 0.64),
    (6, 11410, 7051, 1051, 3308, 3558, 19, 61.8, 9.21, 28.99, 7.56),
    (7, 10967, 8308, 1059, 1600, 1746, 20, 75.75, 9.66, 14.59, 9.51),
];

#[test]
fn matches_hta_on_param_dlrm_8rank() {
    use crate::classify::{classify_kernel, GpuEventKind};
    let text = include_str!("fixtures/param_dlrm_8rank_v100_gpu_events.tsv");
    let mut names = Vec::new();
    let mut per_rank: Vec<Vec<GpuEvent>> = vec![Vec::new(); 8];
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        match f[0] {
            "N" => names.push(f[2]),
            "E" => {
                let num = |i: usize| f[i].parse::<u64>().unwrap();
                let kind = if f[4] == "C" {
                    GpuEventKind::Memcpy
                } else {
                    GpuEventKind::Kernel
                };
                let start_ns = num(2) * 1000;
                let class = classify_kernel(names[num(5) as usize], kind);
                per_rank[num(1) as usize].push(ev(start_ns, start_ns + num(3) * 1000, class));
            }
            other => panic!("bad fixture line kind {other}"),
        }
    }
    let round2 = |x: Option<f64>| x.map(|v| (v * 100.0).round() / 100.0);
    for (rank, span, idle, comp, non_comp, comm, mem, idle_p, comp_p, non_p, ovl_p) in HTA_DLRM {
        let b = breakdown(&per_rank[rank as usize]);
        let us = |x: u64| x * 1000;
        let got = (
            b.gpu_span_ns,
            b.idle_ns,
            b.compute_ns,
            b.non_compute_ns,
            b.comm_ns,
            b.memory_ns,
        );
        assert_eq!(
            got,
            (
                us(span),
                us(idle),
                us(comp),
                us(non_comp),
                us(comm),
                us(mem)
            ),
            "rank {rank}"
        );
        let pcts = (
            round2(b.idle_pct),
            round2(b.compute_pct),
            round2(b.non_compute_pct),
        );
        assert_eq!(
            pcts,
            (Some(idle_p), Some(comp_p), Some(non_p)),
            "rank {rank}"
        );
        assert_eq!(round2(b.overlap_pct), Some(ovl_p), "rank {rank}");
    }
}
