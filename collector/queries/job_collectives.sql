-- Every collective of one job: the input of the collective statistics and of the
-- cross-rank matching by (process_group, seq). No ORDER BY: the matching sorts
-- (rankscope_analysis::match_collectives takes any order), and ClickHouse 18.16
-- would sort all rows first (16,384 ranks x 100 steps: 2.4 s of a 3.5 s request).
-- Binds: job_id.
SELECT rank, process_group, seq, toString(op) AS op, toString(dtype) AS dtype,
       group_size, bytes, start_ns, end_ns
FROM collectives
WHERE job_id = ?
