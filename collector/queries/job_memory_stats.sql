-- A job's memory rows of one kind ('op', 'peak' or 'sample'; job and kind bound), in
-- (rank, device, ts_ns, name) order (api::views::memory).
SELECT
    rank,
    device,
    name,
    calls,
    size_increase_bytes,
    self_size_increase_bytes,
    allocation_count,
    self_allocation_count,
    allocation_size_bytes,
    self_allocation_size_bytes,
    allocated_bytes,
    reserved_bytes,
    device_total_bytes,
    step,
    per_step,
    ts_ns
FROM memory_stats
WHERE job_id = ? AND kind = ?
ORDER BY rank, device, ts_ns, name, step
