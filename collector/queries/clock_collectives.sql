-- The blocking collectives of one job, one row per (process group, seq, node),
-- for the node clock estimate (rankscope_analysis::clocks): the node's lowest
-- rank, its ranks' latest start, earliest end and median end, each on that
-- node's clock. The ops are clocks::BLOCKING_OPS (no member can leave before
-- every member arrived). The ORDER BY key leads with (job_id, process_group,
-- seq), so the job's rows are read in key order. No ORDER BY: the estimate
-- does not depend on row order. Binds: job_id.
SELECT process_group, seq, node,
       min(rank) AS lowest_rank,
       max(start_ns) AS max_start_ns,
       min(end_ns) AS min_end_ns,
       toUInt64(quantileExact(0.5)(end_ns)) AS median_end_ns
FROM collectives
WHERE job_id = ?
  AND op IN ('all_reduce', 'barrier', 'all_gather', 'reduce_scatter', 'all_to_all')
GROUP BY process_group, seq, node
