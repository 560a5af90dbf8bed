-- A rank's collective wait (PyTorch Profiler "synchronizing" time) summed over a step
-- range (job, rank, first, last step bound), from the live breakdown rows.
SELECT toUInt64(sum(comm_wait_ns)) AS wait_ns
FROM step_breakdown FINAL
WHERE job_id = ? AND rank = ? AND step >= ? AND step <= ?
