-- The latest version of every straggler verdict of one job.
-- Binds: job_id.
SELECT rank, node, first_step, last_step, steps_flagged, slowdown, score, cause, active,
       first_seen_ns, updated_ns
FROM straggler_verdicts FINAL
WHERE job_id = ?
ORDER BY first_step, rank
