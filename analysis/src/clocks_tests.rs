use super::*;
use crate::test_rng::Rng;

/// A job of `nodes` nodes (2 ranks each, node i holds ranks 2i, 2i+1) and
/// `n` all-reduces: the true common end of each is `t`, each node sees it
/// `offsets[node] + noise` late; the last arrival is 50 us before `t`, on
/// node `seq % nodes`, the others' starts spread over a 2 ms wait.
fn job(names: &[&str], offsets: &[i64], n: u64, noise_ns: f64, seed: u64) -> Vec<NodeCall> {
    let mut rng = Rng::new(seed);
    let mut calls = Vec::new();
    for seq in 0..n {
        let t = 1_700_000_000_000_000_000u64 + seq * 10_000_000;
        for (i, name) in names.iter().enumerate() {
            // A recorded end is never before the real one: delays only.
            let noise = (rng.normal().abs() * noise_ns) as i64;
            let end = shift(t, offsets[i] + noise);
            let wait = if seq % names.len() as u64 == i as u64 {
                50_000
            } else {
                2_000_000 - rng.below(1_000_000) as i64
            };
            let start = shift(t, offsets[i] - wait);
            calls.push(NodeCall {
                process_group: "0".into(),
                seq,
                node: (*name).into(),
                lowest_rank: 2 * i as u32,
                max_start_ns: start,
                min_end_ns: end.saturating_sub(1_000),
                end_ns: end,
            });
        }
    }
    calls
}

fn node<'a>(e: &'a ClockEstimate, name: &str) -> &'a NodeOffset {
    e.nodes.iter().find(|n| n.node == name).expect(name)
}

#[test]
fn a_shifted_node_is_found_within_its_noise() {
    let names = ["n0", "n1", "n2"];
    let calls = job(&names, &[0, 0, 3_000_000], 400, 20_000.0, 7);
    let e = estimate(&calls);
    assert_eq!(e.reference_node, "n0");
    assert_eq!(node(&e, "n0").offset_ns, Some(0));
    let n2 = node(&e, "n2");
    let off = n2.offset_ns.expect("estimated");
    assert!((off - 3_000_000).abs() < 5_000, "{n2:?}");
    // A residual is the difference of two half-normal delays (sd 0.85 x
    // 20 us); the median's standard error is about sqrt(pi/2) sd / sqrt(400).
    let want = (std::f64::consts::PI / 2.0).sqrt() * 0.85 * 20_000.0 / 20.0;
    assert!(
        (n2.median_se_ns - want).abs() < 0.4 * want,
        "{} vs {want}",
        n2.median_se_ns
    );
    assert!((n2.median_ns - 3_000_000).abs() < 5_000, "{n2:?}");
    let (lo, hi) = n2.bounds_ns.unwrap();
    assert!(lo <= 3_000_000 && 3_000_000 <= hi, "{n2:?}");
    assert!(node(&e, "n1").offset_ns.unwrap().abs() < 5_000);
    assert_eq!(e.instances, 400);
    assert_eq!(e.inconsistent, 0);
}

#[test]
fn outliers_are_rejected_and_do_not_move_the_offset() {
    let names = ["a", "b"];
    let mut calls = job(&names, &[0, -1_500_000], 100, 5_000.0, 3);
    // A quarter of b's ends are 40 ms late (a completion callback that ran
    // late): the median alone would move, the rejection drops them.
    for c in calls.iter_mut().filter(|c| c.node == "b" && c.seq % 4 == 0) {
        c.end_ns += 40_000_000;
        c.min_end_ns += 40_000_000;
    }
    let e = estimate(&calls);
    let b = node(&e, "b");
    assert_eq!((b.samples, b.rejected), (75, 25), "{b:?}");
    assert!((b.offset_ns.unwrap() + 1_500_000).abs() < 4_000, "{b:?}");
}

#[test]
fn the_reference_is_the_node_of_the_lowest_rank_not_the_first_name() {
    let mut calls = job(&["z-host", "a-host"], &[0, 250_000], 50, 0.0, 1);
    let e = estimate(&calls);
    assert_eq!(e.reference_node, "z-host");
    assert_eq!(node(&e, "a-host").offset_ns, Some(250_000));
    // Both nodes were last by 50 us as often, 1 us between end and min end.
    assert_eq!(node(&e, "a-host").uncertainty_ns, 49_000.0);
    // Input order does not matter.
    let mut rng = Rng::new(9);
    rng.shuffle(&mut calls);
    assert_eq!(estimate(&calls), e);
}

#[test]
fn a_node_that_shares_no_instance_with_the_reference_has_no_offset() {
    let mut calls = job(&["r", "x"], &[0, 10_000], 10, 0.0, 2);
    for c in job(&["y", "w"], &[0, 0], 10, 0.0, 2) {
        calls.push(NodeCall {
            process_group: "other".into(),
            lowest_rank: c.lowest_rank + 10,
            ..c
        });
    }
    let e = estimate(&calls);
    assert_eq!(node(&e, "x").offset_ns, Some(10_000));
    for lonely in ["y", "w"] {
        let n = node(&e, lonely);
        assert_eq!((n.offset_ns, n.samples), (None, 0), "{n:?}");
    }
    assert_eq!(e.offset_of("y"), 0);
    assert_eq!(e.instances, 20);
}

#[test]
fn an_instance_that_ends_before_its_last_start_is_counted_inconsistent() {
    let mut calls = job(&["p", "q"], &[0, 500_000], 21, 0.0, 4);
    // Instance 5: q says it started 1 ms after p left, on the corrected axis.
    let q5 = calls
        .iter_mut()
        .find(|c| c.node == "q" && c.seq == 5)
        .unwrap();
    q5.max_start_ns = q5.end_ns + 1_000_000;
    let e = estimate(&calls);
    assert_eq!(node(&e, "q").offset_ns, Some(500_000));
    assert_eq!((e.instances, e.inconsistent), (21, 1));
}

#[test]
fn no_input_no_estimate() {
    let e = estimate(&[]);
    assert!(e.reference_node.is_empty() && e.nodes.is_empty());
    assert_eq!(e.correct("any", 5), 5);
}

#[test]
fn shift_saturates() {
    assert_eq!(shift(5, -10), 0);
    assert_eq!(shift(u64::MAX - 1, 10), u64::MAX);
    assert_eq!(shift(100, -40), 60);
}

/// Ranks that wait for a CPU leave a collective late on one node: the end
/// residuals are biased, the causal bounds are not.
#[test]
fn biased_ends_fall_back_to_the_centre_of_the_causal_bounds() {
    let theta = 3_000_000i64;
    let mut rng = Rng::new(11);
    let mut calls = Vec::new();
    for seq in 0..120u64 {
        let exit = 1_700_000_000_000_000_000u64 + seq * 10_000_000;
        // The last arrival is 60 us before the exit, on either node.
        let last_on_b = seq % 2 == 0;
        let arrive = |last: bool, rng: &mut Rng| {
            if last {
                exit - 60_000
            } else {
                exit - 200_000 - rng.below(2_000_000)
            }
        };
        let (sa, sb) = (arrive(!last_on_b, &mut rng), arrive(last_on_b, &mut rng));
        // Node b leaves 0.4 to 1.2 ms late in most instances.
        let late = if rng.below(10) < 7 {
            400_000 + rng.below(800_000)
        } else {
            0
        };
        let b_end = exit + late;
        for (node, rank, start, end, d) in [("a", 0, sa, exit, 0), ("b", 2, sb, b_end, theta)] {
            calls.push(NodeCall {
                process_group: "0".into(),
                seq,
                node: node.into(),
                lowest_rank: rank,
                max_start_ns: shift(start, d),
                min_end_ns: shift(end, d),
                end_ns: shift(end, d),
            });
        }
    }
    let e = estimate(&calls);
    let b = node(&e, "b");
    assert!(b.from_bounds, "{b:?}");
    assert!(b.median_ns - theta > 200_000, "the median is biased: {b:?}");
    let (lo, hi) = b.bounds_ns.unwrap();
    assert!(
        lo <= theta && theta <= hi,
        "the bounds hold the truth: {b:?}"
    );
    let off = b.offset_ns.unwrap();
    assert!((off - theta).abs() <= 60_000, "{b:?}");
    assert!(b.uncertainty_ns >= (off - theta).abs() as f64, "{b:?}");
    assert_eq!(e.inconsistent, 0);
    assert_eq!(node(&e, "a").offset_ns, Some(0));
}

#[test]
fn marzullo_takes_the_interval_most_samples_agree_on() {
    let s = |lo: f64, hi: f64| Sample {
        residual: 0.0,
        lo,
        hi,
    };
    // Three agree on [8, 10]; one outlier [20, 30]; an empty one.
    let v = [
        s(0.0, 10.0),
        s(8.0, 12.0),
        s(5.0, 11.0),
        s(20.0, 30.0),
        s(3.0, 1.0),
    ];
    assert_eq!(marzullo(&v), Some((8.0, 10.0)));
    assert_eq!(marzullo(&[s(1.0, 2.0)]), Some((1.0, 2.0)));
    assert_eq!(marzullo(&[]), None);
}
