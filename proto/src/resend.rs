//! gRPC metadata of a `CollectorIngest.Ingest` call about the batch's past,
//! which the batch itself does not carry (its bytes are encoded once).
//!
//! In: nothing. Out: the metadata key the agent sets (uplink, spool resend)
//! and the collector reads (ingest service).

/// Set (to `"1"`) on a call whose batch an earlier call may have stored at
/// another collector: its job's owner changed while the batch was
/// unacknowledged (failover, failback), or a previous agent run left it in
/// the spool. The collector's in-memory duplicate detection knows only what
/// it stored itself, so before storing such a batch it asks ClickHouse
/// (`ingest_batches`, `ingest_intents`) whether another collector did.
pub const TRIED_ELSEWHERE: &str = "rankscope-tried-elsewhere";
