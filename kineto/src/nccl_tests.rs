use super::*;

#[test]
fn ops_from_kernel_names() {
    let cases = [
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            Some(Op::AllReduce),
            Some(Dt::Float32),
        ),
        (
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            Some(Op::ReduceScatter),
            Some(Dt::Bfloat16),
        ),
        (
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            Some(Op::AllGather),
            None,
        ),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            Some(Op::AllToAll),
            Some(Dt::Int8),
        ),
        (
            "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)",
            Some(Op::Broadcast),
            Some(Dt::Int8),
        ),
        (
            "ncclDevKernel_Reduce_Sum_f16_RING_LL",
            Some(Op::Reduce),
            Some(Dt::Float16),
        ),
        (
            "ncclDevKernel_AllReduce_Sum_u64_TREE_LL",
            Some(Op::AllReduce),
            Some(Dt::Uint64),
        ),
        (
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
            None,
            None,
        ),
        ("ncclDevKernel_Generic_4", None, None),
        ("ncclKernelFoo", None, None),
        ("volta_sgemm", None, None),
    ];
    for (name, op, dt) in cases {
        assert_eq!(op_from_kernel_name(name), op, "{name}");
        assert_eq!(dtype_from_kernel_name(name), dt, "{name}");
    }
}

#[test]
fn ops_from_collective_names() {
    let cases = [
        ("allreduce", Some(Op::AllReduce)),
        ("allreduce_coalesced", Some(Op::AllReduce)),
        ("_allgather_base", Some(Op::AllGather)),
        ("allgather_into_tensor_coalesced", Some(Op::AllGather)),
        ("_reduce_scatter_base", Some(Op::ReduceScatter)),
        ("reduce_scatter_tensor_coalesced", Some(Op::ReduceScatter)),
        ("all_to_all", Some(Op::AllToAll)),
        ("all_to_allv", Some(Op::AllToAll)),
        ("broadcast", Some(Op::Broadcast)),
        ("reduce", Some(Op::Reduce)),
        ("send", Some(Op::Send)),
        ("recv", Some(Op::Recv)),
        ("recvAnySource", Some(Op::Recv)),
        ("barrier", Some(Op::Barrier)),
        ("gather", None),
        ("scatter", None),
    ];
    for (name, op) in cases {
        assert_eq!(op_from_collective_name(name), op, "{name}");
    }
}

#[test]
fn payload_prefers_metadata_and_counts_nccl_tests_bytes() {
    let generic = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)";
    let meta = CommMeta {
        collective_name: Some("_allgather_base".into()),
        in_nelems: Some(25_136),
        out_nelems: Some(201_088),
        dtype: Some("BFloat16".into()),
        ..CommMeta::default()
    };
    let p = payload(generic, &meta);
    assert_eq!(p.op, Some(Op::AllGather));
    assert_eq!(
        (p.dtype, p.count, p.bytes),
        (Dt::Bfloat16, 201_088, 402_176)
    );
    // reduce_scatter: the input is the large buffer.
    let rs = CommMeta {
        collective_name: Some("reduce_scatter".into()),
        in_nelems: Some(800),
        out_nelems: Some(100),
        dtype: Some("Float".into()),
        ..CommMeta::default()
    };
    assert_eq!(
        payload("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", &rs).bytes,
        3_200
    );
    // Metadata op wins over the name; unknown dtype name keeps the name's.
    let m = CommMeta {
        collective_name: Some("all_to_all".into()),
        in_nelems: Some(10),
        dtype: Some("Mystery".into()),
        ..CommMeta::default()
    };
    let p = payload("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", &m);
    assert_eq!((p.op, p.dtype, p.bytes), (Some(Op::AllToAll), Dt::Int8, 10));
    // Types the wire lacks keep their size.
    let m = CommMeta {
        in_nelems: Some(10),
        dtype: Some("Short".into()),
        ..CommMeta::default()
    };
    let p = payload("ncclKernel_AllReduce_RING_LL_Sum_int16", &m);
    assert_eq!(
        (p.op, p.dtype, p.bytes),
        (Some(Op::AllReduce), Dt::Unspecified, 20)
    );
    // No metadata: op from the name, no bytes; Generic: no op.
    let none = CommMeta::default();
    let p = payload("ncclKernel_AllReduce_RING_LL_Sum_float", &none);
    assert_eq!(
        (p.op, p.dtype, p.count, p.bytes),
        (Some(Op::AllReduce), Dt::Float32, 0, 0)
    );
    assert_eq!(payload(generic, &none).op, None);
}

#[test]
fn metadata_merges_kernel_first() {
    let mut kernel = CommMeta {
        collective_name: Some("allreduce".into()),
        ..CommMeta::default()
    };
    let rpc = CommMeta {
        collective_name: Some("broadcast".into()),
        in_nelems: Some(5),
        pg_name: Some("3".into()),
        pg_ranks: Some(vec![0, 2]),
        ..CommMeta::default()
    };
    kernel.fill_from(&rpc);
    assert_eq!(kernel.collective_name.as_deref(), Some("allreduce"));
    assert_eq!(kernel.in_nelems, Some(5));
    assert_eq!(kernel.pg_ranks, Some(vec![0, 2]));
    assert_eq!(dtype_size(Dt::Float8E4m3), 1);
    assert_eq!(dtype_from_c10("Long"), Some((Dt::Int64, 8)));
}
