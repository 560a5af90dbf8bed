-- Fleet view: the latest version of every straggler verdict first seen since a
-- time, all jobs. Binds: since_ns.
SELECT job_id, rank, node, first_step, last_step, steps_flagged, slowdown, cause,
       first_seen_ns, updated_ns
FROM straggler_verdicts FINAL
WHERE first_seen_ns >= ?
ORDER BY job_id, rank, first_step
