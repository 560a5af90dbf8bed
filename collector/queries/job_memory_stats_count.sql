-- How many memory rows of one kind a job has (job and kind bound).
SELECT toUInt64(count()) AS n
FROM memory_stats
WHERE job_id = ? AND kind = ?
