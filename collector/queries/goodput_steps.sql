-- Per finalized step of a job (job bound): the median step time and the ranks' mean
-- compute, input and exposed communication time (goodput, collector/src/api/goodput.rs).
SELECT
    step,
    toUInt64(quantileExact(0.5)(step_time_ns)) AS step_time_ns,
    avg(compute_ns) AS compute_ns,
    avg(dataloader_ns) AS input_ns,
    avg(exposed_comm_ns) AS exposed_comm_ns
FROM step_breakdown FINAL
WHERE job_id = ?
GROUP BY step
ORDER BY step
