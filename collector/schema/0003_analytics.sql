-- Results of the collector's live analytics (collector/src/stream), so history is
-- queryable without recomputation. Written when a step is finalized across ranks.
-- ReplacingMergeTree: a recomputation (re-import of the same trace, a verdict that
-- is updated while it stays active) replaces the row with the same sorting key;
-- reads use FINAL. The partition key is a time that is constant for a sorting key,
-- so replaced rows always meet in the same partition.

-- step_breakdown: per (job, step, rank) HTA-compatible GPU time breakdown.
-- ORDER BY (job_id, step, rank) serves `breakdown --step N | --last K` (one job,
-- a step range, all ranks) and the per-rank summaries of queries/breakdown_*.sql.
CREATE TABLE IF NOT EXISTS step_breakdown
(
    job_id String,
    run_id String,
    step UInt64,
    rank UInt32,
    node String,
    step_start_ns UInt64,
    step_time_ns UInt64,
    gpu_span_ns UInt64,
    gpu_busy_ns UInt64,
    idle_ns UInt64,
    compute_ns UInt64,
    comm_ns UInt64,
    memory_ns UInt64,
    overlap_ns UInt64,
    exposed_comm_ns UInt64,
    non_compute_ns UInt64,
    dataloader_ns UInt64,
    comm_wait_ns UInt64,
    comm_transfer_ns UInt64,
    gpu_events UInt64,
    computed_ns UInt64
)
ENGINE = ReplacingMergeTree(computed_ns)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(step_start_ns, 1000000000), 'UTC'))
ORDER BY (job_id, step, rank);

-- straggler_verdicts: one row per verdict (a rank flagged in >= K of the last N
-- steps), replaced by later versions while it is active and when it clears.
-- ORDER BY (job_id, rank, first_step) serves `stragglers --job J` (one job, all
-- verdicts) and identifies a verdict for replacement.
CREATE TABLE IF NOT EXISTS straggler_verdicts
(
    job_id String,
    rank UInt32,
    node String,
    first_step UInt64,
    last_step UInt64,
    steps_flagged UInt64,
    slowdown Float64,
    score Float64,
    cause LowCardinality(String),
    active UInt8,
    first_seen_ns UInt64,
    updated_ns UInt64
)
ENGINE = ReplacingMergeTree(updated_ns)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(first_seen_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, first_step);

-- hang_suspects: a rank missing from finalized steps while the others progress.
-- ORDER BY (job_id, rank, last_step) serves the per-job listing and keeps one row
-- per (rank, last step seen).
CREATE TABLE IF NOT EXISTS hang_suspects
(
    job_id String,
    rank UInt32,
    node String,
    last_step Int64,
    job_step UInt64,
    silent_ns UInt64,
    detected_ns UInt64
)
ENGINE = ReplacingMergeTree(detected_ns)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(detected_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, last_step);
