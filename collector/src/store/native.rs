//! INSERT bodies in ClickHouse's Native (columnar) format.
//!
//! Why: RowBinary makes the server parse every row field by field and look
//! each `LowCardinality` string up in its dictionary once per row; Native
//! hands it whole columns and a per-block dictionary. On ClickHouse 18.16
//! the same 282,880 `kernels` rows cost the server 0.19-0.24 CPU s as
//! RowBinary and 0.09-0.10 s as Native (measured side by side, HTTP,
//! uncompressed; the body is 3.1x smaller, the kernel names being sent once
//! per block).
//!
//! In: a table's columns as the server describes them (`system.columns`:
//! name and type) and rows that `serde`-serialize as a struct whose fields
//! are the [`Row::COLUMN_NAMES`](clickhouse::Row::COLUMN_NAMES), in order
//! (the rows the RowBinary path sends). Out: Native blocks (no block info:
//! the HTTP interface's format), sent through the client's
//! `insert_formatted_with` (its settings apply; with LZ4 each block is framed
//! by [`super::frame`], `Store::native_insert`). Rows
//! held in column form ([`Columns`]: the `kernels`, `kernel_launches` and
//! `spans` rows) write each column whole instead
//! ([`Layout::encode_columns`]): the same bytes.
//!
//! Column types encoded: `(U)Int8..64`, `Float32/64`, `Enum8/16`, `Date`,
//! `DateTime`, `String`, `LowCardinality(String)` (dictionary with
//! "additional keys", key version 1, as ClickHouse's own Native writer),
//! `Array(T)` and `Nullable(T)` of those. A table with any other type gets
//! no [`Layout`] and stays on RowBinary. A row that does not match its
//! layout (a field of another width or kind) fails the whole INSERT with
//! `Error::Custom` naming the column, before anything is sent.

use std::collections::HashMap;
use std::ops::Range;

use serde::ser::{self, Impossible, Serialize};

/// How one column is encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Enc {
    /// Fixed-width little-endian values of this many bytes.
    Fixed(usize),
    /// Length-prefixed bytes.
    Str,
    /// `LowCardinality(String)`.
    LowCard,
    Array(Box<Enc>),
    Nullable(Box<Enc>),
}

fn parse_type(ty: &str) -> Option<Enc> {
    let inner = |prefix: &str| ty.strip_prefix(prefix)?.strip_suffix(')');
    if let Some(t) = inner("Array(") {
        return match parse_type(t)? {
            e @ (Enc::Fixed(_) | Enc::Str) => Some(Enc::Array(Box::new(e))),
            _ => None,
        };
    }
    if let Some(t) = inner("Nullable(") {
        return match parse_type(t)? {
            e @ (Enc::Fixed(_) | Enc::Str) => Some(Enc::Nullable(Box::new(e))),
            _ => None,
        };
    }
    if ty == "LowCardinality(String)" {
        return Some(Enc::LowCard);
    }
    if ty.starts_with("Enum8(") {
        return Some(Enc::Fixed(1));
    }
    if ty.starts_with("Enum16(") {
        return Some(Enc::Fixed(2));
    }
    Some(match ty {
        "String" => Enc::Str,
        "UInt8" | "Int8" => Enc::Fixed(1),
        "UInt16" | "Int16" | "Date" => Enc::Fixed(2),
        "UInt32" | "Int32" | "Float32" | "DateTime" => Enc::Fixed(4),
        "UInt64" | "Int64" | "Float64" => Enc::Fixed(8),
        _ => return None,
    })
}

#[derive(Debug, Clone)]
struct Column {
    name: String,
    ty: String,
    enc: Enc,
}

/// How a row type is written to one table: its columns in field order.
#[derive(Debug, Clone)]
pub struct Layout {
    columns: Vec<Column>,
}

impl Layout {
    /// The layout of rows with fields `names` for a table whose columns are
    /// `types` (name -> ClickHouse type); `None` when a field has no column
    /// or a type this module does not encode.
    pub fn new(names: &[&str], types: &HashMap<String, String>) -> Option<Layout> {
        let columns = names
            .iter()
            .map(|&name| {
                let ty = types.get(name)?;
                Some(Column {
                    name: name.to_owned(),
                    ty: ty.clone(),
                    enc: parse_type(ty)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Layout { columns })
    }

    /// One Native block of `rows`, appended to `out`.
    pub fn encode<'r, T: Serialize + 'r>(
        &self,
        rows: impl Iterator<Item = &'r T>,
        out: &mut Vec<u8>,
    ) -> Result<(), clickhouse::error::Error> {
        // Columns sized for the rows and the block for the columns: grown
        // by doubling, each column and then the block would copy its bytes
        // about once more (memmove led the collector's profile).
        let rows_hint = rows.size_hint().0;
        let mut cols: Vec<Buf> = self
            .columns
            .iter()
            .map(|c| Buf::new(&c.enc, rows_hint))
            .collect();
        let mut n = 0usize;
        for row in rows {
            row.serialize(RowSer {
                cols: &mut cols,
                next: 0,
            })
            .map_err(|e| self.error(e))?;
            n += 1;
        }
        self.block(n, cols, out);
        Ok(())
    }

    /// One Native block of rows held in column form: the rows `range` of
    /// each piece, in order. The same bytes as [`Layout::encode`] of those
    /// rows (dictionary keys numbered in order of first use), without a row
    /// ever being built: each column is written whole by the rows' own
    /// [`Columns::write`].
    pub fn encode_columns<C: Columns>(
        &self,
        pieces: &[(&C, Range<usize>)],
        out: &mut Vec<u8>,
    ) -> Result<(), clickhouse::error::Error> {
        let n: usize = pieces.iter().map(|(_, r)| r.len()).sum();
        let start = out.len();
        // Fixed-width and string columns are written in place, at the end
        // of the block (no column buffer copied into it afterwards): room
        // for their values, strings guessed at 24 bytes.
        let room: usize = self
            .columns
            .iter()
            .map(|c| match c.enc {
                Enc::Fixed(w) => w * n,
                _ => 24 * n,
            })
            .sum();
        out.reserve(room + 64 * self.columns.len());
        varint(out, self.columns.len() as u64);
        varint(out, n as u64);
        for (column, c) in self.columns.iter().enumerate() {
            string(out, c.name.as_bytes());
            string(out, c.ty.as_bytes());
            let written = match c.enc {
                Enc::Fixed(width) => {
                    let mut buf = Buf::Fixed {
                        width,
                        data: std::mem::take(out),
                    };
                    let written = self.write_column(column, pieces, n, &mut buf);
                    if let Buf::Fixed { data, .. } = buf {
                        *out = data;
                    }
                    written
                }
                Enc::Str => {
                    let mut buf = Buf::Str(std::mem::take(out));
                    let written = self.write_column(column, pieces, n, &mut buf);
                    if let Buf::Str(data) = buf {
                        *out = data;
                    }
                    written
                }
                _ => {
                    let mut buf = Buf::new(&c.enc, n);
                    let written = self.write_column(column, pieces, n, &mut buf);
                    buf.finish(out);
                    written
                }
            };
            if let Err(e) = written {
                out.truncate(start);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Column `column` of `pieces` (`n` rows in all) into `buf`.
    fn write_column<C: Columns>(
        &self,
        column: usize,
        pieces: &[(&C, Range<usize>)],
        n: usize,
        buf: &mut Buf,
    ) -> Result<(), clickhouse::error::Error> {
        let c = &self.columns[column];
        let mut put = ColumnOut { buf, values: 0 };
        for (rows, range) in pieces {
            rows.write(&c.name, range.clone(), &mut put)
                .map_err(|message| self.error(EncodeError { column, message }))?;
        }
        if put.values != n {
            let message = format!("{} values for {n} rows", put.values);
            return Err(self.error(EncodeError { column, message }));
        }
        Ok(())
    }

    /// Appends the block of `n` rows whose columns are `cols`.
    fn block(&self, n: usize, cols: Vec<Buf>, out: &mut Vec<u8>) {
        let header: usize = self
            .columns
            .iter()
            .map(|c| c.name.len() + c.ty.len() + 20)
            .sum();
        out.reserve(header + cols.iter().map(Buf::encoded_len).sum::<usize>());
        varint(out, self.columns.len() as u64);
        varint(out, n as u64);
        for (c, buf) in self.columns.iter().zip(cols) {
            string(out, c.name.as_bytes());
            string(out, c.ty.as_bytes());
            buf.finish(out);
        }
    }

    fn error(&self, e: EncodeError) -> clickhouse::error::Error {
        let column = self.columns.get(e.column).map_or("?", |c| c.name.as_str());
        clickhouse::error::Error::Custom(format!("Native column {column}: {}", e.message))
    }
}

/// Rows held in column form (see `grouped`): they write each column's
/// values themselves, a column at a time.
pub trait Columns {
    /// Writes the values of the rows `rows` for the column named `column`
    /// (a field of the rows' `clickhouse::Row` type) into `out`; an error
    /// names what does not fit.
    fn write(
        &self,
        column: &str,
        rows: Range<usize>,
        out: &mut ColumnOut<'_>,
    ) -> Result<(), String>;
}

/// A fixed-width value as Native writes it (little-endian).
pub trait Fixed: Copy {
    const WIDTH: usize;
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! fixed {
    ($($t:ty),*) => {
        $(impl Fixed for $t {
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        })*
    };
}
fixed!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

/// One column of a block being written by [`Columns::write`]; counts the
/// values so a column of the wrong length fails the block.
pub struct ColumnOut<'a> {
    buf: &'a mut Buf,
    values: usize,
}

impl ColumnOut<'_> {
    /// One value per row.
    pub fn fixed<T: Fixed>(
        &mut self,
        values: impl ExactSizeIterator<Item = T>,
    ) -> Result<(), String> {
        self.values += values.len();
        match &mut *self.buf {
            Buf::Fixed { width, data } if *width == T::WIDTH => {
                data.reserve(values.len() * T::WIDTH);
                for v in values {
                    v.put(data);
                }
                Ok(())
            }
            buf => values.into_iter().try_for_each(|v| {
                let mut b = Vec::with_capacity(T::WIDTH);
                v.put(&mut b);
                buf.fixed(&b)
            }),
        }
    }

    /// `value` for `n` rows.
    pub fn repeat_fixed<T: Fixed>(&mut self, value: T, n: usize) -> Result<(), String> {
        if n == 0 {
            return Ok(());
        }
        self.values += n;
        let mut b = Vec::with_capacity(T::WIDTH);
        value.put(&mut b);
        match &mut *self.buf {
            Buf::Fixed { width, data } if *width == T::WIDTH => {
                data.reserve(n * T::WIDTH);
                let start = data.len();
                data.extend_from_slice(&b);
                let mut have = 1;
                while have < n {
                    let more = have.min(n - have);
                    data.extend_from_within(start..start + more * T::WIDTH);
                    have += more;
                }
                Ok(())
            }
            buf => (0..n).try_for_each(|_| buf.fixed(&b)),
        }
    }

    /// `s` for `n` rows.
    pub fn repeat_str(&mut self, s: &str, n: usize) -> Result<(), String> {
        if n == 0 {
            return Ok(());
        }
        self.values += n;
        match &mut *self.buf {
            Buf::Str(data) => {
                // One copy, then the copies made so far copied again: a
                // run of n values in about log2(n) copies.
                let start = data.len();
                string(data, s.as_bytes());
                let one = data.len() - start;
                data.reserve((n - 1) * one);
                let mut have = 1;
                while have < n {
                    let more = have.min(n - have);
                    data.extend_from_within(start..start + more * one);
                    have += more;
                }
                Ok(())
            }
            Buf::LowCard { .. } => {
                let id = self.buf.key_id(s)?;
                if let Buf::LowCard { index, .. } = self.buf {
                    index.extend(std::iter::repeat_n(id, n));
                }
                Ok(())
            }
            buf => (0..n).try_for_each(|_| buf.str(s)),
        }
    }

    /// `keys[i]` for each `i` of `indexes` (a dictionary column looks each
    /// key up once, not once per row).
    pub fn indexed_str<K: AsRef<str>>(
        &mut self,
        keys: &[K],
        indexes: impl ExactSizeIterator<Item = u32>,
    ) -> Result<(), String> {
        self.values += indexes.len();
        let key = |i: u32| {
            keys.get(i as usize)
                .map(AsRef::as_ref)
                .ok_or_else(|| format!("key {i} of {}", keys.len()))
        };
        match &mut *self.buf {
            Buf::LowCard { .. } => {
                let mut ids = vec![u32::MAX; keys.len()];
                for i in indexes {
                    let id = match ids.get(i as usize) {
                        Some(&id) if id != u32::MAX => id,
                        _ => {
                            let id = self.buf.key_id(key(i)?)?;
                            ids[i as usize] = id;
                            id
                        }
                    };
                    if let Buf::LowCard { index, .. } = self.buf {
                        index.push(id);
                    }
                }
                Ok(())
            }
            buf => indexes.into_iter().try_for_each(|i| buf.str(key(i)?)),
        }
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn string(out: &mut Vec<u8>, s: &[u8]) {
    varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// One column's data while rows are added.
enum Buf {
    Fixed {
        width: usize,
        data: Vec<u8>,
    },
    Str(Vec<u8>),
    LowCard {
        /// Keys come from agents: a seeded hash, faster than SipHash on
        /// kernel names (9 % of the collector's samples at full ingest).
        /// Key -> (id, where its bytes start in `keys`).
        ids: foldhash::HashMap<Box<str>, (u32, usize)>,
        keys: Vec<u8>,
        index: Vec<u32>,
        /// The last key's id and where its bytes lie in `keys`: consecutive
        /// rows mostly repeat a column's value (job, node, agent of one
        /// batch), which then costs a comparison instead of a lookup.
        last: Option<(u32, std::ops::Range<usize>)>,
    },
    Array {
        offsets: Vec<u64>,
        inner: Box<Buf>,
    },
    Nullable {
        nulls: Vec<u8>,
        inner: Box<Buf>,
    },
}

impl Buf {
    /// An empty column with room for `rows` values (their fixed-width
    /// bytes, indexes, offsets or null marks; string bytes grow as they come).
    fn new(enc: &Enc, rows: usize) -> Buf {
        match enc {
            Enc::Fixed(width) => Buf::Fixed {
                width: *width,
                data: Vec::with_capacity(width * rows),
            },
            Enc::Str => Buf::Str(Vec::new()),
            Enc::LowCard => Buf::LowCard {
                ids: foldhash::HashMap::default(),
                keys: Vec::new(),
                index: Vec::with_capacity(rows),
                last: None,
            },
            Enc::Array(inner) => Buf::Array {
                offsets: Vec::with_capacity(rows),
                inner: Box::new(Buf::new(inner, 0)),
            },
            Enc::Nullable(inner) => Buf::Nullable {
                nulls: Vec::with_capacity(rows),
                inner: Box::new(Buf::new(inner, rows)),
            },
        }
    }

    /// Bytes [`Buf::finish`] appends (at most: the index width may be narrower).
    fn encoded_len(&self) -> usize {
        match self {
            Buf::Str(data) | Buf::Fixed { data, .. } => data.len(),
            Buf::LowCard { keys, index, .. } => 32 + keys.len() + 4 * index.len(),
            Buf::Array { offsets, inner } => 8 * offsets.len() + inner.encoded_len(),
            Buf::Nullable { nulls, inner } => nulls.len() + inner.encoded_len(),
        }
    }

    fn fixed(&mut self, bytes: &[u8]) -> Result<(), String> {
        match self {
            Buf::Fixed { width, data } if *width == bytes.len() => {
                data.extend_from_slice(bytes);
                Ok(())
            }
            Buf::Nullable { nulls, inner } => {
                nulls.push(0);
                inner.fixed(bytes)
            }
            _ => Err(format!("a {}-byte value does not fit", bytes.len())),
        }
    }

    fn str(&mut self, s: &str) -> Result<(), String> {
        match self {
            Buf::Str(data) => {
                string(data, s.as_bytes());
                Ok(())
            }
            Buf::LowCard { .. } => {
                let id = self.key_id(s)?;
                if let Buf::LowCard { index, .. } = self {
                    index.push(id);
                }
                Ok(())
            }
            Buf::Nullable { nulls, inner } => {
                nulls.push(0);
                inner.str(s)
            }
            _ => Err("a string does not fit".into()),
        }
    }

    /// The dictionary id of `s` in a `LowCardinality` column, numbered in
    /// order of first use; the column's index is left to the caller.
    fn key_id(&mut self, s: &str) -> Result<u32, String> {
        let Buf::LowCard {
            ids, keys, last, ..
        } = self
        else {
            return Err("a dictionary key does not fit".into());
        };
        if let Some((id, at)) = last {
            if keys[at.clone()] == *s.as_bytes() {
                return Ok(*id);
            }
        }
        let (id, start) = match ids.get(s) {
            Some(&known) => known,
            None => {
                let id = u32::try_from(ids.len()).map_err(|_| "too many keys")?;
                string(keys, s.as_bytes());
                let start = keys.len() - s.len();
                ids.insert(s.into(), (id, start));
                (id, start)
            }
        };
        *last = Some((id, start..start + s.len()));
        Ok(id)
    }

    fn null(&mut self) -> Result<(), String> {
        match self {
            Buf::Nullable { nulls, inner } => {
                nulls.push(1);
                match inner.as_mut() {
                    Buf::Fixed { width, data } => data.resize(data.len() + *width, 0),
                    Buf::Str(data) => data.push(0),
                    _ => return Err("unsupported nullable".into()),
                }
                Ok(())
            }
            _ => Err("a null does not fit".into()),
        }
    }

    /// Appends the column's Native data. Every row put exactly one value in
    /// every column (`RowSer` checks the field count, a value that does not
    /// fit fails), so the columns are as long as the block.
    fn finish(self, out: &mut Vec<u8>) {
        match self {
            Buf::Str(data) | Buf::Fixed { data, .. } => out.extend_from_slice(&data),
            Buf::LowCard {
                ids, keys, index, ..
            } => {
                // Key version 1 (shared dictionaries with additional keys);
                // then the index width and "has additional keys" (bit 9),
                // the keys, the rows' indexes.
                let (kind, width) = match ids.len() {
                    0..=0x100 => (0u64, 1),
                    0x101..=0x1_0000 => (1, 2),
                    _ => (2, 4),
                };
                out.extend_from_slice(&1u64.to_le_bytes());
                out.extend_from_slice(&(kind | 1 << 9).to_le_bytes());
                out.extend_from_slice(&(ids.len() as u64).to_le_bytes());
                out.extend_from_slice(&keys);
                out.extend_from_slice(&(index.len() as u64).to_le_bytes());
                for i in index {
                    out.extend_from_slice(&i.to_le_bytes()[..width]);
                }
            }
            Buf::Array { offsets, inner } => {
                for o in &offsets {
                    out.extend_from_slice(&o.to_le_bytes());
                }
                inner.finish(out);
            }
            Buf::Nullable { nulls, inner } => {
                out.extend_from_slice(&nulls);
                inner.finish(out);
            }
        }
    }
}

#[derive(Debug)]
struct EncodeError {
    column: usize,
    message: String,
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EncodeError {}

impl ser::Error for EncodeError {
    fn custom<M: std::fmt::Display>(msg: M) -> Self {
        EncodeError {
            column: usize::MAX,
            message: msg.to_string(),
        }
    }
}

/// Serializes one row: field `next` goes to `cols[next]`.
struct RowSer<'a> {
    cols: &'a mut [Buf],
    next: usize,
}

fn not_a_row<T>() -> Result<T, EncodeError> {
    Err(ser::Error::custom("a row must serialize as a struct"))
}

macro_rules! unsupported {
    ($($f:ident($($t:ty),*)),* $(,)?) => {
        $(fn $f(self, $(_: $t),*) -> Result<Self::Ok, EncodeError> { not_a_row() })*
    };
}

impl<'a> ser::Serializer for RowSer<'a> {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = Impossible<(), EncodeError>;
    type SerializeTuple = Impossible<(), EncodeError>;
    type SerializeTupleStruct = Impossible<(), EncodeError>;
    type SerializeTupleVariant = Impossible<(), EncodeError>;
    type SerializeMap = Impossible<(), EncodeError>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), EncodeError>;

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, EncodeError> {
        Ok(self)
    }
    unsupported!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    );
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<(), EncodeError> {
        not_a_row()
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<(), EncodeError> {
        not_a_row()
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), EncodeError> {
        not_a_row()
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, EncodeError> {
        not_a_row()
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, EncodeError> {
        not_a_row()
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, EncodeError> {
        not_a_row()
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, EncodeError> {
        not_a_row()
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, EncodeError> {
        not_a_row()
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, EncodeError> {
        not_a_row()
    }
}

impl ser::SerializeStruct for RowSer<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        _: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        let column = self.next;
        let buf = self.cols.get_mut(column).ok_or_else(|| EncodeError {
            column,
            message: "more fields than columns".into(),
        })?;
        value
            .serialize(FieldSer(buf))
            .map_err(|e| EncodeError { column, ..e })?;
        self.next += 1;
        Ok(())
    }
    fn end(self) -> Result<(), EncodeError> {
        if self.next == self.cols.len() {
            Ok(())
        } else {
            Err(EncodeError {
                column: self.next,
                message: "fewer fields than columns".into(),
            })
        }
    }
}

/// Serializes one field value into its column.
struct FieldSer<'a>(&'a mut Buf);

/// `FieldSer` methods for numbers: their little-endian bytes.
macro_rules! fixed_width {
    ($($f:ident: $t:ty),* $(,)?) => {
        $(fn $f(self, v: $t) -> Result<(), EncodeError> {
            self.0.fixed(&v.to_le_bytes()).map_err(wrong)
        })*
    };
}

fn wrong(why: String) -> EncodeError {
    ser::Error::custom(why)
}

impl<'a> ser::Serializer for FieldSer<'a> {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = SeqSer<'a>;
    type SerializeTuple = Impossible<(), EncodeError>;
    type SerializeTupleStruct = Impossible<(), EncodeError>;
    type SerializeTupleVariant = Impossible<(), EncodeError>;
    type SerializeMap = Impossible<(), EncodeError>;
    type SerializeStruct = Impossible<(), EncodeError>;
    type SerializeStructVariant = Impossible<(), EncodeError>;

    fn serialize_bool(self, v: bool) -> Result<(), EncodeError> {
        self.0.fixed(&[u8::from(v)]).map_err(wrong)
    }
    fixed_width!(
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64,
        serialize_f32: f32,
        serialize_f64: f64,
    );
    fn serialize_char(self, v: char) -> Result<(), EncodeError> {
        self.0.str(v.encode_utf8(&mut [0; 4])).map_err(wrong)
    }
    fn serialize_str(self, v: &str) -> Result<(), EncodeError> {
        self.0.str(v).map_err(wrong)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), EncodeError> {
        Err(wrong("bytes are not encoded".into()))
    }
    fn serialize_none(self) -> Result<(), EncodeError> {
        self.0.null().map_err(wrong)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<(), EncodeError> {
        // `Nullable` columns mark non-null values as their value arrives.
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), EncodeError> {
        Err(wrong("a unit does not fit".into()))
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), EncodeError> {
        Err(wrong("a unit does not fit".into()))
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), EncodeError> {
        Err(wrong("an enum variant does not fit".into()))
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), EncodeError> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), EncodeError> {
        Err(wrong("an enum variant does not fit".into()))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<SeqSer<'a>, EncodeError> {
        match self.0 {
            Buf::Array { offsets, inner } => Ok(SeqSer {
                offsets,
                inner,
                count: 0,
            }),
            _ => Err(wrong("an array does not fit".into())),
        }
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, EncodeError> {
        Err(wrong("a tuple does not fit".into()))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, EncodeError> {
        Err(wrong("a tuple does not fit".into()))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, EncodeError> {
        Err(wrong("an enum variant does not fit".into()))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, EncodeError> {
        Err(wrong("a map does not fit".into()))
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, EncodeError> {
        Err(wrong("a struct does not fit".into()))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, EncodeError> {
        Err(wrong("an enum variant does not fit".into()))
    }
}

/// The elements of one `Array` value.
struct SeqSer<'a> {
    offsets: &'a mut Vec<u64>,
    inner: &'a mut Box<Buf>,
    count: u64,
}

impl ser::SerializeSeq for SeqSer<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), EncodeError> {
        v.serialize(FieldSer(self.inner))?;
        self.count += 1;
        Ok(())
    }
    fn end(self) -> Result<(), EncodeError> {
        let last = self.offsets.last().copied().unwrap_or(0);
        self.offsets.push(last + self.count);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct R {
        s: &'static str,
        lc: &'static str,
        n: u32,
        e: i8,
        a: Vec<u32>,
        o: Option<f32>,
    }

    fn layout() -> Layout {
        let types: HashMap<String, String> = [
            ("s", "String"),
            ("lc", "LowCardinality(String)"),
            ("n", "UInt32"),
            ("e", "Enum8('a' = 1, 'b' = 2)"),
            ("a", "Array(UInt32)"),
            ("o", "Nullable(Float32)"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        Layout::new(&["s", "lc", "n", "e", "a", "o"], &types).expect("supported")
    }

    #[test]
    fn a_block_has_every_column_in_native_layout() {
        let rows = [
            R {
                s: "x",
                lc: "k1",
                n: 7,
                e: 2,
                a: vec![1, 2],
                o: Some(1.5),
            },
            R {
                s: "",
                lc: "k1",
                n: 8,
                e: 1,
                a: vec![],
                o: None,
            },
        ];
        let mut out = Vec::new();
        layout().encode(rows.iter(), &mut out).expect("encodes");
        let mut want = vec![6u8, 2];
        let col = |w: &mut Vec<u8>, name: &str, ty: &str, data: &[u8]| {
            string(w, name.as_bytes());
            string(w, ty.as_bytes());
            w.extend_from_slice(data);
        };
        col(&mut want, "s", "String", b"\x01x\x00");
        let mut lc = Vec::new();
        lc.extend_from_slice(&1u64.to_le_bytes());
        lc.extend_from_slice(&(1u64 << 9).to_le_bytes());
        lc.extend_from_slice(&1u64.to_le_bytes());
        lc.extend_from_slice(b"\x02k1");
        lc.extend_from_slice(&2u64.to_le_bytes());
        lc.extend_from_slice(&[0, 0]);
        col(&mut want, "lc", "LowCardinality(String)", &lc);
        col(&mut want, "n", "UInt32", &[7, 0, 0, 0, 8, 0, 0, 0]);
        col(&mut want, "e", "Enum8('a' = 1, 'b' = 2)", &[2, 1]);
        let mut a = Vec::new();
        for v in [2u64, 2] {
            a.extend_from_slice(&v.to_le_bytes());
        }
        for v in [1u32, 2] {
            a.extend_from_slice(&v.to_le_bytes());
        }
        col(&mut want, "a", "Array(UInt32)", &a);
        let mut o = vec![0u8, 1];
        o.extend_from_slice(&1.5f32.to_le_bytes());
        o.extend_from_slice(&0f32.to_le_bytes());
        col(&mut want, "o", "Nullable(Float32)", &o);
        assert_eq!(out, want);
    }

    #[test]
    fn a_dictionary_column_numbers_each_key_once_whatever_the_order() {
        // Repeats, a key after another, a prefix of the last key, the empty
        // string, a key again after others: the last-key shortcut must give
        // what the dictionary gives.
        let values = ["k1", "k1", "k2", "k1", "", "k", "k", "k1", "k2", "k2"];
        let mut buf = Buf::new(&Enc::LowCard, 0);
        for v in values {
            buf.str(v).expect("a string fits");
        }
        let mut out = Vec::new();
        buf.finish(&mut out);
        let mut want = Vec::new();
        want.extend_from_slice(&1u64.to_le_bytes());
        want.extend_from_slice(&(1u64 << 9).to_le_bytes());
        want.extend_from_slice(&4u64.to_le_bytes());
        want.extend_from_slice(b"\x02k1\x02k2\x00\x01k");
        want.extend_from_slice(&(values.len() as u64).to_le_bytes());
        want.extend_from_slice(&[0, 0, 1, 0, 2, 3, 3, 0, 1, 1]);
        assert_eq!(out, want);
    }

    #[test]
    fn mismatches_fail_and_unknown_types_have_no_layout() {
        #[derive(serde::Serialize)]
        struct Wide {
            n: u64,
        }
        let types: HashMap<String, String> = [("n".to_owned(), "UInt32".to_owned())]
            .into_iter()
            .collect();
        let l = Layout::new(&["n"], &types).expect("supported");
        let err = l
            .encode([Wide { n: 1 }].iter(), &mut Vec::new())
            .expect_err("u64 into UInt32");
        assert!(err.to_string().contains("column n"), "{err}");
        let types: HashMap<String, String> = [("n".to_owned(), "Decimal(9, 2)".to_owned())]
            .into_iter()
            .collect();
        assert!(Layout::new(&["n"], &types).is_none());
        assert!(Layout::new(&["missing"], &types).is_none());
    }
}
