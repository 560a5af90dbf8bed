-- Whether one agent batch has an intent (migration 0009): a collector began
-- storing it. With no ingest_batches row for it, its rows may be stored in
-- part. Asked for a batch the agent says another collector may have had
-- (rankscope_proto::resend). Served by ingest_intents
-- ORDER BY (agent_id, agent_session, batch_seq).
-- Binds: agent_id, agent_session, batch_seq.
SELECT count() AS intents
FROM ingest_intents
WHERE agent_id = ? AND agent_session = ? AND batch_seq = ?
