//! Rows keyed like `kernel_launches` and `kernel_configs`, by (rank, kernel
//! start, correlation), matched to the GPU activities they belong to.
//!
//! In: every row of a job (any order) with its key. Out: a [`ByKernel`] that
//! answers the row of an activity's (rank, start, correlation).
//!
//! Why not a hash map: a job's activities arrive in (rank, start) order
//! (`job_gpu_ops.sql`), so the rows sorted the same way are met in order and
//! a cursor that moves forward finds each in O(1) amortised, reading memory
//! in sequence. A hash map of millions of entries (2.9 M launch calls and 2.7
//! M launch figures at 1,024 ranks x 100 steps, ~200 MB each) is a cache miss
//! per insert and per lookup: inserting and removing in it was half of the
//! overview's cold answer on this machine (perf, bench/RESULTS-views.md).
//!
//! Invariants: one row per key (of rows with equal keys the first in the
//! order given is kept, as a hash map's `entry().or_insert` would); a key
//! asked out of order (behind the cursor) is found by binary search, so the
//! answers never depend on the order of the questions, only the speed does.

/// (rank, kernel start ns, correlation).
pub type KernelKey = (u32, u64, u64);

/// Rows by [`KernelKey`], sorted; see the module doc.
#[derive(Debug)]
pub struct ByKernel<V> {
    rows: Vec<(KernelKey, Option<V>)>,
    /// Index of the first row not below the last key asked.
    pos: usize,
    /// (rank, start) of the last key asked.
    last: (u32, u64),
}

impl<V> Default for ByKernel<V> {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl<V> ByKernel<V> {
    /// `rows` in any order; of equal keys the first is kept.
    pub fn new(rows: Vec<(KernelKey, V)>) -> Self {
        let mut rows: Vec<(KernelKey, Option<V>)> =
            rows.into_iter().map(|(k, v)| (k, Some(v))).collect();
        // Stable: equal keys keep their order, so `dedup` keeps the first.
        // ClickHouse returns each part in key order, so runs are long.
        rows.sort_by_key(|r| r.0);
        rows.dedup_by_key(|r| r.0);
        Self {
            rows,
            pos: 0,
            last: (0, 0),
        }
    }

    /// Rows held (after de-duplication).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn find(&mut self, (rank, start, corr): KernelKey) -> Option<usize> {
        let rs = (rank, start);
        let at = |r: &(KernelKey, Option<V>)| (r.0 .0, r.0 .1);
        if rs < self.last {
            self.pos = self.rows.partition_point(|r| at(r) < rs);
        } else {
            while self.pos < self.rows.len() && at(&self.rows[self.pos]) < rs {
                self.pos += 1;
            }
        }
        self.last = rs;
        self.rows[self.pos..]
            .iter()
            .take_while(|r| at(r) == rs)
            .position(|r| r.0 .2 == corr)
            .map(|i| self.pos + i)
    }

    /// The row of `key`, if any is left.
    pub fn get(&mut self, key: KernelKey) -> Option<&V> {
        let i = self.find(key)?;
        self.rows[i].1.as_ref()
    }

    /// The row of `key`, taken: a second question for it gets `None`.
    pub fn take(&mut self, key: KernelKey) -> Option<V> {
        let i = self.find(key)?;
        self.rows[i].1.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ByKernel<&'static str> {
        ByKernel::new(vec![
            ((1, 50, 9), "r1 50 c9"),
            ((0, 20, 3), "r0 20 c3"),
            ((0, 10, 7), "r0 10 c7"),
            ((0, 20, 2), "r0 20 c2"),
            ((0, 20, 3), "a duplicate, dropped"),
            ((2, 5, 1), "r2 5 c1"),
        ])
    }

    #[test]
    fn keys_asked_in_order_are_found_and_missing_ones_are_not() {
        let mut m = sample();
        assert_eq!(m.len(), 5);
        assert_eq!(m.get((0, 10, 7)), Some(&"r0 10 c7"));
        assert_eq!(m.get((0, 10, 8)), None);
        assert_eq!(m.get((0, 15, 7)), None);
        assert_eq!(m.get((0, 20, 2)), Some(&"r0 20 c2"));
        assert_eq!(m.get((0, 20, 3)), Some(&"r0 20 c3"));
        assert_eq!(m.get((1, 0, 9)), None);
        assert_eq!(m.get((1, 50, 9)), Some(&"r1 50 c9"));
        assert_eq!(m.get((2, 5, 1)), Some(&"r2 5 c1"));
        assert_eq!(m.get((3, 0, 0)), None);
    }

    #[test]
    fn keys_asked_out_of_order_give_the_same_answers() {
        let keys = [
            (2, 5, 1),
            (0, 20, 3),
            (0, 10, 7),
            (1, 50, 9),
            (0, 20, 2),
            (0, 10, 7),
            (9, 9, 9),
            (0, 0, 0),
        ];
        let mut m = sample();
        let got: Vec<Option<&str>> = keys.iter().map(|k| m.get(*k).copied()).collect();
        let mut fresh = sample();
        let want: Vec<Option<&str>> = keys
            .iter()
            .map(|k| {
                fresh.pos = 0;
                fresh.last = (0, 0);
                fresh.get(*k).copied()
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(
            got,
            [
                Some("r2 5 c1"),
                Some("r0 20 c3"),
                Some("r0 10 c7"),
                Some("r1 50 c9"),
                Some("r0 20 c2"),
                Some("r0 10 c7"),
                None,
                None
            ]
        );
    }

    #[test]
    fn a_taken_row_is_given_once() {
        let mut m = sample();
        assert_eq!(m.take((0, 20, 3)), Some("r0 20 c3"));
        assert_eq!(m.take((0, 20, 3)), None);
        assert_eq!(m.get((0, 20, 3)), None);
        assert_eq!(m.take((0, 20, 2)), Some("r0 20 c2"));
    }

    #[test]
    fn an_empty_set_answers_none() {
        let mut m: ByKernel<u8> = ByKernel::default();
        assert!(m.is_empty());
        assert_eq!(m.get((0, 0, 0)), None);
        assert_eq!(m.take((5, 5, 5)), None);
    }
}
