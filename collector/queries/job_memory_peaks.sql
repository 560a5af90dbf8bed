-- A job's memory peaks (kind 'peak': the traces' per-rank peaks and the rank SDK's
-- per-step ones; job bound) with only the columns peaks use, in (rank, device, ts_ns,
-- step) order (api::opsmem::memory, api::advice).
SELECT
    rank,
    device,
    allocated_bytes,
    reserved_bytes,
    device_total_bytes,
    step,
    per_step,
    ts_ns
FROM memory_stats
WHERE job_id = ? AND kind = 'peak'
ORDER BY rank, device, ts_ns, name, step
