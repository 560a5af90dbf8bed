//! A task that runs a round on a fixed period until shutdown: the
//! `repeat_offender` and `clock_skew` evaluators and the fleet answers'
//! refresher.
//!
//! In: the period, the round's state, the round, a shutdown future. Out:
//! the task. The first round runs at once; a round that outlasts the period
//! delays the next tick instead of bunching missed ones.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Runs `round(state)` every `period` until `shutdown` completes.
pub fn spawn_every<S, F, Fut>(
    period: Duration,
    state: S,
    shutdown: impl Future<Output = ()> + Send + 'static,
    round: F,
) -> tokio::task::JoinHandle<()>
where
    S: Send + Sync + 'static,
    F: Fn(Arc<S>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let state = Arc::new(state);
    tokio::spawn(async move {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = tick.tick() => round(state.clone()).await,
            }
        }
    })
}
