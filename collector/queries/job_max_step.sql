-- Highest step stored for a job and whether it has any (daemon-trace iterations of an
-- unmodified job are numbered after it).
SELECT max(step) AS max_step, count() AS n
FROM steps
WHERE job_id = ?
