-- Fleet view: hang suspects detected since a time, one row per (job, rank).
-- Binds: since_ns.
SELECT job_id, rank, argMax(node, detected_ns) AS node, toUInt64(count()) AS suspects
FROM hang_suspects FINAL
WHERE detected_ns >= ?
GROUP BY job_id, rank
ORDER BY job_id, rank
