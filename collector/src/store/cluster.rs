//! Cluster mode (`clickhouse_cluster`): the single-server schema rewritten to run
//! `ON CLUSTER` as sharded, replicated tables.
//!
//! In: the statements of `collector/schema/NNNN_*.sql` (and the bookkeeping table of
//! `queries/schema_migrations.sql`), in the order they were written; the cluster and
//! database names (validated `[A-Za-z0-9_]`). Out: for each statement, the statements to
//! run instead, or a [`RewriteError`] naming what cannot run on a cluster.
//!
//! The schema files stay the one source: every table `t` becomes
//! - `t_local`: the same columns, partitioning and ORDER BY with the
//!   `Replicated*MergeTree` engine, ZooKeeper path `/clickhouse/tables/{shard}/<db>/t_local`
//!   and replica `{replica}` (the server's `macros`), on every server;
//! - `t`: `Distributed(<cluster>, <db>, t_local, <sharding key>)` on every server, so the
//!   writer's INSERTs and every query in `collector/queries/` keep their table names.
//!
//! Sharding keys ([`sharding_key`]): `cityHash64(job_id)` for every table with a `job_id`
//! column, so all rows of one job live on one shard: the ReplacingMergeTree tables
//! (`ranks`, `step_breakdown`, `straggler_verdicts`, `hang_suspects`,
//! `straggler_evidence`, `straggler_gains`) are keyed by job, so every version of a row meets its
//! replacement on the same shard and `FINAL` stays exact. Node telemetry has no job:
//! `gpu_samples` and `host_samples` use `cityHash64(node)` (one node's series stays
//! together, so `LIMIT 1 BY node, gpu_index` is exact per shard). `ingest_batches` has a
//! `node` too and follows it. `schema_migrations` is sharded by `version`. A future table
//! without `job_id`, `node` or `agent_id` is rejected until it gets an entry in
//! [`SHARDING_OVERRIDES`].
//!
//! Statements: `CREATE TABLE` (a `*MergeTree` engine) becomes the two tables above;
//! `CREATE MATERIALIZED VIEW v TO t AS SELECT ... FROM s` becomes a view on every server
//! from `s_local` to `t_local` (allowed only when `s` and `t` have the same sharding key,
//! so the view's rows land where `t`'s own INSERTs would); `DROP TABLE` drops both tables
//! (or the view); `ALTER TABLE` runs on `t_local`, and when it changes columns the
//! Distributed table is dropped and created again from `t_local` (ClickHouse 18.16 refuses
//! `ALTER ... ON CLUSTER` on a Distributed table when shards use internal replication).
//! Everything else is rejected with an error, so a migration never runs unrewritten.
//!
//! [`check_layout`] runs before and after migrations in both modes and refuses a
//! database made for the other one.
//!
//! Invariants: the rewriter is fed every migration from the first, in order, at every
//! start (it learns the tables and their sharding keys as it goes); CREATE and DROP
//! come out as `IF [NOT] EXISTS` forms, so an interrupted migration can run again (an
//! ALTER is no more re-runnable than on one server). Identifiers are emitted
//! back-quoted and database-qualified.

mod lex;

use std::collections::{BTreeMap, BTreeSet};

use clickhouse::Row;
use lex::{column_names, depth_zero, lex, Parser};
use serde::Deserialize;

use super::sql::{query_file, QueryFile};
use super::{Store, StoreError, Table};

const TABLE_ENGINES_SQL: QueryFile = query_file!("table_engines");

/// Sharding keys of tables the column rules do not cover.
pub const SHARDING_OVERRIDES: &[(&str, &str)] = &[("schema_migrations", "version")];

/// Columns whose hash shards a table, in order of preference.
const SHARDING_COLUMNS: &[&str] = &["job_id", "node", "agent_id"];

/// Suffix of the replicated table under each Distributed table.
pub const LOCAL_SUFFIX: &str = "_local";

/// A statement that cannot run on a cluster, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RewriteError(String);

fn reject<T>(msg: impl Into<String>) -> Result<T, RewriteError> {
    Err(RewriteError(msg.into()))
}

/// The local (replicated) table of table `name`.
pub fn local_name(name: &str) -> String {
    format!("{name}{LOCAL_SUFFIX}")
}

/// The sharding key of table `name` with `columns`.
pub fn sharding_key(name: &str, columns: &[String]) -> Result<String, RewriteError> {
    if let Some((_, key)) = SHARDING_OVERRIDES.iter().find(|(t, _)| *t == name) {
        return Ok((*key).to_string());
    }
    match SHARDING_COLUMNS
        .iter()
        .find(|c| columns.iter().any(|col| col == *c))
    {
        Some(c) => Ok(format!("cityHash64({c})")),
        None => reject(format!(
            "table {name} has none of the columns {SHARDING_COLUMNS:?} to shard it by; \
             add its sharding key to SHARDING_OVERRIDES in collector/src/store/cluster.rs"
        )),
    }
}

/// Rewrites single-server statements for one cluster and database (see the module docs).
#[derive(Debug, Clone)]
pub struct ClusterSchema {
    cluster: String,
    database: String,
    /// Tables created so far, with their sharding keys.
    tables: BTreeMap<String, String>,
    /// Materialized views created so far.
    views: BTreeSet<String>,
}

impl ClusterSchema {
    /// `cluster` and `database` must be validated `[A-Za-z0-9_]` names.
    pub fn new(cluster: &str, database: &str) -> Self {
        ClusterSchema {
            cluster: cluster.to_string(),
            database: database.to_string(),
            tables: BTreeMap::new(),
            views: BTreeSet::new(),
        }
    }

    /// `CREATE DATABASE` on every server of the cluster.
    pub fn create_database(&self) -> String {
        format!(
            "CREATE DATABASE IF NOT EXISTS `{}` ON CLUSTER `{}`",
            self.database, self.cluster
        )
    }

    /// The statements that replace `sql` on the cluster.
    pub fn rewrite(&mut self, sql: &str) -> Result<Vec<String>, RewriteError> {
        let tokens = lex(sql)?;
        let mut p = Parser {
            sql,
            tokens: &tokens,
            pos: 0,
        };
        if p.eat_words(&["CREATE", "TABLE"]) {
            self.create_table(&mut p)
        } else if p.eat_words(&["CREATE", "MATERIALIZED", "VIEW"]) {
            self.create_view(&mut p)
        } else if p.eat_words(&["DROP", "TABLE"]) {
            self.drop_table(&mut p)
        } else if p.eat_words(&["ALTER", "TABLE"]) {
            self.alter_table(&mut p)
        } else {
            let head: Vec<&str> = tokens.iter().take(3).map(|t| t.text(sql)).collect();
            reject(format!(
                "`{} ...` has no cluster form; cluster mode rewrites CREATE TABLE, CREATE \
                 MATERIALIZED VIEW ... TO, DROP TABLE and ALTER TABLE only \
                 (collector/src/store/cluster.rs)",
                head.join(" ")
            ))
        }
    }

    fn q(&self, name: &str) -> String {
        format!("`{}`.`{name}`", self.database)
    }

    fn distributed(&self, name: &str, key: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} ON CLUSTER `{c}` AS {} \
             ENGINE = Distributed(`{c}`, `{db}`, `{}`, {key})",
            self.q(name),
            self.q(&local_name(name)),
            local_name(name),
            c = self.cluster,
            db = self.database,
        )
    }

    fn drop(&self, name: &str) -> String {
        format!(
            "DROP TABLE IF EXISTS {} ON CLUSTER `{}`",
            self.q(name),
            self.cluster
        )
    }

    fn create_table(&mut self, p: &mut Parser<'_>) -> Result<Vec<String>, RewriteError> {
        p.eat_words(&["IF", "NOT", "EXISTS"]);
        let name = p.table_name()?;
        if name.ends_with(LOCAL_SUFFIX) || self.views.contains(&name) {
            return reject(format!(
                "table name {name} clashes with cluster mode's names (`*{LOCAL_SUFFIX}` and views)"
            ));
        }
        let (open, close) = p.parens().ok_or_else(|| {
            RewriteError(format!(
                "CREATE TABLE {name} needs a column list in parentheses in cluster mode"
            ))
        })?;
        let columns = column_names(p.sql, &p.tokens[open + 1..close]);
        if !p.eat_words(&["ENGINE"]) || !p.eat_punct('=') {
            return reject(format!("CREATE TABLE {name} must name its ENGINE"));
        }
        let engine = p.word().unwrap_or_default();
        if !engine.ends_with("MergeTree") || engine.starts_with("Replicated") {
            return reject(format!(
                "table {name}: engine {engine:?} has no cluster form (only non-replicated \
                 *MergeTree engines are rewritten to Replicated*MergeTree)"
            ));
        }
        let args = match p.parens() {
            Some((a, b)) => p.span(a + 1, b - 1).trim().to_string(),
            None => String::new(),
        };
        let rest = p.rest().trim().to_string();
        let key = sharding_key(&name, &columns)?;
        let local = local_name(&name);
        let mut replicated_args = format!(
            "'/clickhouse/tables/{{shard}}/{}/{local}', '{{replica}}'",
            self.database
        );
        if !args.is_empty() {
            replicated_args.push_str(", ");
            replicated_args.push_str(&args);
        }
        let create_local = format!(
            "CREATE TABLE IF NOT EXISTS {} ON CLUSTER `{}`\n{}\nENGINE = Replicated{engine}({replicated_args})\n{rest}",
            self.q(&local),
            self.cluster,
            p.span(open, close),
        );
        let statements = vec![
            create_local.trim_end().to_string(),
            self.distributed(&name, &key),
        ];
        self.tables.insert(name, key);
        Ok(statements)
    }

    fn create_view(&mut self, p: &mut Parser<'_>) -> Result<Vec<String>, RewriteError> {
        p.eat_words(&["IF", "NOT", "EXISTS"]);
        let name = p.table_name()?;
        if self.tables.contains_key(&name) || name.ends_with(LOCAL_SUFFIX) {
            return reject(format!("view name {name} clashes with a table"));
        }
        if !p.eat_words(&["TO"]) {
            return reject(format!(
                "materialized view {name} needs `TO <table>` in cluster mode (an inner \
                 table could not be sharded)"
            ));
        }
        let target = p.table_name()?;
        let Some(target_key) = self.tables.get(&target).cloned() else {
            return reject(format!(
                "materialized view {name}: TO {target} is not a table created by an earlier \
                 statement"
            ));
        };
        if !p.eat_words(&["AS"]) {
            return reject(format!(
                "materialized view {name}: expected AS SELECT after TO {target}"
            ));
        }
        // Replace every `FROM <table>` with its local table; refuse joins.
        let body_start = p.pos;
        let mut out = String::new();
        let mut copied = p.tokens.get(body_start).map_or(p.sql.len(), |t| t.start);
        let mut i = body_start;
        while i < p.tokens.len() {
            let t = p.tokens[i];
            let prev_array = i > 0 && p.tokens[i - 1].is_word(p.sql, "ARRAY");
            if t.is_word(p.sql, "JOIN") && !prev_array {
                return reject(format!(
                    "materialized view {name}: JOIN has no cluster form (each shard would \
                     join only its own rows)"
                ));
            }
            if t.is_word(p.sql, "FROM")
                && p.tokens.get(i + 1).is_some_and(|n| !n.is_punct(p.sql, '('))
            {
                let src_tok = p.tokens[i + 1];
                let src = src_tok.ident(p.sql).unwrap_or_default();
                let followed = p.tokens.get(i + 2).map(|n| n.text(p.sql));
                if matches!(followed, Some(".") | Some("(")) {
                    return reject(format!(
                        "materialized view {name}: FROM {src} must name a table of this \
                         schema without a database"
                    ));
                }
                match self.tables.get(&src) {
                    Some(key) if *key == target_key => {}
                    Some(key) => {
                        return reject(format!(
                            "materialized view {name}: source {src} is sharded by {key} but \
                             target {target} by {target_key}; rows would land on the wrong shard"
                        ))
                    }
                    None => {
                        return reject(format!(
                            "materialized view {name}: FROM {src} is not a table created by an \
                             earlier statement"
                        ))
                    }
                }
                out.push_str(&p.sql[copied..src_tok.start]);
                out.push_str(&self.q(&local_name(&src)));
                copied = src_tok.end;
                i += 2;
                continue;
            }
            i += 1;
        }
        out.push_str(&p.sql[copied..]);
        self.views.insert(name.clone());
        Ok(vec![format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {} ON CLUSTER `{}` TO {} AS {}",
            self.q(&name),
            self.cluster,
            self.q(&local_name(&target)),
            out.trim()
        )])
    }

    fn drop_table(&mut self, p: &mut Parser<'_>) -> Result<Vec<String>, RewriteError> {
        p.eat_words(&["IF", "EXISTS"]);
        let name = p.table_name()?;
        if !p.rest().trim().is_empty() {
            return reject(format!(
                "DROP TABLE {name}: nothing may follow the table name in cluster mode"
            ));
        }
        if self.views.remove(&name) {
            return Ok(vec![self.drop(&name)]);
        }
        self.tables.remove(&name);
        Ok(vec![self.drop(&name), self.drop(&local_name(&name))])
    }

    fn alter_table(&mut self, p: &mut Parser<'_>) -> Result<Vec<String>, RewriteError> {
        let name = p.table_name()?;
        let Some(key) = self.tables.get(&name).cloned() else {
            return reject(format!(
                "ALTER TABLE {name}: not a table created by an earlier statement"
            ));
        };
        let actions_at = p.pos;
        let actions = p.rest().trim().to_string();
        if actions.is_empty() {
            return reject(format!("ALTER TABLE {name} without an action"));
        }
        let mut statements = vec![format!(
            "ALTER TABLE {} ON CLUSTER `{}` {actions}",
            self.q(&local_name(&name)),
            self.cluster
        )];
        let changes_columns =
            depth_zero(p.sql, &p.tokens[actions_at..]).any(|t| t.is_word(p.sql, "COLUMN"));
        if changes_columns {
            statements.push(self.drop(&name));
            statements.push(self.distributed(&name, &key));
        }
        Ok(statements)
    }
}

#[derive(Debug, Row, Deserialize)]
struct EngineRow {
    name: String,
    engine: String,
}

/// Refuses a database made for the other mode: `CREATE ... IF NOT EXISTS` would keep a
/// single server's MergeTree `steps` under a cluster collector (writes would stay on one
/// server) and a cluster's Distributed tables under a single-server collector.
pub(super) async fn check_layout(store: &Store) -> Result<(), StoreError> {
    let mut names: Vec<&str> = Table::ALL.iter().map(|t| t.name()).collect();
    names.push("schema_migrations");
    let rows: Vec<EngineRow> = store
        .read(TABLE_ENGINES_SQL)
        .bind(store.database())
        .bind(&names)
        .fetch_all()
        .await
        .map_err(StoreError::query("read table engines"))?;
    let wrong = rows
        .iter()
        .find(|r| (r.engine == "Distributed") != store.cluster().is_some());
    match (wrong, store.cluster()) {
        (None, _) => Ok(()),
        (Some(r), Some(cluster)) => Err(StoreError::Config(format!(
            "database {} was made for a single server (table {} is {}), but clickhouse_cluster \
             = {cluster:?}: cluster mode needs a database of its own \
             (docs/deployment.md#clickhouse-cluster)",
            store.database(),
            r.name,
            r.engine
        ))),
        (Some(r), None) => Err(StoreError::Config(format!(
            "database {} was made for a ClickHouse cluster (table {} is Distributed): set \
             clickhouse_cluster to that cluster",
            store.database(),
            r.name
        ))),
    }
}

#[cfg(test)]
mod tests;
