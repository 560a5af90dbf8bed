//! Collector configuration: defaults < TOML file < command-line flags (which
//! may come from `RANKSCOPE_*` environment variables through clap).
//!
//! Unknown keys are errors (`deny_unknown_fields`); every option names its
//! unit.

use serde::{Deserialize, Serialize};

use crate::alert::AlertsConfig;
use crate::store::{StoreConfig, WriterConfig};
use crate::stream::StreamConfig;

/// Configuration of `rankscope-collector`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address of the agent-facing gRPC ingest service.
    pub grpc_listen_addr: String,
    /// Address of the HTTP JSON API (`/api/v1/...`, `/healthz`, `/metrics`).
    pub http_listen_addr: String,
    /// Largest accepted agent batch, in bytes; larger ones get
    /// RESOURCE_EXHAUSTED.
    pub max_message_bytes: usize,
    /// Days of data kept; older day partitions are dropped. 0 keeps forever.
    pub retention_days: u32,
    /// How often the retention check runs, in seconds.
    pub retention_check_interval_secs: u64,
    /// Most agent sessions tracked for duplicate detection.
    pub dedupe_max_sessions: usize,
    /// ClickHouse connection.
    pub clickhouse: StoreConfig,
    /// Write batching.
    pub writer: WriterConfig,
    /// Live analytics: step assembly, stragglers, hangs.
    pub stream: StreamConfig,
    /// Bearer token required on gRPC ingest and on `/api/*` (empty: no
    /// authentication; `/healthz` and `/metrics` stay open for probes).
    pub auth_token: String,
    /// OTLP/gRPC endpoint metrics are exported to (empty: no export).
    pub otlp_endpoint: String,
    /// How often metrics are exported over OTLP.
    pub otlp_export_interval_ms: u64,
    /// Alert rules, lifecycle and sinks.
    pub alerts: AlertsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            grpc_listen_addr: "0.0.0.0:7700".into(),
            http_listen_addr: "0.0.0.0:7701".into(),
            max_message_bytes: 16 * 1024 * 1024,
            retention_days: 14,
            retention_check_interval_secs: 3600,
            dedupe_max_sessions: 100_000,
            clickhouse: StoreConfig::default(),
            writer: WriterConfig::default(),
            stream: StreamConfig::default(),
            auth_token: String::new(),
            otlp_endpoint: String::new(),
            otlp_export_interval_ms: 10_000,
            alerts: AlertsConfig::default(),
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("invalid config: {0}")]
    Invalid(String),
}

impl Config {
    /// Parses a TOML document.
    pub fn from_toml(text: &str, path: &str) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(e),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a TOML file.
    pub fn load(path: &str) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.max_message_bytes < 1024 {
            return bad("max_message_bytes must be >= 1024");
        }
        if self.retention_check_interval_secs == 0 {
            return bad("retention_check_interval_secs must be >= 1");
        }
        if self.writer.batch_max_rows == 0 || self.writer.queue_capacity == 0 {
            return bad("writer.batch_max_rows and writer.queue_capacity must be >= 1");
        }
        self.stream
            .straggler
            .policy()
            .map_err(ConfigError::Invalid)?;
        self.alerts.validate().map_err(ConfigError::Invalid)?;
        if self.otlp_export_interval_ms == 0 {
            return bad("otlp_export_interval_ms must be >= 1");
        }
        if self.clickhouse.database.is_empty()
            || !self
                .clickhouse
                .database
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return bad("clickhouse.database must be a non-empty name of [A-Za-z0-9_]");
        }
        Ok(())
    }

    /// The configuration as TOML (what `gen-config` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_through_toml() {
        let d = Config::default();
        assert_eq!(Config::from_toml(&d.to_toml(), "gen").unwrap(), d);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::from_toml("grpc_listen = \"x\"", "f.toml").unwrap_err();
        assert!(err.to_string().contains("grpc_listen"), "{err}");
    }

    #[test]
    fn example_configs_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
        let path = format!("{dir}/collector.example.toml");
        let cfg = Config::load(&path).unwrap();
        assert_eq!(cfg.grpc_listen_addr, "0.0.0.0:7700");
    }

    #[test]
    fn bad_database_name_rejected() {
        let err = Config::from_toml("[clickhouse]\ndatabase = \"x; DROP\"", "f").unwrap_err();
        assert!(err.to_string().contains("clickhouse.database"), "{err}");
    }
}
