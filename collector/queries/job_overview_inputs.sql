-- What the overview of each rank of one job is computed from (api::overview,
-- api::views::plugin_ranks), per input table and rank: its rows (unmerged duplicates
-- included: any INSERT raises a count) and a sum of its time columns. A kept row of
-- overview_ranks (migration 0018) is used only while these are what they were when it
-- was computed. The inputs: every GPU activity (kernels), its launch call
-- (kernel_launches) and launch figures (kernel_configs), the dataloader spans, the
-- steps (the span of a rank without the plugin's), the importer's plugin span labels.
-- Each part is served by its table's ORDER BY (job_id, ...). Binds: job_id six times.
SELECT 'kernels' AS input, rank, count() AS n, sum(start_ns + end_ns) AS time_sum
FROM kernels WHERE job_id = ? GROUP BY rank
UNION ALL
SELECT 'kernel_launches' AS input, rank, count() AS n, sum(kernel_start_ns + end_ns) AS time_sum
FROM kernel_launches WHERE job_id = ? GROUP BY rank
UNION ALL
SELECT 'kernel_configs' AS input, rank, count() AS n, sum(kernel_start_ns) AS time_sum
FROM kernel_configs WHERE job_id = ? GROUP BY rank
UNION ALL
SELECT 'dataloader' AS input, rank, count() AS n, sum(start_ns + end_ns) AS time_sum
FROM spans WHERE job_id = ? AND category = 'dataloader' GROUP BY rank
UNION ALL
SELECT 'step_breakdown' AS input, rank, count() AS n, sum(step_start_ns + step_time_ns) AS time_sum
FROM step_breakdown WHERE job_id = ? GROUP BY rank
UNION ALL
SELECT 'ranks' AS input, rank, count() AS n,
       sum(cityHash64(arrayStringConcat(label_values, ','))) AS time_sum
FROM ranks WHERE job_id = ? AND has(label_keys, 'tbp_steps_start_ns') GROUP BY rank
