-- Collectives of a job since a time (recovery of unfinalized steps).
-- Binds, in order: job_id, earliest start_ns, row limit.
SELECT rank, toString(op) AS op, process_group, seq, toString(dtype) AS dtype, group_size,
       bytes, start_ns, end_ns,
       agent_id, agent_session, batch_seq
FROM collectives
WHERE job_id = ? AND start_ns >= ?
LIMIT ?
