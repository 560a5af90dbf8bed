-- The collectives of one job that start in a time range (the ranks' step windows of a
-- step range): the input of the per-step bus bandwidth (`collectives/steps`). The
-- collectives ORDER BY (job_id, process_group, seq, rank) narrows the scan to the job.
-- No ORDER BY: the matching sorts (see job_collectives_mixed.sql).
-- Binds, in order: job_id, first start_ns, last start_ns (inclusive).
SELECT rank, process_group, seq, toString(op) AS op, toString(dtype) AS dtype,
       group_size, bytes, start_ns, end_ns
FROM collectives
WHERE job_id = ? AND start_ns >= ? AND start_ns <= ?
