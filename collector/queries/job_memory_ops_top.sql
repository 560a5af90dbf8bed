-- The operator memory rows (kind 'op') of a job with the largest size increase (job and
-- the row limit bound), largest first, ties in stored order (api::opsmem::bounded).
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
WHERE job_id = ? AND kind = 'op'
ORDER BY size_increase_bytes DESC, rank, device, ts_ns, name, step
LIMIT ?
