use super::*;
use crate::test_rng::Rng;

fn iv(s: u64, e: u64) -> Interval {
    Interval::new(s, e)
}

#[test]
fn union_table() {
    let cases: Vec<(Vec<Interval>, Vec<Interval>)> = vec![
        (vec![], vec![]),
        (vec![iv(5, 5)], vec![]),
        (vec![iv(7, 3)], vec![]),
        (vec![iv(0, 10)], vec![iv(0, 10)]),
        (vec![iv(5, 10), iv(0, 5)], vec![iv(0, 10)]), // touching merge
        (vec![iv(0, 4), iv(6, 9)], vec![iv(0, 4), iv(6, 9)]),
        (vec![iv(0, 10), iv(2, 3), iv(9, 12)], vec![iv(0, 12)]),
        (
            vec![iv(20, 30), iv(0, 5), iv(4, 6), iv(6, 6)],
            vec![iv(0, 6), iv(20, 30)],
        ),
    ];
    for (mut input, want) in cases {
        let owned = union_vec(input.clone());
        let got = union(&mut input);
        assert_eq!(got, want);
        assert_eq!(owned, want);
        assert!(is_canonical(&got));
    }
}

#[test]
fn intersection_table() {
    let a = vec![iv(0, 10), iv(20, 30)];
    let b = vec![iv(5, 25), iv(28, 40)];
    assert_eq!(
        intersection(&a, &b),
        vec![iv(5, 10), iv(20, 25), iv(28, 30)]
    );
    assert_eq!(intersect_len(&a, &b), 5 + 5 + 2);
    // Touching intervals do not intersect (half-open).
    assert_eq!(intersect_len(&[iv(0, 5)], &[iv(5, 9)]), 0);
    assert_eq!(intersection(&[], &a), vec![]);
    assert_eq!(intersect_len(&a, &a), 20);
}

#[test]
fn len_and_emptiness() {
    assert_eq!(iv(3, 10).len_ns(), 7);
    assert_eq!(iv(10, 3).len_ns(), 0);
    assert!(iv(4, 4).is_empty());
    assert_eq!(total_len(&[iv(0, 2), iv(1, 3)]), 4);
}

fn random_intervals(rng: &mut Rng) -> Vec<Interval> {
    let n = rng.below(40) as usize;
    (0..n)
        .map(|_| {
            let s = rng.below(1_000);
            // Some empty and some inverted intervals too.
            let e = if rng.below(10) == 0 {
                s.saturating_sub(rng.below(5))
            } else {
                s + rng.below(100)
            };
            iv(s, e)
        })
        .collect()
}

/// Brute force: covered unit cells in [0, 1200).
fn cells(list: &[Interval]) -> Vec<bool> {
    let mut c = vec![false; 1200];
    for x in list {
        for t in x.start_ns..x.end_ns.max(x.start_ns) {
            c[t as usize] = true;
        }
    }
    c
}

#[test]
fn property_union_and_intersection() {
    let mut rng = Rng::new(42);
    for _ in 0..500 {
        let mut a = random_intervals(&mut rng);
        let mut b = random_intervals(&mut rng);
        let sum: u64 = a.iter().map(Interval::len_ns).sum();
        let ua = union(&mut a);
        let ub = union(&mut b);
        assert!(is_canonical(&ua));
        // Idempotent.
        assert_eq!(union(&mut ua.clone()), ua);
        assert!(total_len(&ua) <= sum);
        // Same cells as the raw input.
        let covered = cells(&ua).iter().filter(|&&x| x).count() as u64;
        assert_eq!(covered, total_len(&ua));
        assert_eq!(cells(&ua), cells(&a));
        // Independent of input order.
        let mut shuffled = a.clone();
        rng.shuffle(&mut shuffled);
        assert_eq!(union_vec(shuffled), ua);
        // Intersection: commutative, <= min, matches brute force.
        let ab = intersection(&ua, &ub);
        assert_eq!(ab, intersection(&ub, &ua));
        assert!(is_canonical(&ab));
        let len = intersect_len(&ua, &ub);
        assert_eq!(len, total_len(&ab));
        assert!(len <= total_len(&ua).min(total_len(&ub)));
        let (ca, cb) = (cells(&ua), cells(&ub));
        let brute = ca.iter().zip(&cb).filter(|(x, y)| **x && **y).count() as u64;
        assert_eq!(len, brute);
        // Difference: a cell is in a - b exactly when it is in a and not in b.
        let d = difference(&ua, &ub);
        assert!(is_canonical(&d));
        assert_eq!(total_len(&d) + len, total_len(&ua));
        let brute: Vec<bool> = ca.iter().zip(&cb).map(|(x, y)| *x && !*y).collect();
        assert_eq!(cells(&d), brute);
    }
}

#[test]
fn difference_cuts_holes_and_trims_edges() {
    let a = [Interval::new(0, 10), Interval::new(20, 30)];
    let b = [
        Interval::new(2, 4),
        Interval::new(8, 22),
        Interval::new(29, 40),
    ];
    assert_eq!(
        difference(&a, &b),
        [
            Interval::new(0, 2),
            Interval::new(4, 8),
            Interval::new(22, 29)
        ]
    );
    assert_eq!(difference(&a, &[]), a);
    assert_eq!(difference(&[], &b), []);
}
