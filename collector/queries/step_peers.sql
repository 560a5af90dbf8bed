-- Per step of one job in a step range, what the what-if gain needs of all
-- its ranks (rankscope_analysis::StepPeers, analysis/src/straggler/gain.rs):
-- how many ranks, the median step time (the (n/2)-th of the ascending times,
-- 0-based, as the Rust definition: quantileExact(0.5) takes element
-- floor(0.5 x n) of the sorted values), the least wait (at most the time in
-- collectives, rankscope_analysis::wait_wall_ns) with its rank and the
-- second-least (the least of the other ranks': one row per rank), the most
-- work (compute + input) with its rank and the second-most. No sort of the
-- values (16,384 ranks x 97 steps: 0.60 s with arraySort, 0.27 s without,
-- same rows). FINAL: one row per (step, rank). A verdict's gain then needs
-- only its own rows (step_waits_of.sql), not all ranks' rows per verdict.
-- Binds, in order: job_id, first step, last step (inclusive).
SELECT
    step,
    toUInt64(count()) AS ranks,
    quantileExact(0.5)(step_time_ns) AS median_step_ns,
    argMin(rank, least(comm_wait_ns, comm_ns)) AS min_wait_rank,
    min(least(comm_wait_ns, comm_ns)) AS min_wait_ns,
    arrayReduce('min', arrayFilter((w, r) -> r != min_wait_rank,
                                   groupArray(least(comm_wait_ns, comm_ns)), groupArray(rank))) AS second_min_wait_ns,
    argMax(rank, compute_ns + dataloader_ns) AS max_work_rank,
    max(compute_ns + dataloader_ns) AS max_work_ns,
    arrayReduce('max', arrayFilter((w, r) -> r != max_work_rank,
                                   groupArray(compute_ns + dataloader_ns), groupArray(rank))) AS second_max_work_ns
FROM step_breakdown FINAL
WHERE job_id = ? AND step >= ? AND step <= ?
GROUP BY step
ORDER BY step
