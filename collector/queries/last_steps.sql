-- How many of the last K complete steps of a job exist and the first of them. A step is
-- complete when at least one rank has both markers (as in step_times.sql).
-- Binds, in order: job_id, first step, last step (inclusive), K.
SELECT
    count() AS steps,
    min(step) AS first_step
FROM
(
    SELECT DISTINCT step
    FROM
    (
        SELECT step
        FROM steps
        WHERE job_id = ? AND step >= ? AND step <= ?
        GROUP BY step, rank
        HAVING countIf(kind = 'begin') > 0 AND countIf(kind = 'end') > 0
            AND maxIf(ts_ns, kind = 'end') >= minIf(ts_ns, kind = 'begin')
    )
    ORDER BY step DESC
    LIMIT ?
)
