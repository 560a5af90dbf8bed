-- Every collective call of one job summarized per (process_group, seq) and the
-- attributes its ranks reported, as job_collective_calls.sql groups them, with
-- the minimum and sum of the ranks' durations instead of the durations: what
-- the per-rank statistics need of the other ranks (a uniform call's transfer
-- time is its minimum duration). 300 rows of 16,384 ranks' calls instead of
-- 39 MB. Durations as CollectiveObs::duration_ns (0 if inverted). Binds: job_id.
SELECT process_group, seq, toString(op) AS op_name, toString(dtype) AS dtype_name,
       bytes, group_size, count() AS calls, uniqExact(rank) AS ranks,
       min(d) AS min_ns, sum(d) AS sum_ns
FROM (
    SELECT process_group, seq, op, dtype, bytes, group_size, rank,
           toUInt64(if(end_ns > start_ns, end_ns - start_ns, 0)) AS d
    FROM collectives
    WHERE job_id = ?)
GROUP BY process_group, seq, op, dtype, bytes, group_size
