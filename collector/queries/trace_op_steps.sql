-- Steps each rank of one trace (job, trace bound) holds: trace-diff's per-iteration divisor.
SELECT rank, uniqExact(step) AS steps
FROM trace_ops
WHERE job_id = ? AND trace_id = ?
GROUP BY rank
ORDER BY rank
