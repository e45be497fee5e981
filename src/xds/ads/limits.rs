//! Limits on the ADS server's work and on what a client may make it hold: how many streams
//! send a push at once, how fast new streams are admitted, how long a connection lives, how
//! large a request may be and how many bytes of requests the server holds at once.
//!
//! Istio's names and defaults, where it has them, with two changes that its users ask for:
//! the new-stream limit admits a burst of a second's worth of streams instead of one at a
//! time, and a stream that ends because its connection is old is closed with `UNAVAILABLE`
//! right after the `GOAWAY`, so its client reconnects after its own short retry backoff
//! instead of after the grace period.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a stream waits to be admitted before it is refused (`RESOURCE_EXHAUSTED`), as
/// Istio's `PILOT_MAX_REQUESTS_PER_SECOND` does: the client retries, perhaps on another
/// replica.
pub const ADMISSION_WAIT: Duration = Duration::from_secs(1);

/// How long a push may wait for its client to take it before its stream gives back its
/// place under the push throttle. The push stays queued for the client.
pub const DELIVERY_WAIT: Duration = Duration::from_secs(5);

/// How long a new stream's first request waits for room in the request budget before the
/// stream is refused (`RESOURCE_EXHAUSTED`): as long as a new stream waits for admission. A
/// stream being served waits as long as it takes.
pub const BUDGET_WAIT: Duration = ADMISSION_WAIT;

/// The server's limits. `Default` is what `wayfinder discovery` uses without flags.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Streams that may be building or sending a push at once (Istio's
    /// `PILOT_PUSH_THROTTLE`). 0: `min(15 + 5 × cores, 100)`, Istio's automatic value.
    pub push_throttle: usize,
    /// New streams admitted per second (Istio's `PILOT_MAX_REQUESTS_PER_SECOND`), with a
    /// burst of one second's worth. 0: no limit.
    pub new_streams_per_second: u32,
    /// How long a client connection lives before the server closes it, so clients spread
    /// over replicas (Istio's `--keepaliveMaxServerConnectionAge`); each connection's age is
    /// drawn within ±10% of it. `None`: forever.
    pub max_connection_age: Option<Duration>,
    /// How long a closing connection may take to finish before it is dropped.
    pub max_connection_age_grace: Duration,
    /// The largest request message accepted (grpc-go's and Istio's 4 MiB); a larger one is
    /// refused from its 5-byte prefix, before anything of it is buffered.
    pub max_request_bytes: usize,
    /// Bytes that every stream's requests may hold at once, being read or decoded: each
    /// message takes its size (and, once read, an estimate of what decoding allocates) from
    /// here until the server has handled it.
    pub request_budget_bytes: usize,
    /// Bytes of copied response chunks that every connection may hold unwritten at once
    /// (the push budget); a stream with no room waits for it.
    pub push_budget_bytes: usize,
    /// How long a stream may hold some of the push budget while its connection takes
    /// nothing, before the connection is closed as a client that stopped reading.
    pub push_send_timeout: Duration,
    /// Resource names (and locators, and delta `initial_resource_versions` entries) in one
    /// request, and resource names a delta stream may be subscribed to per type.
    pub max_names_per_request: usize,
    /// The longest node id accepted.
    pub max_node_id_bytes: usize,
    /// The largest node metadata accepted, encoded.
    pub max_node_metadata_bytes: usize,
    /// Streams one HTTP/2 connection may have open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`).
    pub max_streams_per_connection: u32,
    /// Connections from one IP address at once. 0: no limit (proxies behind NAT share one).
    pub max_connections_per_peer: usize,
    /// ADS connections at once; further connections wait in the listen backlog. 0: the
    /// descriptor limit less a reserve for the HTTP ports, registries and files.
    pub max_connections: usize,
    /// How long a connection may go without a stream (from its first byte, and after its last
    /// stream ended), and how long a new stream may take to send its first request, before it
    /// is closed.
    pub idle_timeout: Duration,
    /// How often an HTTP/2 ping checks that a connection's peer is alive (Istio's
    /// `--keepaliveInterval`).
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection is closed (Istio's
    /// `--keepaliveTimeout`).
    pub keepalive_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            push_throttle: 0,
            new_streams_per_second: 1000,
            max_connection_age: Some(Duration::from_secs(30 * 60)),
            max_connection_age_grace: Duration::from_secs(10),
            max_request_bytes: 4 << 20,
            request_budget_bytes: 64 << 20,
            push_budget_bytes: 64 << 20,
            push_send_timeout: Duration::from_secs(60),
            max_names_per_request: 100_000,
            max_node_id_bytes: 1 << 10,
            max_node_metadata_bytes: 64 << 10,
            max_streams_per_connection: 16,
            max_connections_per_peer: 0,
            max_connections: 0,
            idle_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// The push throttle with 0 resolved to Istio's automatic value for this machine.
    pub fn effective_push_throttle(&self) -> usize {
        if self.push_throttle > 0 {
            return self.push_throttle;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (15 + 5 * cores).min(100)
    }

    /// This connection's age: `max_connection_age` ±10%, so connections made together (after
    /// a restart) do not all close together.
    pub fn connection_age(&self) -> Option<Duration> {
        self.max_connection_age
            .map(|age| wayfinder_registry::backoff::jittered(age.mul_f64(0.9), 0.2 / 0.9))
    }
}

/// A place under the push throttle.
pub(super) struct Throttle(Arc<Semaphore>);

impl Throttle {
    pub(super) fn new(permits: usize) -> Self {
        Self(Arc::new(Semaphore::new(permits.max(1))))
    }

    /// A place, when one is free. `None` only if the semaphore were closed, which it never
    /// is: the stream then goes unthrottled rather than stuck.
    pub(super) async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().acquire_owned().await.ok()
    }
}

/// The bytes every stream's requests may hold at once, in two halves. A request takes its
/// size from the first (the bytes) once its prefix says how large it is, before its body is
/// buffered, and what decoding will allocate beyond that from the second (the decoding) once
/// it is read whole; it gives both back when the server has handled it (the permit is
/// dropped).
///
/// Two halves, so that streams waiting for room never wait on each other in a circle: a
/// request that holds its bytes and waits for its decoding waits only for requests that hold
/// all they need and are being handled. With one pool, a hundred half-taken 640 KB requests
/// each waiting for the rest filled it and nothing moved.
#[derive(Clone, Debug)]
pub(crate) struct RequestBudget {
    bytes: Arc<Semaphore>,
    decoding: Arc<Semaphore>,
    total: usize,
    /// Bytes held now (`wayfinder_xds_request_budget_bytes`).
    in_use: Gauge,
}

/// Bytes of one half of the request budget, held until dropped.
#[derive(Debug)]
pub(crate) struct BudgetPermit {
    permit: OwnedSemaphorePermit,
    in_use: Gauge,
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        self.in_use.dec_by(self.permit.num_permits() as i64);
    }
}

/// A request's bytes and, once it is read whole, its decoding, both held until dropped.
#[derive(Debug)]
pub(crate) struct RequestPermit {
    _bytes: BudgetPermit,
    _decoding: Option<BudgetPermit>,
}

impl RequestPermit {
    /// Adds what decoding the request allocates to what it holds.
    pub(crate) fn set_decoding(&mut self, decoding: BudgetPermit) {
        self._decoding = Some(decoding);
    }
}

impl RequestBudget {
    /// A budget of `total` bytes, half for requests' bytes and half for what decoding them
    /// allocates, whose use `in_use` shows.
    pub(crate) fn new(total: usize, in_use: Gauge) -> Self {
        let total = total.clamp(2, Semaphore::MAX_PERMITS);
        Self {
            bytes: Arc::new(Semaphore::new(total / 2)),
            decoding: Arc::new(Semaphore::new(total - total / 2)),
            total,
            in_use,
        }
    }

    /// The budget's size in bytes.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Takes `bytes` of the first half for a request's bytes, waiting at most `wait`
    /// (`None`: as long as it takes) for other streams to give some back. `None` when they
    /// do not in time, or when `bytes` is more than the whole half.
    pub(crate) async fn take(&self, bytes: usize, wait: Option<Duration>) -> Option<RequestPermit> {
        let bytes = self.take_from(&self.bytes, bytes, wait).await?;
        Some(RequestPermit {
            _bytes: bytes,
            _decoding: None,
        })
    }

    /// Takes `bytes` of the second half, for what decoding a request allocates.
    pub(crate) async fn take_decoding(
        &self,
        bytes: usize,
        wait: Option<Duration>,
    ) -> Option<BudgetPermit> {
        self.take_from(&self.decoding, bytes, wait).await
    }

    async fn take_from(
        &self,
        half: &Arc<Semaphore>,
        bytes: usize,
        wait: Option<Duration>,
    ) -> Option<BudgetPermit> {
        let n = u32::try_from(bytes)
            .ok()
            .filter(|_| bytes <= self.total / 2)?;
        let permit = match half.clone().try_acquire_many_owned(n) {
            Ok(permit) => permit,
            Err(TryAcquireError::Closed) => return None,
            Err(TryAcquireError::NoPermits) => {
                let acquire = half.clone().acquire_many_owned(n);
                match wait {
                    Some(wait) => tokio::time::timeout(wait, acquire).await.ok()?.ok()?,
                    None => acquire.await.ok()?,
                }
            }
        };
        self.in_use.inc_by(i64::from(n));
        Some(BudgetPermit {
            permit,
            in_use: self.in_use.clone(),
        })
    }

    /// Bytes no request holds now, of both halves.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.bytes.available_permits() + self.decoding.available_permits()
    }
}

/// Admits new streams at a steady rate with a burst of one second's worth (a generic cell
/// rate algorithm: each admission moves a theoretical arrival time one interval on). Written
/// here rather than taken from `governor`: it is a dozen lines, and the stream needs the
/// admission time itself (to refuse beyond `ADMISSION_WAIT` without waiting first).
pub(super) struct Admission {
    interval: Duration,
    tolerance: Duration,
    next: Mutex<Instant>,
}

impl Admission {
    /// `None` for no limit.
    pub(super) fn new(per_second: u32) -> Option<Self> {
        (per_second > 0).then(|| {
            let interval = Duration::from_secs(1) / per_second;
            Self {
                interval,
                tolerance: interval * (per_second - 1),
                next: Mutex::new(Instant::now()),
            }
        })
    }

    /// When a stream arriving now may start, or `None` when that is more than `wait` away
    /// (the stream is refused and takes no place).
    pub(super) fn reserve(&self, wait: Duration) -> Option<Instant> {
        let now = Instant::now();
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let arrival = (*next).max(now);
        let at = arrival.checked_sub(self.tolerance).unwrap_or(now).max(now);
        if at > now + wait {
            return None;
        }
        *next = arrival + self.interval;
        Some(at)
    }
}

/// Ends a connection's streams: set by the connection when it reaches its age or the server
/// shuts down, after its `GOAWAY`. Put in each request's extensions by the accept loop
/// (`server`); streams served without one are never ended this way.
#[derive(Clone, Debug, Default)]
pub struct ConnectionEnd {
    token: CancellationToken,
    why: Arc<std::sync::OnceLock<&'static str>>,
    abort: CancellationToken,
}

impl ConnectionEnd {
    /// Ends every stream of the connection, telling clients why.
    pub fn end(&self, why: &'static str) {
        let _ = self.why.set(why);
        self.token.cancel();
    }

    /// Asks the connection to close at once, without waiting for its streams: one of them
    /// has a client that stopped reading.
    pub fn abort(&self) {
        self.abort.cancel();
    }

    /// Waits for [`ConnectionEnd::abort`].
    pub async fn aborted(&self) {
        self.abort.cancelled().await;
    }

    /// Waits for [`ConnectionEnd::end`] and returns its reason.
    pub(super) async fn ended(&self) -> &'static str {
        self.token.cancelled().await;
        self.why
            .get()
            .copied()
            .unwrap_or("the connection is closing")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn admission_takes_a_burst_then_a_steady_rate_and_refuses_beyond_the_wait() {
        let a = Admission::new(10).expect("a limit");
        let now = Instant::now();
        // A second's worth at once.
        for _ in 0..10 {
            assert_eq!(a.reserve(ADMISSION_WAIT), Some(now));
        }
        // Then one every 100 ms, up to the wait.
        for i in 1..=10 {
            assert_eq!(
                a.reserve(ADMISSION_WAIT),
                Some(now + Duration::from_millis(100 * i))
            );
        }
        assert_eq!(a.reserve(ADMISSION_WAIT), None, "more than a second away");
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(
            a.reserve(ADMISSION_WAIT),
            Some(now + Duration::from_millis(1100))
        );
        assert!(Admission::new(0).is_none(), "0 is no limit");
    }

    #[test]
    fn connection_ages_spread_within_ten_percent() {
        let limits = Limits {
            max_connection_age: Some(Duration::from_secs(1000)),
            ..Limits::default()
        };
        let ages: Vec<Duration> = (0..200).filter_map(|_| limits.connection_age()).collect();
        assert_eq!(ages.len(), 200);
        assert!(ages.iter().all(|a| (900..=1100).contains(&a.as_secs())));
        let (min, max) = (ages.iter().min(), ages.iter().max());
        assert!(
            max.zip(min)
                .is_some_and(|(x, n)| *x - *n > Duration::from_secs(100)),
            "ages are spread, not all equal: {min:?}..{max:?}"
        );
        let forever = Limits {
            max_connection_age: None,
            ..Limits::default()
        };
        assert_eq!(forever.connection_age(), None);
    }

    #[test]
    fn the_automatic_push_throttle_follows_istio() {
        let auto = Limits::default().effective_push_throttle();
        assert!((20..=100).contains(&auto), "{auto}");
        let set = Limits {
            push_throttle: 7,
            ..Limits::default()
        };
        assert_eq!(set.effective_push_throttle(), 7);
    }
}
