//! Which collectors each unsettled batch was sent to.
//!
//! In: every call of a batch (its collector). Out: whether the call must
//! say [`rankscope_proto::resend::TRIED_ELSEWHERE`]: an earlier call went to
//! another collector, which may have stored the batch without the agent
//! knowing (the call timed out, or was aborted when that collector was
//! evicted, while its write went on). The collector that gets such a batch
//! checks ClickHouse before storing it, so a job moving between collectors
//! (failover, failback) stores each batch once.

/// The collectors (`ip:port`) a batch was sent to, in first-call order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tried(Vec<String>);

impl Tried {
    /// Records a call of the batch to `key`; `true` when an earlier call
    /// went to another collector.
    pub(crate) fn record(&mut self, key: &str) -> bool {
        let elsewhere = self.0.iter().any(|k| k != key);
        if !self.0.iter().any(|k| k == key) {
            self.0.push(key.to_owned());
        }
        elsewhere
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_tried_elsewhere_once_another_collector_had_it() {
        let mut t = Tried::default();
        assert!(!t.record("a:1"), "first call");
        assert!(!t.record("a:1"), "a retry to the same collector");
        assert!(t.record("b:1"), "failover: a:1 may have stored it");
        assert!(t.record("b:1"), "b:1's retry: a:1 still may have");
        assert!(t.record("a:1"), "failback: b:1 may have stored it");
    }
}
