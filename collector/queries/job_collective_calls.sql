-- Every collective call of the given process groups of one job, aggregated per
-- (process_group, seq) and the attributes its ranks reported: the job-wide
-- collective statistics of a process group with a mixed call read these
-- (job_collective_groups.sql serves the other process groups) instead of one
-- row per rank (16,384 ranks x 100 steps x 3 calls: 39 MB of durations instead
-- of 311 MB of rows). A call with one row here whose `calls`
-- equals `ranks` is uniform (rankscope_analysis::UniformMatch); the others are
-- read row by row with job_collectives_mixed.sql. Durations as
-- CollectiveObs::duration_ns (0 if inverted). Binds: job_id, process groups
-- (an array).
SELECT process_group, seq, toString(op) AS op_name, toString(dtype) AS dtype_name,
       bytes, group_size, count() AS calls, uniqExact(rank) AS ranks,
       groupArray(toUInt64(if(end_ns > start_ns, end_ns - start_ns, 0))) AS durations_ns
FROM collectives
WHERE job_id = ? AND process_group IN (SELECT arrayJoin(?))
GROUP BY process_group, seq, op, dtype, bytes, group_size
