//! A job that moves between collectors and back stores each batch once
//! (issue 36; the duplicates seen after a failback under load).
//!
//! Two collectors in this process over one ClickHouse, called directly
//! over gRPC as an agent does. The first holds the job and knows its
//! session; the job moves to the second, which stores a batch whose
//! acknowledgement the agent never got; the job comes back to the first,
//! whose record of the session predates that batch. The agent resends the
//! batch marked `rankscope_proto::resend::TRIED_ELSEWHERE`, and the first
//! collector, having asked ClickHouse, acknowledges it as a duplicate.
//! Ownership refreshes are an hour apart here, so the first collector
//! keeps holding the job (and its stale record) for the whole test: the
//! outcome does not depend on timing.

use crate::common;

use rankscope_proto::v1 as proto;

async fn collector(ch: &rankscope_testkit::ClickHouse, db: &str) -> rankscope_collector::Collector {
    let mut cfg = common::collector_config(&ch.http_url, db);
    cfg.ownership.refresh_interval_ms = 3_600_000;
    rankscope_collector::start(cfg)
        .await
        .expect("collector starts")
}

/// One `Ingest` call, marked as tried elsewhere when `elsewhere`.
async fn send(
    c: &rankscope_collector::Collector,
    batch: proto::AgentBatch,
    elsewhere: bool,
) -> proto::IngestAck {
    let mut client = proto::collector_ingest_client::CollectorIngestClient::connect(format!(
        "http://{}",
        c.grpc_addr
    ))
    .await
    .expect("connect to collector");
    let mut request = tonic::Request::new(batch);
    if elsewhere {
        request.metadata_mut().insert(
            rankscope_proto::resend::TRIED_ELSEWHERE,
            tonic::metadata::MetadataValue::from_static("1"),
        );
    }
    client.ingest(request).await.expect("ingest").into_inner()
}

/// Rows of `job` in the event tables, and stored batch rows of the session.
fn stored(ch: &rankscope_testkit::ClickHouse, db: &str, job: &str) -> (u64, u64) {
    let count = |sql: String| -> u64 {
        ch.query(&sql)
            .expect("count")
            .trim()
            .parse()
            .expect("a number")
    };
    let rows = ["steps", "spans", "collectives", "kernels"]
        .iter()
        .map(|t| {
            count(format!(
                "SELECT count() FROM {db}.{t} WHERE job_id = '{job}'"
            ))
        })
        .sum();
    let batches = count(format!(
        "SELECT count() FROM {db}.ingest_batches WHERE agent_id = 'test-agent' AND agent_session = 77"
    ));
    (rows, batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_another_collector_stored_is_not_stored_again_when_the_job_comes_back() {
    let ch = rankscope_testkit::ClickHouse::start().expect("ClickHouse");
    let db = ch.fresh_database("resend").unwrap();
    let (first, second) = (collector(&ch, &db).await, collector(&ch, &db).await);
    let job = "resend-job";

    // The first collector holds the job and knows the session.
    assert!(
        !send(&first, common::small_batch(job, 1), false)
            .await
            .duplicate
    );
    let (one_batch, _) = stored(&ch, &db, job);
    assert!(one_batch > 0, "seq 1 stored");
    // The job moves: the second collector stores seq 2, its ack is lost.
    assert!(
        !send(&second, common::small_batch(job, 2), true)
            .await
            .duplicate
    );
    let (two_batches, _) = stored(&ch, &db, job);
    assert!(two_batches > one_batch, "seq 2 stored");

    // The job comes back with seq 2 unacknowledged: the agent resends it.
    let ack = send(&first, common::small_batch(job, 2), true).await;
    assert!(
        ack.duplicate,
        "the first collector stored seq 2 again: {ack:?}"
    );
    assert_eq!(
        stored(&ch, &db, job),
        (two_batches, 2),
        "nothing stored twice"
    );
    // The session goes on there.
    assert!(
        !send(&first, common::small_batch(job, 3), false)
            .await
            .duplicate
    );
    let (rows, batches) = stored(&ch, &db, job);
    assert_eq!(batches, 3);
    assert!(rows > two_batches);

    first.shutdown().await;
    second.shutdown().await;
}
