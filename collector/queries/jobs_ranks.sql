-- Per job and run: world size, distinct ranks and nodes seen, first and last time a
-- batch carried one of its ranks.
SELECT
    job_id,
    run_id,
    max(world_size) AS world_size,
    toUInt32(uniqExact(rank)) AS ranks_seen,
    toUInt32(uniqExact(node)) AS nodes,
    min(seen_ns) AS first_seen_ns,
    max(seen_ns) AS last_seen_ns
FROM ranks
GROUP BY job_id, run_id
