-- Every stored agent batch received at or after a time, to seed duplicate detection
-- after a restart.
-- Binds: received_ns lower bound.
SELECT DISTINCT
    agent_id,
    agent_session,
    batch_seq
FROM ingest_batches
WHERE received_ns >= ?
ORDER BY agent_id, agent_session, batch_seq
