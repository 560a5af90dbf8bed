//! Interval algebra over half-open `[start_ns, end_ns)` time spans.
//!
//! In: arbitrary intervals (any order, overlapping, empty or inverted).
//! Out: *canonical unions*: sorted by start, every interval non-empty, and
//! consecutive intervals separated by a gap (`next.start_ns > prev.end_ns`;
//! touching intervals are merged), plus lengths and intersections of unions.
//!
//! This is the `merge(S)` of Holistic Trace Analysis (HTA) 0.5.0
//! (`_merge_kernel_intervals`: sort by `ts`, start a new group when
//! `ts > cummax(end)`, keep `[min ts, max end)` per group) and the
//! intersection used by HTA's comm/comp overlap:
//! `|merge(A) ∩ merge(B)| = Σ max(0, min(a.end, b.end) - max(a.start, b.start))`
//! over pairs of the two merged lists, walked with two pointers.
//!
//! Invariants: `total_len(&union(x)) <= Σ len(x)`; `union` is idempotent and
//! does not depend on input order; `intersection` is commutative and its
//! length is `<= min(total_len(a), total_len(b))`.

/// A half-open time span `[start_ns, end_ns)`; `end_ns <= start_ns` is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Interval {
    /// Inclusive start, ns.
    pub start_ns: u64,
    /// Exclusive end, ns.
    pub end_ns: u64,
}

impl Interval {
    /// `[start_ns, end_ns)`.
    pub const fn new(start_ns: u64, end_ns: u64) -> Self {
        Self { start_ns, end_ns }
    }

    /// Length in ns; 0 for empty or inverted intervals.
    pub const fn len_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// True when the interval covers no time (`end_ns <= start_ns`).
    pub const fn is_empty(&self) -> bool {
        self.end_ns <= self.start_ns
    }
}

/// Union of `intervals` as a canonical list (see the module doc).
///
/// Sorts `intervals` in place (hence `&mut`) and returns the merged list;
/// empty intervals are dropped.
pub fn union(intervals: &mut [Interval]) -> Vec<Interval> {
    intervals.sort_unstable();
    let mut out: Vec<Interval> = Vec::new();
    for &iv in intervals.iter() {
        push_merged(&mut out, iv);
    }
    out
}

/// Like [`union`], but consumes the vector and merges inside its buffer.
pub fn union_vec(mut intervals: Vec<Interval>) -> Vec<Interval> {
    intervals.sort_unstable();
    let mut write = 0usize;
    for read in 0..intervals.len() {
        let iv = intervals[read];
        if iv.is_empty() {
            continue;
        }
        if write > 0 && iv.start_ns <= intervals[write - 1].end_ns {
            let last = &mut intervals[write - 1];
            last.end_ns = last.end_ns.max(iv.end_ns);
        } else {
            intervals[write] = iv;
            write += 1;
        }
    }
    intervals.truncate(write);
    intervals
}

fn push_merged(out: &mut Vec<Interval>, iv: Interval) {
    if iv.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(last) if iv.start_ns <= last.end_ns => last.end_ns = last.end_ns.max(iv.end_ns),
        _ => out.push(iv),
    }
}

/// Sum of the lengths of `intervals`. On a canonical union this is the
/// covered time; on arbitrary input it counts overlaps more than once.
pub fn total_len(intervals: &[Interval]) -> u64 {
    intervals.iter().map(Interval::len_ns).sum()
}

/// Intersection of two canonical unions (outputs of [`union`]), itself a
/// canonical union. Two-pointer walk, `O(|a| + |b|)`.
pub fn intersection(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    debug_assert!(is_canonical(a) && is_canonical(b));
    let mut out = Vec::new();
    walk_intersection(a, b, |iv| out.push(iv));
    out
}

/// `total_len(&intersection(a, b))` without allocating. Inputs must be
/// canonical unions.
pub fn intersect_len(a: &[Interval], b: &[Interval]) -> u64 {
    debug_assert!(is_canonical(a) && is_canonical(b));
    let mut len = 0u64;
    walk_intersection(a, b, |iv| len += iv.len_ns());
    len
}

fn walk_intersection(a: &[Interval], b: &[Interval], mut emit: impl FnMut(Interval)) {
    let (mut i, mut j) = (0usize, 0usize);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        let start = x.start_ns.max(y.start_ns);
        let end = x.end_ns.min(y.end_ns);
        if start < end {
            emit(Interval::new(start, end));
        }
        // Advance whichever ends first; it cannot meet anything later.
        if x.end_ns <= y.end_ns {
            i += 1;
        } else {
            j += 1;
        }
    }
}

/// `a` minus `b` for two canonical unions: the time in `a` not covered by
/// `b`, itself a canonical union. Two-pointer walk, `O(|a| + |b|)`.
/// `total_len(a) = total_len(difference(a, b)) + intersect_len(a, b)`.
pub fn difference(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    debug_assert!(is_canonical(a) && is_canonical(b));
    let mut out = Vec::new();
    let mut j = 0usize;
    for x in a {
        let mut start = x.start_ns;
        // Skip the parts of b that end before this piece starts.
        while b.get(j).is_some_and(|y| y.end_ns <= start) {
            j += 1;
        }
        let mut k = j;
        while let Some(y) = b.get(k).filter(|y| y.start_ns < x.end_ns) {
            if y.start_ns > start {
                out.push(Interval::new(start, y.start_ns));
            }
            start = start.max(y.end_ns);
            k += 1;
        }
        if start < x.end_ns {
            out.push(Interval::new(start, x.end_ns));
        }
    }
    out
}

/// True when `intervals` is a canonical union: sorted, non-empty, separated.
pub fn is_canonical(intervals: &[Interval]) -> bool {
    intervals.iter().all(|iv| !iv.is_empty())
        && intervals.windows(2).all(|w| w[1].start_ns > w[0].end_ns)
}

#[cfg(test)]
mod tests;
