-- Spans of one job in a time window (job, from, to bound), for the timeline export.
SELECT rank, toString(category) AS category, name, start_ns, end_ns, stream, device
FROM spans
WHERE job_id = ? AND start_ns >= ? AND start_ns <= ?
-- Ties broken to a total order (an enclosing span first): ClickHouse versions order
-- equal keys differently.
ORDER BY rank, start_ns, end_ns DESC, name
