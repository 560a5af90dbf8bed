-- Per job and run: time range of its step markers, how many end markers it has and the
-- highest step with an end marker.
SELECT
    job_id,
    run_id,
    min(ts_ns) AS first_ns,
    max(ts_ns) AS last_ns,
    countIf(kind = 'end') AS ends,
    maxIf(step, kind = 'end') AS last_step
FROM steps
GROUP BY job_id, run_id
