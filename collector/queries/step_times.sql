-- Step wall time per (step, rank) of one job: from the earliest begin marker to the
-- latest end marker (duplicate markers of retried batches collapse), only pairs with
-- both markers and end at or after begin.
-- Binds, in order: job_id, first step, last step (inclusive).
SELECT
    step,
    rank,
    node,
    start_ns,
    end_ns,
    toUInt64(end_ns - start_ns) AS step_time_ns
FROM
(
    SELECT
        step,
        rank,
        any(node) AS node,
        minIf(ts_ns, kind = 'begin') AS start_ns,
        maxIf(ts_ns, kind = 'end') AS end_ns,
        countIf(kind = 'begin') AS begins,
        countIf(kind = 'end') AS ends
    FROM steps
    WHERE job_id = ? AND step >= ? AND step <= ?
    GROUP BY step, rank
)
WHERE begins > 0 AND ends > 0 AND end_ns >= start_ns
ORDER BY step, rank
