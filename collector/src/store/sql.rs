//! Reads from `collector/queries/*.sql` with their file name attached, and the check of
//! their result types on servers that can report them.
//!
//! In: a [`QueryFile`] (name + SQL, from [`query_file!`]) and `?` arguments. Out: typed
//! rows, or a `clickhouse` error whose text names the query file.
//!
//! Invariant: on ClickHouse 22 and later ([`TYPED_SINCE_MAJOR`]; asked once per
//! [`Store`] by [`Store::detect_server`]) every read is `RowBinaryWithNamesAndTypes` and
//! the `clickhouse` crate compares each column's type with the Rust field that reads it:
//! a difference (a `Nullable` where a plain value is expected, `Int64` for `u64`, ...)
//! is an error `schema mismatch: <file>.sql: ...` naming the column and both types,
//! never a misread. ClickHouse 18.16 cannot send the header, so reads there stay plain
//! `RowBinary` (exactly as fast as before); the chDB test tier (ClickHouse 26.x,
//! `testkit/tests/modern_clickhouse.rs`) runs every query typed, so a query whose types
//! drift between versions fails a test.

use clickhouse::error::Error;
use clickhouse::query::{Query, RowCursor};
use clickhouse::sql::Bind;
use clickhouse::{RowOwned, RowRead};

use super::{Store, StoreError};

/// The first ClickHouse major version whose reads are type-checked (it answers
/// `FORMAT RowBinaryWithNamesAndTypes` with the header the crate validates).
pub const TYPED_SINCE_MAJOR: u32 = 22;

/// A read query and the file it comes from.
#[derive(Debug, Clone, Copy)]
pub struct QueryFile {
    /// File name under `collector/queries/`, e.g. `goodput_job.sql`.
    pub name: &'static str,
    /// Its text.
    pub sql: &'static str,
}

/// `query_file!("goodput_job")`: the [`QueryFile`] of `collector/queries/goodput_job.sql`.
macro_rules! query_file {
    ($name:literal) => {
        $crate::store::sql::QueryFile {
            name: concat!($name, ".sql"),
            sql: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/queries/",
                $name,
                ".sql"
            )),
        }
    };
}
pub(crate) use query_file;

/// A read being built: `?` bound in order, then fetched.
#[must_use]
pub struct Read {
    file: &'static str,
    query: Query,
}

/// A row cursor whose errors name the query file.
pub struct Cursor<T> {
    file: &'static str,
    inner: RowCursor<T>,
}

impl Store {
    /// Starts a read of `file` (with type checks when [`Store::detect_server`] found a
    /// server that reports types).
    pub fn read(&self, file: QueryFile) -> Read {
        self.read_sql(file.name, file.sql)
    }

    /// [`Store::read`] of SQL made from query file `name` (e.g. a table name put in).
    pub fn read_sql(&self, name: &'static str, sql: &str) -> Read {
        let client = if self.typed_reads() == Some(true) {
            &self.checked
        } else {
            &self.client
        };
        Read {
            file: name,
            query: client.query(sql),
        }
    }

    /// Whether reads are type-checked: `None` until [`Store::detect_server`] ran.
    pub fn typed_reads(&self) -> Option<bool> {
        self.typed.get().copied()
    }

    /// Asks the server's version once per store (clones share the answer) and turns
    /// type-checked reads on from ClickHouse [`TYPED_SINCE_MAJOR`]. [`Store::ping`] and
    /// [`Store::migrate`] call it.
    pub async fn detect_server(&self) -> Result<(), StoreError> {
        if self.typed.get().is_some() {
            return Ok(());
        }
        let version: String = self
            .server
            .query("SELECT version()")
            .fetch_one()
            .await
            .map_err(StoreError::query("server version"))?;
        let typed = major_version(&version).is_some_and(|m| m >= TYPED_SINCE_MAJOR);
        if self.typed.set(typed).is_ok() {
            tracing::info!(%version, typed_reads = typed, "ClickHouse server");
        }
        Ok(())
    }
}

/// `26` of `26.9.2.1`; `None` when the text does not start with a number.
pub fn major_version(version: &str) -> Option<u32> {
    version.trim().split('.').next()?.parse().ok()
}

/// Puts the query file's name into a type error's text.
fn named(file: &'static str) -> impl Fn(Error) -> Error {
    move |e| match e {
        Error::SchemaMismatch(msg) => Error::SchemaMismatch(format!("{file}: {msg}")),
        other => other,
    }
}

impl Read {
    /// Binds the next `?`.
    pub fn bind(self, value: impl Bind) -> Read {
        Read {
            file: self.file,
            query: self.query.bind(value),
        }
    }

    pub async fn fetch_all<T: RowOwned + RowRead>(self) -> Result<Vec<T>, Error> {
        self.query.fetch_all().await.map_err(named(self.file))
    }

    pub async fn fetch_one<T: RowOwned + RowRead>(self) -> Result<T, Error> {
        self.query.fetch_one().await.map_err(named(self.file))
    }

    pub async fn fetch_optional<T: RowOwned + RowRead>(self) -> Result<Option<T>, Error> {
        self.query.fetch_optional().await.map_err(named(self.file))
    }

    pub fn fetch<T: RowOwned + RowRead>(self) -> Result<Cursor<T>, Error> {
        Ok(Cursor {
            file: self.file,
            inner: self.query.fetch().map_err(named(self.file))?,
        })
    }

    /// Runs a statement without rows (no types to check).
    pub async fn execute(self) -> Result<(), Error> {
        self.query.execute().await
    }

    /// Sets a ClickHouse setting for this query only.
    pub fn with_setting(self, name: impl Into<String>, value: impl Into<String>) -> Read {
        Read {
            file: self.file,
            query: self.query.with_setting(name, value),
        }
    }
}

impl<T: RowOwned + RowRead> Cursor<T> {
    pub async fn next(&mut self) -> Result<Option<T>, Error> {
        let file = self.file;
        self.inner.next().await.map_err(named(file))
    }
}

/// A read on a task of its own, stopped when dropped unawaited (the read
/// that needed it failed).
pub struct ReadTask<T>(tokio::task::JoinHandle<Result<T, StoreError>>);

impl<T: Send + 'static> ReadTask<T> {
    pub fn spawn(
        read: impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Self {
        Self(tokio::spawn(read))
    }

    /// The read's result (a panic in it goes on here).
    pub async fn joined(mut self) -> Result<T, StoreError> {
        match (&mut self.0).await {
            Ok(r) => r,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => Err(StoreError::ChangedWhileRead(
                    "a read was cancelled: the collector is stopping".into(),
                )),
            },
        }
    }
}

impl<T> Drop for ReadTask<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_versions() {
        assert_eq!(major_version("18.16.1"), Some(18));
        assert_eq!(major_version("26.9.2.1"), Some(26));
        assert_eq!(major_version(" 22.3 "), Some(22));
        assert_eq!(major_version("x"), None);
    }

    #[test]
    fn type_errors_name_the_file() {
        let e = named("goodput_job.sql")(Error::SchemaMismatch("column world_size".into()));
        assert_eq!(
            e.to_string(),
            "schema mismatch: goodput_job.sql: column world_size"
        );
        let other = named("x.sql")(Error::RowNotFound);
        assert!(!other.to_string().contains("x.sql"));
    }
}
