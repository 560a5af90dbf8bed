-- Ranks of a job that streamed events, with the largest world size any reported
-- (a trace request for "all ranks" covers them).
SELECT rank, max(world_size) AS world_size, argMax(node, seen_ns) AS node
FROM ranks
WHERE job_id = ?
GROUP BY rank
ORDER BY rank
