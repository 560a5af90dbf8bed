-- Migration 0018 (issue 38): the overview's per-rank figures (GET
-- /api/v1/jobs/{job}/overview and advice, api::overview), kept in ClickHouse once the
-- collector has computed them from the job's stored rows, with what those rows
-- were, so that a later cold request reads one row per rank instead of every GPU
-- activity with its launch call and launch figures (8.4 M rows at 1,024 ranks x 100
-- steps, bench/RESULTS-views.md).
-- Statements end with a semicolon at the end of a line; lines starting with two dashes
-- are comments (see store/migrate.rs).

-- overview_ranks: one row per (job, rank) and computation. input_n / input_sum hold,
-- in the order of queries/job_overview_inputs.sql (kernels, kernel_launches,
-- kernel_configs, dataloader spans, step_breakdown, ranks with the plugin's span), the
-- rank's rows and a time sum of each input table read before the figures were
-- computed; a row is used only while the same query gives the same vectors now (any
-- write of the rank's inputs changes a count), otherwise the route computes from the
-- stored rows again and writes a new row. Figures are api::overview::RankOverview's:
-- a NULL percentage is one the definition leaves absent; roles_us in the order of
-- rankscope_analysis::tb_plugin::ROLES. Later computations replace earlier ones
-- (computed_ns; the read keeps the latest row per rank).
-- ORDER BY (job_id, rank) serves queries/job_overview_ranks.sql.
CREATE TABLE IF NOT EXISTS overview_ranks
(
    job_id String,
    rank UInt32,
    computed_ns UInt64,
    input_n Array(UInt64),
    input_sum Array(UInt64),
    steps UInt64,
    span_from String,
    gpu_util_pct Nullable(Float64),
    sm_efficiency_pct Nullable(Float64),
    achieved_occupancy_pct Nullable(Float64),
    tensor_core_pct Nullable(Float64),
    roles_us Array(Float64),
    step_us Float64,
    kernel_total_ns UInt64,
    gemm_conv_ns UInt64,
    launched UInt64,
    short_launches UInt64
)
ENGINE = ReplacingMergeTree(computed_ns)
ORDER BY (job_id, rank);
