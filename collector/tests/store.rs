//! The ClickHouse store against a real server: migrations, the writer's batching,
//! acknowledgement and failure policy, the read queries and retention.
//! Every test works in its own fresh database of one shared private server.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use rankscope_collector::store::gains::StoredGainRow;
use rankscope_collector::store::rows::{
    EvidenceRow, GpuErrorRow, GpuSampleRow, HostSampleRow, RankGpuRow, RankProcessRow,
    TelemetryRows,
};
use rankscope_collector::store::{
    spawn_writer, BatchRow, BreakdownRow, CollectiveRow, GainRow, HangRow, KernelRow, KernelRows,
    RankRow, RowSet, SpanRow, SpanRows, StepRow, StepTimeRow, Store, StoreConfig, StoreError,
    Table, VerdictRow, WriteError, WriterConfig, WriterHandle, MIGRATIONS,
};
use rankscope_testkit::ClickHouse;
use tokio::sync::oneshot;

const DAY_NS: u64 = 86_400 * 1_000_000_000;

fn ch() -> &'static ClickHouse {
    ClickHouse::shared().unwrap_or_else(|e| panic!("{e}"))
}

fn config(url: &str, database: &str) -> StoreConfig {
    StoreConfig {
        url: url.into(),
        database: database.into(),
        ..StoreConfig::default()
    }
}

/// A migrated store in a fresh database.
async fn fresh_store(prefix: &str) -> Store {
    let db = ch().fresh_database(prefix).unwrap();
    let store = Store::connect(&config(&ch().http_url, &db)).unwrap();
    store.migrate().await.unwrap();
    store
}

fn writer_cfg(
    batch_max_rows: usize,
    flush_interval_ms: u64,
    queue_capacity: usize,
) -> WriterConfig {
    WriterConfig {
        batch_max_rows,
        flush_interval_ms,
        queue_capacity,
        ..WriterConfig::default()
    }
}

/// A writer whose shutdown fires when the returned sender is used or dropped.
fn writer(
    store: Store,
    cfg: WriterConfig,
) -> (
    WriterHandle,
    tokio::task::JoinHandle<()>,
    oneshot::Sender<()>,
) {
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (handle, task) = spawn_writer(store, cfg, async move {
        let _ = stop_rx.await;
    });
    (handle, task, stop_tx)
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Relaxed)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn step(job: &str, rank: u32, step: u64, kind: i8, ts_ns: u64) -> StepRow {
    StepRow {
        job_id: job.into(),
        run_id: "run-1".into(),
        rank,
        step,
        kind,
        ts_ns,
        node: format!("node-{}", rank / 8).into(),
        local_rank: rank % 8,
        pid: 1000 + rank,
        agent_id: "agent-a".into(),
        agent_session: 7,
        batch_seq: 1,
    }
}

/// A row set touching every table, with distinctive values in every column.
fn full_row_set(job: &str, seq: u64, ts_ns: u64) -> RowSet {
    let node = "node-0".to_string();
    let agent = "agent-a".to_string();
    RowSet {
        steps: vec![
            StepRow {
                batch_seq: seq,
                ..step(job, 3, seq, 1, ts_ns)
            },
            StepRow {
                batch_seq: seq,
                ..step(job, 3, seq, 2, ts_ns + 5_000)
            },
        ],
        spans: SpanRows::from(vec![SpanRow {
            job_id: job.into(),
            run_id: "run-1".into(),
            rank: 3,
            node: node.as_str().into(),
            category: 6,
            name: "ncclKernel_AllReduce".into(),
            start_ns: ts_ns + 10,
            end_ns: ts_ns + 20,
            stream: 7,
            device: -1,
            agent_id: agent.as_str().into(),
            agent_session: 7,
            batch_seq: seq,
        }]),
        collectives: vec![CollectiveRow {
            job_id: job.into(),
            run_id: "run-1".into(),
            rank: 3,
            node: node.as_str().into(),
            op: 2,
            process_group: "pg:dp".into(),
            group_ranks: vec![1, 3, 5],
            group_size: 3,
            dtype: 10,
            count: 1 << 20,
            bytes: 2 << 20,
            seq: 42,
            peer: 9,
            stream: 13,
            device: 2,
            start_ns: ts_ns + 30,
            end_ns: ts_ns + 40,
            agent_id: agent.as_str().into(),
            agent_session: 7,
            batch_seq: seq,
        }],
        kernels: KernelRows::from(vec![KernelRow {
            job_id: job.into(),
            run_id: "run-1".into(),
            rank: 3,
            node: node.as_str().into(),
            kind: 2,
            name: "Memcpy HtoD".into(),
            stream: 7,
            device: 2,
            start_ns: ts_ns + 50,
            end_ns: ts_ns + 60,
            correlation: u64::MAX - 1,
            bytes: 4096,
            agent_id: agent.as_str().into(),
            agent_session: 7,
            batch_seq: seq,
        }]),
        ranks: vec![RankRow {
            job_id: job.into(),
            run_id: "run-1".into(),
            rank: 3,
            world_size: 8,
            local_rank: 3,
            node: node.clone(),
            pid: 4242,
            label_keys: vec!["model".into(), "team".into()],
            label_values: vec!["llama".into(), "infra".into()],
            seen_ns: ts_ns,
        }],
        batches: vec![BatchRow {
            agent_id: agent,
            agent_session: 7,
            batch_seq: seq,
            node: node.clone(),
            received_ns: ts_ns,
            rows: 5,
        }],
        breakdowns: vec![BreakdownRow {
            job_id: job.into(),
            run_id: "run-1".into(),
            step: 3,
            rank: 3,
            node: node.clone(),
            step_start_ns: ts_ns,
            step_time_ns: 11,
            gpu_span_ns: 12,
            gpu_busy_ns: 13,
            idle_ns: 14,
            compute_ns: 15,
            comm_ns: 16,
            memory_ns: 17,
            overlap_ns: 18,
            exposed_comm_ns: 19,
            non_compute_ns: 20,
            dataloader_ns: 21,
            comm_wait_ns: 22,
            comm_transfer_ns: 23,
            gpu_events: 24,
            computed_ns: ts_ns + 1,
        }],
        verdicts: vec![VerdictRow {
            job_id: job.into(),
            rank: 3,
            node: node.clone(),
            first_step: 2,
            last_step: 6,
            steps_flagged: 4,
            slowdown: 1.3,
            score: 9.5,
            cause: "compute".into(),
            active: 1,
            first_seen_ns: ts_ns,
            updated_ns: ts_ns + 2,
        }],
        gains: vec![GainRow {
            job_id: job.into(),
            rank: 3,
            first_step: 2,
            last_step: 6,
            expected_gain_pct: Some(12.5),
            first_seen_ns: ts_ns,
            updated_ns: ts_ns + 2,
        }],
        hangs: vec![HangRow {
            job_id: job.into(),
            rank: 3,
            node: node.clone(),
            last_step: -1,
            job_step: 8,
            silent_ns: 60_000_000_000,
            detected_ns: ts_ns,
        }],
        telemetry: telemetry_rows(job, seq, ts_ns),
        ..RowSet::default()
    }
}

/// One row of every telemetry table: set metrics, NULL metrics, arrays.
fn telemetry_rows(job: &str, seq: u64, ts_ns: u64) -> TelemetryRows {
    let (node, agent) = ("node-0".to_string(), "agent-a".to_string());
    TelemetryRows {
        gpu_samples: vec![GpuSampleRow {
            node: node.clone(),
            agent_id: agent.clone(),
            agent_session: 7,
            batch_seq: seq,
            ts_ns,
            period_ns: 1_000_000_000,
            gpu_index: 5,
            uuid: "GPU-5".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: "00000000:15:00.0".into(),
            state: 1,
            error: String::new(),
            gpu_util_pct: Some(87.5),
            mem_util_pct: Some(0.0),
            sm_active_pct: None,
            sm_occupancy_pct: Some(33.25),
            tensor_active_pct: None,
            dram_active_pct: Some(12.0),
            mem_used_bytes: Some(1 << 33),
            mem_total_bytes: Some(80 << 30),
            power_w: Some(312.5),
            power_limit_w: None,
            temp_c: Some(88.0),
            sm_clock_mhz: Some(1200),
            sm_clock_max_mhz: Some(1980),
            mem_clock_mhz: None,
            mem_clock_max_mhz: Some(2619),
            throttle_mask: Some(0x60),
            throttle_reasons: vec!["sw_thermal_slowdown".into(), "hw_thermal_slowdown".into()],
            pcie_tx_bytes_per_s: Some(u64::MAX),
            pcie_rx_bytes_per_s: None,
            nvlink_tx_bytes_per_s: Some(0),
            nvlink_rx_bytes_per_s: None,
            ecc_corrected_total: Some(3),
            ecc_uncorrected_total: None,
            xid_errors: Some(1),
            last_xid: Some(79),
            process_pids: vec![10005, 10013],
            process_mem_bytes: vec![Some(1 << 30), None],
            rank_jobs: vec![job.into()],
            rank_ids: vec![5],
        }],
        host_samples: vec![HostSampleRow {
            node: node.clone(),
            agent_id: agent.clone(),
            agent_session: 7,
            batch_seq: seq,
            ts_ns,
            period_ns: 1_000_000_000,
            cpu_util_pct: Some(12.5),
            cpu_core_util_pct: vec![10.0, 15.0],
            load1: Some(0.5),
            load5: None,
            load15: Some(0.25),
            mem_total_bytes: Some(24 << 30),
            mem_used_bytes: Some(3 << 30),
            mem_available_bytes: None,
            net_interfaces: vec!["eth0".into(), "lo".into()],
            net_rx_bytes: vec![1000, 5],
            net_tx_bytes: vec![2000, 5],
        }],
        rank_gpu: vec![RankGpuRow {
            job_id: job.into(),
            rank: 5,
            node: node.clone(),
            gpu_index: 5,
            uuid: "GPU-5".into(),
            ts_ns,
            period_ns: 1_000_000_000,
            gpu_util_pct: Some(87.5),
            sm_active_pct: None,
            sm_clock_mhz: Some(1200),
            power_w: Some(312.5),
            temp_c: None,
            throttle_mask: Some(0x60),
            throttle_reasons: vec!["hw_thermal_slowdown".into()],
            agent_id: agent.clone(),
            agent_session: 7,
            batch_seq: seq,
        }],
        rank_process: vec![RankProcessRow {
            job_id: job.into(),
            rank: 5,
            node: node.clone(),
            pid: 10005,
            ts_ns,
            period_ns: 1_000_000_000,
            cpu_pct: Some(250.5),
            rss_bytes: None,
            agent_id: agent.clone(),
            agent_session: 7,
            batch_seq: seq,
        }],
        gpu_errors: vec![GpuErrorRow {
            node: node.clone(),
            uuid: "GPU-5".into(),
            gpu_index: 5,
            ts_ns,
            period_ns: 1_000_000_000,
            xid_errors: 1,
            last_xid: Some(79),
            ecc_corrected: 2,
            ecc_uncorrected: 0,
            pcie_replays: 3,
            ecc_corrected_total: Some(12),
            ecc_uncorrected_total: None,
            pcie_replays_total: Some(3),
            agent_id: agent,
            agent_session: 7,
            batch_seq: seq,
        }],
        evidence: vec![EvidenceRow {
            job_id: job.into(),
            rank: 5,
            first_step: 2,
            node,
            evidence: "GPU 5 (GPU-5) on node-0: SM clock 1200 MHz vs 1980 MHz".into(),
            gpu_indexes: vec![5],
            gpu_uuids: vec!["GPU-5".into()],
            sm_clock_mhz: Some(1200.0),
            peer_sm_clock_mhz: Some(1980.0),
            throttle_reasons: vec!["hw_thermal_slowdown".into()],
            temp_c: Some(88.0),
            peer_temp_c: None,
            power_w: None,
            peer_power_w: Some(350.0),
            samples: 12,
            peer_gpus: 7,
            first_seen_ns: ts_ns,
            updated_ns: ts_ns + 2,
        }],
    }
}

async fn fetch_all<T: clickhouse::RowOwned + clickhouse::RowRead>(
    store: &Store,
    table: &str,
) -> Vec<T> {
    rows_of(
        store,
        &format!("SELECT ?fields FROM {table} ORDER BY batch_seq"),
    )
    .await
}

/// Every row `sql` returns, as `T`.
async fn rows_of<T: clickhouse::RowOwned + clickhouse::RowRead>(
    store: &Store,
    sql: &str,
) -> Vec<T> {
    store.client().query(sql).fetch_all().await.unwrap()
}

#[tokio::test]
async fn migrations_apply_once_and_record_checksums() {
    let db = ch().fresh_database("migrate").unwrap();
    let store = Store::connect(&config(&ch().http_url, &db)).unwrap();
    let all: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(store.migrate().await.unwrap(), all);
    assert_eq!(
        store.migrate().await.unwrap(),
        Vec::<u32>::new(),
        "second run must apply nothing"
    );

    let recorded = ch()
        .query(&format!(
            "SELECT version, name, checksum FROM {db}.schema_migrations ORDER BY version"
        ))
        .unwrap();
    let expected: String = MIGRATIONS
        .iter()
        .map(|m| format!("{}\t{}\t{}\n", m.version, m.name, m.checksum()))
        .collect();
    assert_eq!(recorded, expected);
    let tables = ch()
        .query(&format!(
            "SELECT name FROM system.tables WHERE database = '{db}' ORDER BY name"
        ))
        .unwrap();
    let mut names: Vec<&str> = Table::ALL
        .iter()
        .map(|t| t.name())
        // Written outside the writer: the migrations' own record, job
        // ownership (collector/src/ownership.rs) and the overview's kept
        // figures (collector/src/store/overview_kept.rs).
        .chain(["schema_migrations", "job_owners", "overview_ranks"])
        // The fleet rollup and its view (migration 0014): derived, not written.
        .chain(["fleet_unit_jobs", "fleet_unit_jobs_mv"])
        .collect();
    names.sort_unstable();
    assert_eq!(tables.lines().collect::<Vec<_>>(), names);
}

#[tokio::test]
async fn migrate_creates_a_missing_database() {
    let db = format!("{}_new", ch().fresh_database("mkdb").unwrap());
    let store = Store::connect(&config(&ch().http_url, &db)).unwrap();
    assert!(!store.migrate().await.unwrap().is_empty());
    assert_eq!(
        ch().query(&format!("EXISTS TABLE {db}.steps"))
            .unwrap()
            .trim(),
        "1"
    );
}

#[tokio::test]
async fn migrate_fails_when_an_applied_migration_changed() {
    let store = fresh_store("checksum").await;
    ch().query(&format!(
        "INSERT INTO {}.schema_migrations VALUES (1, '0001_events', 'fnv1a64:edited', 0)",
        store.database()
    ))
    .unwrap();
    let err = store.migrate().await.unwrap_err();
    assert!(
        matches!(&err, StoreError::ChecksumMismatch { version: 1, recorded, .. } if recorded == "fnv1a64:edited"),
        "{err}"
    );
}

#[tokio::test]
async fn every_row_type_round_trips_through_its_table() {
    let store = fresh_store("roundtrip").await;
    let (handle, _task, _stop) = writer(store.clone(), writer_cfg(100_000, 10, 8));
    let rows = full_row_set("job-rt", 1, now_ns());
    let outcome = handle.write(rows.clone()).await.unwrap();
    assert_eq!(outcome.rows, 5);
    assert_eq!(
        fetch_all::<SpanRow>(&store, "spans").await,
        rows.spans.rows().collect::<Vec<_>>()
    );
    assert_eq!(
        fetch_all::<CollectiveRow>(&store, "collectives").await,
        rows.collectives
    );
    assert_eq!(
        fetch_all::<KernelRow>(&store, "kernels").await,
        rows.kernels.rows().collect::<Vec<_>>()
    );
    assert_eq!(
        fetch_all::<BatchRow>(&store, "ingest_batches").await,
        rows.batches
    );
    let steps: Vec<StepRow> = rows_of(&store, "SELECT ?fields FROM steps ORDER BY kind").await;
    assert_eq!(steps, rows.steps);
    let ranks: Vec<RankRow> = rows_of(&store, "SELECT ?fields FROM ranks").await;
    assert_eq!(ranks, rows.ranks);
    let q = |t: &str| format!("SELECT ?fields FROM {t} FINAL");
    let b: Vec<BreakdownRow> = rows_of(&store, &q("step_breakdown")).await;
    assert_eq!(b, rows.breakdowns);
    let v: Vec<VerdictRow> = rows_of(&store, &q("straggler_verdicts")).await;
    assert_eq!(v, rows.verdicts);
    let g: Vec<GainRow> = rows_of(&store, &q("straggler_gains")).await;
    assert_eq!(g, rows.gains);
    // The stragglers route's read of it (migration 0017), then a later
    // version of the verdict whose gain has no value by the definition.
    let job = &rows.gains[0].job_id;
    let stored = store.straggler_gains(job).await.unwrap();
    let gain = |g: &StoredGainRow| {
        (
            g.rank,
            g.first_step,
            g.last_step,
            g.expected_gain_pct,
            g.updated_ns,
        )
    };
    let first = &rows.gains[0];
    assert_eq!(
        stored.iter().map(gain).collect::<Vec<_>>(),
        vec![(3, 2, 6, Some(12.5), first.updated_ns)]
    );
    let later = GainRow {
        last_step: 7,
        expected_gain_pct: None,
        updated_ns: first.updated_ns + 1,
        ..first.clone()
    };
    handle
        .write(RowSet {
            gains: vec![later.clone()],
            ..RowSet::default()
        })
        .await
        .unwrap();
    let stored = store.straggler_gains(job).await.unwrap();
    assert_eq!(
        stored.iter().map(gain).collect::<Vec<_>>(),
        vec![(3, 2, 7, None, later.updated_ns)]
    );
    assert!(store.straggler_gains("other-job").await.unwrap().is_empty());
    let h: Vec<HangRow> = rows_of(&store, &q("hang_suspects")).await;
    assert_eq!(h, rows.hangs);
    let t = &rows.telemetry;
    let all = |table: &str| format!("SELECT ?fields FROM {table}");
    let got: Vec<GpuSampleRow> = rows_of(&store, &all("gpu_samples")).await;
    assert_eq!(got, t.gpu_samples);
    let got: Vec<HostSampleRow> = rows_of(&store, &all("host_samples")).await;
    assert_eq!(got, t.host_samples);
    let got: Vec<RankGpuRow> = rows_of(&store, &all("rank_gpu_samples")).await;
    assert_eq!(got, t.rank_gpu);
    let got: Vec<RankProcessRow> = rows_of(&store, &all("rank_process_samples")).await;
    assert_eq!(got, t.rank_process);
    let got: Vec<EvidenceRow> = rows_of(&store, &q("straggler_evidence")).await;
    assert_eq!(got, t.evidence);
    let got: Vec<GpuErrorRow> = rows_of(&store, &all("gpu_error_samples")).await;
    assert_eq!(got, t.gpu_errors);
    // The fleet's read of it (migration 0016): the GPU's counts, summed.
    let counters = store.fleet_gpu_counters(0).await.unwrap();
    assert_eq!(counters.len(), 1, "{counters:?}");
    let c = &counters[0];
    assert_eq!(
        (
            c.uuid.as_str(),
            c.xid_errors,
            c.ecc_corrected_errors,
            c.ecc_uncorrected_errors,
            c.pcie_replays
        ),
        ("GPU-5", 1, 2, 0, 3)
    );
    // NULL metrics are NULL in ClickHouse, not 0; the GPU state is named.
    let nulls = ch()
        .query(&format!(
            "SELECT isNull(sm_active_pct), isNull(mem_util_pct), toString(state) FROM {}.gpu_samples",
            store.database()
        ))
        .unwrap();
    assert_eq!(nulls.trim(), "1\t0\tok");
    // Enum8 columns hold the proto numbers under their names.
    let names = ch()
        .query(&format!(
            "SELECT toString(category), (SELECT toString(op) FROM {db}.collectives), \
             (SELECT toString(dtype) FROM {db}.collectives), (SELECT toString(kind) FROM {db}.kernels) \
             FROM {db}.spans",
            db = store.database()
        ))
        .unwrap();
    assert_eq!(
        names.trim(),
        "communication\treduce_scatter\tbfloat16\tmemcpy"
    );
}

#[tokio::test]
async fn a_rank_row_is_written_when_its_identity_changes_or_goes_stale() {
    use rankscope_collector::store::RANKS_REFRESH_NS;
    let store = fresh_store("ranks_refresh").await;
    let (handle, task, stop) = writer(store.clone(), writer_cfg(25, 20, 64));
    let base = now_ns();
    let second = 1_000_000_000;
    // (seen, pid): first row; same identity 1 s later; pid changed; same
    // again 1 s later; the refresh interval after the last row written.
    let rows = [
        (base, 10),
        (base + second, 10),
        (base + 2 * second, 11),
        (base + 3 * second, 11),
        (base + 2 * second + RANKS_REFRESH_NS, 11),
    ];
    for (seq, (seen, pid)) in rows.into_iter().enumerate() {
        let mut set = full_row_set("job-r", seq as u64 + 1, seen);
        set.ranks[0].pid = pid;
        set.ranks[0].seen_ns = seen;
        assert_eq!(handle.write(set).await.unwrap().rows, 5);
    }
    assert_eq!(load(&handle.metrics().table(Table::Ranks).rows), 3);
    let latest = ch()
        .query(&format!(
            "SELECT pid, seen_ns = {} FROM {}.ranks FINAL WHERE job_id = 'job-r'",
            base + 2 * second + RANKS_REFRESH_NS,
            store.database()
        ))
        .unwrap();
    assert_eq!(latest.trim(), "11\t1");
    drop(stop);
    task.await.unwrap();
}

#[tokio::test]
async fn a_relaxed_row_set_waits_until_one_that_may_not_wait_closes_its_window() {
    let store = fresh_store("relaxed").await;
    // Row sets that may not wait close their window at once; relaxed ones
    // would wait a minute.
    let cfg = WriterConfig {
        relaxed_flush_interval_ms: 60_000,
        ..writer_cfg(1_000, 0, 64)
    };
    let (handle, task, stop) = writer(store.clone(), cfg);
    let base = now_ns();
    // Both queued before the writer task runs (one-thread runtime): were the
    // relaxed set closed at once, each would be a window of its own.
    let relaxed = handle
        .enqueue_relaxed(full_row_set("job-x", 1, base))
        .unwrap();
    let urgent = handle.enqueue(full_row_set("job-x", 2, base + 1)).unwrap();
    let within = std::time::Duration::from_secs(20);
    for queued in [urgent, relaxed] {
        let stored = tokio::time::timeout(within, queued.stored()).await;
        assert_eq!(
            stored
                .expect("acknowledged with the urgent set")
                .unwrap()
                .rows,
            5
        );
    }
    assert_eq!(load(&handle.metrics().flushes), 1);
    assert_eq!(store.count_rows(Table::Spans, "job-x").await.unwrap(), 2);
    drop(stop);
    task.await.unwrap();
}

#[tokio::test]
async fn concurrent_writes_are_all_acknowledged_and_stored_exactly_once() {
    let store = fresh_store("concurrent").await;
    let (handle, task, stop) = writer(store.clone(), writer_cfg(25, 20, 64));
    let n = 40u64;
    let base = now_ns();
    let writes = (1..=n).map(|seq| {
        let handle = handle.clone();
        tokio::spawn(async move { handle.write(full_row_set("job-c", seq, base + seq)).await })
    });
    let writes: Vec<_> = writes.collect();
    for w in writes {
        assert_eq!(w.await.unwrap().unwrap().rows, 5);
    }
    for (table, per_set) in [
        (Table::Steps, 2),
        (Table::Spans, 1),
        (Table::Collectives, 1),
        (Table::Kernels, 1),
    ] {
        assert_eq!(
            store.count_rows(table, "job-c").await.unwrap(),
            per_set * n,
            "{table:?}"
        );
        assert_eq!(load(&handle.metrics().table(table).rows), per_set * n);
    }
    assert_eq!(store.count_rows(Table::IngestBatches, "").await.unwrap(), n);
    let m = handle.metrics();
    // One identity, all within RANKS_REFRESH_NS: its first row is written,
    // the other row sets' copies are left out.
    assert_eq!(load(&m.table(Table::Ranks).rows), 1);
    let ranks = ch()
        .query(&format!(
            "SELECT count() FROM {}.ranks FINAL",
            store.database()
        ))
        .unwrap();
    assert_eq!(ranks.trim(), "1");
    // 16 tables (`straggler_gains` of migration 0017 included), and the
    // batch's `ingest_intents` row written first; one `ranks` row in all.
    assert_eq!(load(&m.rows_written), 17 * n + 1);
    assert_eq!(load(&m.insert_failures), 0);
    // Batched: 15 tables and the intents per flush (and `ranks` once), far
    // fewer flushes than row sets.
    assert_eq!(load(&m.inserts), 16 * load(&m.flushes) + 1);
    assert!(
        load(&m.flushes) < n,
        "{} flushes for {n} row sets",
        load(&m.flushes)
    );
    let batches = store.acked_batches("agent-a", 7).await.unwrap();
    assert_eq!(batches, (1..=n).collect::<Vec<_>>());
    drop(stop);
    task.await.unwrap();
}

#[tokio::test]
async fn acknowledged_rows_are_queryable_and_small_batches_wait_for_the_interval() {
    let store = fresh_store("ackvis").await;
    let interval = Duration::from_millis(150);
    let (handle, _task, _stop) = writer(
        store.clone(),
        writer_cfg(1_000, interval.as_millis() as u64, 8),
    );
    for seq in 1..=3u64 {
        let started = Instant::now();
        handle
            .write(full_row_set("job-v", seq, now_ns()))
            .await
            .unwrap();
        assert!(
            started.elapsed() >= interval,
            "a small batch was flushed before the interval"
        );
        assert_eq!(store.count_rows(Table::Spans, "job-v").await.unwrap(), seq);
        assert_eq!(
            store.count_rows(Table::IngestBatches, "").await.unwrap(),
            seq
        );
    }
    // A full batch flushes at once, long before a one-minute interval.
    let (handle, _task, _stop) = writer(store.clone(), writer_cfg(7, 60_000, 8));
    tokio::time::timeout(
        Duration::from_secs(20),
        handle.write(full_row_set("job-v", 4, now_ns())),
    )
    .await
    .expect("batch_max_rows did not trigger a flush")
    .unwrap();
    assert_eq!(store.count_rows(Table::Spans, "job-v").await.unwrap(), 4);
}

#[tokio::test]
async fn clickhouse_down_is_unavailable_and_not_acknowledged() {
    let url = format!("http://127.0.0.1:{}", rankscope_testkit::free_port());
    let store = Store::connect(&config(&url, "rankscope")).unwrap();
    assert!(store.ping().await.unwrap_err().is_transient());
    let (handle, _task, _stop) = writer(store, writer_cfg(1, 10, 8));
    let err = handle
        .write(full_row_set("job-d", 1, now_ns()))
        .await
        .unwrap_err();
    assert!(matches!(err, WriteError::Unavailable(_)), "{err:?}");
    let m = handle.metrics();
    assert_eq!(load(&m.unavailable), 1);
    assert_eq!(load(&m.rows_written), 0);
    // The first failing INSERT cancels the concurrent ones of the same flush.
    let failed: u64 = Table::ALL.iter().map(|t| load(&m.table(*t).failures)).sum();
    assert_eq!(load(&m.insert_failures), failed);
    assert!(failed >= 1);
    assert_eq!(
        load(&m.table(Table::IngestBatches).failures),
        0,
        "batches go last"
    );
}

#[tokio::test]
async fn malformed_rows_are_rejected() {
    // A `steps` table whose last column is wider than the row's u64: the server runs out
    // of data in the middle of the row and refuses the INSERT.
    let db = ch().fresh_database("malformed").unwrap();
    ch().query_in(
        &db,
        "CREATE TABLE steps (job_id String, run_id String, rank UInt32, step UInt64, \
         kind Enum8('begin' = 1, 'end' = 2), ts_ns UInt64, node String, local_rank UInt32, pid UInt32, \
         agent_id String, agent_session UInt64, batch_seq FixedString(16)) ENGINE = MergeTree() ORDER BY job_id",
    )
    .unwrap();
    let store = Store::connect(&config(&ch().http_url, &db)).unwrap();
    let (handle, _task, _stop) = writer(store.clone(), writer_cfg(1, 10, 8));
    let rows = RowSet {
        steps: vec![step("job-m", 0, 1, 1, now_ns())],
        ..RowSet::default()
    };
    let err = handle.write(rows).await.unwrap_err();
    assert!(
        matches!(&err, WriteError::Rejected(msg) if msg.contains("steps")),
        "{err:?}"
    );
    assert_eq!(load(&handle.metrics().rejected), 1);
    assert_eq!(
        ch().query(&format!("SELECT count() FROM {db}.steps"))
            .unwrap()
            .trim(),
        "0"
    );
}

#[tokio::test]
async fn a_full_queue_is_overloaded_at_once_and_a_hung_insert_times_out() {
    // A "server" that accepts connections and never answers keeps the first
    // window committing (its `ingest_intents` INSERT hangs until the timeout).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let store = Store::connect(&config(&url, "rankscope")).unwrap();
    // The hung INSERTs end when the test drops their connections, not by
    // this timeout (a descheduled test must not see them end early).
    let cfg = WriterConfig {
        insert_timeout_ms: 120_000,
        ..writer_cfg(1, 0, 1)
    };
    let (handle, _task, _stop) = writer(store, cfg);

    let first = tokio::spawn({
        let handle = handle.clone();
        async move { handle.write(full_row_set("job-o", 1, now_ns())).await }
    });
    let (_conn, _) = listener.accept().await.unwrap(); // the first window is committing
                                                       // The second row set fills the next window (batch_max_rows = 1), which
                                                       // cannot close while the first commits, so the writer takes no more.
    let second = handle.enqueue(full_row_set("job-o", 2, now_ns())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while handle.queue_len() > 0 {
        assert!(Instant::now() < deadline, "second row set never taken");
        tokio::task::yield_now().await;
    }
    let third = handle.enqueue(full_row_set("job-o", 3, now_ns())).unwrap();
    assert_eq!(handle.queue_len(), 1);
    // Overloaded at once: the first poll answers.
    let fourth =
        futures_util::FutureExt::now_or_never(handle.write(full_row_set("job-o", 4, now_ns())));
    assert_eq!(
        fourth,
        Some(Err(WriteError::Overloaded)),
        "the queue holds 1 row set; Overloaded must not wait"
    );
    assert_eq!(load(&handle.metrics().overloaded), 1);
    // The row bound: a queue of 8 row sets but rows for one.
    let rows_of_one = full_row_set("job-o", 5, now_ns()).total_rows();
    // Its own listener: the first writer's connection is not taken for it.
    let rows_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rows_url = format!("http://{}", rows_listener.local_addr().unwrap());
    let (rows_handle, _rows_task, _rows_stop) = writer(
        Store::connect(&config(&rows_url, "rankscope")).unwrap(),
        WriterConfig {
            insert_timeout_ms: 120_000,
            queue_max_rows: rows_of_one,
            ..writer_cfg(1, 0, 8)
        },
    );
    let a = rows_handle
        .enqueue(full_row_set("job-r", 1, now_ns()))
        .unwrap();
    let (_conn2, _) = rows_listener.accept().await.unwrap(); // its window commits
    let b = rows_handle
        .enqueue(full_row_set("job-r", 2, now_ns()))
        .unwrap();
    while rows_handle.queue_len() > 0 {
        assert!(Instant::now() < deadline, "row set b never taken");
        tokio::task::yield_now().await;
    }
    let c = rows_handle
        .enqueue(full_row_set("job-r", 3, now_ns()))
        .unwrap();
    assert!(
        matches!(
            rows_handle.enqueue(full_row_set("job-r", 4, now_ns())),
            Err(WriteError::Overloaded)
        ),
        "the queue's rows are spent with 7 row sets free"
    );

    // The hung INSERTs fail now; later INSERTs find nothing listening.
    drop((listener, rows_listener, _conn, _conn2));
    for (n, answer) in [
        (1, first.await.unwrap()),
        (2, second.stored().await),
        (3, third.stored().await),
        (11, a.stored().await),
        (12, b.stored().await),
        (13, c.stored().await),
    ] {
        assert!(
            matches!(answer, Err(WriteError::Unavailable(_))),
            "row set {n}: {answer:?}"
        );
    }
}

#[tokio::test]
async fn shutdown_flushes_buffered_rows_then_refuses_writes() {
    let store = fresh_store("shutdown").await;
    let (handle, task, stop) = writer(store.clone(), writer_cfg(100_000, 60_000, 8));
    let (written, ()) = tokio::join!(handle.write(full_row_set("job-s", 1, now_ns())), async {
        tokio::task::yield_now().await; // the write above is queued by now
        stop.send(()).unwrap();
    });
    assert_eq!(written.unwrap().rows, 5);
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("writer did not stop")
        .unwrap();
    assert_eq!(store.count_rows(Table::Steps, "job-s").await.unwrap(), 2);
    let after = handle.write(full_row_set("job-s", 2, now_ns())).await;
    assert!(
        matches!(after, Err(WriteError::Unavailable(_))),
        "{after:?}"
    );
}

/// Steps of job "j": ranks 0 and 1, steps 1..=5; step 3 of rank 0 is written twice (a
/// retried batch); step 5 has only begin markers; rank 1 misses the begin of step 4.
fn step_fixture(base: u64) -> Vec<StepRow> {
    let mut rows = Vec::new();
    for s in 1..=5u64 {
        for r in 0..2u32 {
            let begin = base + s * 1_000_000 + u64::from(r) * 1_000;
            let end = begin + 500_000 + u64::from(r) * 10_000 + s;
            if !(s == 4 && r == 1) {
                rows.push(step("j", r, s, 1, begin));
            }
            if s != 5 {
                rows.push(step("j", r, s, 2, end));
            }
        }
    }
    rows.extend(
        rows.clone()
            .into_iter()
            .filter(|row| row.step == 3 && row.rank == 0),
    );
    rows.push(step("other-job", 0, 1, 1, base));
    rows.push(step("other-job", 0, 1, 2, base + 7));
    rows
}

fn expected_step(base: u64, s: u64, r: u32) -> StepTimeRow {
    let start_ns = base + s * 1_000_000 + u64::from(r) * 1_000;
    let end_ns = start_ns + 500_000 + u64::from(r) * 10_000 + s;
    StepTimeRow {
        step: s,
        rank: r,
        node: "node-0".into(),
        start_ns,
        end_ns,
        step_time_ns: end_ns - start_ns,
    }
}

#[tokio::test]
async fn step_times_pair_markers_per_rank_and_honour_ranges() {
    let store = fresh_store("steps").await;
    let (handle, _task, _stop) = writer(store.clone(), writer_cfg(100_000, 10, 8));
    let base = now_ns() - 3_600 * 1_000_000_000;
    handle
        .write(RowSet {
            steps: step_fixture(base),
            ..RowSet::default()
        })
        .await
        .unwrap();
    let e = |s, r| expected_step(base, s, r);

    let all = store.step_times("j", None, None, None).await.unwrap();
    assert_eq!(
        all,
        vec![
            e(1, 0),
            e(1, 1),
            e(2, 0),
            e(2, 1),
            e(3, 0),
            e(3, 1),
            e(4, 0)
        ]
    );
    assert_eq!(
        store.step_times("j", Some(2), Some(3), None).await.unwrap(),
        vec![e(2, 0), e(2, 1), e(3, 0), e(3, 1)]
    );
    assert_eq!(
        store.step_times("j", None, None, Some(2)).await.unwrap(),
        vec![e(3, 0), e(3, 1), e(4, 0)]
    );
    assert_eq!(
        store.step_times("j", None, Some(2), Some(1)).await.unwrap(),
        vec![e(2, 0), e(2, 1)]
    );
    assert_eq!(
        store
            .step_times("j", Some(4), None, Some(10))
            .await
            .unwrap(),
        vec![e(4, 0)]
    );
    assert!(store
        .step_times("j", Some(5), None, None)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .step_times("j", Some(5), None, Some(3))
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .step_times("nope", None, None, Some(3))
        .await
        .unwrap()
        .is_empty());
    assert!(store.job_exists("j").await.unwrap());
    assert!(!store.job_exists("nope").await.unwrap());
    // Quotes and placeholders in user input are data, not SQL.
    assert!(store
        .step_times("j' OR 1=1 --?", None, None, None)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn jobs_summarise_ranks_and_steps() {
    let store = fresh_store("jobs").await;
    let (handle, _task, _stop) = writer(store.clone(), writer_cfg(100_000, 10, 8));
    let base = now_ns() - 3_600 * 1_000_000_000;
    let mut rows = RowSet {
        steps: step_fixture(base),
        ..RowSet::default()
    };
    for rank in 0..2 {
        let mut r = full_row_set("j", 1, base + 10).ranks.remove(0);
        r.rank = rank;
        r.node = format!("node-{rank}");
        rows.ranks.push(r);
    }
    handle.write(rows).await.unwrap();
    let jobs = store.jobs().await.unwrap();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let j = &jobs[0];
    assert_eq!((j.job.as_str(), j.run_id.as_str()), ("j", "run-1"));
    assert_eq!((j.world_size, j.ranks_seen, j.nodes), (8, 2, 2));
    assert_eq!(j.first_seen_ns, base + 10);
    assert_eq!(
        j.last_seen_ns,
        base + 5_000_000 + 1_000,
        "latest marker: begin of step 5, rank 1"
    );
    assert_eq!(j.last_step, Some(4));
    let other = &jobs[1];
    assert_eq!(
        (other.job.as_str(), other.world_size, other.last_step),
        ("other-job", 0, Some(1))
    );
}

#[tokio::test]
async fn acked_batches_are_per_session_distinct_and_sorted() {
    let store = fresh_store("acked").await;
    let (handle, _task, _stop) = writer(store.clone(), writer_cfg(100_000, 10, 8));
    let batch = |agent: &str, session, seq| BatchRow {
        agent_id: agent.into(),
        agent_session: session,
        batch_seq: seq,
        node: "n".into(),
        received_ns: now_ns(),
        rows: 0,
    };
    let batches = vec![
        batch("agent-b", 1, 3),
        batch("agent-b", 1, 1),
        batch("agent-b", 2, 1),
        batch("agent-b", 1, 3),
        batch("agent-c", 1, 9),
    ];
    handle
        .write(RowSet {
            batches,
            ..RowSet::default()
        })
        .await
        .unwrap();
    assert_eq!(store.acked_batches("agent-b", 1).await.unwrap(), vec![1, 3]);
    assert_eq!(store.acked_batches("agent-b", 2).await.unwrap(), vec![1]);
    assert!(store.acked_batches("agent-x", 1).await.unwrap().is_empty());
}

#[tokio::test]
async fn retention_drops_old_day_partitions_and_keeps_recent_ones() {
    let store = fresh_store("retention").await;
    let (handle, _task, _stop) = writer(store.clone(), writer_cfg(100_000, 10, 8));
    let now = now_ns();
    let day_of = |ns: u64| {
        ch().query(&format!(
            "SELECT toYYYYMMDD(toDateTime({}, 'UTC'))",
            ns / 1_000_000_000
        ))
        .unwrap()
        .trim()
        .to_string()
    };
    // A pid of its own each: the writer writes a rank's row again only when
    // its identity changed or RANKS_REFRESH_NS after the last (the day
    // 10 days back comes after `now` here).
    for (seq, ts) in [(1, now), (2, now - 10 * DAY_NS), (3, now + 8 * DAY_NS)] {
        let mut set = full_row_set("job-r", seq, ts);
        set.ranks[0].pid = seq as u32;
        handle.write(set).await.unwrap();
    }
    assert_eq!(store.count_rows(Table::Spans, "job-r").await.unwrap(), 3);

    assert!(
        store
            .drop_expired_partitions(0, now)
            .await
            .unwrap()
            .is_empty(),
        "0 keeps forever"
    );
    // The day 10 days ago is older than 7 days, but it was written just now
    // (an import of old data): it stays for 7 days after its write.
    assert!(store
        .drop_expired_partitions(7, now)
        .await
        .unwrap()
        .is_empty());
    // 8 days later both the old day and today have expired; day +8 stays.
    let later = now + 8 * DAY_NS;
    let dropped = store.drop_expired_partitions(7, later).await.unwrap();
    let tables = [
        "collectives",
        "gpu_error_samples",
        "gpu_samples",
        "hang_suspects",
        "host_samples",
        "ingest_batches",
        "ingest_intents",
        "kernels",
        "rank_gpu_samples",
        "rank_process_samples",
        "ranks",
        "spans",
        "step_breakdown",
        "steps",
        "straggler_evidence",
        "straggler_gains",
        "straggler_verdicts",
    ];
    let mut expected: Vec<String> = tables
        .iter()
        .flat_map(|t| {
            [
                format!("{t}/{}", day_of(now - 10 * DAY_NS)),
                format!("{t}/{}", day_of(now)),
            ]
        })
        .collect();
    // The fleet rollup (migration 0014) keeps a month until its last day is
    // past the retention: the months of the three writes whose last day
    // comes before the cutoff day go.
    let cutoff = day_of(later - 7 * DAY_NS);
    let month_end_of = |ns: u64| {
        ch().query(&format!(
            "SELECT toYYYYMMDD(addDays(addMonths(toStartOfMonth(toDateTime({}, 'UTC')), 1), -1))",
            ns / 1_000_000_000
        ))
        .unwrap()
        .trim()
        .to_string()
    };
    let mut months: Vec<String> = [now - 10 * DAY_NS, now, now + 8 * DAY_NS]
        .iter()
        .map(|ts| month_end_of(*ts))
        .filter(|m| *m < cutoff)
        .collect();
    months.dedup();
    expected.extend(months.iter().map(|m| format!("fleet_unit_jobs/{m}")));
    expected.sort();
    assert_eq!(dropped, expected);
    for table in [
        Table::Steps,
        Table::Spans,
        Table::Collectives,
        Table::Kernels,
        Table::Ranks,
    ] {
        assert_eq!(
            store.count_rows(table, "job-r").await.unwrap(),
            if table == Table::Steps { 2 } else { 1 }
        );
    }
    assert_eq!(store.acked_batches("agent-a", 7).await.unwrap(), vec![3]);
    assert!(
        store
            .drop_expired_partitions(7, later)
            .await
            .unwrap()
            .is_empty(),
        "idempotent"
    );
}

/// The collectives reads (calls aggregated in ClickHouse, only the rows of
/// mixed calls and, per rank, the rank's own rows read) give what matching
/// every stored row gives, to the bit, job-wide and per rank: uniform all-reduces, a rank reported twice, send / recv pairs,
/// ranks that disagree on bytes, an inverted timestamp, and another job
/// under the same (process group, seq).
#[tokio::test]
async fn job_collective_stats_equal_the_row_by_row_statistics() {
    use rankscope_analysis::{collective_stats, CollOp, CollectiveObs};
    let store = fresh_store("rs_coll_agg").await;
    let t0 = now_ns();
    let mut rows: Vec<CollectiveRow> = Vec::new();
    let mut row =
        |job: &str, rank: u32, op: CollOp, pg: &str, seq: u64, bytes: u64, start: u64, dur: i64| {
            let start_ns = t0 + start;
            rows.push(CollectiveRow {
                job_id: job.into(),
                run_id: "r".into(),
                rank,
                node: "n".into(),
                op: CollOp::ALL.iter().position(|o| *o == op).unwrap() as i8 + 1,
                process_group: pg.into(),
                group_ranks: Vec::new(),
                group_size: if matches!(op, CollOp::Send | CollOp::Recv) {
                    2
                } else {
                    8
                },
                dtype: if seq.is_multiple_of(3) { 10 } else { 8 },
                count: 0,
                bytes,
                seq,
                peer: 0,
                stream: 0,
                device: 0,
                start_ns,
                end_ns: start_ns.saturating_add_signed(dur),
                agent_id: "a".into(),
                agent_session: 1,
                batch_seq: 1,
            });
        };
    for seq in 0..40u64 {
        for rank in 0..8u32 {
            let jitter = (u64::from(rank) * 7_919 + seq * 104_729) % 50_000;
            let late = if rank == 5 { 400_000 } else { 0 };
            let bytes = if seq == 17 && rank == 2 {
                1 << 20
            } else {
                64 << 20
            };
            let dur = 1_000_000 + jitter as i64 + late;
            // At-least-once: rank 4 reports call 9 twice, the copy started later.
            let copies: &[u64] = if seq == 9 && rank == 4 { &[0, 5] } else { &[0] };
            for &later in copies {
                let start = seq * 10_000_000 + later;
                row("agg", rank, CollOp::AllReduce, "0", seq, bytes, start, dur);
            }
        }
        // A pipeline stage pair: send and recv under one seq.
        row(
            "agg",
            0,
            CollOp::Send,
            "pp",
            seq,
            8 << 20,
            seq * 10_000_000,
            300_000,
        );
        row(
            "agg",
            1,
            CollOp::Recv,
            "pp",
            seq,
            8 << 20,
            seq * 10_000_000,
            350_000 + seq as i64,
        );
        row("other", 0, CollOp::AllReduce, "0", seq, 1, 0, 1);
    }
    row("agg", 3, CollOp::Broadcast, "tp", 1, 4096, 0, -10); // inverted: 0 ns
    row("agg", 4, CollOp::Broadcast, "tp", 1, 4096, 0, 20_000);
    let obs: Vec<CollectiveObs> = rows
        .iter()
        .filter(|r| &*r.job_id == "agg")
        .map(|r| CollectiveObs {
            rank: r.rank,
            process_group: r.process_group.to_string(),
            seq: r.seq,
            op: CollOp::ALL[(r.op - 1) as usize],
            dtype: if r.dtype == 10 { "bfloat16" } else { "float32" }.into(),
            group_size: r.group_size,
            bytes: r.bytes,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
        })
        .collect();
    // Stored in several INSERTs (parts), as the writer stores batches.
    for chunk in rows.chunks(97) {
        let mut ins = store
            .client()
            .insert::<CollectiveRow>("collectives")
            .await
            .unwrap();
        for r in chunk {
            ins.write(r).await.unwrap();
        }
        ins.end().await.unwrap();
    }
    let want = collective_stats(&obs, false);
    let got = store.collective_stats("agg", None).await.unwrap();
    assert_eq!(got, want);
    // Every row but the duplicate is a call.
    assert_eq!(
        got.iter().map(|s| s.calls).sum::<u64>(),
        obs.len() as u64 - 1
    );
    assert!(got.iter().any(|s| s.op == CollOp::Send) && got.iter().any(|s| s.wait_ns_total > 0));
    // Per rank: the rank's rows against the calls' durations, as every row
    // matched per rank (rank 4 reported a call twice, rank 0 sends, rank 9
    // has no rows).
    let per_rank = collective_stats(&obs, true);
    for rank in [0, 2, 4, 5, 9] {
        let want: Vec<_> = per_rank
            .iter()
            .filter(|s| s.rank == Some(rank))
            .cloned()
            .collect();
        assert_eq!(
            store.collective_stats("agg", Some(rank)).await.unwrap(),
            want,
            "rank {rank}"
        );
    }
}

/// The GPU activities' read sends each name as its cityHash64 and maps it
/// back (`job_gpu_ops.sql`, `job_gpu_op_names.sql`); it answers exactly as
/// the read with the name on every row (`job_gpu_ops_named.sql`, its
/// fallback when two names share a hash), names and order included.
#[tokio::test]
async fn gpu_activities_read_by_name_hash_equal_the_named_read() {
    let store = fresh_store("gpuops").await;
    let (handle, _task, _stop) = writer(store.clone(), writer_cfg(100_000, 10, 8));
    let base = now_ns();
    let names = [
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "Memcpy HtoD (Pageable -> Device)",
        "",
    ];
    let mut rows = RowSet::default();
    for rank in 0..3u32 {
        for i in 0..40u64 {
            let name = names[(i as usize + rank as usize) % names.len()];
            rows.kernels.push(KernelRow {
                job_id: "job-ops".into(),
                run_id: "run-1".into(),
                rank,
                node: "node-a".into(),
                kind: if name.starts_with("Memcpy") { 2 } else { 1 },
                name: name.into(),
                stream: 7 + (i % 2) as u32,
                device: 0,
                start_ns: base + i * 1_000,
                end_ns: base + i * 1_000 + 500 + u64::from(rank),
                correlation: i + 1,
                bytes: if name.starts_with("Memcpy") { 4096 } else { 0 },
                agent_id: "agent-1".into(),
                agent_session: 1,
                batch_seq: u64::from(rank),
            });
        }
    }
    handle.write(rows).await.unwrap();
    let by_hash = store.gpu_ops("job-ops").await.unwrap();
    let named = store.gpu_ops_named("job-ops").await.unwrap();
    assert_eq!(by_hash.len(), 3);
    assert_eq!(by_hash.iter().map(|r| r.ops.len()).sum::<usize>(), 120);
    assert_eq!(by_hash, named);
    let first: Vec<&str> = by_hash[1].ops.iter().take(4).map(|o| &*o.name).collect();
    assert_eq!(first, [names[1], names[2], names[3], names[0]]);
    assert!(store.gpu_ops("no-such-job").await.unwrap().is_empty());
}

#[path = "store/collectives.rs"]
mod collectives;
