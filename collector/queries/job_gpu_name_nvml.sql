-- The name NVML reported for a GPU a job's ranks ran on (job bound).
SELECT name FROM gpu_samples
WHERE uuid IN (SELECT DISTINCT uuid FROM rank_gpu_samples WHERE job_id = ?) AND name != ''
LIMIT 1
