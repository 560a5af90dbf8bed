-- Latest state of every (trace, rank) requested since a time: the collector reloads them at
-- start-up (collector/src/traces.rs).
SELECT
    job_id,
    trace_id,
    rank,
    argMax(node, updated_at_ns) AS node,
    argMax(state, updated_at_ns) AS state,
    argMax(reason, updated_at_ns) AS reason,
    any(origin) AS origin,
    any(requested_at_ns) AS requested_at_ns,
    max(updated_at_ns) AS updated_at_ns,
    any(duration_ms) AS duration_ms,
    any(iterations) AS iterations,
    argMax(first_step, updated_at_ns) AS first_step,
    argMax(steps, updated_at_ns) AS steps,
    argMax(events, updated_at_ns) AS events,
    argMax(pid, updated_at_ns) AS pid,
    any(subject) AS subject
FROM trace_ranks
WHERE requested_at_ns >= ?
GROUP BY job_id, trace_id, rank
ORDER BY requested_at_ns DESC, trace_id, rank
LIMIT ?
