//! The ADS server: one task per stream around [`StreamState`] (state of the world) or
//! [`DeltaState`] (incremental), the same loop for both.
//!
//! Each stream waits for the server to be ready, reads who is asking from the first request,
//! then answers requests and pushes new snapshots as they are published. Responses leave
//! through a small bounded queue: a client that does not read stalls only its own task, while
//! snapshots published meanwhile collapse into the latest (the version channel keeps only the
//! newest), so a slow or stuck client never delays the others or the aggregate.

mod clip;
mod delta;
mod errors;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
mod held;
mod inputs;
mod limits;
mod outbox;
mod pages;
mod protocol;
mod service;
mod state;
mod status;
mod subscription;
mod triggers;
mod wire;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use delta::DeltaState;
pub use errors::PeerAddr;
pub use inputs::InputChannels;
pub use limits::{ADMISSION_WAIT, BUDGET_WAIT, ConnectionEnd, DELIVERY_WAIT, Limits};
pub use pages::{Connection, Push};
pub use service::AdsService;
pub use state::{Outcome, RequestError, StreamState};
pub use status::{Nack, SyncState, TypeStatus};
pub use subscription::Subscription;
pub use wire::{DeltaResponse, Encoded, SotwRequest, SotwResponse};

use self::errors::{Peer, StreamError};
use self::limits::{Admission, RequestBudget, Throttle};
use self::outbox::Outbox;
use self::pages::PUSH_LOG;
use self::protocol::Protocol;
use self::wire::{Budgeted, Progress, PushBudget, ReadLimits, Requests};

use crate::ca::PeerCertificate;
use crate::metrics::ReasonLabel;
use crate::snapshot::SnapshotReader;
use crate::xds::metrics::XdsMetrics;
use crate::xds::observe::{HEALTH_TYPE, StreamObserver};
use crate::xds::proxy::Proxy;
use crate::xds::{TypeUrl, XdsSnapshot};

/// How a stream's connection came in.
#[derive(Clone, Debug)]
pub(crate) enum Transport {
    /// The plaintext port: the node is who it says it is.
    Plain,
    /// The secure port, with the client's verified certificate if it presented one: ADS
    /// needs one, and the node must match its identity.
    Secure(Option<Arc<PeerCertificate>>),
}

/// Responses that may wait for a slow client before its stream task waits in turn.
const QUEUE: usize = 16;

/// The ADS server. Cheap to clone; clones share connections and state.
#[derive(Clone)]
pub struct AdsServer {
    inner: Arc<Inner>,
}

struct Inner {
    model: SnapshotReader,
    metrics: Arc<XdsMetrics>,
    domain: Arc<str>,
    identifier: Arc<str>,
    current: ArcSwap<XdsSnapshot>,
    versions: watch::Receiver<u64>,
    connections: Mutex<BTreeMap<u64, Arc<Connection>>>,
    next_id: AtomicU64,
    /// The latest pushes, newest last, for `/debug/push_status`.
    pushes: Mutex<VecDeque<Push>>,
    /// Places for streams sending a push.
    throttle: Throttle,
    /// The new-stream rate limit, if any.
    admission: Option<Admission>,
    /// What a stream's requests may be, and the budget they share.
    read_limits: ReadLimits,
    /// How long a new stream may take to send its first request.
    first_request_wait: Duration,
    /// The bytes of copied responses every connection may hold unwritten at once.
    push_budget: PushBudget,
    /// How long a stream may hold some of the push budget while its connection takes
    /// nothing, before the connection is closed.
    push_send_timeout: Duration,
    /// Told about streams opening and closing and the health proxies report.
    observer: std::sync::OnceLock<Arc<dyn StreamObserver>>,
}

/// What a stream's requests may be under `limits`, with a new request budget.
fn read_limits(limits: &Limits, in_use: Gauge) -> ReadLimits {
    ReadLimits {
        max_bytes: limits.max_request_bytes,
        max_names: limits.max_names_per_request,
        max_node_id: limits.max_node_id_bytes,
        max_node_metadata: limits.max_node_metadata_bytes,
        message_wait: limits.idle_timeout,
        budget: RequestBudget::new(limits.request_budget_bytes, in_use),
    }
}

impl AdsServer {
    /// A server over the published model snapshots. `domain` is the mesh domain (`--domain`);
    /// `inputs` are what generation reads besides the model (JWT keys, credentials, and the
    /// server's settings: see [`MeshSettings`](crate::xds::MeshSettings)). It follows new
    /// snapshots and inputs until `shutdown`. Of `limits`, the push throttle and the
    /// new-stream rate apply here; connection ages are the accept loop's (`server`).
    pub fn new(
        model: SnapshotReader,
        metrics: Arc<XdsMetrics>,
        domain: &str,
        mut inputs: InputChannels,
        limits: &Limits,
        shutdown: CancellationToken,
    ) -> Self {
        // Subscribe before loading, so a snapshot published in between still wakes `follow`.
        let model_versions = model.versions();
        let first = model.snapshot();
        let (tx, versions) = watch::channel(first.version);
        let current =
            ArcSwap::from_pointee(XdsSnapshot::new(first, domain).with_inputs(inputs.current()));
        let read_limits = read_limits(limits, metrics.xds_request_budget.clone());
        let push_budget =
            PushBudget::new(limits.push_budget_bytes, metrics.xds_push_budget.clone());
        let inner = Arc::new(Inner {
            model: model.clone(),
            metrics,
            domain: domain.into(),
            identifier: format!("wayfinder-{}", env!("CARGO_PKG_VERSION")).into(),
            current,
            versions,
            connections: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            pushes: Mutex::new(VecDeque::with_capacity(PUSH_LOG)),
            throttle: Throttle::new(limits.effective_push_throttle()),
            admission: Admission::new(limits.new_streams_per_second),
            read_limits,
            first_request_wait: limits.idle_timeout,
            push_budget,
            push_send_timeout: limits.push_send_timeout,
            observer: std::sync::OnceLock::new(),
        });
        tokio::spawn(inputs::follow(
            model,
            model_versions,
            inputs,
            Arc::downgrade(&inner),
            tx,
            shutdown,
        ));
        Self { inner }
    }

    /// Tells `observer` about every stream from now on (see [`StreamObserver`]); a second
    /// observer is refused.
    pub fn observe(&self, observer: Arc<dyn StreamObserver>) -> Result<(), &'static str> {
        self.inner
            .observer
            .set(observer)
            .map_err(|_| "the ADS server already has an observer")
    }

    /// The gRPC service to mount (on a tonic server).
    pub fn service(&self) -> AdsService {
        AdsService::new(self.clone())
    }

    /// The snapshot streams are served from.
    pub fn current(&self) -> Arc<XdsSnapshot> {
        self.inner.current.load_full()
    }

    /// Every connected stream, in connection order.
    pub fn connections(&self) -> Vec<Arc<Connection>> {
        lock(&self.inner.connections).values().cloned().collect()
    }

    /// The latest pushes, oldest first (at most 256).
    pub fn pushes(&self) -> Vec<Push> {
        lock(&self.inner.pushes).iter().cloned().collect()
    }

    async fn serve<P: Protocol>(
        self,
        requests: Requests<P::Request>,
        tx: Responses,
        progress: Arc<Progress>,
        end: ConnectionEnd,
        addr: Option<SocketAddr>,
        transport: Transport,
    ) {
        let mut out = Outbox::new(tx);
        let mut peer = Peer { addr, node: None };
        let timeout = self.inner.push_send_timeout;
        let result = tokio::select! {
            result = self.run::<P>(requests, &mut out, &end, &mut peer, transport) => result,
            () = progress.stalled(timeout) => Err(StreamError::Stalled(timeout)),
        };
        if let Err(err) = result {
            let m = &self.inner.metrics;
            if err.is_internal() {
                m.xds_internal_errors.inc();
            }
            if let StreamError::Stalled(_) = err {
                m.xds_write_timeouts.inc();
            }
            if let StreamError::Ended(why) = err {
                tracing::debug!(peer = %peer.addr(), node = peer.node.as_deref().unwrap_or("-"), why, "ending an xDS stream");
            } else if err.is_quiet() {
                tracing::debug!(peer = %peer.addr(), node = peer.node.as_deref().unwrap_or("-"), reason = %err, "xDS stream ended by the client");
            } else {
                m.xds_refused_streams
                    .get_or_create(&ReasonLabel {
                        reason: err.reason(),
                    })
                    .inc();
                tracing::warn!(peer = %peer.addr(), node = peer.node.as_deref().unwrap_or("-"), variant = P::VARIANT, reason = %err, "refusing an xDS stream");
            }
            if let StreamError::Stalled(_) = err {
                // Nothing more reaches a client that does not read; closing its connection
                // frees what the connection holds for it.
                end.abort();
                return;
            }
            out.fail(err.into()).await;
        }
    }

    /// Waits until the model is ready and the streams' snapshot has caught up with the
    /// model it published then: a stream opened during start would otherwise be served the
    /// empty snapshot of before the registries' first state, then the whole mesh.
    async fn ready(&self) {
        self.inner.model.ready().await;
        let published = self.inner.model.snapshot().version;
        let mut versions = self.inner.versions.clone();
        // An error means the server is stopping; the stream ends soon after.
        let _ = versions.wait_for(|v| *v >= published).await;
    }

    /// The proxy a node describes, bound to its client certificate's identity on the secure
    /// port. Not inlined into `run`: a `Proxy` held there would be kept in every stream's
    /// task for its whole life.
    fn proxy(
        &self,
        node: &crate::xds::pb::core::Node,
        certificate: Option<&PeerCertificate>,
    ) -> Result<Arc<Proxy>, StreamError> {
        let mut proxy = Proxy::from_node(node, &self.inner.domain)?;
        if let Some(certificate) = certificate {
            proxy
                .bind_identity(certificate)
                .map_err(|e| StreamError::Identity(Box::new(e)))?;
        }
        Ok(Arc::new(proxy))
    }

    /// Waits for the new-stream rate limit; `Busy` when the wait would be too long.
    async fn admit(&self) -> Result<(), StreamError> {
        let Some(admission) = &self.inner.admission else {
            return Ok(());
        };
        let at = admission.reserve(ADMISSION_WAIT).ok_or(StreamError::Busy)?;
        tokio::time::sleep_until(at).await;
        Ok(())
    }

    async fn run<P: Protocol>(
        &self,
        mut requests: Requests<P::Request>,
        out: &mut Outbox,
        end: &ConnectionEnd,
        peer: &mut Peer,
        transport: Transport,
    ) -> Result<(), StreamError> {
        let certificate = match transport {
            Transport::Plain => None,
            Transport::Secure(Some(cert)) if !cert.identities.is_empty() => Some(cert),
            Transport::Secure(_) => return Err(StreamError::NoCertificate),
        };
        self.admit().await?;
        let first = requests.first(self.inner.first_request_wait).await?;
        let Some(first) = first else {
            return Ok(());
        };
        let node = P::node(&first).ok_or(StreamError::NoNode)?;
        peer.node = Some(clip::clip(&node.id, clip::NODE_ID).into_owned());
        let proxy = self.proxy(node, certificate.as_deref())?;
        self.ready().await;
        let conn = self.register(proxy.clone(), peer.addr);
        let _guard = Registration {
            server: self,
            id: conn.id,
        };
        tracing::info!(peer = %peer.addr(), proxy = %proxy, kind = ?proxy.kind, variant = P::VARIANT, "xDS stream opened");
        if let Some(observer) = self.inner.observer.get() {
            observer.opened(conn.id, &proxy, &self.inner.model.snapshot());
        }
        let mut state = P::new(proxy, self.inner.identifier.clone())
            .with_max_names(self.inner.read_limits.max_names);
        let mut versions = self.inner.versions.clone();
        let mut pushed = triggers::Pushed::new(&self.current());
        versions.mark_unchanged();
        let mut next = Some(first);
        loop {
            if let Some(req) = next.take() {
                // Boxed: an answer's future is a kilobyte, which the task would otherwise
                // keep for the stream's life (`-Zprint-type-sizes`).
                if !Box::pin(self.answer(&mut state, req, out, conn.id)).await? {
                    return Ok(());
                }
            } else {
                tokio::select! {
                    msg = requests.message() => match msg? {
                        Some(req) => next = Some(req),
                        None => return Ok(()),
                    },
                    changed = versions.changed() => {
                        if changed.is_err() || !self.push(&mut state, &mut pushed, out).await {
                            return Ok(());
                        }
                    }
                    why = end.ended() => return Err(StreamError::Ended(why)),
                }
            }
            state.status_into(&mut lock(&conn.types));
        }
    }

    /// Handles one request; false when the client went away.
    async fn answer<P: Protocol>(
        &self,
        state: &mut P,
        req: Budgeted<P::Request>,
        out: &mut Outbox,
        stream: u64,
    ) -> Result<bool, StreamError> {
        let (type_url, nonce) = P::request_type_and_nonce(&req);
        if type_url == HEALTH_TYPE {
            // istio-agent's health report: for the observer, never answered.
            let unhealthy = P::error_detail(&req);
            tracing::debug!(proxy = %state.proxy(), ?unhealthy, "health report");
            if let Some(observer) = self.inner.observer.get() {
                observer.health(stream, unhealthy);
            }
            return Ok(true);
        }
        if nonce.is_empty() && type_url == TypeUrl::Secret.as_str() && !state.proxy().mesh_tls() {
            // As istiod: a node on the plaintext port is whoever it says it is.
            tracing::warn!(proxy = %state.proxy(), "a proxy without a verified identity asks for secrets: they are served only on the secure port, to the identity of the proxy's certificate");
        }
        let outcome = state.on_request(&req, &self.current())?;
        let m = &self.inner.metrics;
        if outcome.stale {
            m.xds_expired_nonce.inc();
            tracing::debug!(proxy = %state.proxy(), %type_url, %nonce, "a request with a stale nonce");
        }
        if let Some(message) = &outcome.nack {
            m.xds_rejects.inc();
            if let Some(t) = TypeUrl::parse(type_url) {
                m.xds_type_rejects
                    .get_or_create(&XdsMetrics::type_label(t))
                    .inc();
            }
            tracing::warn!(proxy = %state.proxy(), %type_url, %nonce, error_detail = %message, "proxy rejected configuration (NACK)");
        }
        if outcome.unsupported {
            tracing::debug!(proxy = %state.proxy(), %type_url, "ignoring a request for a type wayfinder does not serve");
        }
        // A sidecar's request can name every cluster (tens of kilobytes); let it go, and its
        // bytes of the request budget, before waiting to send, or every stream waiting under
        // the throttle would hold one.
        drop(req);
        Ok(self.send(state, outcome.responses, None, out).await)
    }

    /// Pushes the newest snapshot, counting why (`pushed`: what the stream pushed last);
    /// false when the client went away.
    async fn push<P: Protocol>(
        &self,
        state: &mut P,
        pushed: &mut triggers::Pushed,
        out: &mut Outbox,
    ) -> bool {
        let snap = self.current();
        pushed.record(&snap, &self.inner.metrics);
        let responses = state.on_snapshot(&snap);
        // Boxed, as `answer` is where it is called.
        Box::pin(self.send(state, responses, Some(snap.published()), out)).await
    }

    /// Adds a push to the log `/debug/push_status` shows.
    fn record(&self, push: Push) {
        let mut pushes = lock(&self.inner.pushes);
        if pushes.len() == PUSH_LOG {
            pushes.pop_front();
        }
        pushes.push_back(push);
    }

    fn register(&self, proxy: Arc<Proxy>, peer: Option<SocketAddr>) -> Arc<Connection> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let connected_since = state::now();
        let conn = Arc::new(Connection {
            id,
            proxy,
            peer,
            connected_since,
            types: Mutex::default(),
        });
        lock(&self.inner.connections).insert(id, conn.clone());
        self.inner.metrics.xds_clients.inc();
        conn
    }
}

/// Unregisters a connection when its task ends, however it ends.
struct Registration<'a> {
    server: &'a AdsServer,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(conn) = lock(&self.server.inner.connections).remove(&self.id) {
            let peer = conn.peer.map_or_else(|| "-".to_string(), |a| a.to_string());
            tracing::info!(%peer, proxy = %conn.proxy, "xDS stream closed");
            if let Some(observer) = self.server.inner.observer.get() {
                observer.closed(self.id);
            }
        } else {
            // Only this guard removes a registered connection: istiod counts the same loss
            // (`removeCon` of a connection it does not hold) as an internal error.
            tracing::error!(
                connection = self.id,
                "an xDS stream's connection was not registered when it closed"
            );
            self.server.inner.metrics.xds_internal_errors.inc();
        }
        self.server.inner.metrics.xds_clients.dec();
    }
}

/// Where a stream's task sends its encoded responses (and, last, an error status).
type Responses = mpsc::Sender<wire::Queued>;

/// Locks a debug-state mutex. The data behind these locks is replaced whole, never left half
/// written, so a poisoned lock still holds a consistent value.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
