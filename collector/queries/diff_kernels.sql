-- Kernels of one rank of a job in a time window (job, rank, from, to bound): calls and
-- time per (name, kind), for `rankscope diff` (collector/src/api/diff.rs).
SELECT name, toInt8(kind) AS kind, count() AS calls, toUInt64(sum(end_ns - start_ns)) AS sum_ns
FROM kernels
WHERE job_id = ? AND rank = ? AND start_ns >= ? AND start_ns <= ?
GROUP BY name, kind
