//! One watch: a loop asking Consul the same question, blocking on the index (or polling at a
//! period), that reports each new answer and each failure to the supervisor.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::time::Instant;
use wayfinder_registry::RegistryError;
use wayfinder_registry::backoff::{Backoff, jittered};

use crate::client::{Client, Leader, Query, next_index};

/// A watch never asks again sooner than this after its last question: Consul advises rate
/// limiting the loop, since a busy service (or an index that cannot block) answers at once.
pub(crate) const MIN_GAP: Duration = Duration::from_millis(100);
/// Retry delays after a failure.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// How a watch waits for change.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    /// Blocking queries on `X-Consul-Index`.
    Blocking,
    /// A plain read at this period.
    Poll(Duration),
}

/// Asks `query` until the receiver goes away, sending `wrap(answer)` for every answer that
/// may hold news (the first, one after a failure, one whose index moved, every poll, one
/// without a known leader and the next one) and every failure as it happens. Each answer goes with what it said
/// of Consul's leader.
pub(crate) async fn run<T, R>(
    client: Arc<Client>,
    query: Query,
    mode: Mode,
    tx: mpsc::Sender<R>,
    wrap: impl Fn(Result<(T, Leader), RegistryError>) -> R,
) where
    T: DeserializeOwned,
{
    let mut index = 0u64;
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_MAX);
    let mut last_ok = false;
    let mut was_leaderless = false;
    loop {
        let started = Instant::now();
        let blocking = matches!(mode, Mode::Blocking) && index > 0;
        let pause = match client.get::<T>(&query, blocking.then_some(index)).await {
            Ok(answer) => {
                backoff.reset();
                let previous = index;
                index = next_index(index, answer.index);
                // Without a leader, and on the first answer with one again, the supervisor
                // hears of it even when nothing else changed.
                let leaderless = matches!(answer.leader, Leader::Unknown(_));
                let news = !last_ok
                    || !blocking
                    || answer.index != Some(previous)
                    || leaderless
                    || was_leaderless;
                last_ok = true;
                was_leaderless = leaderless;
                if news
                    && tx
                        .send(wrap(Ok((answer.value, answer.leader))))
                        .await
                        .is_err()
                {
                    return;
                }
                match mode {
                    Mode::Blocking => MIN_GAP.saturating_sub(started.elapsed()),
                    Mode::Poll(period) => jittered(period, 0.1),
                }
            }
            Err(err) => {
                last_ok = false;
                if tx.send(wrap(Err(err))).await.is_err() {
                    return;
                }
                backoff.next_delay()
            }
        };
        tokio::time::sleep(pause).await;
    }
}
