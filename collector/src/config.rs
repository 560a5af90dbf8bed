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
    /// ClickHouse cluster (a `remote_servers` name) to create the schema on:
    /// sharded replicated `*_local` tables under Distributed ones, sharded by
    /// job (docs/deployment.md#clickhouse-cluster). Empty: one server.
    pub clickhouse_cluster: String,
    /// Write batching.
    pub writer: WriterConfig,
    /// Live analytics: step assembly, stragglers, hangs.
    pub stream: StreamConfig,
    /// Bearer token required on gRPC ingest and on `/api/*` (empty: no
    /// authentication; `/healthz` and `/metrics` stay open for probes).
    pub auth_token: String,
    /// PEM certificate chain the collector presents on both listeners
    /// (empty: plaintext).
    pub tls_cert_path: String,
    /// PEM private key of `tls_cert_path`.
    pub tls_key_path: String,
    /// PEM CA agents' client certificates must be signed by: mutual TLS on
    /// gRPC ingest (empty: agents present no certificate).
    pub tls_ca_path: String,
    /// How often the certificate files are checked for changes, in seconds
    /// (SIGHUP reloads at once).
    pub tls_reload_interval_secs: u64,
    /// Serve plaintext on a non-loopback address. Without TLS the collector
    /// refuses to listen anywhere but loopback unless this is set.
    pub allow_insecure: bool,
    /// OTLP/gRPC endpoint metrics are exported to (empty: no export).
    pub otlp_endpoint: String,
    /// How often metrics are exported over OTLP.
    pub otlp_export_interval_ms: u64,
    /// Alert rules, lifecycle and sinks.
    pub alerts: AlertsConfig,
    /// Kineto traces on request and automatic ones (`[traces]`).
    pub traces: crate::traces::TracesConfig,
    /// Job ownership among several collectors (`[ownership]`).
    pub ownership: crate::ownership::OwnershipConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            grpc_listen_addr: "127.0.0.1:7700".into(),
            http_listen_addr: "127.0.0.1:7701".into(),
            max_message_bytes: 16 * 1024 * 1024,
            retention_days: 14,
            retention_check_interval_secs: 3600,
            dedupe_max_sessions: 100_000,
            clickhouse: StoreConfig::default(),
            clickhouse_cluster: String::new(),
            writer: WriterConfig::default(),
            stream: StreamConfig::default(),
            auth_token: String::new(),
            tls_cert_path: String::new(),
            tls_key_path: String::new(),
            tls_ca_path: String::new(),
            tls_reload_interval_secs: 10,
            allow_insecure: false,
            otlp_endpoint: String::new(),
            otlp_export_interval_ms: 10_000,
            alerts: AlertsConfig::default(),
            traces: crate::traces::TracesConfig::default(),
            ownership: crate::ownership::OwnershipConfig::default(),
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
        if self.writer.batch_max_rows == 0
            || self.writer.queue_capacity == 0
            || self.writer.queue_max_rows == 0
        {
            return bad(
                "writer.batch_max_rows, writer.queue_capacity and writer.queue_max_rows must be >= 1",
            );
        }
        if self.writer.batch_max_rows > crate::store::MAX_WINDOW_ROWS {
            return bad(&format!(
                "writer.batch_max_rows = {} is over {}: ClickHouse would commit an INSERT that large in several parts, and a failure between them could not be retried without storing rows twice",
                self.writer.batch_max_rows,
                crate::store::MAX_WINDOW_ROWS
            ));
        }
        self.stream
            .straggler
            .policy()
            .map_err(ConfigError::Invalid)?;
        self.alerts.validate().map_err(ConfigError::Invalid)?;
        self.traces.validate().map_err(ConfigError::Invalid)?;
        if self.otlp_export_interval_ms == 0 {
            return bad("otlp_export_interval_ms must be >= 1");
        }
        self.validate_transport()?;
        if self.clickhouse.database.is_empty()
            || !self
                .clickhouse
                .database
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return bad("clickhouse.database must be a non-empty name of [A-Za-z0-9_]");
        }
        if !self
            .clickhouse_cluster
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return bad("clickhouse_cluster must be empty (one server) or a name of [A-Za-z0-9_]");
        }
        Ok(())
    }

    /// The TLS files, when TLS is configured.
    pub fn tls_paths(&self) -> Option<rankscope_proto::tls::TlsPaths> {
        let p = rankscope_proto::tls::TlsPaths::from_config(
            &self.tls_cert_path,
            &self.tls_key_path,
            &self.tls_ca_path,
        );
        p.any().then_some(p)
    }

    /// TLS options that fit together, and no plaintext listener off loopback
    /// unless `allow_insecure` says so.
    fn validate_transport(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.tls_cert_path.is_empty() != self.tls_key_path.is_empty() {
            return bad("tls_cert_path and tls_key_path must be set together".into());
        }
        if !self.tls_ca_path.is_empty() && self.tls_cert_path.is_empty() {
            return bad("tls_ca_path (mutual TLS) needs tls_cert_path and tls_key_path too".into());
        }
        if self.tls_reload_interval_secs == 0 {
            return bad("tls_reload_interval_secs must be >= 1".into());
        }
        if self.tls_cert_path.is_empty() && !self.allow_insecure {
            for (key, addr) in [
                ("grpc_listen_addr", &self.grpc_listen_addr),
                ("http_listen_addr", &self.http_listen_addr),
            ] {
                if !rankscope_proto::tls::is_loopback_listen_addr(addr) {
                    return bad(format!(
                        "{key} {addr} is not a loopback address and TLS is not configured: \
                         set tls_cert_path and tls_key_path, or allow_insecure = true to serve \
                         plaintext on the network anyway"
                    ));
                }
            }
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
        assert!(cfg.tls_paths().is_some_and(|p| p.ca.is_some()));
    }

    #[test]
    fn plaintext_off_loopback_needs_allow_insecure() {
        let err = Config::from_toml("grpc_listen_addr = \"0.0.0.0:7700\"", "f").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("grpc_listen_addr 0.0.0.0:7700"), "{msg}");
        assert!(msg.contains("allow_insecure"), "{msg}");
        let err = Config::from_toml("http_listen_addr = \"10.1.2.3:7701\"", "f").unwrap_err();
        assert!(err.to_string().contains("http_listen_addr"), "{err}");
        let ok = Config::from_toml(
            "grpc_listen_addr = \"0.0.0.0:7700\"\nallow_insecure = true",
            "f",
        )
        .unwrap();
        assert!(ok.allow_insecure);
        let tls = "grpc_listen_addr = \"0.0.0.0:7700\"\ntls_cert_path = \"c.pem\"\ntls_key_path = \"k.pem\"";
        assert_eq!(
            Config::from_toml(tls, "f")
                .unwrap()
                .tls_paths()
                .unwrap()
                .cert
                .unwrap()
                .to_str(),
            Some("c.pem")
        );
    }

    #[test]
    fn tls_options_must_fit_together() {
        for (toml, expect) in [
            ("tls_cert_path = \"c.pem\"", "set together"),
            ("tls_key_path = \"k.pem\"", "set together"),
            ("tls_ca_path = \"ca.pem\"", "needs tls_cert_path"),
        ] {
            let err = Config::from_toml(toml, "f").unwrap_err();
            assert!(err.to_string().contains(expect), "{toml}: {err}");
        }
    }

    #[test]
    fn a_window_larger_than_one_clickhouse_block_is_rejected() {
        let err = Config::from_toml("[writer]\nbatch_max_rows = 1000001", "f").unwrap_err();
        assert!(
            err.to_string().contains("writer.batch_max_rows = 1000001"),
            "{err}"
        );
        let ok = Config::from_toml("[writer]\nbatch_max_rows = 1000000", "f").unwrap();
        assert_eq!(ok.writer.batch_max_rows, 1_000_000);
    }

    #[test]
    fn bad_cluster_name_rejected() {
        let err = Config::from_toml("clickhouse_cluster = \"c; DROP\"", "f").unwrap_err();
        assert!(err.to_string().contains("clickhouse_cluster"), "{err}");
        let ok = Config::from_toml("clickhouse_cluster = \"prod_2x2\"", "f").unwrap();
        assert_eq!(ok.clickhouse_cluster, "prod_2x2");
        assert!(Config::default().clickhouse_cluster.is_empty());
    }

    #[test]
    fn bad_database_name_rejected() {
        let err = Config::from_toml("[clickhouse]\ndatabase = \"x; DROP\"", "f").unwrap_err();
        assert!(err.to_string().contains("clickhouse.database"), "{err}");
    }
}
