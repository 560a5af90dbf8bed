-- When each active straggler verdict of a job was first seen (recovery).
-- Binds: job_id.
SELECT rank, first_step, first_seen_ns
FROM straggler_verdicts FINAL
WHERE job_id = ? AND active = 1
ORDER BY rank, first_step
