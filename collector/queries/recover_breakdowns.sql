-- Finalized per-(step, rank) figures of a job from a step on: they replay the
-- straggler window and the what-if history after a restart.
-- Binds, in order: job_id, first step.
SELECT step, rank, node, step_start_ns, step_time_ns, compute_ns, comm_ns, dataloader_ns,
       comm_wait_ns
FROM step_breakdown FINAL
WHERE job_id = ? AND step >= ?
ORDER BY step, rank
