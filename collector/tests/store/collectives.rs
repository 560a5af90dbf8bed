//! The job-wide collectives read of a job whose calls are all uniform:
//! ClickHouse computes each statistics group's nearest-rank p50 / p99
//! (`job_collective_groups.sql`) and only per-call sums travel. Its answer
//! equals matching every stored row, to the bit, for groups of odd and even
//! sizes, tied durations, sizes within one power-of-two bucket, 0 bytes and
//! inverted (0 ns) calls, and a group of 100 distinct durations, where p99
//! is the 99th value, not the 100th.

use rankscope_analysis::{collective_stats, CollOp, CollectiveObs};
use rankscope_collector::store::CollectiveRow;

use super::{fresh_store, now_ns};

#[tokio::test]
async fn uniform_job_percentiles_computed_in_clickhouse_equal_the_row_statistics() {
    let store = fresh_store("rs_coll_uni").await;
    let t0 = now_ns();
    let mut rows: Vec<CollectiveRow> = Vec::new();
    // One call of `durations.len()` ranks, each rank's duration given.
    let mut call = |pg: &str, op: CollOp, seq: u64, bytes: u64, durations: &[i64]| {
        for (rank, &dur) in durations.iter().enumerate() {
            let start_ns = t0 + seq * 10_000_000 + rank as u64 * 13;
            rows.push(CollectiveRow {
                job_id: "uni".into(),
                run_id: "r".into(),
                rank: rank as u32,
                node: "n".into(),
                op: CollOp::ALL.iter().position(|o| *o == op).unwrap() as i8 + 1,
                process_group: pg.into(),
                group_ranks: Vec::new(),
                group_size: durations.len() as u32,
                dtype: 8,
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
        }
    };
    // Even count with ties: p50 = 20 (2nd of 4), p99 = 30.
    call("even", CollOp::Broadcast, 0, 4096, &[30, 10, 20, 20]);
    // Odd count: p50 = 7, p99 = 9.
    call("odd", CollOp::Broadcast, 0, 4096, &[9, 5, 7]);
    // 100 distinct durations in one call: p50 = 50, p99 = 99.
    let hundred: Vec<i64> = (1..=100).rev().collect();
    call("hundred", CollOp::AllToAll, 0, 1 << 20, &hundred);
    // Many calls of 8 ranks: jitter, ties, a late rank, sizes 3,000 and
    // 4,000 (one bucket), an inverted call and 0 bytes.
    for seq in 0..40u64 {
        let d: Vec<i64> = (0..8i64)
            .map(|r| {
                let late = if r == 5 { 400_000 } else { 0 };
                1_000_000 + (r * 7_919 + seq as i64 * 104_729) % 5_000 / 1_000 * 1_000 + late
            })
            .collect();
        call("0", CollOp::AllReduce, seq, 64 << 20, &d);
        let bytes = if seq.is_multiple_of(2) { 3_000 } else { 4_000 };
        call("tp", CollOp::ReduceScatter, seq, bytes, &d[..3]);
        call("bar", CollOp::Barrier, seq, 0, &[50, 50 + seq as i64]);
    }
    call("inv", CollOp::AllGather, 0, 8 << 20, &[-10, 20_000, 20_000]);
    let obs: Vec<CollectiveObs> = rows
        .iter()
        .map(|r| CollectiveObs {
            rank: r.rank,
            process_group: r.process_group.to_string(),
            seq: r.seq,
            op: CollOp::ALL[(r.op - 1) as usize],
            dtype: "float32".into(),
            group_size: r.group_size,
            bytes: r.bytes,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
        })
        .collect();
    // Stored in several INSERTs (parts), as the writer stores batches.
    for chunk in rows.chunks(61) {
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
    let got = store.collective_stats("uni", None).await.unwrap();
    assert_eq!(got, collective_stats(&obs, false));
    let pct = |pg: &str| {
        let s = got.iter().find(|s| s.process_group == pg).unwrap();
        (s.p50_duration_ns, s.p99_duration_ns)
    };
    assert_eq!(pct("even"), (20, 30));
    assert_eq!(pct("odd"), (7, 9));
    assert_eq!(pct("hundred"), (50, 99));
    assert_eq!(pct("inv"), (20_000, 20_000));
    assert_eq!(got.iter().filter(|s| s.process_group == "tp").count(), 1);
    // Per rank: the calls' sums and the rank's own rows.
    let per_rank = collective_stats(&obs, true);
    for rank in [0, 2, 5, 7, 99] {
        let want: Vec<_> = per_rank
            .iter()
            .filter(|s| s.rank == Some(rank))
            .cloned()
            .collect();
        assert_eq!(
            store.collective_stats("uni", Some(rank)).await.unwrap(),
            want,
            "rank {rank}"
        );
    }
}
