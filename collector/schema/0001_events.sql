-- Raw rank events and ingest bookkeeping.
--
-- Every table is partitioned by the UTC day of its event time, so retention drops whole
-- day partitions (Store::drop_expired_partitions). Timestamps are UInt64 ns since the
-- Unix epoch. Event rows carry their ingest identity (agent_id, agent_session,
-- batch_seq) so duplicates of a retried batch can be found and removed.
-- Enum8 values are the proto enum numbers of rankscope.v1.
-- Statements end with a semicolon at the end of a line; lines starting with two dashes
-- are comments (see store/migrate.rs).

-- steps: step begin/end markers of every rank.
-- ORDER BY (job_id, step, rank) serves per-step queries across ranks:
-- queries/step_times.sql and queries/last_steps.sql read one job's step range.
CREATE TABLE IF NOT EXISTS steps
(
    job_id String,
    run_id String,
    rank UInt32,
    step UInt64,
    kind Enum8('begin' = 1, 'end' = 2),
    ts_ns UInt64,
    node String,
    local_rank UInt32,
    pid UInt32,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (job_id, step, rank);

-- spans: forward/backward/optimizer/... spans of every rank.
-- ORDER BY (job_id, rank, start_ns) serves per-rank timelines of one job in a time
-- window (step breakdown, compute/communication overlap).
CREATE TABLE IF NOT EXISTS spans
(
    job_id String,
    run_id String,
    rank UInt32,
    node String,
    category Enum8('forward' = 1, 'backward' = 2, 'optimizer' = 3, 'dataloader' = 4,
                   'compute' = 5, 'communication' = 6, 'memcpy' = 7, 'other' = 8),
    name LowCardinality(String),
    start_ns UInt64,
    end_ns UInt64,
    stream UInt32,
    device Int32,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(start_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, start_ns);

-- collectives: NCCL collectives as seen by each rank.
-- ORDER BY (job_id, process_group, seq, rank) serves cross-rank matching of one
-- collective: all ranks' rows of (process_group, seq) are adjacent (straggler and
-- wait-time analysis).
CREATE TABLE IF NOT EXISTS collectives
(
    job_id String,
    run_id String,
    rank UInt32,
    node String,
    op Enum8('all_reduce' = 1, 'reduce_scatter' = 2, 'all_gather' = 3, 'all_to_all' = 4,
             'broadcast' = 5, 'reduce' = 6, 'send' = 7, 'recv' = 8, 'barrier' = 9),
    process_group LowCardinality(String),
    group_ranks Array(UInt32),
    group_size UInt32,
    dtype Enum8('unspecified' = 0, 'int8' = 1, 'uint8' = 2, 'int32' = 3, 'uint32' = 4,
                'int64' = 5, 'uint64' = 6, 'float16' = 7, 'float32' = 8, 'float64' = 9,
                'bfloat16' = 10, 'float8_e4m3' = 11, 'float8_e5m2' = 12),
    count UInt64,
    bytes UInt64,
    seq UInt64,
    peer UInt32,
    stream UInt32,
    device Int32,
    start_ns UInt64,
    end_ns UInt64,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(start_ns, 1000000000), 'UTC'))
ORDER BY (job_id, process_group, seq, rank);

-- kernels: GPU kernels, memcpys and memsets of every rank.
-- ORDER BY (job_id, rank, start_ns) serves per-rank GPU timelines of one job in a
-- time window.
CREATE TABLE IF NOT EXISTS kernels
(
    job_id String,
    run_id String,
    rank UInt32,
    node String,
    kind Enum8('kernel' = 1, 'memcpy' = 2, 'memset' = 3),
    name LowCardinality(String),
    stream UInt32,
    device Int32,
    start_ns UInt64,
    end_ns UInt64,
    correlation UInt64,
    bytes UInt64,
    agent_id String,
    agent_session UInt64,
    batch_seq UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(start_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, start_ns);

-- ranks: identity of every rank, one row per batch that carried it; merges keep the
-- latest (highest seen_ns) row per key and day.
-- ORDER BY (job_id, run_id, rank) serves the job list (queries/jobs_ranks.sql: world
-- size, ranks and nodes seen per job and run).
CREATE TABLE IF NOT EXISTS ranks
(
    job_id String,
    run_id String,
    rank UInt32,
    world_size UInt32,
    local_rank UInt32,
    node String,
    pid UInt32,
    label_keys Array(String),
    label_values Array(String),
    seen_ns UInt64
)
ENGINE = ReplacingMergeTree(seen_ns)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(seen_ns, 1000000000), 'UTC'))
ORDER BY (job_id, run_id, rank);

-- ingest_batches: one row per stored agent batch, written after the batch's event rows
-- in the same flush.
-- ORDER BY (agent_id, agent_session, batch_seq) serves seeding duplicate detection after
-- a collector restart (queries/acked_batches.sql).
CREATE TABLE IF NOT EXISTS ingest_batches
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
