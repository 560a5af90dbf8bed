-- Per (rank, device) of a job's memory curve (kind 'sample'; job bound): its
-- allocated peak and its number of points, in (rank, device) order
-- (api::opsmem::bounded picks the series of a job-wide answer from these
-- before reading their points).
SELECT rank, device, max(allocated_bytes) AS peak_bytes, toUInt64(count()) AS points
FROM memory_stats
WHERE job_id = ? AND kind = 'sample'
GROUP BY rank, device
ORDER BY rank, device
