//! Event rows in column form: the `kernels`, `kernel_launches` and `spans`
//! rows, kept grouped from conversion to INSERT.
//!
//! Why: as row structs ([`KernelRow`], [`LaunchRow`], [`SpanRow`]), every
//! event cost five shared-string reference counts to build and five to drop,
//! a `serde` walk of thirteen to fifteen fields into the Native columns, and
//! a dictionary lookup of its name: together about a third of the
//! collector's CPU at full ingest (`perf`, issue 38). Here the columns a
//! rank group's events share (job, run, rank, node, agent, batch) are held
//! once per group and written as runs, names are indexes into the group's
//! name table (looked up in the block's dictionary once per group and name),
//! and an event's own figures are a small `Copy` struct ([`Fields`]).
//!
//! In: groups of events from `convert` ([`Grouped::group`] then
//! [`Grouped::push_fields`], [`Grouped::sort_group`]), or whole rows (tests,
//! other writers: [`Grouped::push`]). Out: the Native columns of any range of
//! rows ([`Columns`]), or the rows again as row structs.
//!
//! Invariants: the groups' `end`s never fall and the last is the row count;
//! only the last group may be empty; a name index is below its group's name
//! count.

use std::fmt::Debug;
use std::ops::Range;
use std::sync::Arc;

use super::native::{ColumnOut, Columns};
use super::rows::{KernelRow, LaunchRow, SpanRow, Text};

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

/// An event's own columns (all but the [`RowIdent`] ones), its name as an
/// index into its group's names.
pub trait Fields: Copy + Debug + PartialEq {
    /// The table's row struct.
    type Row;
    /// The column of the interned name.
    const NAME_COLUMN: &'static str;
    /// The name's index in the group's names.
    fn name(&self) -> u32;
    /// The time the table's `ORDER BY (job_id, rank, <time>)` sorts a rank's
    /// rows by.
    fn order_ns(&self) -> u64;
    /// A row's shared columns, name and own fields (name index 0).
    fn split(row: Self::Row) -> (RowIdent, Text, Self);
    /// The fields with name index `name`.
    fn with_name(self, name: u32) -> Self;
    /// The row again.
    fn join(&self, ident: &RowIdent, name: Text) -> Self::Row;
    /// Writes the own column `column` of `rows`; `None` when `column` is
    /// not one of them.
    fn write(rows: &[Self], column: &str, out: &mut ColumnOut<'_>) -> Option<Result<(), String>>;
}

/// Rows of one group: its shared columns, its names, where its rows end.
#[derive(Debug, Clone, PartialEq)]
struct Group {
    ident: RowIdent,
    names: Arc<Vec<Text>>,
    end: usize,
}

/// One table's rows, grouped (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Grouped<F> {
    groups: Vec<Group>,
    rows: Vec<F>,
}

impl<F> Default for Grouped<F> {
    fn default() -> Self {
        Grouped {
            groups: Vec::new(),
            rows: Vec::new(),
        }
    }
}

/// `kernels` rows.
pub type KernelRows = Grouped<KernelFields>;
/// `kernel_launches` rows.
pub type LaunchRows = Grouped<LaunchFields>;
/// `spans` rows.
pub type SpanRows = Grouped<SpanFields>;

impl<F: Fields> Grouped<F> {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn clear(&mut self) {
        *self = Grouped::default();
    }

    /// Room for `n` more rows.
    pub fn reserve_exact(&mut self, n: usize) {
        self.rows.reserve_exact(n);
    }

    /// Rows there is room for without growing.
    pub fn capacity(&self) -> usize {
        self.rows.capacity()
    }

    /// Where the last group's rows start.
    fn last_start(&self) -> usize {
        let n = self.groups.len();
        n.checked_sub(2).map_or(0, |i| self.groups[i].end)
    }

    /// Starts a group: the rows [`Grouped::push_fields`] adds next share
    /// `ident`, and their name indexes `names`.
    pub fn group(&mut self, ident: RowIdent, names: Arc<Vec<Text>>) {
        // A group that got no rows would hold an empty run: replaced.
        let start = self.last_start();
        if self.groups.last().is_some_and(|g| g.end == start) {
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
    /// When no group was started, or the name is not an index of its names.
    pub fn push_fields(&mut self, f: F) {
        let group = self.groups.last_mut().expect("a group is started first");
        assert!(
            (f.name() as usize) < group.names.len(),
            "name index {} of {} names",
            f.name(),
            group.names.len()
        );
        group.end += 1;
        self.rows.push(f);
    }

    /// Puts the rows of the group last started in [`Fields::order_ns`]
    /// order (stable): with the writer's order of groups (by job, rank and
    /// first time) a window's INSERT is then in the table's `ORDER BY` order
    /// when a rank's batches do not overlap in time. A rank's events come in
    /// the order they ended, not started (a kernel on another stream, a
    /// span around others), so a group is often sorted: checked first.
    pub fn sort_group(&mut self) {
        if self.groups.is_empty() {
            return;
        }
        let start = self.last_start();
        let rows = &mut self.rows[start..];
        if !rows.is_sorted_by_key(F::order_ns) {
            rows.sort_by_key(F::order_ns);
        }
    }

    /// Adds a whole row (to the last group when it has the same shared
    /// columns, else to a new one).
    pub fn push(&mut self, row: F::Row) {
        let (ident, name, f) = F::split(row);
        if self.groups.last().is_none_or(|g| g.ident != ident) {
            self.group(ident, Arc::default());
        }
        let group = self.groups.last_mut().expect("a group was started");
        let names = Arc::make_mut(&mut group.names);
        let index = match names.iter().position(|n| *n == name) {
            Some(i) => i,
            None => {
                names.push(name);
                names.len() - 1
            }
        };
        self.push_fields(f.with_name(index as u32));
    }

    /// Row `i` as a row struct.
    ///
    /// # Panics
    /// When `i` is not below [`Grouped::len`].
    pub fn row(&self, i: usize) -> F::Row {
        let g = &self.groups[self.groups.partition_point(|g| g.end <= i)];
        let f = &self.rows[i];
        f.join(&g.ident, g.names[f.name() as usize].clone())
    }

    /// Every row as a row struct, in order.
    pub fn rows(&self) -> impl Iterator<Item = F::Row> + '_ {
        (0..self.len()).map(|i| self.row(i))
    }

    /// The first and last [`Fields::order_ns`], `None` when there are no
    /// rows.
    pub fn order_range(&self) -> Option<(u64, u64)> {
        let min = self.rows.iter().map(F::order_ns).min()?;
        let max = self.rows.iter().map(F::order_ns).max()?;
        Some((min, max))
    }

    /// Each group's shared columns, rows and first row's
    /// [`Fields::order_ns`], in order.
    pub fn groups(&self) -> impl Iterator<Item = (&RowIdent, Range<usize>, u64)> + '_ {
        self.runs(0..self.len())
            .map(|(g, rows)| (&g.ident, rows.clone(), self.rows[rows.start].order_ns()))
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

impl<F: Fields> From<Vec<F::Row>> for Grouped<F> {
    fn from(rows: Vec<F::Row>) -> Self {
        rows.into_iter().collect()
    }
}

impl<F: Fields> FromIterator<F::Row> for Grouped<F> {
    fn from_iter<I: IntoIterator<Item = F::Row>>(rows: I) -> Self {
        let mut out = Grouped::default();
        for row in rows {
            out.push(row);
        }
        out
    }
}

impl<F: Fields> Columns for Grouped<F> {
    fn write(
        &self,
        column: &str,
        rows: Range<usize>,
        out: &mut ColumnOut<'_>,
    ) -> Result<(), String> {
        let runs = || self.runs(rows.clone());
        match column {
            "job_id" => runs().try_for_each(|(g, p)| out.repeat_str(&g.ident.job_id, p.len())),
            "run_id" => runs().try_for_each(|(g, p)| out.repeat_str(&g.ident.run_id, p.len())),
            "rank" => runs().try_for_each(|(g, p)| out.repeat_fixed(g.ident.rank, p.len())),
            "node" => runs().try_for_each(|(g, p)| out.repeat_str(&g.ident.node, p.len())),
            "agent_id" => runs().try_for_each(|(g, p)| out.repeat_str(&g.ident.agent_id, p.len())),
            "agent_session" => {
                runs().try_for_each(|(g, p)| out.repeat_fixed(g.ident.agent_session, p.len()))
            }
            "batch_seq" => {
                runs().try_for_each(|(g, p)| out.repeat_fixed(g.ident.batch_seq, p.len()))
            }
            c if c == F::NAME_COLUMN => runs()
                .try_for_each(|(g, p)| out.indexed_str(&g.names, self.rows[p].iter().map(F::name))),
            c => F::write(&self.rows[rows], c, out)
                .unwrap_or_else(|| Err(format!("these rows have no column {c}"))),
        }
    }
}

/// A `kernels` row's own columns.
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

/// The [`RowIdent`] of a row struct with those fields.
macro_rules! ident_of {
    ($row:expr) => {
        RowIdent {
            job_id: $row.job_id,
            run_id: $row.run_id,
            rank: $row.rank,
            node: $row.node,
            agent_id: $row.agent_id,
            agent_session: $row.agent_session,
            batch_seq: $row.batch_seq,
        }
    };
}

/// A row struct with the [`RowIdent`] `$id`'s columns and the own ones.
macro_rules! with_ident {
    ($ty:ident, $id:expr, { $($f:ident: $v:expr),* $(,)? }) => {
        $ty {
            job_id: $id.job_id.clone(),
            run_id: $id.run_id.clone(),
            rank: $id.rank,
            node: $id.node.clone(),
            agent_id: $id.agent_id.clone(),
            agent_session: $id.agent_session,
            batch_seq: $id.batch_seq,
            $($f: $v),*
        }
    };
}

impl Fields for KernelFields {
    type Row = KernelRow;
    const NAME_COLUMN: &'static str = "name";
    fn name(&self) -> u32 {
        self.name
    }
    fn order_ns(&self) -> u64 {
        self.start_ns
    }
    fn split(r: KernelRow) -> (RowIdent, Text, Self) {
        let f = KernelFields {
            kind: r.kind,
            name: 0,
            stream: r.stream,
            device: r.device,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            correlation: r.correlation,
            bytes: r.bytes,
        };
        (ident_of!(r), r.name, f)
    }
    fn with_name(self, name: u32) -> Self {
        KernelFields { name, ..self }
    }
    fn join(&self, id: &RowIdent, name: Text) -> KernelRow {
        with_ident!(KernelRow, id, {
            kind: self.kind,
            name: name,
            stream: self.stream,
            device: self.device,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            correlation: self.correlation,
            bytes: self.bytes,
        })
    }
    fn write(rows: &[Self], column: &str, out: &mut ColumnOut<'_>) -> Option<Result<(), String>> {
        let r = rows.iter();
        Some(match column {
            "kind" => out.fixed(r.map(|f| f.kind)),
            "stream" => out.fixed(r.map(|f| f.stream)),
            "device" => out.fixed(r.map(|f| f.device)),
            "start_ns" => out.fixed(r.map(|f| f.start_ns)),
            "end_ns" => out.fixed(r.map(|f| f.end_ns)),
            "correlation" => out.fixed(r.map(|f| f.correlation)),
            "bytes" => out.fixed(r.map(|f| f.bytes)),
            _ => return None,
        })
    }
}

/// A `kernel_launches` row's own columns (`api` is the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchFields {
    pub correlation: u64,
    pub stream: u32,
    pub kernel_start_ns: u64,
    pub api: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Fields for LaunchFields {
    type Row = LaunchRow;
    const NAME_COLUMN: &'static str = "api";
    fn name(&self) -> u32 {
        self.api
    }
    fn order_ns(&self) -> u64 {
        self.kernel_start_ns
    }
    fn split(r: LaunchRow) -> (RowIdent, Text, Self) {
        let f = LaunchFields {
            correlation: r.correlation,
            stream: r.stream,
            kernel_start_ns: r.kernel_start_ns,
            api: 0,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
        };
        (ident_of!(r), r.api, f)
    }
    fn with_name(self, api: u32) -> Self {
        LaunchFields { api, ..self }
    }
    fn join(&self, id: &RowIdent, api: Text) -> LaunchRow {
        with_ident!(LaunchRow, id, {
            correlation: self.correlation,
            stream: self.stream,
            kernel_start_ns: self.kernel_start_ns,
            api: api,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
        })
    }
    fn write(rows: &[Self], column: &str, out: &mut ColumnOut<'_>) -> Option<Result<(), String>> {
        let r = rows.iter();
        Some(match column {
            "correlation" => out.fixed(r.map(|f| f.correlation)),
            "stream" => out.fixed(r.map(|f| f.stream)),
            "kernel_start_ns" => out.fixed(r.map(|f| f.kernel_start_ns)),
            "start_ns" => out.fixed(r.map(|f| f.start_ns)),
            "end_ns" => out.fixed(r.map(|f| f.end_ns)),
            _ => return None,
        })
    }
}

/// A `spans` row's own columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanFields {
    pub category: i8,
    pub name: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub stream: u32,
    pub device: i32,
}

impl Fields for SpanFields {
    type Row = SpanRow;
    const NAME_COLUMN: &'static str = "name";
    fn name(&self) -> u32 {
        self.name
    }
    fn order_ns(&self) -> u64 {
        self.start_ns
    }
    fn split(r: SpanRow) -> (RowIdent, Text, Self) {
        let f = SpanFields {
            category: r.category,
            name: 0,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            stream: r.stream,
            device: r.device,
        };
        (ident_of!(r), r.name, f)
    }
    fn with_name(self, name: u32) -> Self {
        SpanFields { name, ..self }
    }
    fn join(&self, id: &RowIdent, name: Text) -> SpanRow {
        with_ident!(SpanRow, id, {
            category: self.category,
            name: name,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            stream: self.stream,
            device: self.device,
        })
    }
    fn write(rows: &[Self], column: &str, out: &mut ColumnOut<'_>) -> Option<Result<(), String>> {
        let r = rows.iter();
        Some(match column {
            "category" => out.fixed(r.map(|f| f.category)),
            "start_ns" => out.fixed(r.map(|f| f.start_ns)),
            "end_ns" => out.fixed(r.map(|f| f.end_ns)),
            "stream" => out.fixed(r.map(|f| f.stream)),
            "device" => out.fixed(r.map(|f| f.device)),
            _ => return None,
        })
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

    fn layout_of<R: Row>(types: &[(&str, &str)]) -> Layout {
        let all: HashMap<String, String> = types
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Layout::new(R::COLUMN_NAMES, &all).expect("supported types")
    }

    /// The `kernels` layout with `types` replacing some columns' types.
    fn layout(types: &[(&str, &str)]) -> Layout {
        let all = [
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
        ];
        layout_of::<KernelRow>(&[&all[..], types].concat())
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
            cols.order_range(),
            Some((starts.clone().min().unwrap(), starts.max().unwrap()))
        );
        assert_eq!(KernelRows::default().order_range(), None);
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

    /// The same rows as `spans` and `kernel_launches` rows.
    fn spans() -> Vec<SpanRow> {
        fixture()
            .into_iter()
            .map(|k| {
                with_ident!(SpanRow, k, {
                    category: k.kind + 4,
                    name: k.name.clone(),
                    start_ns: k.start_ns,
                    end_ns: k.end_ns,
                    stream: k.stream,
                    device: k.device,
                })
            })
            .collect()
    }

    fn launches() -> Vec<LaunchRow> {
        fixture()
            .into_iter()
            .map(|k| {
                with_ident!(LaunchRow, k, {
                    correlation: k.correlation,
                    stream: k.stream,
                    kernel_start_ns: k.start_ns,
                    api: k.name.clone(),
                    start_ns: k.start_ns.saturating_sub(100),
                    end_ns: k.start_ns.saturating_sub(50),
                })
            })
            .collect()
    }

    /// The column writer must give the bytes the row serializer gives, for
    /// any cut of the rows into blocks and parts, and for other column
    /// types (a dictionary job id, a nullable number).
    fn encode_like_rows<F: Fields>(rows: Vec<F::Row>, types: &[(&str, &str)])
    where
        F::Row: Clone + serde::Serialize + Row,
    {
        let a = Grouped::<F>::from(rows[..50].to_vec());
        let b = Grouped::<F>::from(rows[50..].to_vec());
        assert_eq!(b.len(), 49);
        let common = [
            ("job_id", "String"),
            ("run_id", "String"),
            ("rank", "UInt32"),
            ("node", "String"),
            ("agent_id", "String"),
            ("agent_session", "UInt64"),
            ("batch_seq", "UInt64"),
        ];
        let layouts = [
            layout_of::<F::Row>(&[&common[..], types].concat()),
            layout_of::<F::Row>(
                &[
                    &common[..],
                    types,
                    &[
                        ("job_id", "LowCardinality(String)"),
                        ("stream", "Nullable(UInt32)"),
                    ],
                ]
                .concat(),
            ),
        ];
        let cuts: [&[(&Grouped<F>, Range<usize>)]; 4] = [
            &[(&a, 0..50), (&b, 0..49)],
            &[(&a, 0..1)],
            &[(&a, 39..50)],
            &[(&a, 40..50), (&b, 0..0), (&b, 10..35)],
        ];
        for layout in &layouts {
            for cut in cuts {
                let want_rows: Vec<F::Row> = cut
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
    fn columns_encode_to_the_bytes_of_their_rows() {
        encode_like_rows::<KernelFields>(
            fixture(),
            &[
                ("kind", "Enum8('kernel' = 1, 'memcpy' = 2, 'memset' = 3)"),
                ("name", "LowCardinality(String)"),
                ("stream", "UInt32"),
                ("device", "Int32"),
                ("start_ns", "UInt64"),
                ("end_ns", "UInt64"),
                ("correlation", "UInt64"),
                ("bytes", "UInt64"),
            ],
        );
        encode_like_rows::<SpanFields>(
            spans(),
            &[
                (
                    "category",
                    "Enum8('compute' = 5, 'communication' = 6, 'memcpy' = 7)",
                ),
                ("name", "LowCardinality(String)"),
                ("start_ns", "UInt64"),
                ("end_ns", "UInt64"),
                ("stream", "UInt32"),
                ("device", "Int32"),
            ],
        );
        encode_like_rows::<LaunchFields>(
            launches(),
            &[
                ("correlation", "UInt64"),
                ("stream", "UInt32"),
                ("kernel_start_ns", "UInt64"),
                ("api", "LowCardinality(String)"),
                ("start_ns", "UInt64"),
                ("end_ns", "UInt64"),
            ],
        );
    }

    #[test]
    fn spans_and_launches_come_back_as_they_went_in() {
        let s = spans();
        assert_eq!(SpanRows::from(s.clone()).rows().collect::<Vec<_>>(), s);
        let l = launches();
        let cols = LaunchRows::from(l.clone());
        assert_eq!(cols.rows().collect::<Vec<_>>(), l);
        let starts = l.iter().map(|r| r.kernel_start_ns);
        assert_eq!(
            cols.order_range(),
            Some((starts.clone().min().unwrap(), starts.max().unwrap()))
        );
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
