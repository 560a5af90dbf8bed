-- The collectives of one rank of one job (the per-rank statistics: this rank's
-- rows, matched against each call's sums from job_collective_call_sums.sql).
-- Same columns as job_collectives_mixed.sql. The ORDER BY key leads with
-- (job_id, process_group, seq), so the rank is a filter on the job's rows.
-- No ORDER BY (see job_collectives_mixed.sql). Binds: job_id, rank.
SELECT rank, process_group, seq, toString(op) AS op, toString(dtype) AS dtype,
       group_size, bytes, start_ns, end_ns
FROM collectives
WHERE job_id = ? AND rank = ?
