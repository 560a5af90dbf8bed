-- Migration 0017 (issue 38): the what-if gain of each straggler verdict version,
-- stored as the stream computed it, so GET /api/v1/jobs/{job}/stragglers need not
-- recompute it from every rank's step_breakdown rows per request.
-- A separate table, not a column of straggler_verdicts: ClickHouse 18.16 has no
-- ADD COLUMN IF NOT EXISTS, and migrations must be re-runnable.
-- Statements end with a semicolon at the end of a line; lines starting with two dashes
-- are comments (see store/migrate.rs).

-- straggler_gains: one row per verdict version whose gain the stream computed over
-- every step of the verdict (rankscope_analysis::expected_gain_pct, held in memory);
-- keyed like straggler_verdicts and replaced by later versions (FINAL on read). A
-- version without a row here (written before this migration, or raised while some
-- of its steps were not in memory) has its gain computed from step_breakdown at read
-- time; so has a version whose row here has another updated_ns (a later version of
-- the verdict had no row). expected_gain_pct NULL: the definition has no value
-- (no peers, or the rank has no row in the verdict's steps).
-- first_seen_ns is the verdict's first_seen_ns, constant per key, so versions meet
-- in one partition (dropped with the verdict's by retention).
-- ORDER BY (job_id, rank, first_step) serves queries/straggler_gains.sql.
CREATE TABLE IF NOT EXISTS straggler_gains
(
    job_id String,
    rank UInt32,
    first_step UInt64,
    last_step UInt64,
    expected_gain_pct Nullable(Float64),
    first_seen_ns UInt64,
    updated_ns UInt64
)
ENGINE = ReplacingMergeTree(updated_ns)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(first_seen_ns, 1000000000), 'UTC'))
ORDER BY (job_id, rank, first_step);
