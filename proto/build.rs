//! Generates the rankscope.v1 Rust types. protoc comes from
//! `protoc-bin-vendored` unless `$PROTOC` names one.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        std::env::set_var("PROTOC", protoc);
    }
    println!("cargo:rerun-if-env-changed=PROTOC");
    println!("cargo:rerun-if-changed=rankscope");
    tonic_prost_build::configure()
        .codec_path("crate::codec::SliceCodec")
        // Every queued event is as large as the largest kind: the rare large
        // ones live on the heap, so an `Event` stays ~96 bytes (the agent's
        // memory budget, testkit/tests/deploy/k8s_objects.rs).
        .boxed(".rankscope.v1.Kernel.config")
        .boxed(".rankscope.v1.Event.kind.operator_stat")
        .compile_protos(
            &[
                "rankscope/v1/events.proto",
                "rankscope/v1/samples.proto",
                "rankscope/v1/ingest.proto",
                "rankscope/v1/control.proto",
            ],
            &["."],
        )?;
    // The agent's RankIngest server over `crate::wire::RankMessageIn` (each
    // event decoded and its bytes kept): same path, same ack type.
    tonic_build::manual::Builder::new()
        .build_client(false)
        .compile(&[tonic_build::manual::Service::builder()
            .name("RankIngest")
            .package("rankscope.v1")
            .method(
                tonic_build::manual::Method::builder()
                    .name("stream_events")
                    .route_name("StreamEvents")
                    .input_type("crate::wire::RankMessageIn")
                    .output_type("crate::v1::RankAck")
                    .codec_path("crate::wire::RankMessageCodec")
                    .client_streaming()
                    .server_streaming()
                    .build(),
            )
            .build()]);
    Ok(())
}
