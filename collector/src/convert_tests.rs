use super::*;
use proto::event::Kind;

fn identity(rank: u32) -> proto::RankIdentity {
    proto::RankIdentity {
        job_id: "job-1".into(),
        rank,
        world_size: 4,
        local_rank: rank,
        node: String::new(),
        pid: 100 + rank,
        run_id: "r1".into(),
        labels: [("team".to_string(), "llm".to_string())].into(),
    }
}

fn batch(groups: Vec<proto::RankEvents>) -> proto::AgentBatch {
    proto::AgentBatch {
        agent_id: "agent-a".into(),
        agent_session: 42,
        seq: 7,
        node: "node-a".into(),
        sent_at_ns: 1,
        ranks: groups,
        ..Default::default()
    }
}

fn ev(k: Kind) -> proto::Event {
    proto::Event { kind: Some(k) }
}

fn group(rank: u32) -> proto::RankEvents {
    proto::RankEvents {
        identity: Some(identity(rank)),
        names: vec![
            proto::InternedName {
                id: 1,
                name: "sm80_xmma_gemm".into(),
            },
            proto::InternedName {
                id: 2,
                name: "default_pg".into(),
            },
        ],
        events: vec![
            ev(Kind::StepBegin(proto::StepBegin {
                step: 3,
                ts_ns: 1_000,
            })),
            ev(Kind::Span(proto::Span {
                category: proto::SpanCategory::Forward as i32,
                name_id: 0,
                start_ns: 1_000,
                end_ns: 1_500,
                stream: 0,
                device: -1,
            })),
            ev(Kind::Kernel(proto::Kernel {
                kind: proto::KernelKind::Kernel as i32,
                name_id: 1,
                stream: 7,
                device: 0,
                start_ns: 1_100,
                end_ns: 1_200,
                correlation: 9,
                bytes: 0,
                ..Default::default()
            })),
            ev(Kind::Collective(proto::Collective {
                op: proto::CollectiveOp::AllReduce as i32,
                process_group_id: 2,
                group_ranks: vec![0, 1, 2, 3],
                group_size: 4,
                dtype: proto::DataType::Bfloat16 as i32,
                count: 1024,
                bytes: 2048,
                seq: 5,
                stream: 9,
                device: 0,
                start_ns: 1_300,
                end_ns: 1_400,
                peer: 0,
            })),
            ev(Kind::StepEnd(proto::StepEnd {
                step: 3,
                ts_ns: 2_000,
            })),
        ],
        ..Default::default()
    }
}

#[test]
fn converts_every_event_with_batch_identity() {
    let rows = convert(&batch(vec![group(0), group(1)]), 99).unwrap();
    assert_eq!(rows.steps.len(), 4);
    assert_eq!(rows.spans.len(), 2);
    assert_eq!(rows.kernels.len(), 2);
    assert_eq!(rows.collectives.len(), 2);
    assert_eq!(rows.ranks.len(), 2);
    assert_eq!(rows.len(), 10);
    let k = &rows.kernels.row(1);
    assert_eq!(
        (k.rank, &*k.name, &*k.node),
        (1, "sm80_xmma_gemm", "node-a")
    );
    assert_eq!(
        (&*k.agent_id, k.agent_session, k.batch_seq),
        ("agent-a", 42, 7)
    );
    let c = &rows.collectives[0];
    assert_eq!(&*c.process_group, "default_pg");
    assert_eq!((c.op, c.dtype, c.bytes, c.seq), (1, 10, 2048, 5));
    assert_eq!(rows.steps[0].kind, 1);
    assert_eq!(rows.steps[1].kind, 2);
    assert_eq!(rows.ranks[0].label_keys, vec!["team".to_string()]);
    let b = &rows.batches[0];
    assert_eq!((b.batch_seq, b.rows, b.received_ns), (7, 10, 99));
}

#[test]
fn one_bad_group_rejects_the_whole_batch() {
    let mut bad = group(2);
    bad.identity.as_mut().unwrap().rank = 4;
    let err = convert(&batch(vec![group(0), bad]), 1).unwrap_err();
    assert_eq!(err.reason(), "rank_out_of_range");
    let msg = err.to_string();
    assert!(
        msg.contains("ranks[1]") && msg.contains("rank = 4"),
        "{msg}"
    );
}

#[test]
fn names_must_be_in_the_batch() {
    let mut g = group(0);
    g.names.retain(|n| n.id != 1);
    let err = convert(&batch(vec![g]), 1).unwrap_err();
    assert_eq!(err.reason(), "unknown_name_id");
}

#[test]
fn batch_header_is_checked() {
    let mut b = batch(vec![group(0)]);
    b.agent_session = 0;
    assert_eq!(convert(&b, 1).unwrap_err().reason(), "bad_batch_header");
    let mut b = batch(vec![group(0)]);
    b.agent_id.clear();
    assert!(convert(&b, 1).unwrap_err().to_string().contains("agent_id"));
}

#[test]
fn name_table_finds_dense_and_sparse_ids_and_nothing_else() {
    let t = NameTable::new([(1, "a"), (2, "b"), (1_000_000, "far")].into_iter());
    assert_eq!(t.get(1), Some(&"a"));
    assert_eq!(t.get(2), Some(&"b"));
    assert_eq!(t.get(1_000_000), Some(&"far"));
    for unknown in [0, 3, 70, 999_999, u32::MAX] {
        assert_eq!(t.get(unknown), None, "{unknown}");
    }
}

#[test]
fn event_row_vectors_are_reserved_for_exactly_their_rows() {
    let mut traced = group(1);
    traced.events.push(ev(Kind::Kernel(proto::Kernel {
        kind: proto::KernelKind::Kernel as i32,
        name_id: 1,
        stream: 7,
        device: 0,
        start_ns: 1_300,
        end_ns: 1_400,
        correlation: 10,
        launch_start_ns: 1_250,
        launch_end_ns: 1_260,
        launch_name_id: 1,
        config: Some(Box::new(proto::KernelConfig {
            grid: vec![64, 1, 1],
            block: vec![128, 1, 1],
            registers_per_thread: 32,
            ..Default::default()
        })),
        ..Default::default()
    })));
    let rows = convert(&batch(vec![group(0), traced]), 5).expect("valid batch");
    let sizes = [
        ("steps", rows.steps.len(), rows.steps.capacity()),
        ("spans", rows.spans.len(), rows.spans.capacity()),
        (
            "collectives",
            rows.collectives.len(),
            rows.collectives.capacity(),
        ),
        ("kernels", rows.kernels.len(), rows.kernels.capacity()),
        ("launches", rows.launches.len(), rows.launches.capacity()),
        (
            "configs",
            rows.kernel_configs.len(),
            rows.kernel_configs.capacity(),
        ),
    ];
    for (table, len, capacity) in sizes {
        assert!(len > 0, "{table}: the batch makes rows");
        assert_eq!(capacity, len, "{table}: capacity beyond the rows");
    }
}

/// A rank's kernels, launches and spans leave conversion in start order
/// (the table's `ORDER BY` time), each table's rows of a group sorted on
/// their own, whatever order they were sent in.
#[test]
fn a_groups_kernels_launches_and_spans_come_out_in_start_order() {
    let mut g = group(0);
    g.events
        .retain(|e| !matches!(e.kind, Some(Kind::Kernel(_) | Kind::Span(_))));
    for start in [1_400u64, 1_100, 1_300, 1_200] {
        g.events.insert(
            1,
            ev(Kind::Kernel(proto::Kernel {
                kind: proto::KernelKind::Kernel as i32,
                name_id: 1,
                start_ns: start,
                end_ns: start + 50,
                correlation: start,
                launch_start_ns: start - 90,
                launch_end_ns: start - 80,
                ..Default::default()
            })),
        );
        g.events.insert(
            1,
            ev(Kind::Span(proto::Span {
                category: proto::SpanCategory::Forward as i32,
                start_ns: start,
                end_ns: start + 60,
                device: -1,
                ..Default::default()
            })),
        );
    }
    let rows = convert(&batch(vec![g, group(1)]), 5).expect("valid batch");
    let kernels: Vec<(u32, u64, u64)> = rows
        .kernels
        .rows()
        .map(|k| (k.rank, k.start_ns, k.correlation))
        .collect();
    assert_eq!(
        kernels,
        [
            (0, 1_100, 1_100),
            (0, 1_200, 1_200),
            (0, 1_300, 1_300),
            (0, 1_400, 1_400),
            (1, 1_100, 9)
        ],
        "every column moves with its row"
    );
    let launches: Vec<(u64, u64)> = rows
        .launches
        .rows()
        .map(|l| (l.kernel_start_ns, l.start_ns))
        .collect();
    assert_eq!(
        launches,
        [
            (1_100, 1_010),
            (1_200, 1_110),
            (1_300, 1_210),
            (1_400, 1_310)
        ]
    );
    let spans: Vec<(u32, u64)> = rows.spans.rows().map(|s| (s.rank, s.start_ns)).collect();
    assert_eq!(
        spans,
        [(0, 1_100), (0, 1_200), (0, 1_300), (0, 1_400), (1, 1_000)]
    );
}
