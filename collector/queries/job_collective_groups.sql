-- The job-wide collective statistics' groups of one job, computed where the
-- durations are: per (process_group, op, dtype, power-of-two size bucket) its
-- calls summarized (one entry per call, the same grouping as
-- job_collective_calls.sql: a call with one entry whose `calls` equals `ranks`
-- is uniform) and the nearest-rank p50 / p99 of every duration in the group.
-- 16,384 ranks x 300 calls send 3 rows instead of 39 MB of durations.
--
-- Nearest-rank percentile (rankscope_analysis::stats::percentile_nearest_rank):
-- the value at 0-based ascending index ceil(p n) - 1. ClickHouse's
-- quantileExact(level) takes the value at 0-based index floor(level n) of its
-- input (src/AggregateFunctions/QuantileExact.h, QuantileExact::getImpl:
-- n = level * size for a level below 1, then nth_element), so it is
-- taken over bitNot(duration), which reverses the order of UInt64 exactly:
-- index floor((1 - p) n) from the top is n - ceil(p n) = index ceil(p n) - 1
-- from the bottom. Levels 0.5 and 0.01 give p50 and p99 (0.01 * n rounds to
-- the exact n / 100 for any n below 2^50). The collector reverses bitNot.
--
-- Size bucket (rankscope_analysis::size_bucket): the highest set bit of bytes
-- (0 for 0 bytes), by smearing it down and keeping the top one. Durations as
-- CollectiveObs::duration_ns (0 if inverted). Binds: job_id.
SELECT process_group, op_name, dtype_name,
       groupArray(seq) AS seqs, groupArray(bytes) AS call_bytes,
       groupArray(group_size) AS group_sizes, groupArray(calls) AS call_rows,
       groupArray(ranks) AS call_ranks, groupArray(min_ns) AS call_min_ns,
       groupArray(sum_ns) AS call_sum_ns,
       quantilesExactArray(0.5, 0.01)(inverted_ns) AS inverted_p50_p99
FROM (
    SELECT process_group, seq, toString(op) AS op_name, toString(dtype) AS dtype_name,
           bytes, group_size, count() AS calls, uniqExact(rank) AS ranks,
           min(d) AS min_ns, sum(d) AS sum_ns, groupArray(bitNot(d)) AS inverted_ns,
           bitOr(bytes, bitShiftRight(bytes, 1)) AS s1, bitOr(s1, bitShiftRight(s1, 2)) AS s2,
           bitOr(s2, bitShiftRight(s2, 4)) AS s3, bitOr(s3, bitShiftRight(s3, 8)) AS s4,
           bitOr(s4, bitShiftRight(s4, 16)) AS s5, bitOr(s5, bitShiftRight(s5, 32)) AS s6,
           bitXor(s6, bitShiftRight(s6, 1)) AS bucket
    FROM (
        SELECT process_group, seq, op, dtype, bytes, group_size, rank,
               toUInt64(if(end_ns > start_ns, end_ns - start_ns, 0)) AS d
        FROM collectives
        WHERE job_id = ?)
    GROUP BY process_group, seq, op, dtype, bytes, group_size)
GROUP BY process_group, op_name, dtype_name, bucket
