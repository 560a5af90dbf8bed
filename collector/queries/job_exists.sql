-- Whether any rank identity or step marker of a job is stored.
-- Binds, in order: job_id, job_id.
SELECT
    (SELECT count() FROM ranks WHERE job_id = ?)
    + (SELECT count() FROM steps WHERE job_id = ?) AS found
