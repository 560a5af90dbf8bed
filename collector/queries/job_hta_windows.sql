-- The HTA ProfilerStep window of each imported rank of a job: the
-- `hta_last_step_end_ns` label the trace importer writes when a trace has at
-- least two distinct ProfilerStep#N annotations (see rankscope_analysis::hta_load).
-- Served by the ranks ORDER BY (job_id, run_id, rank). Binds: job_id.
SELECT rank, any(label_values[indexOf(label_keys, 'hta_last_step_end_ns')]) AS end_ns
FROM ranks
WHERE job_id = ? AND has(label_keys, 'hta_last_step_end_ns')
GROUP BY rank
ORDER BY rank
