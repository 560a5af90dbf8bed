-- A job's wall time (first step begin to last step end, job bound twice), its devices
-- (largest world size; job bound) and its longest suspected hang (job bound).
-- ifNull: since ClickHouse 21 a scalar subquery is Nullable (it may find no row);
-- 18.16 types it plain. Both then answer UInt64, UInt64, UInt32, UInt64.
SELECT
    ifNull((SELECT minIf(ts_ns, kind = 'begin') FROM steps WHERE job_id = ?), 0) AS first_ns,
    ifNull((SELECT maxIf(ts_ns, kind = 'end') FROM steps WHERE job_id = ?), 0) AS last_ns,
    ifNull((SELECT max(world_size) FROM ranks WHERE job_id = ?), 0) AS world_size,
    ifNull((SELECT max(silent_ns) FROM hang_suspects WHERE job_id = ?), 0) AS longest_hang_ns
