-- All rows of a table without a job column.
-- Binds: table (identifier).
SELECT count() FROM ?
