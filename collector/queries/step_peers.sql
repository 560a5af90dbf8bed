-- Per step of one job in a step range, what the what-if gain needs of all
-- its ranks (rankscope_analysis::StepPeers, analysis/src/straggler/gain.rs):
-- how many ranks, the median step time (the (n/2)-th of the ascending times,
-- 0-based, as the Rust definition), the least wait with its rank and the
-- second-least, the most work (compute + input) with its rank and the
-- second-most. FINAL: one row per (step, rank). A verdict's gain then needs
-- only its own rows (step_waits_of.sql), not all ranks' rows per verdict.
-- Binds, in order: job_id, first step, last step (inclusive).
SELECT
    step,
    toUInt64(count()) AS ranks,
    arraySort(groupArray(step_time_ns))[intDiv(count(), 2) + 1] AS median_step_ns,
    argMin(rank, comm_wait_ns) AS min_wait_rank,
    min(comm_wait_ns) AS min_wait_ns,
    arraySort(groupArray(comm_wait_ns))[2] AS second_min_wait_ns,
    argMax(rank, compute_ns + dataloader_ns) AS max_work_rank,
    max(compute_ns + dataloader_ns) AS max_work_ns,
    arrayReverseSort(groupArray(compute_ns + dataloader_ns))[2] AS second_max_work_ns
FROM step_breakdown FINAL
WHERE job_id = ? AND step >= ? AND step <= ?
GROUP BY step
ORDER BY step
