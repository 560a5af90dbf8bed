-- Fleet view: every unit's exposure since a time, from the rollup
-- (schema/0014_fleet_rollup.sql): jobs seen on it, rank placements (distinct
-- (job, rank)) and rank time. A (unit, job) is in the window when any of its
-- ranks was seen at or after `since`; its rank time is ranks x (last seen -
-- max(first seen, since)). Binds, in order: since_ns (rank-time clamp),
-- unit kind ('node' | 'gpu' | 'link'), month_end of since (YYYYMMDD of that
-- month's last day: partition pruning), since_ns.
SELECT any(nd) AS node, any(un) AS unit,
       toUInt64(count()) AS jobs,
       toUInt64(sum(n)) AS placements,
       toUInt64(sum(n * (l - greatest(f, ?)))) AS rank_ns
FROM
(
    SELECT unit_key, any(node) AS nd, any(unit) AS un,
           length(groupUniqArrayMerge(ranks)) AS n,
           minMerge(first_ns) AS f, maxMerge(last_ns) AS l
    FROM fleet_unit_jobs
    WHERE unit_kind = ? AND month_end >= ?
    GROUP BY unit_key, job_key
    HAVING l >= ?
)
GROUP BY unit_key
ORDER BY node, unit
