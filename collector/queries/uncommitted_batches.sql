-- Agent batches with an intent and no ingest_batches row since a time: a
-- collector died while flushing them, so some of their tables may hold their
-- rows (migration 0009).
-- Binds, in order: earliest received_ns, earliest received_ns.
SELECT agent_id, agent_session, batch_seq
FROM ingest_intents
WHERE received_ns >= ?
  AND (agent_id, agent_session, batch_seq) NOT IN
  (
      SELECT agent_id, agent_session, batch_seq
      FROM ingest_batches
      WHERE received_ns >= ?
  )
ORDER BY agent_id, agent_session, batch_seq
