-- How many [memory] events a job (one rank or all: job, all-ranks flag, rank bound) has
-- (memory_stats kind 'event'; api::opsmem::events pages them).
SELECT count() AS n
FROM memory_stats
WHERE job_id = ? AND kind = 'event' AND (? = 1 OR rank = ?)
