-- The curve points (kind 'sample') of a job's ranks in the bound array (job, ranks bound),
-- in (rank, device, ts_ns) order (api::opsmem::bounded: the ranks of a job-wide answer).
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
WHERE job_id = ? AND kind = 'sample' AND has(?, rank)
ORDER BY rank, device, ts_ns, name, step
