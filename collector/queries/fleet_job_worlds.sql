-- Fleet view: the world size (highest rank seen + 1) of every job with a
-- straggler verdict first seen since a time, over the job's ranks seen in the
-- window, from the rollup's per-node rows (schema/0014_fleet_rollup.sql).
-- Binds, in order: month_end of since, since_ns (verdicts), since_ns (window).
SELECT any(jid) AS job_id, toUInt32(max(top) + 1) AS world
FROM
(
    SELECT unit_key, job_key, any(job_id) AS jid,
           arrayReduce('max', groupUniqArrayMerge(ranks)) AS top, maxMerge(last_ns) AS l
    FROM fleet_unit_jobs
    WHERE unit_kind = 'node' AND month_end >= ?
      AND job_key IN (SELECT cityHash64(job_id) FROM straggler_verdicts WHERE first_seen_ns >= ?)
    GROUP BY unit_key, job_key
    HAVING l >= ?
)
GROUP BY job_key
ORDER BY job_id
