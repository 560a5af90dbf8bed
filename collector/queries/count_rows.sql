-- Rows of one job in a table.
-- Binds, in order: table (identifier), job_id.
SELECT count() FROM ? WHERE job_id = ?
