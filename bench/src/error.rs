//! The one error type of the benchmark library.
//!
//! Every section fails for the same few reasons (a process, a file, an HTTP
//! or gRPC exchange, ClickHouse, a deadline), so the modules share this enum;
//! messages name what was being done.

use std::path::PathBuf;

/// Why a benchmark step failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} failed ({status}): {detail}")]
    Process {
        program: String,
        status: String,
        detail: String,
    },
    #[error("HTTP {what}: {detail}")]
    Http { what: String, detail: String },
    #[error("ClickHouse: {0}")]
    ClickHouse(String),
    #[error("gRPC {what}: {detail}")]
    Grpc { what: String, detail: String },
    #[error("timed out after {secs} s waiting for {what}")]
    Timeout { what: String, secs: u64 },
    #[error("cannot parse {what}: {detail}")]
    Parse { what: String, detail: String },
    #[error("missing {what} at {path}")]
    Missing { what: String, path: PathBuf },
    #[error("unexpected result: {0}")]
    Check(String),
}

impl BenchError {
    /// `map_err` helper for I/O errors.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
        let context = context.into();
        move |source| BenchError::Io { context, source }
    }

    /// A parse failure of `what`.
    pub fn parse(what: impl Into<String>, detail: impl ToString) -> BenchError {
        BenchError::Parse {
            what: what.into(),
            detail: detail.to_string(),
        }
    }
}

impl From<rankscope_testkit::TestkitError> for BenchError {
    fn from(e: rankscope_testkit::TestkitError) -> Self {
        BenchError::ClickHouse(e.to_string())
    }
}

impl From<clickhouse::error::Error> for BenchError {
    fn from(e: clickhouse::error::Error) -> Self {
        BenchError::ClickHouse(e.to_string())
    }
}
