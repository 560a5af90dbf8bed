-- Exactly once across a collector killed mid-flush (collector/src/store/writer.rs).
--
-- ingest_intents: one row per agent batch, written BEFORE the batch's event rows
-- (ingest_batches is written after them). A batch with an intent and no
-- ingest_batches row was being flushed when the collector died: some of its
-- tables may hold its rows. At the next start such batches are "uncommitted":
-- live-state recovery leaves their rows out, and when the agent sends the batch
-- again only the tables that lack its rows are written (collector/src/service.rs).
-- Same columns as ingest_batches; ORDER BY serves the per-session lookup.
CREATE TABLE IF NOT EXISTS ingest_intents
(
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64,
    node String,
    received_ns UInt64,
    rows UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(received_ns, 1000000000), 'UTC'))
ORDER BY (agent_id, agent_session, batch_seq);
