-- Fills fleet_unit_jobs from the `ranks` rows stored before migration 0014 created
-- its materialized view (run once, right after the migration; the same SELECT
-- as fleet_unit_jobs_mv in schema/0014_fleet_rollup.sql). Idempotent: the
-- states (any, groupUniqArray, min, max) do not change when a row is written twice.
-- Binds: none.
INSERT INTO fleet_unit_jobs (unit_kind, unit_key, job_key, month_end, node, unit, job_id, ranks, first_ns, last_ns)
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
GROUP BY unit_kind, unit_key, job_key, month_end, node, unit, job_id
