-- Fleet view: one pass over the rollup (schema/0014_fleet_rollup.sql) per
-- unit kind, giving every unit's exposure and the facts of its flagged
-- placements in the same grouping (issue 38: the exposure, flagged
-- placements and world sizes were three passes over the same rows).
-- Per unit: jobs seen on it, rank placements (distinct (job, rank)) and rank
-- time, as before: a (unit, job) is in the window when any of its ranks was
-- seen at or after `since`; its rank time is ranks x (last seen -
-- max(first seen, since)).
-- `flagged`: per (unit, job) of the pairs (node, job) that a straggler
-- verdict first seen or a hang suspect detected since `since` names, the
-- job, its ranks there that such a verdict or suspect names, and the pair's
-- seen span (a rank that moved node since is placed from its verdict, as one
-- older than the window). `tops`: when asked (by node: every rank of a job
-- has a node row), per (unit, job) of the jobs with a verdict first seen
-- since `since`, the job and its highest rank there (world size = the
-- highest over the job's units + 1).
-- Binds, in order: since_ns (rank-time clamp), since_ns (verdicts' ranks),
-- since_ns (hangs' ranks), since_ns (verdicts' pairs), since_ns (hangs'
-- pairs), want_tops (0 | 1), since_ns (verdicts' jobs), unit kind ('node' |
-- 'gpu' | 'link'), month_end of since (YYYYMMDD: partition pruning), since_ns.
SELECT any(nd) AS node, any(un) AS unit,
       toUInt64(count()) AS jobs,
       toUInt64(sum(n)) AS placements,
       toUInt64(sum(n * (l - greatest(f, ?)))) AS rank_ns,
       groupArrayIf((jid, arrayFilter(r -> (jid, r) IN
           (
               SELECT job_id, rank FROM straggler_verdicts WHERE first_seen_ns >= ?
               UNION ALL
               SELECT job_id, rank FROM hang_suspects WHERE detected_ns >= ?
           ), if(pf, rs, emptyArrayUInt32())), f, l), pf) AS flagged,
       groupArrayIf((jid, top), vj) AS tops
FROM
(
    SELECT unit_key, any(node) AS nd, any(unit) AS un, any(job_id) AS jid,
           groupUniqArrayMerge(ranks) AS rs, length(rs) AS n,
           arrayReduce('max', rs) AS top,
           minMerge(first_ns) AS f, maxMerge(last_ns) AS l,
           (nd, jid) IN
           (
               SELECT node, job_id FROM straggler_verdicts WHERE first_seen_ns >= ?
               UNION ALL
               SELECT node, job_id FROM hang_suspects WHERE detected_ns >= ?
           ) AS pf,
           toUInt8(?) = 1 AND job_key IN
               (SELECT cityHash64(job_id) FROM straggler_verdicts WHERE first_seen_ns >= ?) AS vj
    FROM fleet_unit_jobs
    WHERE unit_kind = ? AND month_end >= ?
    GROUP BY unit_key, job_key
    HAVING l >= ?
)
GROUP BY unit_key
ORDER BY node, unit
