-- A job's per-rank process RSS samples (job bound), by (rank, ts_ns): the live memory
-- of CPU ranks (api::views::memory, joined to the step windows in Rust).
SELECT rank, node, ts_ns, period_ns, ifNull(rss_bytes, toUInt64(0)) AS rss_bytes
FROM rank_process_samples
WHERE job_id = ? AND isNotNull(rss_bytes)
ORDER BY rank, ts_ns
