-- Alerts with their latest transition: one row per (job, rule, rank, start).
-- Binds, in order: job filter ('' = all jobs) twice, active-only flag (0/1).
SELECT
    job_id,
    rule,
    rank,
    argMax(node, transition_ns) AS node,
    argMax(severity, transition_ns) AS severity,
    toString(argMax(state, transition_ns)) AS state,
    started_at_ns,
    max(resolved_at_ns) AS resolved_at_ns,
    argMax(summary, transition_ns) AS summary,
    argMax(evidence, transition_ns) AS evidence
FROM alerts
WHERE (? = '' OR job_id = ?)
GROUP BY job_id, rule, rank, started_at_ns
HAVING ? = 0 OR state = 'firing'
ORDER BY started_at_ns DESC, job_id, rule, rank
