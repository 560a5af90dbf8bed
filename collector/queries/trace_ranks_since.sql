-- Latest state of every (trace, rank) requested since a time: the collector reloads them at
-- start-up (collector/src/traces.rs). The aggregates get aliases of their own inside and
-- the column names outside: ClickHouse 18.16 resolves an alias that shadows a column
-- everywhere in the query (`max(updated_at_ns) AS updated_at_ns` would nest aggregates).
SELECT
    job_id,
    trace_id,
    rank,
    node_ AS node,
    state_ AS state,
    reason_ AS reason,
    origin_ AS origin,
    requested_ AS requested_at_ns,
    updated_ AS updated_at_ns,
    duration_ AS duration_ms,
    iterations_ AS iterations,
    first_step_ AS first_step,
    steps_ AS steps,
    events_ AS events,
    pid_ AS pid,
    subject_ AS subject
FROM
(
    SELECT
        job_id,
        trace_id,
        rank,
        argMax(node, updated_at_ns) AS node_,
        argMax(state, updated_at_ns) AS state_,
        argMax(reason, updated_at_ns) AS reason_,
        any(origin) AS origin_,
        any(requested_at_ns) AS requested_,
        max(updated_at_ns) AS updated_,
        any(duration_ms) AS duration_,
        any(iterations) AS iterations_,
        argMax(first_step, updated_at_ns) AS first_step_,
        argMax(steps, updated_at_ns) AS steps_,
        argMax(events, updated_at_ns) AS events_,
        argMax(pid, updated_at_ns) AS pid_,
        any(subject) AS subject_
    FROM trace_ranks
    WHERE requested_at_ns >= ?
    GROUP BY job_id, trace_id, rank
)
ORDER BY requested_at_ns DESC, trace_id, rank
LIMIT ?
