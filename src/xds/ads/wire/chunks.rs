//! The push budget: the bytes of copied response chunks that every stream's connection has
//! not yet written to its socket, bounded for the whole server (`--max-push-budget`).
//!
//! A chunk takes its size (at most [`CHUNK`] bytes) from the budget when it is made and
//! gives it back when its bytes are dropped, which the connection does once it has written them. So the server's
//! memory for responses in flight is the budget, whatever the number of sidecars connecting
//! at once; a stream with no room waits (fairly, first come first served) as it waits for a
//! place under the push throttle. Each stream's share is bounded too: hyper asks it for a
//! chunk only while its HTTP/2 send buffer has room (`SEND_BUFFER` in `server/grpc.rs`).
//!
//! Each stream's [`Progress`] says how much of the budget it holds and when its connection
//! last took something; a stream that holds some and whose connection takes nothing for
//! `--push-send-timeout` is a client that stopped reading, and its connection is closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::PollSemaphore;

use super::CHUNK;

/// The server's push budget.
#[derive(Clone, Debug)]
pub(crate) struct PushBudget {
    permits: Arc<Semaphore>,
    /// Bytes held now (`wayfinder_xds_push_budget_bytes`).
    in_use: Gauge,
}

impl PushBudget {
    /// A budget of `total` bytes (at least one chunk), whose use `in_use` shows.
    pub(crate) fn new(total: usize, in_use: Gauge) -> Self {
        let total = total.clamp(CHUNK, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(total)),
            in_use,
        }
    }

    /// The budget of one response body.
    pub(crate) fn for_stream(&self, progress: Arc<Progress>) -> ChunkBudget {
        ChunkBudget {
            permits: PollSemaphore::new(self.permits.clone()),
            in_use: self.in_use.clone(),
            progress,
        }
    }

    /// Bytes no chunk holds now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

/// One response body's way into the push budget.
pub(crate) struct ChunkBudget {
    permits: PollSemaphore,
    in_use: Gauge,
    pub(super) progress: Arc<Progress>,
}

impl ChunkBudget {
    /// Room for a chunk of `size` bytes (at most [`CHUNK`]), when the budget has it.
    pub(super) fn poll_take(&mut self, cx: &mut Context<'_>, size: usize) -> Poll<ChunkPermit> {
        let size = size.clamp(1, CHUNK);
        let permit = std::task::ready!(self.permits.poll_acquire_many(cx, size as u32));
        // The semaphore is never closed; were it, the chunk would go out unbudgeted.
        let size = if permit.is_some() { size } else { 0 };
        self.in_use.inc_by(size as i64);
        self.progress.held.fetch_add(size, Ordering::Relaxed);
        Poll::Ready(ChunkPermit {
            _permit: permit,
            size,
            in_use: self.in_use.clone(),
            progress: self.progress.clone(),
        })
    }
}

/// Room for one chunk, given back when the chunk is dropped.
pub(super) struct ChunkPermit {
    _permit: Option<OwnedSemaphorePermit>,
    /// Bytes of the budget it holds.
    size: usize,
    in_use: Gauge,
    progress: Arc<Progress>,
}

impl ChunkPermit {
    /// Bytes of the budget it holds: what a chunk made with it may hold.
    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// `chunk`'s bytes, holding this room until the connection has written them.
    pub(super) fn wrap(self, chunk: BytesMut) -> Bytes {
        Bytes::from_owner(Chunk {
            bytes: chunk,
            _permit: self,
        })
    }
}

impl Drop for ChunkPermit {
    fn drop(&mut self) {
        self.in_use.dec_by(self.size as i64);
        self.progress.held.fetch_sub(self.size, Ordering::Relaxed);
        self.progress.touch();
    }
}

/// A copied chunk and its room in the budget.
struct Chunk {
    bytes: BytesMut,
    _permit: ChunkPermit,
}

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// How one stream's responses are going out.
#[derive(Debug)]
pub(crate) struct Progress {
    /// Bytes of the push budget its chunks hold.
    held: AtomicUsize,
    /// When its connection last took or wrote something, in milliseconds since `since`.
    last: AtomicU64,
    since: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            held: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            since: Instant::now(),
        }
    }
}

impl Progress {
    /// Notes that the connection took or wrote something now.
    pub(super) fn touch(&self) {
        let now = self.since.elapsed().as_millis() as u64;
        self.last.store(now, Ordering::Relaxed);
    }

    /// Bytes of the push budget the stream holds.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Resolves once the stream has held some of the budget for `timeout` while its
    /// connection took nothing: its client has stopped reading.
    pub(crate) async fn stalled(&self, timeout: Duration) {
        loop {
            let last = self.since + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let due = last + timeout;
            if self.held() > 0 && Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due.max(Instant::now() + timeout / 4)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[tokio::test]
    async fn chunks_hold_the_budget_until_dropped_and_a_full_budget_waits() {
        let budget = PushBudget::new(2 * CHUNK, Gauge::default());
        let progress = Arc::new(Progress::default());
        let mut body = budget.for_stream(progress.clone());
        let a = poll_fn(|cx| body.poll_take(cx, CHUNK))
            .await
            .wrap(BytesMut::from(&b"a"[..]));
        let b = poll_fn(|cx| body.poll_take(cx, CHUNK))
            .await
            .wrap(BytesMut::from(&b"b"[..]));
        assert_eq!(budget.available(), 0);
        assert_eq!(progress.held(), 2 * CHUNK);
        assert_eq!(budget.in_use.get(), 2 * CHUNK as i64);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(body.poll_take(&mut cx, CHUNK).is_pending(), "no room");
        assert_eq!(&a[..], b"a");
        drop(a);
        assert!(body.poll_take(&mut cx, CHUNK).is_ready(), "room again");
        drop(b);
        assert_eq!(budget.available(), 2 * CHUNK);
        assert_eq!(progress.held(), 0);
        assert_eq!(budget.in_use.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_stalls_only_while_it_holds_budget_and_nothing_moves() {
        let budget = PushBudget::new(4 * CHUNK, Gauge::default());
        let progress = Arc::new(Progress::default());
        let mut body = budget.for_stream(progress.clone());
        let timeout = Duration::from_secs(60);
        // Holding nothing is never a stall, however long.
        let idle = tokio::time::timeout(timeout * 3, progress.stalled(timeout)).await;
        assert!(idle.is_err(), "no budget held: not stalled");
        let chunk = poll_fn(|cx| body.poll_take(cx, CHUNK))
            .await
            .wrap(BytesMut::from(&b"x"[..]));
        progress.touch();
        let early = tokio::time::timeout(timeout / 2, progress.stalled(timeout)).await;
        assert!(early.is_err(), "not yet");
        let started = Instant::now();
        progress.stalled(timeout).await;
        assert!(started.elapsed() >= timeout / 2 - Duration::from_millis(1));
        drop(chunk);
    }
}
