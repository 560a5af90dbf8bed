-- Every rank of a job with its latest identity and the last step it ended at
-- or before the job's last finalized step (recovery after a restart).
-- Binds, in order: job_id, job_id, last finalized step.
SELECT r.rank AS rank, r.node AS node, r.run_id AS run_id, r.world_size AS world_size,
       e.last_end AS last_end, e.ends AS ends
FROM
(
    SELECT rank, argMax(node, seen_ns) AS node, argMax(run_id, seen_ns) AS run_id,
           max(world_size) AS world_size
    FROM ranks
    WHERE job_id = ?
    GROUP BY rank
) AS r
LEFT JOIN
(
    SELECT rank, max(step) AS last_end, count() AS ends
    FROM steps
    WHERE job_id = ? AND kind = 'end' AND step <= ?
    GROUP BY rank
) AS e USING rank
ORDER BY rank
