-- Collectives of one job in a time window (job, from, to bound), for the timeline
-- export (flow arrows join the same (process_group, seq) across ranks).
SELECT rank, toString(op) AS op, process_group, seq, bytes, stream, device, start_ns, end_ns
FROM collectives
WHERE job_id = ? AND start_ns >= ? AND start_ns <= ?
ORDER BY process_group, seq, rank
