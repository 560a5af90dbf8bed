-- The GPU-side user annotations (`gpu_user_annotation` ranges the importer stores as
-- `other` spans with a device, issue 29) of one job, per rank in time order: the input of
-- the annotations view. Served by the spans ORDER BY (job_id, rank, start_ns).
-- Binds: job_id.
SELECT rank, name, start_ns, end_ns
FROM spans
WHERE job_id = ? AND category = 'other' AND device >= 0
ORDER BY rank, start_ns, end_ns, name
