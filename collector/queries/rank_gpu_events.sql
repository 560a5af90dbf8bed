-- Every GPU activity (kernel, memcpy, memset) of one job, per rank in time order:
-- the input of the per-rank temporal breakdown (HTA's, over the whole timeline).
-- Served by the kernels ORDER BY (job_id, rank, start_ns). A kernel's class comes
-- from its name, classified once per distinct name by the caller
-- (`rank_kernel_names.sql`): the names of the non-computation classes and their
-- codes are bound and mapped here (any other name: 0, computation), so names do
-- not travel per row.
-- Binds: those names, their class codes, job_id.
SELECT rank, node, toInt8(kind) AS kind, toUInt8(transform(name, ?, ?, 0)) AS class,
       start_ns, end_ns
FROM kernels
WHERE job_id = ?
ORDER BY rank, start_ns
