-- One rank's steps in a range (job, rank, first, last step bound): the window from the
-- first begin to the last end, and how many steps ended in it.
SELECT
    minIf(ts_ns, kind = 'begin') AS from_ns,
    maxIf(ts_ns, kind = 'end') AS to_ns,
    uniqExactIf(step, kind = 'end') AS steps
FROM steps
WHERE job_id = ? AND rank = ? AND step >= ? AND step <= ?
