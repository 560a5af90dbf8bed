-- Engines of our tables in a database, to check after migrations that the database
-- was made for the mode the collector runs in (Distributed tables in cluster mode,
-- none on a single server).
-- Binds, in order: database, table names (array).
SELECT name, engine
FROM system.tables
WHERE database = ? AND has(?, name)
ORDER BY name
