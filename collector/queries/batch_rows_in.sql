-- Rows one agent batch left in one table ({table} and its time column {ts} are
-- substituted from `Table`), within the batch's time range so that only the
-- partitions of that range are read.
-- Binds, in order: agent_id, agent_session, batch_seq, first ts, last ts.
SELECT count() AS n
FROM {table}
WHERE agent_id = ? AND agent_session = ? AND batch_seq = ? AND {ts} >= ? AND {ts} <= ?
