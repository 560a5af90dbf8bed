-- The rows of the collective calls of one job that are not uniform (see
-- job_collective_calls.sql): a rank reported the call twice, or its ranks
-- disagree on op, dtype, bytes or group size (send / recv pairs, a
-- desynchronised job). No ORDER BY: the matching sorts
-- (rankscope_analysis::match_collectives takes any order), and ClickHouse 18.16
-- would sort every row first. Binds: job_id, job_id.
SELECT rank, process_group, seq, toString(op) AS op, toString(dtype) AS dtype,
       group_size, bytes, start_ns, end_ns
FROM collectives
WHERE job_id = ? AND (process_group, seq) IN (
    SELECT process_group, seq
    FROM collectives
    WHERE job_id = ?
    GROUP BY process_group, seq
    HAVING count() != uniqExact(rank) OR uniqExact(op, dtype, bytes, group_size) > 1)
