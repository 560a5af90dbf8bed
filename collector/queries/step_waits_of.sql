-- Per (step, rank) of the given ranks of one job in a step range: step
-- time, work (compute + input) and collective wait (at most the time in
-- collectives, rankscope_analysis::wait_wall_ns), the what-if gain's own
-- rows of each verdict (see step_peers.sql).
-- Binds, in order: job_id, first step, last step (inclusive), ranks (array;
-- IN a subquery is a hash set, `has(array, rank)` a scan of it per row:
-- 8 s for 1,146 ranks of a 16,384-rank job).
SELECT
    step,
    rank,
    step_time_ns,
    compute_ns + dataloader_ns AS work_ns,
    least(comm_wait_ns, comm_ns) AS wait_ns
FROM step_breakdown FINAL
WHERE job_id = ? AND step >= ? AND step <= ? AND rank IN (SELECT toUInt32(arrayJoin(?)))
ORDER BY step, rank
