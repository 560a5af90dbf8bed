-- A job's wall time (first step begin to last step end, job bound twice), its devices
-- (largest world size; job bound) and its longest suspected hang (job bound).
SELECT
    (SELECT minIf(ts_ns, kind = 'begin') FROM steps WHERE job_id = ?) AS first_ns,
    (SELECT maxIf(ts_ns, kind = 'end') FROM steps WHERE job_id = ?) AS last_ns,
    (SELECT max(world_size) FROM ranks WHERE job_id = ?) AS world_size,
    (SELECT max(silent_ns) FROM hang_suspects WHERE job_id = ?) AS longest_hang_ns
