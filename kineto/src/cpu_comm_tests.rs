use super::*;

fn rec(kind: HostKind, ordinal: u64, start: u64, end: u64, tid: u64, op: Option<Op>) -> HostComm {
    HostComm {
        kind,
        ordinal,
        start,
        end,
        pid: 1,
        tid,
        op,
        ext: None,
        meta: None,
        elems: None,
        dtype: None,
    }
}

#[test]
fn names_map_to_record_kinds() {
    assert_eq!(
        HostComm::kind_of("c10d::allreduce_", true),
        Some((HostKind::C10d, Some(Op::AllReduce)))
    );
    assert_eq!(
        HostComm::kind_of("c10d::_allgather_base_", true),
        Some((HostKind::C10d, Some(Op::AllGather)))
    );
    assert_eq!(
        HostComm::kind_of("c10d::reduce_scatter_", true),
        Some((HostKind::C10d, Some(Op::ReduceScatter)))
    );
    assert_eq!(
        HostComm::kind_of("c10d::barrier", true),
        Some((HostKind::C10d, Some(Op::Barrier)))
    );
    assert_eq!(HostComm::kind_of("c10d::wait", true), None);
    assert_eq!(
        HostComm::kind_of("record_param_comms", true),
        Some((HostKind::ParamComms, None))
    );
    assert_eq!(
        HostComm::kind_of("gloo:all_reduce", false),
        Some((HostKind::Gloo, Some(Op::AllReduce)))
    );
    assert_eq!(
        HostComm::kind_of("nccl:all_reduce", false),
        Some((HostKind::NcclAnnotation, None))
    );
    assert_eq!(HostComm::kind_of("gloo:all_reduce", true), None);
    assert_eq!(HostComm::kind_of("aten::add", true), None);
}

#[test]
fn one_call_per_c10d_op_with_its_record_param_comms_and_gloo_work() {
    let mut rpc = rec(HostKind::ParamComms, 11, 105, 150, 7, None);
    rpc.meta = Some(CommMeta {
        collective_name: Some("allreduce".into()),
        in_nelems: Some(1024),
        out_nelems: Some(1024),
        dtype: Some("Float".into()),
        pg_name: Some("0".into()),
        ..Default::default()
    });
    let mut gloo = rec(HostKind::Gloo, 30, 170, 900, 99, Some(Op::AllReduce));
    gloo.elems = Some(1024);
    gloo.dtype = Some((Dt::Float32, 4));
    let host = vec![
        gloo,
        rec(HostKind::C10d, 10, 100, 200, 7, Some(Op::AllReduce)),
        rpc,
        // A later barrier with no gloo work recorded.
        rec(HostKind::C10d, 20, 300, 310, 7, Some(Op::Barrier)),
    ];
    let calls = calls(host, &[], &HashSet::new());
    assert_eq!(calls.len(), 2, "{calls:?}");
    let c = &calls[0];
    assert_eq!(
        (c.ordinal, c.op, c.start, c.end),
        (10, Op::AllReduce, 100, 900)
    );
    assert_eq!(c.meta.pg_name.as_deref(), Some("0"));
    assert_eq!(c.meta.in_nelems, Some(1024));
    assert_eq!(c.dtype, Some((Dt::Float32, 4)));
    let b = &calls[1];
    assert_eq!(
        (b.ordinal, b.op, b.start, b.end),
        (20, Op::Barrier, 300, 310)
    );
}

#[test]
fn calls_that_launched_nccl_kernels_are_not_host_collectives() {
    let mut by_ext = rec(HostKind::C10d, 1, 100, 200, 7, Some(Op::AllReduce));
    by_ext.ext = Some(42);
    let host = vec![
        by_ext,
        // Contains an nccl: annotation.
        rec(HostKind::C10d, 2, 300, 400, 7, Some(Op::Broadcast)),
        rec(HostKind::NcclAnnotation, 3, 310, 390, 7, None),
        // Contains an NCCL kernel launch.
        rec(HostKind::C10d, 4, 500, 600, 7, Some(Op::AllGather)),
        // A gloo call.
        rec(HostKind::C10d, 5, 700, 800, 7, Some(Op::AllReduce)),
    ];
    let calls = calls(host, &[550], &HashSet::from([42]));
    let ords: Vec<u64> = calls.iter().map(|c| c.ordinal).collect();
    assert_eq!(ords, [5]);
}

#[test]
fn a_one_rank_nccl_call_without_a_kernel_is_a_host_collective() {
    // NCCL launches no kernel for a 1-rank communicator (H200, NCCL 2.28.9:
    // `nccl:all_reduce` around a Memcpy DtoD): the call is the collective.
    let one_rank = |ordinal, start, end, group_size| {
        let mut r = rec(HostKind::ParamComms, ordinal, start, end, 7, None);
        r.meta = Some(CommMeta {
            collective_name: Some("allreduce".into()),
            in_nelems: Some(16),
            out_nelems: Some(16),
            group_size: Some(group_size),
            dtype: Some("Float".into()),
            pg_name: Some("0".into()),
            pg_ranks: Some(vec![0]),
        });
        r
    };
    let host = vec![
        rec(HostKind::C10d, 1, 100, 200, 7, Some(Op::AllReduce)),
        one_rank(2, 110, 190, 1),
        rec(HostKind::NcclAnnotation, 3, 120, 180, 7, None),
        // A 2-rank group's call whose kernel fell outside the trace: not
        // a host collective (its kernel is the collective).
        rec(HostKind::C10d, 4, 300, 400, 7, Some(Op::AllReduce)),
        one_rank(5, 310, 390, 2),
        rec(HostKind::NcclAnnotation, 6, 320, 380, 7, None),
        // A 1-rank call whose kernel is in the trace (launched inside it).
        rec(HostKind::C10d, 7, 500, 600, 7, Some(Op::AllReduce)),
        one_rank(8, 510, 590, 1),
        rec(HostKind::NcclAnnotation, 9, 520, 580, 7, None),
    ];
    let calls = calls(host, &[550], &HashSet::new());
    let got: Vec<(u64, Op, Option<u32>)> = calls
        .iter()
        .map(|c| (c.ordinal, c.op, c.meta.group_size))
        .collect();
    assert_eq!(got, [(1, Op::AllReduce, Some(1))]);
}

#[test]
fn gloo_work_goes_to_the_first_call_of_its_op_in_order() {
    let host = vec![
        // Work from a call before the trace: no call, dropped.
        rec(HostKind::Gloo, 1, 50, 90, 9, Some(Op::AllReduce)),
        rec(HostKind::C10d, 2, 100, 110, 7, Some(Op::AllReduce)),
        rec(HostKind::C10d, 3, 120, 130, 7, Some(Op::Broadcast)),
        rec(HostKind::C10d, 4, 140, 150, 7, Some(Op::AllReduce)),
        rec(HostKind::Gloo, 5, 115, 400, 9, Some(Op::AllReduce)),
        rec(HostKind::Gloo, 6, 125, 200, 8, Some(Op::Broadcast)),
        rec(HostKind::Gloo, 7, 400, 500, 9, Some(Op::AllReduce)),
    ];
    let calls = calls(host, &[], &HashSet::new());
    let got: Vec<(u64, u64)> = calls.iter().map(|c| (c.ordinal, c.end)).collect();
    assert_eq!(got, [(2, 400), (3, 200), (4, 500)]);
}

#[test]
fn counts_follow_nccl_tests() {
    assert_eq!(count_from_input(Op::AllReduce, 1024, 4), 1024);
    assert_eq!(count_from_input(Op::AllGather, 256, 2), 512);
    assert_eq!(count_from_input(Op::ReduceScatter, 256, 2), 512);
    assert_eq!(count_from_input(Op::Broadcast, 128, 2), 128);
    assert_eq!(count_from_input(Op::Barrier, 1, 2), 0);
}
