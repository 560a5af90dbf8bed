-- Per (step, rank) breakdown rows of one job in a step range; FINAL collapses
-- recomputations of the same (job, step, rank).
-- Binds, in order: job_id, first step, last step (inclusive).
SELECT
    step, rank, node, step_time_ns, gpu_span_ns, gpu_busy_ns, idle_ns, compute_ns,
    comm_ns, memory_ns, overlap_ns, exposed_comm_ns, non_compute_ns, dataloader_ns,
    comm_wait_ns, comm_transfer_ns
FROM step_breakdown FINAL
WHERE job_id = ? AND step >= ? AND step <= ?
ORDER BY step, rank
