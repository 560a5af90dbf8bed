-- What the overview and advice routes read of one job, summarised so that any
-- write to those inputs changes the answer: per table its rows and the sum
-- of a time column. The routes' answers are kept per job and served again
-- while this is unchanged (api::overview::cache). An unmerged duplicate
-- counts too, so a merge changes it: that only recomputes an answer.
-- Each part is served by its table's ORDER BY (job_id, ...). Binds: job_id
-- six times.
SELECT 'kernels' AS input, count() AS n, sum(end_ns) AS time_sum
FROM kernels WHERE job_id = ?
UNION ALL
SELECT 'kernel_launches' AS input, count() AS n, sum(end_ns) AS time_sum
FROM kernel_launches WHERE job_id = ?
UNION ALL
SELECT 'kernel_configs' AS input, count() AS n, sum(kernel_start_ns) AS time_sum
FROM kernel_configs WHERE job_id = ?
UNION ALL
SELECT 'spans' AS input, count() AS n, sum(end_ns) AS time_sum
FROM spans WHERE job_id = ?
UNION ALL
SELECT 'step_breakdown' AS input, count() AS n, sum(step_time_ns) AS time_sum
FROM step_breakdown WHERE job_id = ?
UNION ALL
SELECT 'ranks' AS input, count() AS n, sum(seen_ns) AS time_sum
FROM ranks WHERE job_id = ?
