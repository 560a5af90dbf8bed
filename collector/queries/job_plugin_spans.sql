-- The TensorBoard plugin's "all steps" span of each imported rank of a job (issue 29): the
-- `tbp_steps_start_ns` / `tbp_steps_end_ns` / `tbp_steps` labels the trace importer writes
-- (rankscope_kineto identity::plugin_steps_span). Served by the ranks ORDER BY
-- (job_id, run_id, rank). Binds: job_id.
SELECT rank,
       any(label_values[indexOf(label_keys, 'tbp_steps_start_ns')]) AS start_ns,
       any(label_values[indexOf(label_keys, 'tbp_steps_end_ns')]) AS end_ns,
       any(label_values[indexOf(label_keys, 'tbp_steps')]) AS steps
FROM ranks
WHERE job_id = ? AND has(label_keys, 'tbp_steps_start_ns')
GROUP BY rank
ORDER BY rank
