//! `kernels` rows in column form: the collector's largest table, kept as
//! columns from conversion to INSERT.
//!
//! Why: as [`KernelRow`]s, every kernel cost five shared-string reference
//! counts to build and five to drop, a `serde` walk of fifteen fields into
//! the Native columns, and a dictionary lookup of its name: together about
//! a third of the collector's CPU at full ingest (`perf`, issue 38). Here
//! the columns a rank group's kernels share (job, run, rank, node, agent,
//! batch) are held once per group and written as runs, names are indexes
//! into the group's name table (looked up in the block's dictionary once per
//! group and name), and a kernel's own figures are plain vectors.
//!
//! In: groups of kernels from `convert` ([`KernelRows::group`] then
//! [`KernelRows::push_fields`]), or whole [`KernelRow`]s (tests, other
//! writers: [`KernelRows::push`]). Out: the Native columns of any range of
//! rows ([`Columns`]), or the rows again as [`KernelRow`]s.
//!
//! Invariants: every column vector has one value per row; the groups'
//! `end`s rise strictly and the last is the row count; a name index is
//! below its group's name count.

use std::ops::Range;
use std::sync::Arc;

use super::native::{ColumnOut, Columns};
use super::rows::{KernelRow, Text};

/// The columns every event row of one rank group of one agent batch shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowIdent {
    pub job_id: Text,
    pub run_id: Text,
    pub rank: u32,
    pub node: Text,
    pub agent_id: Text,
    pub agent_session: u64,
    pub batch_seq: u64,
}

/// One kernel's own columns; `name` indexes its group's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelFields {
    pub kind: i8,
    pub name: u32,
    pub stream: u32,
    pub device: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub correlation: u64,
    pub bytes: u64,
}

/// Rows of one group: its shared columns, its names, where its rows end.
#[derive(Debug, Clone, PartialEq)]
struct Group {
    ident: RowIdent,
    names: Arc<Vec<Text>>,
    end: usize,
}

/// `kernels` rows, column by column (see the module doc).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelRows {
    groups: Vec<Group>,
    kind: Vec<i8>,
    name: Vec<u32>,
    stream: Vec<u32>,
    device: Vec<i32>,
    start_ns: Vec<u64>,
    end_ns: Vec<u64>,
    correlation: Vec<u64>,
    bytes: Vec<u64>,
}

impl KernelRows {
    pub fn len(&self) -> usize {
        self.kind.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kind.is_empty()
    }

    pub fn clear(&mut self) {
        *self = KernelRows::default();
    }

    /// Room for `n` more rows in every column.
    pub fn reserve_exact(&mut self, n: usize) {
        self.kind.reserve_exact(n);
        self.name.reserve_exact(n);
        self.stream.reserve_exact(n);
        self.device.reserve_exact(n);
        self.start_ns.reserve_exact(n);
        self.end_ns.reserve_exact(n);
        self.correlation.reserve_exact(n);
        self.bytes.reserve_exact(n);
    }

    /// Rows the columns have room for without growing.
    pub fn capacity(&self) -> usize {
        [
            self.kind.capacity(),
            self.name.capacity(),
            self.stream.capacity(),
            self.device.capacity(),
            self.start_ns.capacity(),
            self.end_ns.capacity(),
            self.correlation.capacity(),
            self.bytes.capacity(),
        ]
        .into_iter()
        .min()
        .unwrap_or(0)
    }

    /// Starts a group: the rows [`KernelRows::push_fields`] adds next share
    /// `ident`, and their `name` indexes `names`.
    pub fn group(&mut self, ident: RowIdent, names: Arc<Vec<Text>>) {
        // A group that got no rows would hold an empty run: replaced.
        let n = self.groups.len();
        let start_of_last = n.checked_sub(2).map_or(0, |i| self.groups[i].end);
        if self.groups.last().is_some_and(|g| g.end == start_of_last) {
            self.groups.pop();
        }
        self.groups.push(Group {
            ident,
            names,
            end: self.len(),
        });
    }

    /// Adds a row to the group last started.
    ///
    /// # Panics
    /// When no group was started, or `f.name` is not an index of its names.
    pub fn push_fields(&mut self, f: KernelFields) {
        let group = self.groups.last_mut().expect("a group is started first");
        assert!(
            (f.name as usize) < group.names.len(),
            "name index {} of {} names",
            f.name,
            group.names.len()
        );
        group.end += 1;
        self.kind.push(f.kind);
        self.name.push(f.name);
        self.stream.push(f.stream);
        self.device.push(f.device);
        self.start_ns.push(f.start_ns);
        self.end_ns.push(f.end_ns);
        self.correlation.push(f.correlation);
        self.bytes.push(f.bytes);
    }

    /// Puts the rows of the group last started in `start_ns` order (stable):
    /// with the writer's order of groups ([`KernelRows::groups`] by job and
    /// rank) a window's INSERT is then in the table's `ORDER BY` order when
    /// a rank's batches do not overlap in time. A rank's events come in the
    /// order they ended, not started (a kernel on another stream), so a
    /// group is often almost sorted: checked first, then sorted by index.
    pub fn sort_group(&mut self) {
        let Some(last) = self.groups.last() else {
            return;
        };
        let start = self
            .groups
            .len()
            .checked_sub(2)
            .map_or(0, |i| self.groups[i].end);
        let rows = start..last.end;
        if self.start_ns[rows.clone()].is_sorted() {
            return;
        }
        let mut order: Vec<u32> = (0..rows.len() as u32).collect();
        order.sort_by_key(|&i| self.start_ns[start + i as usize]);
        fn permute<T: Copy>(column: &mut [T], order: &[u32]) {
            let sorted: Vec<T> = order.iter().map(|&i| column[i as usize]).collect();
            column.copy_from_slice(&sorted);
        }
        permute(&mut self.kind[rows.clone()], &order);
        permute(&mut self.name[rows.clone()], &order);
        permute(&mut self.stream[rows.clone()], &order);
        permute(&mut self.device[rows.clone()], &order);
        permute(&mut self.start_ns[rows.clone()], &order);
        permute(&mut self.end_ns[rows.clone()], &order);
        permute(&mut self.correlation[rows.clone()], &order);
        permute(&mut self.bytes[rows], &order);
    }

    /// Adds a whole row (to the last group when it has the same shared
    /// columns, else to a new one).
    pub fn push(&mut self, row: KernelRow) {
        let ident = RowIdent {
            job_id: row.job_id,
            run_id: row.run_id,
            rank: row.rank,
            node: row.node,
            agent_id: row.agent_id,
            agent_session: row.agent_session,
            batch_seq: row.batch_seq,
        };
        if self.groups.last().is_none_or(|g| g.ident != ident) {
            self.group(ident, Arc::default());
        }
        let group = self.groups.last_mut().expect("a group was started");
        let names = Arc::make_mut(&mut group.names);
        let name = match names.iter().position(|n| *n == row.name) {
            Some(i) => i,
            None => {
                names.push(row.name);
                names.len() - 1
            }
        };
        self.push_fields(KernelFields {
            kind: row.kind,
            name: name as u32,
            stream: row.stream,
            device: row.device,
            start_ns: row.start_ns,
            end_ns: row.end_ns,
            correlation: row.correlation,
            bytes: row.bytes,
        });
    }

    /// Row `i` as a [`KernelRow`].
    ///
    /// # Panics
    /// When `i` is not below [`KernelRows::len`].
    pub fn row(&self, i: usize) -> KernelRow {
        let g = &self.groups[self.groups.partition_point(|g| g.end <= i)];
        KernelRow {
            job_id: g.ident.job_id.clone(),
            run_id: g.ident.run_id.clone(),
            rank: g.ident.rank,
            node: g.ident.node.clone(),
            kind: self.kind[i],
            name: g.names[self.name[i] as usize].clone(),
            stream: self.stream[i],
            device: self.device[i],
            start_ns: self.start_ns[i],
            end_ns: self.end_ns[i],
            correlation: self.correlation[i],
            bytes: self.bytes[i],
            agent_id: g.ident.agent_id.clone(),
            agent_session: g.ident.agent_session,
            batch_seq: g.ident.batch_seq,
        }
    }

    /// Every row as a [`KernelRow`], in order.
    pub fn rows(&self) -> impl Iterator<Item = KernelRow> + '_ {
        (0..self.len()).map(|i| self.row(i))
    }

    /// The first and last `start_ns`, `None` when there are no rows.
    pub fn start_range(&self) -> Option<(u64, u64)> {
        let min = self.start_ns.iter().min()?;
        let max = self.start_ns.iter().max()?;
        Some((*min, *max))
    }

    /// Each group's shared columns and rows, in order.
    pub fn groups(&self) -> impl Iterator<Item = (&RowIdent, Range<usize>)> + '_ {
        self.runs(0..self.len()).map(|(g, rows)| (&g.ident, rows))
    }

    /// The `start_ns` of row `i`.
    pub fn start_ns(&self, i: usize) -> u64 {
        self.start_ns[i]
    }

    /// The groups overlapping `rows`, each with the part of `rows` it holds.
    fn runs(&self, rows: Range<usize>) -> impl Iterator<Item = (&Group, Range<usize>)> + '_ {
        let first = self.groups.partition_point(|g| g.end <= rows.start);
        let mut start = if first == 0 {
            0
        } else {
            self.groups[first - 1].end
        };
        self.groups[first..]
            .iter()
            .map(move |g| {
                let part = start.max(rows.start)..g.end.min(rows.end);
                start = g.end;
                (g, part)
            })
            .take_while(|(_, part)| !part.is_empty())
    }
}

impl From<Vec<KernelRow>> for KernelRows {
    fn from(rows: Vec<KernelRow>) -> Self {
        rows.into_iter().collect()
    }
}

impl FromIterator<KernelRow> for KernelRows {
    fn from_iter<I: IntoIterator<Item = KernelRow>>(rows: I) -> Self {
        let mut out = KernelRows::default();
        for row in rows {
            out.push(row);
        }
        out
    }
}

impl Columns for KernelRows {
    fn write(
        &self,
        column: &str,
        rows: Range<usize>,
        out: &mut ColumnOut<'_>,
    ) -> Result<(), String> {
        let per_group =
            |out: &mut ColumnOut<'_>,
             put: &dyn Fn(&mut ColumnOut<'_>, &Group, usize) -> Result<(), String>| {
                self.runs(rows.clone())
                    .try_for_each(|(g, part)| put(out, g, part.len()))
            };
        match column {
            "job_id" => per_group(out, &|o, g, n| o.repeat_str(&g.ident.job_id, n)),
            "run_id" => per_group(out, &|o, g, n| o.repeat_str(&g.ident.run_id, n)),
            "rank" => per_group(out, &|o, g, n| o.repeat_fixed(g.ident.rank, n)),
            "node" => per_group(out, &|o, g, n| o.repeat_str(&g.ident.node, n)),
            "agent_id" => per_group(out, &|o, g, n| o.repeat_str(&g.ident.agent_id, n)),
            "agent_session" => per_group(out, &|o, g, n| o.repeat_fixed(g.ident.agent_session, n)),
            "batch_seq" => per_group(out, &|o, g, n| o.repeat_fixed(g.ident.batch_seq, n)),
            "name" => self
                .runs(rows.clone())
                .try_for_each(|(g, part)| out.indexed_str(&g.names, &self.name[part])),
            "kind" => out.fixed(&self.kind[rows]),
            "stream" => out.fixed(&self.stream[rows]),
            "device" => out.fixed(&self.device[rows]),
            "start_ns" => out.fixed(&self.start_ns[rows]),
            "end_ns" => out.fixed(&self.end_ns[rows]),
            "correlation" => out.fixed(&self.correlation[rows]),
            "bytes" => out.fixed(&self.bytes[rows]),
            other => Err(format!("kernels rows have no column {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use clickhouse::Row;

    use super::*;
    use crate::store::native::Layout;

    fn kernel(job: &str, rank: u32, seq: u64, name: &str, i: u64) -> KernelRow {
        KernelRow {
            job_id: job.into(),
            run_id: "run-1".into(),
            rank,
            node: format!("node-{}", rank / 2).into(),
            kind: (i % 3) as i8 + 1,
            name: name.into(),
            stream: 7 + (i % 2) as u32,
            device: (rank % 2) as i32,
            start_ns: 1_000 * i + u64::from(rank),
            end_ns: 1_000 * i + 500,
            correlation: i,
            bytes: i * 64,
            agent_id: "agent-a".into(),
            agent_session: 42,
            batch_seq: seq,
        }
    }

    /// Rows of several groups (a name shared by groups, a group whose
    /// names come in another order, a one-row group, the empty name).
    fn fixture() -> Vec<KernelRow> {
        let names = ["gemm", "nccl_allreduce", "", "Memcpy HtoD"];
        let mut rows = Vec::new();
        for (g, (job, rank, seq, n)) in [
            ("job-a", 0, 1, 40u64),
            ("job-a", 1, 1, 25),
            ("job-b", 0, 2, 1),
            ("job-a", 0, 3, 33),
        ]
        .into_iter()
        .enumerate()
        {
            for i in 0..n {
                let name = names[(i as usize * (g + 1) + g) % names.len()];
                rows.push(kernel(job, rank, seq, name, i));
            }
        }
        rows
    }

    fn layout(types: &[(&str, &str)]) -> Layout {
        let mut all: HashMap<String, String> = [
            ("job_id", "String"),
            ("run_id", "String"),
            ("rank", "UInt32"),
            ("node", "String"),
            ("kind", "Enum8('kernel' = 1, 'memcpy' = 2, 'memset' = 3)"),
            ("name", "LowCardinality(String)"),
            ("stream", "UInt32"),
            ("device", "Int32"),
            ("start_ns", "UInt64"),
            ("end_ns", "UInt64"),
            ("correlation", "UInt64"),
            ("bytes", "UInt64"),
            ("agent_id", "String"),
            ("agent_session", "UInt64"),
            ("batch_seq", "UInt64"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        for (k, v) in types {
            all.insert((*k).to_owned(), (*v).to_owned());
        }
        Layout::new(KernelRow::COLUMN_NAMES, &all).expect("supported types")
    }

    #[test]
    fn rows_come_back_as_they_went_in() {
        let rows = fixture();
        let cols = KernelRows::from(rows.clone());
        assert_eq!(cols.len(), rows.len());
        assert_eq!(cols.rows().collect::<Vec<_>>(), rows);
        assert_eq!(cols.groups.len(), 4, "one group per rank group");
        let starts = rows.iter().map(|r| r.start_ns);
        assert_eq!(
            cols.start_range(),
            Some((starts.clone().min().unwrap(), starts.max().unwrap()))
        );
        assert_eq!(KernelRows::default().start_range(), None);
    }

    #[test]
    fn a_group_started_without_rows_is_replaced_by_the_next() {
        let mut cols = KernelRows::default();
        let ident = |job: &str| RowIdent {
            job_id: job.into(),
            run_id: "r".into(),
            rank: 0,
            node: "n".into(),
            agent_id: "a".into(),
            agent_session: 1,
            batch_seq: 1,
        };
        let names = Arc::new(vec![Text::from(""), Text::from("k")]);
        cols.group(ident("empty"), Arc::clone(&names));
        cols.group(ident("job"), names);
        cols.push_fields(KernelFields {
            kind: 1,
            name: 1,
            stream: 0,
            device: 0,
            start_ns: 5,
            end_ns: 6,
            correlation: 0,
            bytes: 0,
        });
        assert_eq!(cols.groups.len(), 1);
        let row = cols.row(0);
        assert_eq!((&*row.job_id, &*row.name), ("job", "k"));
    }

    #[test]
    fn sorting_a_group_orders_its_rows_by_start_and_leaves_the_others() {
        let mut rows = fixture();
        let (first, second) = rows.split_at_mut(40);
        second[..25].reverse(); // the second group, out of order
        first.reverse(); // the first, left as pushed
        let mut cols = KernelRows::default();
        for r in &rows[..65] {
            cols.push(r.clone());
        }
        cols.sort_group();
        let got: Vec<KernelRow> = cols.rows().collect();
        assert_eq!(got[..40], rows[..40], "an earlier group is not touched");
        let mut want = rows[40..65].to_vec();
        want.sort_by_key(|r| r.start_ns);
        assert_eq!(got[40..], want[..], "every column moved with its row");
        let before = cols.clone();
        cols.sort_group();
        assert_eq!(cols, before, "a sorted group stays as it is");
    }

    /// The column writer must give the bytes the row serializer gives, for
    /// any cut of the rows into blocks and parts, and for other column
    /// types (a dictionary job id, a nullable number).
    #[test]
    fn columns_encode_to_the_bytes_of_their_rows() {
        let rows = fixture();
        let a = KernelRows::from(rows[..50].to_vec());
        let b = KernelRows::from(rows[50..].to_vec());
        let layouts = [
            layout(&[]),
            layout(&[
                ("job_id", "LowCardinality(String)"),
                ("stream", "Nullable(UInt32)"),
            ]),
        ];
        let cuts: [&[(&KernelRows, Range<usize>)]; 4] = [
            &[(&a, 0..50), (&b, 0..49)],
            &[(&a, 0..1)],
            &[(&a, 39..66 - 16)],
            &[(&a, 40..50), (&b, 0..0), (&b, 10..35)],
        ];
        for layout in &layouts {
            for cut in cuts {
                let want_rows: Vec<KernelRow> = cut
                    .iter()
                    .flat_map(|(k, r)| r.clone().map(|i| k.row(i)))
                    .collect();
                let mut want = Vec::new();
                layout
                    .encode(want_rows.iter(), &mut want)
                    .expect("rows encode");
                // Appended to what the buffer holds (earlier blocks).
                let mut got = b"an earlier block".to_vec();
                layout
                    .encode_columns(cut, &mut got)
                    .expect("columns encode");
                assert_eq!(
                    got.strip_prefix(b"an earlier block"),
                    Some(&want[..]),
                    "cut {:?}",
                    cut.iter().map(|c| &c.1).collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn a_column_that_does_not_fit_fails_the_block_naming_it() {
        let cols = KernelRows::from(fixture());
        let l = layout(&[("rank", "UInt64")]);
        let mut out = b"earlier blocks".to_vec();
        let err = l
            .encode_columns(&[(&cols, 0..cols.len())], &mut out)
            .expect_err("a u32 into UInt64");
        assert!(err.to_string().contains("column rank"), "{err}");
        assert_eq!(
            out, b"earlier blocks",
            "nothing of the failed block is left"
        );
    }

    #[test]
    fn a_column_of_the_wrong_length_fails_the_block() {
        struct Short;
        impl Columns for Short {
            fn write(
                &self,
                column: &str,
                rows: Range<usize>,
                out: &mut ColumnOut<'_>,
            ) -> Result<(), String> {
                let n = if column == "n" {
                    rows.len() - 1
                } else {
                    rows.len()
                };
                out.repeat_fixed(1u32, n)
            }
        }
        let types: HashMap<String, String> = [("m", "UInt32"), ("n", "UInt32")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let l = Layout::new(&["m", "n"], &types).expect("supported");
        let err = l
            .encode_columns(&[(&Short, 0..3)], &mut Vec::new())
            .expect_err("two values for three rows");
        assert!(
            err.to_string().contains("column n: 2 values for 3 rows"),
            "{err}"
        );
    }
}
