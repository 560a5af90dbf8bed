-- Drops one day partition of a table (retention).
-- Binds, in order: table (identifier), partition id (validated YYYYMMDD number).
ALTER TABLE ? DROP PARTITION ?
