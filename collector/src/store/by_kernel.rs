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

/// One rank's rows: ((kernel start, correlation), row), sorted, one per key.
type RankRows<V> = Vec<((u64, u64), Option<V>)>;

/// Rows by [`KernelKey`], per rank, sorted; see the module doc.
#[derive(Debug)]
pub struct ByKernel<V> {
    /// By rank ascending.
    ranks: Vec<(u32, RankRows<V>)>,
    /// Index in `ranks` of the rank last asked.
    at: usize,
    /// Index in that rank's rows of the first row not below the last start
    /// asked.
    pos: usize,
    /// The last kernel start asked of that rank.
    last: u64,
}

impl<V> Default for ByKernel<V> {
    fn default() -> Self {
        Builder::default().finish()
    }
}

/// Rows gathered per rank in the order they arrive.
#[derive(Debug)]
pub struct RankBuckets<T> {
    index: foldhash::HashMap<u32, usize>,
    ranks: Vec<(u32, Vec<T>)>,
    /// (rank, index) of the last row: consecutive rows share their rank.
    last: Option<(u32, usize)>,
}

impl<T> Default for RankBuckets<T> {
    fn default() -> Self {
        Self {
            index: foldhash::HashMap::default(),
            ranks: Vec::new(),
            last: None,
        }
    }
}

impl<T> RankBuckets<T> {
    /// One more row of `rank`.
    pub fn push(&mut self, rank: u32, row: T) {
        let i = match self.last {
            Some((r, i)) if r == rank => i,
            _ => {
                let ranks = &mut self.ranks;
                let i = *self.index.entry(rank).or_insert_with(|| {
                    ranks.push((rank, Vec::new()));
                    ranks.len() - 1
                });
                self.last = Some((rank, i));
                i
            }
        };
        self.ranks[i].1.push(row);
    }

    /// The ranks ascending, each with its rows in arrival order.
    pub fn into_sorted(mut self) -> Vec<(u32, Vec<T>)> {
        self.ranks.sort_unstable_by_key(|r| r.0);
        self.ranks
    }
}

/// Gathers rows per rank as they arrive ([`Builder::finish`] sorts them):
/// a rank's rows come as a few runs already sorted (a table part each), so
/// sorting them rank by rank is nearly linear and stays in cache, where one
/// sort of every row of the job merged dozens of runs of millions.
#[derive(Debug)]
pub struct Builder<V>(RankBuckets<((u64, u64), V)>);

impl<V> Default for Builder<V> {
    fn default() -> Self {
        Self(RankBuckets::default())
    }
}

impl<V> Builder<V> {
    /// One more row (rows may come in any order).
    pub fn push(&mut self, (rank, start, corr): KernelKey, row: V) {
        self.0.push(rank, ((start, corr), row));
    }

    /// The rows sorted; of equal keys the first pushed is kept.
    pub fn finish(self) -> ByKernel<V> {
        let ranks = self
            .0
            .into_sorted()
            .into_iter()
            .map(|(rank, mut rows)| {
                // Stable: equal keys keep their order, so `dedup` keeps the first.
                rows.sort_by_key(|r| r.0);
                rows.dedup_by_key(|r| r.0);
                (rank, rows.into_iter().map(|(k, v)| (k, Some(v))).collect())
            })
            .collect();
        ByKernel {
            ranks,
            at: 0,
            pos: 0,
            last: 0,
        }
    }
}

impl<V> ByKernel<V> {
    /// `rows` in any order; of equal keys the first is kept.
    #[cfg(test)]
    pub fn new(rows: Vec<(KernelKey, V)>) -> Self {
        let mut b = Builder::default();
        for (k, v) in rows {
            b.push(k, v);
        }
        b.finish()
    }

    /// Rows held (after de-duplication).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.ranks.iter().map(|r| r.1.len()).sum()
    }

    /// No rows.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.ranks.iter().all(|r| r.1.is_empty())
    }

    fn find(&mut self, (rank, start, corr): KernelKey) -> Option<(usize, usize)> {
        if self.ranks.get(self.at).is_none_or(|r| r.0 != rank) {
            self.at = self.ranks.binary_search_by_key(&rank, |r| r.0).ok()?;
            (self.pos, self.last) = (0, 0);
        }
        let rows = &self.ranks[self.at].1;
        if start < self.last {
            self.pos = rows.partition_point(|r| r.0 .0 < start);
        } else {
            while self.pos < rows.len() && rows[self.pos].0 .0 < start {
                self.pos += 1;
            }
        }
        self.last = start;
        rows[self.pos..]
            .iter()
            .take_while(|r| r.0 .0 == start)
            .position(|r| r.0 .1 == corr)
            .map(|i| (self.at, self.pos + i))
    }

    /// The row of `key`, if any is left.
    pub fn get(&mut self, key: KernelKey) -> Option<&V> {
        let (r, i) = self.find(key)?;
        self.ranks[r].1[i].1.as_ref()
    }

    /// The row of `key`, taken: a second question for it gets `None`.
    pub fn take(&mut self, key: KernelKey) -> Option<V> {
        let (r, i) = self.find(key)?;
        self.ranks[r].1[i].1.take()
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
        let want: Vec<Option<&str>> = keys.iter().map(|k| sample().get(*k).copied()).collect();
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
