-- Step markers of a job after its last finalized step (recovery).
-- Binds, in order: job_id, last finalized step + 1, row limit.
SELECT rank, step, kind = 'end' AS is_end, ts_ns, node, run_id,
       agent_id, agent_session, batch_seq
FROM steps
WHERE job_id = ? AND step >= ?
ORDER BY rank, ts_ns
LIMIT ?
