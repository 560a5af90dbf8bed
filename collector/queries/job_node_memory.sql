-- Host memory of the nodes a job's ranks ran on (job bound): the denominator of the
-- live memory headroom of CPU ranks (api::views::memory).
SELECT node, ifNull(max(mem_total_bytes), toUInt64(0)) AS mem_total_bytes
FROM host_samples
WHERE node IN (SELECT DISTINCT node FROM rank_process_samples WHERE job_id = ?)
GROUP BY node
ORDER BY node
