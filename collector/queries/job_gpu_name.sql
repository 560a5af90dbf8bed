-- The `gpu` label of an imported rank of a job (job bound).
SELECT label_values[indexOf(label_keys, 'gpu')] AS name FROM ranks
WHERE job_id = ? AND has(label_keys, 'gpu') AND name != ''
LIMIT 1
