//! The verdict versions and evidence of `GET /api/v1/jobs/{job}/stragglers`.
//!
//! In: the job id, the store and the live registry
//! (`stream::live`). Out: the versions (each with its gain when known) in
//! route order and the latest evidence per verdict. From memory alone once
//! the registry holds all the store would add (`stream::live::complete`:
//! no ClickHouse read then, which under ingest load queues behind the raw
//! events); else the stored versions merged with the live ones, as the
//! route always did, which also verifies the job for the next requests.

use super::super::{ApiError, ApiState};
use crate::store::telemetry::EvidenceReadRow;

/// The job's verdict versions and evidence: from memory alone when the
/// live registry holds all the store would add (`stream::live::complete`),
/// else the stored ones merged with the live ones (and the job then
/// verified when memory holds them all).
pub(super) async fn straggler_versions(
    st: &ApiState,
    job: &str,
) -> Result<(Vec<crate::stream::live::Version>, Vec<EvidenceReadRow>), ApiError> {
    if let Some(m) = st.live.memory_of(job, crate::service::now_ns()) {
        if !m.stored {
            require_job(st, job, m.versions.is_empty()).await?;
        }
        let mut versions = m.versions;
        versions.sort_by_key(|v| (v.row.first_step, v.row.rank));
        return Ok((versions, m.evidence));
    }
    // The verdicts, their stored gains and evidence are independent reads:
    // concurrent.
    let (rows, gains, evidence) = tokio::join!(
        st.store.stragglers(job),
        st.store.straggler_gains(job),
        st.store.straggler_evidence(job)
    );
    let (rows, evidence) = (rows?, evidence?);
    // Versions raised but perhaps not stored yet: answered at once, with
    // their gains when the stream computed them from memory; stored
    // versions with the gain the stream stored with them (migration 0017).
    let snap = st.live.snapshot(job, crate::service::now_ns());
    st.live.verify(job, &snap, &rows, &evidence);
    let mut versions = crate::stream::live::merge(rows, snap.versions);
    crate::stream::live::fill_stored(&mut versions, gains?);
    require_job(st, job, versions.is_empty()).await?;
    Ok((versions, evidence))
}

/// `ApiState::require_job`, noting in the live registry a job found stored.
async fn require_job(st: &ApiState, job: &str, empty: bool) -> Result<(), ApiError> {
    st.require_job(job, empty).await?;
    if empty {
        st.live.found_stored(job);
    }
    Ok(())
}
