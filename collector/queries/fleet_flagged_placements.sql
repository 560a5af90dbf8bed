-- Fleet view: the units of the (job, rank) placements that have a straggler
-- verdict first seen or a hang suspect detected since a time, from the rollup
-- (schema/0014_fleet_rollup.sql): one row per (job, rank, unit) with the
-- (unit, job)'s seen span. Only these placements travel to the collector; the
-- others are counted by fleet_exposure.sql. Only the rollup rows of the
-- (node, job) pairs the verdicts and suspects name are grouped (a rank that
-- moved node since is placed from its verdict, as one older than the window).
-- Binds, in order: unit kind ('node' | 'gpu' | 'link'), month_end of since,
-- since_ns (verdicts), since_ns (hangs), since_ns (window), since_ns
-- (verdicts), since_ns (hangs).
SELECT jid AS job_id, rank, nd AS node, un AS unit, f AS first_ns, l AS last_ns
FROM
(
    SELECT unit_key, job_key, any(job_id) AS jid, any(node) AS nd, any(unit) AS un,
           groupUniqArrayMerge(ranks) AS rs, minMerge(first_ns) AS f, maxMerge(last_ns) AS l
    FROM fleet_unit_jobs
    WHERE unit_kind = ? AND month_end >= ?
      AND (node, job_id) IN
      (
          SELECT node, job_id FROM straggler_verdicts WHERE first_seen_ns >= ?
          UNION ALL
          SELECT node, job_id FROM hang_suspects WHERE detected_ns >= ?
      )
    GROUP BY unit_key, job_key
    HAVING l >= ?
)
ARRAY JOIN rs AS rank
WHERE (jid, rank) IN
(
    SELECT job_id, rank FROM straggler_verdicts WHERE first_seen_ns >= ?
    UNION ALL
    SELECT job_id, rank FROM hang_suspects WHERE detected_ns >= ?
)
ORDER BY jid, rank, nd, un
