-- Memory view (issue 29): rows of three kinds per rank and device.
--   kind 'op':     one operator's row of the per-operator memory table of a trace file
--                  (rankscope.v1.MemoryOpStat; the TensorBoard plugin 0.4.3's columns);
--   kind 'peak':   peak allocated / reserved bytes, of a trace file (per_step = 0) or of
--                  one live step (per_step = 1, from the rank SDK or the agent's RSS)
--                  (rankscope.v1.MemoryPeak);
--   kind 'sample': one point of a trace's down-sampled memory curve
--                  (rankscope.v1.MemorySample).
-- device: -1 = CPU, else the CUDA device index. ts_ns: the sample's time, else when the
-- collector received the batch. Columns a kind does not use are 0 / ''.
-- ORDER BY (job_id, kind, rank, device, ts_ns) serves each of the views per job.
CREATE TABLE IF NOT EXISTS memory_stats
(
    job_id String,
    run_id String,
    rank UInt32,
    node String,
    kind LowCardinality(String),
    device Int32,
    name String,
    calls UInt64,
    size_increase_bytes Int64,
    self_size_increase_bytes Int64,
    allocation_count UInt64,
    self_allocation_count UInt64,
    allocation_size_bytes Int64,
    self_allocation_size_bytes Int64,
    allocated_bytes Int64,
    reserved_bytes Int64,
    device_total_bytes UInt64,
    step UInt64,
    per_step UInt8,
    ts_ns UInt64,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (job_id, kind, rank, device, ts_ns);
