-- A job's [memory] events (memory_stats kind 'event', written from the importer's
-- MemorySample events with `event` set: size_increase_bytes = the event's bytes,
-- name = its operator), one rank or all (job, all-ranks flag, rank bound), a page of
-- them (offset, limit bound) in (rank, device, ts_ns) order (api::opsmem::events).
SELECT
    rank,
    device,
    ts_ns,
    size_increase_bytes AS bytes,
    allocated_bytes,
    reserved_bytes,
    name
FROM memory_stats
WHERE job_id = ? AND kind = 'event' AND (? = 1 OR rank = ?)
ORDER BY rank, device, ts_ns, name, bytes
LIMIT ?, ?
