-- GPU events of a job since a time (recovery of unfinalized steps).
-- Binds, in order: job_id, earliest start_ns, row limit.
SELECT rank, kind = 'memcpy' AS memcpy, kind = 'memset' AS memset, name, start_ns, end_ns,
       agent_id, agent_session, batch_seq
FROM kernels
WHERE job_id = ? AND start_ns >= ?
LIMIT ?
