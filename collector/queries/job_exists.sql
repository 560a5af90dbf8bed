-- Whether any rank identity or step marker of a job is stored.
-- Binds, in order: job_id, job_id.
-- ifNull: since ClickHouse 21 a scalar subquery is Nullable; 18.16 types it plain.
SELECT
    ifNull((SELECT count() FROM ranks WHERE job_id = ?), 0)
    + ifNull((SELECT count() FROM steps WHERE job_id = ?), 0) AS found
