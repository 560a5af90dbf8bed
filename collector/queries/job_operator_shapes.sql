-- A job's operator figures per (rank, operator, input shape; returned as call_stack), summed over its traces
-- (job bound; api::views::ops groups and ranks them).
SELECT
    rank,
    name,
    input_shape AS call_stack,
    sum(calls) AS calls,
    sum(host_self_ns) AS host_self_ns,
    sum(host_total_ns) AS host_total_ns,
    sum(device_self_ns) AS device_self_ns,
    sum(device_total_ns) AS device_total_ns,
    sum(tc_self_ns) AS tc_self_ns,
    sum(tc_total_ns) AS tc_total_ns,
    toUInt8(max(tc_eligible)) AS tc_eligible,
    sum(runtime_ns) AS runtime_ns,
    min(host_total_min_ns) AS host_total_min_ns,
    max(host_total_max_ns) AS host_total_max_ns,
    min(device_total_min_ns) AS device_total_min_ns,
    max(device_total_max_ns) AS device_total_max_ns
FROM operator_shapes
WHERE job_id = ?
GROUP BY rank, name, input_shape
ORDER BY rank, name, input_shape
