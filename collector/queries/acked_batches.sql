-- The stored batch sequence numbers of one agent session, to seed duplicate
-- detection the first time this collector sees the session (after a restart, or a
-- re-import of the same trace files). Served by ingest_batches
-- ORDER BY (agent_id, agent_session, batch_seq).
-- Binds: agent_id, agent_session.
SELECT DISTINCT batch_seq
FROM ingest_batches
WHERE agent_id = ? AND agent_session = ?
ORDER BY batch_seq
