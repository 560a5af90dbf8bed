-- Per rank and operator of one trace (job, trace bound): calls and self time summed
-- over the rank's steps.
SELECT rank, category, name, sum(calls) AS calls, sum(self_ns) AS self_ns
FROM trace_ops
WHERE job_id = ? AND trace_id = ?
GROUP BY rank, category, name
ORDER BY rank, category, name
