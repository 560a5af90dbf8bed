-- Dataloader and compute spans of a job since a time (recovery of
-- unfinalized steps; the categories live analytics reads).
-- Binds, in order: job_id, earliest start_ns, row limit.
SELECT rank, category = 'dataloader' AS dataloader, device, start_ns, end_ns,
       agent_id, agent_session, batch_seq
FROM spans
WHERE job_id = ? AND start_ns >= ?
  AND category IN ('forward', 'backward', 'optimizer', 'compute', 'dataloader')
LIMIT ?
