//! Schema migrations: the numbered files in `collector/schema/`, applied in order at
//! start-up and recorded in `schema_migrations`.
//!
//! In: the migration files compiled into the binary ([`MIGRATIONS`]). Out: the versions
//! applied by this call.
//!
//! File format: `NNNN_name.sql`, statements separated by a `;` at the end of a line;
//! lines whose first non-blank characters are `--` are comments and are not sent.
//! Statements must be idempotent (`CREATE ... IF NOT EXISTS`): a migration interrupted
//! between statements is run again from its first statement.
//!
//! Invariants: history is append-only. An applied migration whose file changed makes
//! `migrate` fail (checksums are recorded), and `tests::checksums_are_frozen` pins every
//! file's checksum so an edit is caught before it ships. A version recorded in the
//! database but unknown to this binary (a newer collector ran) is logged and left alone.
//!
//! Cluster mode ([`Store::with_cluster`]): every statement, the bookkeeping table's
//! included, is rewritten by [`super::cluster::ClusterSchema`] before anything runs (a
//! statement without a cluster form fails start-up with nothing applied), then run
//! `ON CLUSTER`. `schema_migrations` is then a Distributed table over a replicated one,
//! so every collector of the cluster, whichever server it talks to, sees the same
//! history. Collectors migrating at once both run the idempotent statements (the
//! distributed DDL queue serialises them per server) and both record the version;
//! readers group by version.

use clickhouse::sql::Identifier;
use clickhouse::Row;
use serde::{Deserialize, Serialize};

use super::cluster::ClusterSchema;
use super::sql::{query_file, QueryFile};
use super::{Store, StoreError};

/// One migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in version order. Append only.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_events",
        sql: include_str!("../../schema/0001_events.sql"),
    },
    Migration {
        version: 2,
        name: "0002_samples",
        sql: include_str!("../../schema/0002_samples.sql"),
    },
    Migration {
        version: 3,
        name: "0003_analytics",
        sql: include_str!("../../schema/0003_analytics.sql"),
    },
    Migration {
        version: 4,
        name: "0004_telemetry",
        sql: include_str!("../../schema/0004_telemetry.sql"),
    },
    Migration {
        version: 5,
        name: "0005_alerts",
        sql: include_str!("../../schema/0005_alerts.sql"),
    },
    Migration {
        version: 6,
        name: "0006_kernel_launches",
        sql: include_str!("../../schema/0006_kernel_launches.sql"),
    },
    Migration {
        version: 7,
        name: "0007_traces",
        sql: include_str!("../../schema/0007_traces.sql"),
    },
    Migration {
        version: 8,
        name: "0008_trace_ops",
        sql: include_str!("../../schema/0008_trace_ops.sql"),
    },
    Migration {
        version: 9,
        name: "0009_ingest_intents",
        sql: include_str!("../../schema/0009_ingest_intents.sql"),
    },
    Migration {
        version: 10,
        name: "0010_operator_stats",
        sql: include_str!("../../schema/0010_operator_stats.sql"),
    },
    Migration {
        version: 11,
        name: "0011_memory_stats",
        sql: include_str!("../../schema/0011_memory_stats.sql"),
    },
    Migration {
        version: 12,
        name: "0012_kernel_configs",
        sql: include_str!("../../schema/0012_kernel_configs.sql"),
    },
    Migration {
        version: 13,
        name: "0013_operator_shapes",
        sql: include_str!("../../schema/0013_operator_shapes.sql"),
    },
    Migration {
        version: 14,
        name: "0014_fleet_rollup",
        sql: include_str!("../../schema/0014_fleet_rollup.sql"),
    },
    Migration {
        version: 15,
        name: "0015_job_owners",
        sql: include_str!("../../schema/0015_job_owners.sql"),
    },
    Migration {
        version: 16,
        name: "0016_gpu_errors",
        sql: include_str!("../../schema/0016_gpu_errors.sql"),
    },
    Migration {
        version: 17,
        name: "0017_straggler_gains",
        sql: include_str!("../../schema/0017_straggler_gains.sql"),
    },
    Migration {
        version: 18,
        name: "0018_overview_ranks",
        sql: include_str!("../../schema/0018_overview_ranks.sql"),
    },
];

/// Version of the migration whose rollup is filled from existing rows right
/// after it is applied (queries/fleet_rollup_backfill.sql).
const FLEET_ROLLUP_VERSION: u32 = 14;
const FLEET_ROLLUP_BACKFILL_SQL: QueryFile = query_file!("fleet_rollup_backfill");

const CREATE_TABLE_SQL: &str = include_str!("../../queries/schema_migrations.sql");
const APPLIED_SQL: QueryFile = query_file!("applied_migrations");

impl Migration {
    /// Hex FNV-1a 64 of the file text: cheap, dependency-free, enough to detect edits.
    pub fn checksum(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.sql.bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("fnv1a64:{hash:016x}")
    }

    /// The statements of the file, comments removed, without the trailing `;`.
    pub fn statements(&self) -> Vec<String> {
        split_statements(self.sql)
    }
}

/// Splits a migration file into statements (see the module docs for the format).
pub fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        if line.trim_start().starts_with("--") {
            continue;
        }
        let trimmed = line.trim_end();
        if let Some(last) = trimmed.strip_suffix(';') {
            current.push_str(last);
            push_statement(&mut out, &mut current);
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    push_statement(&mut out, &mut current);
    out
}

fn push_statement(out: &mut Vec<String>, current: &mut String) {
    let statement = current.trim();
    if !statement.is_empty() {
        out.push(statement.to_string());
    }
    current.clear();
}

#[derive(Debug, Row, Serialize)]
struct MigrationRow<'a> {
    version: u32,
    name: &'a str,
    checksum: &'a str,
    applied_at_ns: u64,
}

#[derive(Debug, Row, Deserialize)]
struct AppliedRow {
    version: u32,
    name: String,
    checksums: Vec<String>,
}

/// The statements to run: the bookkeeping table's, then each migration's, one list per
/// statement of its file (a cluster rewrite turns one statement into several).
#[derive(Debug)]
struct Plan {
    bookkeeping: Vec<String>,
    migrations: Vec<Vec<Vec<String>>>,
}

fn plan(store: &Store, migrations: &[Migration]) -> Result<Plan, StoreError> {
    let Some(cluster) = store.cluster() else {
        return Ok(Plan {
            bookkeeping: vec![CREATE_TABLE_SQL.to_string()],
            migrations: migrations
                .iter()
                .map(|m| m.statements().into_iter().map(|s| vec![s]).collect())
                .collect(),
        });
    };
    let mut schema = ClusterSchema::new(cluster, store.database());
    let error = |version: u32, name: &str, index: usize| {
        let (name, cluster) = (name.to_string(), cluster.to_string());
        move |e: super::cluster::RewriteError| StoreError::ClusterRewrite {
            version,
            name,
            index,
            cluster,
            reason: e.to_string(),
        }
    };
    let mut bookkeeping = Vec::new();
    for (index, statement) in split_statements(CREATE_TABLE_SQL).iter().enumerate() {
        bookkeeping.extend(schema.rewrite(statement).map_err(error(
            0,
            "schema_migrations",
            index,
        ))?);
    }
    let mut planned = Vec::new();
    for m in migrations {
        let mut statements = Vec::new();
        for (index, statement) in m.statements().iter().enumerate() {
            statements.push(
                schema
                    .rewrite(statement)
                    .map_err(error(m.version, m.name, index))?,
            );
        }
        planned.push(statements);
    }
    Ok(Plan {
        bookkeeping,
        migrations: planned,
    })
}

/// Runs one DDL statement; on a cluster it waits for every server's answer before the
/// HTTP status is sent, so a server's failure is never hidden behind a 200.
async fn run_ddl(store: &Store, statement: &str) -> Result<(), clickhouse::error::Error> {
    let mut query = store.client().query_raw(statement);
    if store.cluster().is_some() {
        query = query.with_setting("wait_end_of_query", "1");
    }
    query.execute().await
}

/// Creates the database and applies every migration not yet recorded.
pub(super) async fn migrate(
    store: &Store,
    migrations: &[Migration],
) -> Result<Vec<u32>, StoreError> {
    let plan = plan(store, migrations)?;
    match store.cluster() {
        None => store
            .server_client()
            .query("CREATE DATABASE IF NOT EXISTS ?")
            .bind(Identifier(store.database())),
        Some(cluster) => store
            .server_client()
            .query_raw(&ClusterSchema::new(cluster, store.database()).create_database())
            .with_setting("wait_end_of_query", "1"),
    }
    .execute()
    .await
    .map_err(StoreError::query("create database"))?;
    // Before any DDL (a wrong database is left untouched) and after the last.
    super::cluster::check_layout(store).await?;
    let client = store.client();
    for statement in &plan.bookkeeping {
        run_ddl(store, statement)
            .await
            .map_err(StoreError::query("create schema_migrations"))?;
    }
    let applied: Vec<AppliedRow> = store
        .read(APPLIED_SQL)
        .fetch_all()
        .await
        .map_err(StoreError::query("read schema_migrations"))?;

    for row in &applied {
        if !migrations.iter().any(|m| m.version == row.version) {
            tracing::warn!(version = row.version, name = %row.name, "database has a migration this collector does not know; a newer collector ran here");
        }
    }
    let mut done = Vec::new();
    for (migration, planned) in migrations.iter().zip(&plan.migrations) {
        let checksum = migration.checksum();
        if let Some(row) = applied.iter().find(|r| r.version == migration.version) {
            if let Some(other) = row.checksums.iter().find(|c| **c != checksum) {
                return Err(StoreError::ChecksumMismatch {
                    version: migration.version,
                    name: migration.name.to_string(),
                    recorded: other.clone(),
                    current: checksum,
                });
            }
            continue;
        }
        for (index, statements) in planned.iter().enumerate() {
            for statement in statements {
                run_ddl(store, statement)
                    .await
                    .map_err(|source| StoreError::Migration {
                        version: migration.version,
                        name: migration.name.to_string(),
                        index,
                        source,
                    })?;
            }
        }
        let mut insert = client
            .insert::<MigrationRow<'_>>("schema_migrations")
            .await
            .map_err(StoreError::query("record migration"))?;
        let row = MigrationRow {
            version: migration.version,
            name: migration.name,
            checksum: &checksum,
            applied_at_ns: super::now_ns(),
        };
        insert
            .write(&row)
            .await
            .map_err(StoreError::query("record migration"))?;
        insert
            .end()
            .await
            .map_err(StoreError::query("record migration"))?;
        if migration.version == FLEET_ROLLUP_VERSION {
            // The view sees only new INSERTs: fill the rollup from the rows
            // already stored (idempotent states; rows written between the view
            // and this fill are counted once either way).
            store
                .read(FLEET_ROLLUP_BACKFILL_SQL)
                .execute()
                .await
                .map_err(StoreError::query(FLEET_ROLLUP_BACKFILL_SQL.name))?;
        }
        tracing::info!(
            version = migration.version,
            name = migration.name,
            "applied schema migration"
        );
        done.push(migration.version);
    }
    super::cluster::check_layout(store).await?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// History is append-only: a changed checksum here means an applied migration was
    /// edited. Add a new NNNN file instead, then add its checksum below.
    #[test]
    fn checksums_are_frozen() {
        let expected: &[(u32, &str, &str)] = &[
            (1, "0001_events", "fnv1a64:8459d31ae7e0cbc6"),
            (2, "0002_samples", "fnv1a64:8d880ae440d5d658"),
            (3, "0003_analytics", "fnv1a64:381b4c3360af5e09"),
            (4, "0004_telemetry", "fnv1a64:dbefe69e1eaa8369"),
            (5, "0005_alerts", "fnv1a64:827c4ed844c70367"),
            (6, "0006_kernel_launches", "fnv1a64:86ffd72a04181f6d"),
            (7, "0007_traces", "fnv1a64:33d3b6253281c527"),
            (8, "0008_trace_ops", "fnv1a64:5b5e90ed4b191b72"),
            (9, "0009_ingest_intents", "fnv1a64:e4daec9fb376e443"),
            (10, "0010_operator_stats", "fnv1a64:b4f23a2fa7274377"),
            (11, "0011_memory_stats", "fnv1a64:ce1dfb428c43ce4c"),
            (12, "0012_kernel_configs", "fnv1a64:6b229c6b83886f75"),
            (13, "0013_operator_shapes", "fnv1a64:b61dfc5bd9376eae"),
            (14, "0014_fleet_rollup", "fnv1a64:c0c047f42e345705"),
            (15, "0015_job_owners", "fnv1a64:49c457df14c43943"),
            (16, "0016_gpu_errors", "fnv1a64:eec204356dac2ccf"),
            (17, "0017_straggler_gains", "fnv1a64:4683a2d15524a5e1"),
            (18, "0018_overview_ranks", "fnv1a64:b08cc098b6c59718"),
        ];
        let actual: Vec<(u32, &str, String)> = MIGRATIONS
            .iter()
            .map(|m| (m.version, m.name, m.checksum()))
            .collect();
        let expected: Vec<(u32, &str, String)> = expected
            .iter()
            .map(|(v, n, c)| (*v, *n, c.to_string()))
            .collect();
        assert_eq!(actual, expected);
    }

    #[test]
    fn versions_are_dense_and_match_names() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        let expected: Vec<u32> = (1..=18).collect();
        assert_eq!(versions, expected);
        for m in MIGRATIONS {
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
            assert!(!m.statements().is_empty(), "{} has no statements", m.name);
        }
    }

    #[test]
    fn every_schema_file_is_listed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<String> = MIGRATIONS
            .iter()
            .map(|m| format!("{}.sql", m.name))
            .collect();
        assert_eq!(files, listed);
    }

    #[test]
    fn every_table_has_an_order_by_comment() {
        for m in MIGRATIONS {
            let mut comment = String::new();
            for line in m.sql.lines() {
                let line = line.trim();
                if let Some(text) = line.strip_prefix("--") {
                    comment.push_str(text);
                } else if line.starts_with("CREATE TABLE") {
                    assert!(
                        comment.contains("ORDER BY"),
                        "{}: {line} lacks an ORDER BY comment",
                        m.name
                    );
                    comment.clear();
                } else if line.is_empty() {
                    comment.clear();
                }
            }
        }
    }

    #[test]
    fn splits_statements_and_drops_comments() {
        let sql = "-- head; not a statement;\nCREATE TABLE a\n(\n  x UInt8 -- inline\n);\n\n  -- c\nSELECT 1;\nSELECT 2\n";
        assert_eq!(
            split_statements(sql),
            vec![
                "CREATE TABLE a\n(\n  x UInt8 -- inline\n)".to_string(),
                "SELECT 1".into(),
                "SELECT 2".into()
            ]
        );
        assert!(split_statements("-- only a comment;\n\n").is_empty());
    }

    #[test]
    fn checksum_changes_with_any_edit() {
        let a = Migration {
            version: 1,
            name: "x",
            sql: "CREATE TABLE t (x UInt8);",
        };
        let b = Migration {
            sql: "CREATE TABLE t (x UInt8); ",
            ..a
        };
        assert_ne!(a.checksum(), b.checksum());
        assert_eq!(a.checksum(), a.checksum());
    }
}
