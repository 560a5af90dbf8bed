//! Tests of the cluster rewriter: every statement of the shipped schema, and the
//! statements it must refuse.

use super::lex::{column_names, lex};
use super::*;
use crate::store::{split_statements, MIGRATIONS};

const BOOKKEEPING: &str = include_str!("../../../queries/schema_migrations.sql");

/// What one schema statement must become.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// `CREATE TABLE t` with its sharding key and engine.
    Create(&'static str, &'static str, &'static str),
    /// `DROP TABLE t`.
    Drop(&'static str),
    /// `CREATE MATERIALIZED VIEW v TO t AS SELECT ... FROM s` (v, t, s).
    View(&'static str, &'static str, &'static str),
}
use Expect::{Create, Drop, View};

const JOB: &str = "cityHash64(job_id)";
const NODE: &str = "cityHash64(node)";

/// Every statement of the bookkeeping table and of every migration, in order. A new
/// migration statement fails `every_schema_statement_has_a_cluster_form` until it is
/// listed here with its expected cluster form.
const SCHEMA: &[(&str, &[Expect])] = &[
    (
        "schema_migrations",
        &[Create("schema_migrations", "version", "MergeTree")],
    ),
    (
        "0001_events",
        &[
            Create("steps", JOB, "MergeTree"),
            Create("spans", JOB, "MergeTree"),
            Create("collectives", JOB, "MergeTree"),
            Create("kernels", JOB, "MergeTree"),
            Create("ranks", JOB, "ReplacingMergeTree"),
            Create("ingest_batches", NODE, "MergeTree"),
        ],
    ),
    (
        "0002_samples",
        &[
            Create("gpu_samples", NODE, "MergeTree"),
            Create("host_samples", NODE, "MergeTree"),
        ],
    ),
    (
        "0003_analytics",
        &[
            Create("step_breakdown", JOB, "ReplacingMergeTree"),
            Create("straggler_verdicts", JOB, "ReplacingMergeTree"),
            Create("hang_suspects", JOB, "ReplacingMergeTree"),
        ],
    ),
    (
        "0004_telemetry",
        &[
            Drop("gpu_samples"),
            Create("gpu_samples", NODE, "MergeTree"),
            Drop("host_samples"),
            Create("host_samples", NODE, "MergeTree"),
            Create("rank_gpu_samples", JOB, "MergeTree"),
            Create("rank_process_samples", JOB, "MergeTree"),
            Create("straggler_evidence", JOB, "ReplacingMergeTree"),
        ],
    ),
    ("0005_alerts", &[Create("alerts", JOB, "MergeTree")]),
    (
        "0006_kernel_launches",
        &[Create("kernel_launches", JOB, "MergeTree")],
    ),
    ("0007_traces", &[Create("trace_ranks", JOB, "MergeTree")]),
    ("0008_trace_ops", &[Create("trace_ops", JOB, "MergeTree")]),
    (
        "0009_ingest_intents",
        &[Create("ingest_intents", NODE, "MergeTree")],
    ),
    (
        "0010_operator_stats",
        &[Create("operator_stats", JOB, "MergeTree")],
    ),
    (
        "0011_memory_stats",
        &[Create("memory_stats", JOB, "MergeTree")],
    ),
    (
        "0012_kernel_configs",
        &[Create("kernel_configs", JOB, "MergeTree")],
    ),
    (
        "0013_operator_shapes",
        &[Create("operator_shapes", JOB, "MergeTree")],
    ),
    (
        "0014_fleet_rollup",
        &[
            Create("fleet_unit_jobs", JOB, "AggregatingMergeTree"),
            View("fleet_unit_jobs_mv", "fleet_unit_jobs", "ranks"),
        ],
    ),
    (
        "0015_job_owners",
        &[Create("job_owners", JOB, "ReplacingMergeTree")],
    ),
    (
        "0016_gpu_errors",
        &[Create("gpu_error_samples", NODE, "MergeTree")],
    ),
    (
        "0017_straggler_gains",
        &[Create("straggler_gains", JOB, "ReplacingMergeTree")],
    ),
    (
        "0018_overview_ranks",
        &[Create("overview_ranks", JOB, "ReplacingMergeTree")],
    ),
];

fn schema() -> ClusterSchema {
    ClusterSchema::new("c1", "db")
}

/// The head of the local table's CREATE, its engine clause and the Distributed CREATE.
fn create_forms(table: &str, key: &str, engine: &str) -> (String, String, String) {
    (
        format!("CREATE TABLE IF NOT EXISTS `db`.`{table}_local` ON CLUSTER `c1`\n("),
        format!(
            "\nENGINE = Replicated{engine}('/clickhouse/tables/{{shard}}/db/{table}_local', \
             '{{replica}}'"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS `db`.`{table}` ON CLUSTER `c1` AS `db`.`{table}_local` \
             ENGINE = Distributed(`c1`, `db`, `{table}_local`, {key})"
        ),
    )
}

#[test]
fn every_schema_statement_has_a_cluster_form() {
    let mut files: Vec<(&str, Vec<String>)> =
        vec![("schema_migrations", split_statements(BOOKKEEPING))];
    files.extend(MIGRATIONS.iter().map(|m| (m.name, m.statements())));
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    let listed: Vec<&str> = SCHEMA.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, listed, "every migration is listed in SCHEMA");

    let mut s = schema();
    for ((file, statements), (_, expected)) in files.iter().zip(SCHEMA) {
        assert_eq!(
            statements.len(),
            expected.len(),
            "{file}: list every statement in SCHEMA"
        );
        for (index, (sql, want)) in statements.iter().zip(expected.iter()).enumerate() {
            let out = s
                .rewrite(sql)
                .unwrap_or_else(|e| panic!("{file} statement {index}: {e}"));
            match *want {
                Create(table, key, engine) => {
                    assert_eq!(out.len(), 2, "{file} {index}: {out:#?}");
                    let (head, engine_line, dist) = create_forms(table, key, engine);
                    assert!(out[0].starts_with(&head), "{file} {index}: {}", out[0]);
                    assert!(out[0].contains(&engine_line), "{file} {index}: {}", out[0]);
                    assert!(out[0].contains("ORDER BY"), "{}", out[0]);
                    assert_eq!(out[1], dist, "{file} {index}");
                    assert_eq!(s.tables.get(table).map(String::as_str), Some(key));
                }
                Drop(table) => assert_eq!(
                    out,
                    vec![
                        format!("DROP TABLE IF EXISTS `db`.`{table}` ON CLUSTER `c1`"),
                        format!("DROP TABLE IF EXISTS `db`.`{table}_local` ON CLUSTER `c1`"),
                    ],
                    "{file} {index}"
                ),
                View(view, to, from) => {
                    assert_eq!(out.len(), 1, "{file} {index}: {out:#?}");
                    let head = format!(
                        "CREATE MATERIALIZED VIEW IF NOT EXISTS `db`.`{view}` ON CLUSTER `c1` TO `db`.`{to}_local` AS SELECT "
                    );
                    assert!(out[0].starts_with(&head), "{file} {index}: {}", out[0]);
                    assert!(
                        out[0].contains(&format!("FROM `db`.`{from}_local`")),
                        "{file} {index}: {}",
                        out[0]
                    );
                }
            }
        }
    }
    // Every table the writer knows ends up sharded.
    for t in crate::store::Table::ALL {
        assert!(s.tables.contains_key(t.name()), "{}", t.name());
        assert_eq!(
            s.tables[t.name()] == JOB,
            t.has_job_id(),
            "{} is sharded by job exactly when it has a job",
            t.name()
        );
    }
}

#[test]
fn create_table_full_text() {
    let sql = "CREATE TABLE IF NOT EXISTS ranks\n(\n    job_id String, -- the job\n    \
               kind Enum8('a(b' = 1, 'c,d' = 2),\n    seen_ns UInt64\n)\n\
               ENGINE = ReplacingMergeTree(seen_ns)\n\
               PARTITION BY toYYYYMMDD(toDateTime(intDiv(seen_ns, 1000000000), 'UTC'))\n\
               ORDER BY (job_id, kind)";
    let out = schema().rewrite(sql).unwrap();
    assert_eq!(
        out[0],
        "CREATE TABLE IF NOT EXISTS `db`.`ranks_local` ON CLUSTER `c1`\n(\n    job_id String, \
         -- the job\n    kind Enum8('a(b' = 1, 'c,d' = 2),\n    seen_ns UInt64\n)\n\
         ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/ranks_local', \
         '{replica}', seen_ns)\n\
         PARTITION BY toYYYYMMDD(toDateTime(intDiv(seen_ns, 1000000000), 'UTC'))\n\
         ORDER BY (job_id, kind)"
    );
}

#[test]
fn column_names_skip_types_and_strings() {
    let list = "job_id String, `odd name` Array(Nullable(UInt64)), e Enum8('x,y' = 1), \
                n Nested(a UInt8, b String), node LowCardinality(String)";
    assert_eq!(
        column_names(list, &lex(list).unwrap()),
        vec!["job_id", "odd name", "e", "n", "node"]
    );
}

#[test]
fn sharding_prefers_job_then_node_then_agent() {
    let cols = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(sharding_key("t", &cols(&["node", "job_id"])).unwrap(), JOB);
    assert_eq!(
        sharding_key("t", &cols(&["agent_id", "node"])).unwrap(),
        NODE
    );
    assert_eq!(
        sharding_key("t", &cols(&["agent_id"])).unwrap(),
        "cityHash64(agent_id)"
    );
    assert_eq!(sharding_key("schema_migrations", &[]).unwrap(), "version");
}

#[test]
fn materialized_views_read_and_write_local_tables() {
    let mut s = schema();
    s.rewrite("CREATE TABLE src (job_id String, v UInt64, tags Array(String)) ENGINE = MergeTree() ORDER BY job_id")
        .unwrap();
    s.rewrite(
        "CREATE TABLE agg (job_id String, n AggregateFunction(count)) \
         ENGINE = AggregatingMergeTree() ORDER BY job_id",
    )
    .unwrap();
    let out = s
        .rewrite(
            "CREATE MATERIALIZED VIEW agg_mv TO agg AS SELECT job_id, countState() AS n \
             FROM (SELECT job_id FROM src ARRAY JOIN tags) GROUP BY job_id",
        )
        .unwrap();
    assert_eq!(
        out,
        vec![
            "CREATE MATERIALIZED VIEW IF NOT EXISTS `db`.`agg_mv` ON CLUSTER `c1` TO \
             `db`.`agg_local` AS SELECT job_id, countState() AS n FROM (SELECT job_id FROM \
             `db`.`src_local` ARRAY JOIN tags) GROUP BY job_id"
                .to_string()
        ]
    );
    assert_eq!(
        s.rewrite("DROP TABLE IF EXISTS agg_mv").unwrap(),
        vec!["DROP TABLE IF EXISTS `db`.`agg_mv` ON CLUSTER `c1`".to_string()]
    );
}

#[test]
fn alters_run_on_local_tables_and_refresh_distributed_ones() {
    let mut s = schema();
    s.rewrite("CREATE TABLE t (job_id String) ENGINE = MergeTree() ORDER BY job_id")
        .unwrap();
    assert_eq!(
        s.rewrite("ALTER TABLE t ADD COLUMN x Enum8('a' = 1, 'b' = 2)")
            .unwrap(),
        vec![
            "ALTER TABLE `db`.`t_local` ON CLUSTER `c1` ADD COLUMN x Enum8('a' = 1, 'b' = 2)"
                .to_string(),
            "DROP TABLE IF EXISTS `db`.`t` ON CLUSTER `c1`".to_string(),
            "CREATE TABLE IF NOT EXISTS `db`.`t` ON CLUSTER `c1` AS `db`.`t_local` ENGINE = \
             Distributed(`c1`, `db`, `t_local`, cityHash64(job_id))"
                .to_string(),
        ]
    );
    assert_eq!(
        s.rewrite("ALTER TABLE t DELETE WHERE job_id = 'COLUMN'")
            .unwrap(),
        vec![
            "ALTER TABLE `db`.`t_local` ON CLUSTER `c1` DELETE WHERE job_id = 'COLUMN'".to_string()
        ]
    );
}

#[test]
fn statements_without_a_cluster_form_are_refused() {
    let mut s = schema();
    s.rewrite("CREATE TABLE t (job_id String) ENGINE = MergeTree() ORDER BY job_id")
        .unwrap();
    s.rewrite("CREATE TABLE g (node String) ENGINE = MergeTree() ORDER BY node")
        .unwrap();
    let cases: &[(&str, &str)] = &[
        ("INSERT INTO t VALUES ('a')", "`INSERT INTO t ...` has no cluster form"),
        ("CREATE VIEW v AS SELECT 1", "has no cluster form"),
        ("RENAME TABLE t TO u", "has no cluster form"),
        ("TRUNCATE TABLE t", "has no cluster form"),
        ("OPTIMIZE TABLE t FINAL", "has no cluster form"),
        ("CREATE DATABASE x", "has no cluster form"),
        ("CREATE TABLE m (job_id String) ENGINE = Memory", "engine \"Memory\""),
        (
            "CREATE TABLE r (job_id String) ENGINE = ReplicatedMergeTree('/p', 'r') ORDER BY job_id",
            "engine \"ReplicatedMergeTree\"",
        ),
        ("CREATE TABLE x (a UInt8) ENGINE = MergeTree() ORDER BY a", "SHARDING_OVERRIDES"),
        ("CREATE TABLE other.x (job_id String) ENGINE = MergeTree()", "without a database"),
        ("CREATE TABLE x_local (job_id String) ENGINE = MergeTree()", "clashes"),
        ("CREATE TABLE x AS t ENGINE = MergeTree()", "column list"),
        ("CREATE TABLE x (job_id String) ORDER BY job_id", "must name its ENGINE"),
        (
            "CREATE MATERIALIZED VIEW v ENGINE = MergeTree() ORDER BY job_id AS SELECT * FROM t",
            "needs `TO <table>`",
        ),
        ("CREATE MATERIALIZED VIEW v TO nowhere AS SELECT * FROM t", "TO nowhere is not a table"),
        ("CREATE MATERIALIZED VIEW v TO t AS SELECT * FROM missing", "FROM missing is not a table"),
        ("CREATE MATERIALIZED VIEW v TO t AS SELECT * FROM x.t", "without a database"),
        ("CREATE MATERIALIZED VIEW v TO t AS SELECT * FROM numbers(3)", "without a database"),
        ("CREATE MATERIALIZED VIEW v TO t POPULATE AS SELECT * FROM t", "expected AS SELECT"),
        (
            "CREATE MATERIALIZED VIEW v TO t AS SELECT job_id FROM t ANY LEFT JOIN g USING job_id",
            "JOIN has no cluster form",
        ),
        ("CREATE MATERIALIZED VIEW v TO t AS SELECT node AS job_id FROM g", "wrong shard"),
        ("ALTER TABLE missing ADD COLUMN x UInt8", "not a table created"),
        ("ALTER TABLE t", "without an action"),
        ("DROP TABLE t SYNC", "nothing may follow"),
        ("CREATE TABLE x (job_id String) ENGINE = MergeTree() ORDER BY 'a", "unterminated"),
    ];
    for (sql, want) in cases {
        let err = s
            .clone()
            .rewrite(sql)
            .expect_err(&format!("{sql} must be refused"));
        assert!(err.to_string().contains(want), "{sql}: {err}");
    }
}

#[test]
fn dropped_tables_are_forgotten() {
    let mut s = schema();
    s.rewrite("CREATE TABLE t (job_id String) ENGINE = MergeTree() ORDER BY job_id")
        .unwrap();
    s.rewrite("DROP TABLE t").unwrap();
    let err = s.rewrite("ALTER TABLE t ADD COLUMN x UInt8").unwrap_err();
    assert!(err.to_string().contains("not a table"), "{err}");
    assert_eq!(
        s.create_database(),
        "CREATE DATABASE IF NOT EXISTS `db` ON CLUSTER `c1`"
    );
}

/// Any prefix of any statement is rewritten or refused, never a panic.
#[test]
fn truncated_statements_never_panic() {
    let mut base = schema();
    base.rewrite("CREATE TABLE t (job_id String) ENGINE = MergeTree() ORDER BY job_id")
        .unwrap();
    let extra = [
        "CREATE MATERIALIZED VIEW v TO t AS SELECT job_id FROM t ARRAY JOIN x",
        "ALTER TABLE t ADD COLUMN `x y` Enum8('a\\'b' = 1) /* c */ -- d",
        "DROP TABLE IF EXISTS t",
    ];
    let all = MIGRATIONS
        .iter()
        .flat_map(|m| m.statements())
        .chain(extra.iter().map(|s| s.to_string()));
    for sql in all {
        for (i, _) in sql.char_indices().step_by(3) {
            let _ = base.clone().rewrite(&sql[..i]);
        }
    }
}
