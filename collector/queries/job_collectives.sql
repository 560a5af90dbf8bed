-- Every collective of one job: the input of the collective statistics and of the
-- cross-rank matching by (process_group, seq). Served by the collectives
-- ORDER BY (job_id, process_group, seq, rank).
-- Binds: job_id.
SELECT rank, node, process_group, seq, toString(op) AS op, toString(dtype) AS dtype,
       group_size, bytes, start_ns, end_ns
FROM collectives
WHERE job_id = ?
ORDER BY process_group, seq, rank
