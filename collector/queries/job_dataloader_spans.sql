-- The data-loading spans of one job (issue 29: the overview's DataLoader time), per rank
-- in time order. Served by the spans ORDER BY (job_id, rank, start_ns). Binds: job_id.
SELECT rank, start_ns, end_ns
FROM spans
WHERE job_id = ? AND category = 'dataloader'
ORDER BY rank, start_ns, end_ns
