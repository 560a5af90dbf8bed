-- Fleet view: every rank placement seen since a time, one row per (job, rank):
-- its latest node, its `gpu_uuid` and `link` (NIC / network link) labels (simulated ranks, `--placement`; a real
-- agent's ranks get their GPU from fleet_rank_gpus.sql) and the span of its
-- stored `seen_ns` versions (no FINAL: every version counts; the writer refreshes
-- a rank's row every 5 s while it streams). Reads only `ranks`.
-- Binds: since_ns.
SELECT job_id, rank,
       argMax(node, seen_ns) AS node,
       anyIf(label_values[indexOf(label_keys, 'gpu_uuid')], has(label_keys, 'gpu_uuid')) AS gpu_label,
       anyIf(label_values[indexOf(label_keys, 'link')], has(label_keys, 'link')) AS link_label,
       min(seen_ns) AS first_ns,
       max(seen_ns) AS last_ns
FROM ranks
WHERE seen_ns >= ?
GROUP BY job_id, rank
ORDER BY job_id, rank
