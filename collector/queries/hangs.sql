-- Suspected hangs of one job (a rank that stopped ending steps while others went on).
-- Binds: job_id.
SELECT rank, node, last_step, job_step, silent_ns, detected_ns
FROM hang_suspects FINAL
WHERE job_id = ?
ORDER BY detected_ns, rank
