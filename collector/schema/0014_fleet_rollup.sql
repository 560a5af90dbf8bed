-- Migration 0014 (issue 38): the fleet view's rollup of `ranks`, so
-- `GET /api/v1/fleet` and the `repeat_offender` rule read one row per
-- (unit, job) instead of grouping every rank placement of the window.
-- Statements end with a semicolon at the end of a line; lines starting with two dashes
-- are comments (see store/migrate.rs).

-- fleet_unit_jobs: per unit (node; node + `gpu_uuid` label; node + `link` label)
-- and job, the ranks the job ran there and the span of their `seen_ns`, as
-- aggregate states written by fleet_unit_jobs_mv at every INSERT into `ranks`
-- (and once from the existing `ranks` rows when this migration is applied:
-- queries/fleet_rollup_backfill.sql; the states are idempotent, so a row
-- written twice changes nothing). One row per (unit, job, month) once merged.
-- unit_key = cityHash64(node, unit), job_key = cityHash64(job_id): numeric keys
-- so the fleet query groups on integers; node, unit and job_id follow them in
-- the sorting key (they depend on the keys; modern ClickHouse refuses plain
-- columns outside the sorting key of an AggregatingMergeTree).
-- PARTITION BY month_end (the month's last day as YYYYMMDD) so retention drops a
-- month once all of it is older than retention_days (store/retention.rs).
-- ORDER BY (unit_kind, unit_key, job_key, ...) serves queries/fleet_exposure.sql,
-- fleet_flagged_placements.sql and fleet_job_worlds.sql (one unit kind, all units).
CREATE TABLE IF NOT EXISTS fleet_unit_jobs
(
    unit_kind Enum8('node' = 1, 'gpu' = 2, 'link' = 3),
    unit_key UInt64,
    job_key UInt64,
    month_end UInt32,
    node String,
    unit String,
    job_id String,
    ranks AggregateFunction(groupUniqArray, UInt32),
    first_ns AggregateFunction(min, UInt64),
    last_ns AggregateFunction(max, UInt64)
)
ENGINE = AggregatingMergeTree()
PARTITION BY month_end
ORDER BY (unit_kind, unit_key, job_key, node, unit, job_id);

CREATE MATERIALIZED VIEW IF NOT EXISTS fleet_unit_jobs_mv TO fleet_unit_jobs AS
SELECT CAST(k.1 AS Enum8('node' = 1, 'gpu' = 2, 'link' = 3)) AS unit_kind,
       cityHash64(node, k.2) AS unit_key,
       cityHash64(job_id) AS job_key,
       toYYYYMMDD(addDays(addMonths(toStartOfMonth(toDateTime(intDiv(seen_ns, 1000000000), 'UTC')), 1), -1)) AS month_end,
       node,
       k.2 AS unit,
       job_id,
       groupUniqArrayState(rank) AS ranks,
       minState(seen_ns) AS first_ns,
       maxState(seen_ns) AS last_ns
FROM ranks
ARRAY JOIN arrayFilter(x -> x.1 = 'node' OR x.2 != '',
    [('node', ''), ('gpu', label_values[indexOf(label_keys, 'gpu_uuid')]), ('link', label_values[indexOf(label_keys, 'link')])]) AS k
GROUP BY unit_kind, unit_key, job_key, month_end, node, unit, job_id;
