-- Fleet view: median step time and world size of every job with a verdict first
-- seen since a time (the what-if cost's scale). Reads `step_breakdown` of those
-- jobs only, by its ORDER BY prefix (job_id). Binds: since_ns.
SELECT job_id,
       toUInt64(quantileExact(0.5)(step_time_ns)) AS median_step_ns,
       toUInt32(max(rank) + 1) AS world_size
FROM step_breakdown
WHERE job_id IN (SELECT job_id FROM straggler_verdicts WHERE first_seen_ns >= ?)
GROUP BY job_id
ORDER BY job_id
