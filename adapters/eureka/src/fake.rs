//! An in-process Eureka server for tests (feature `fake`): the REST API of Netflix/Spring
//! Cloud Eureka under `/eureka`, with a recently-changed queue for deltas, the reconcile
//! hashcode, and knobs for the encodings real servers use ([`Quirks`]) and for failures
//! ([`Fault`]).
//!
//! Start one with [`FakeEureka::start`], point a [`crate::Config`] at [`FakeEureka::url`], and
//! change it with [`FakeEureka::register`] and friends (or over HTTP, as a Eureka client
//! would). It serves:
//!
//! - `GET /eureka/apps`, `GET /eureka/apps/delta`, `GET /eureka/apps/{APP}`;
//! - `POST /eureka/apps/{APP}` with `{"instance": {…}}` → 204;
//! - `PUT /eureka/apps/{APP}/{id}` (heartbeat) and `DELETE /eureka/apps/{APP}/{id}` → 200, or
//!   404 for an unknown instance;
//! - `PUT /eureka/apps/{APP}/{id}/status?value=OUT_OF_SERVICE` (sets the status and the
//!   overridden status) and `DELETE …/status?value=UP` (clears the override) → 200 or 404.
//!
//! Real Eureka answers XML to requests without `Accept: application/json`; this fake answers
//! those GETs with **406 Not Acceptable**, so a client that forgets the header fails loudly
//! instead of parsing XML. Unlike real servers it does not cache answers: a change is visible
//! to the next request. Faults apply to GETs only.

mod render;
mod routes;
mod state;

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use wayfinder_registry::CancellationToken;

use self::state::State;

/// A running fake Eureka server; it stops serving when dropped.
pub struct FakeEureka {
    shared: Arc<Shared>,
    fault: watch::Sender<Fault>,
    addr: SocketAddr,
    stop: CancellationToken,
}

/// An instance as the fake stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// Application name; stored upper-cased, as Eureka does.
    pub app: String,
    /// `instanceId`, unique within the application.
    pub instance_id: String,
    /// `hostName`.
    pub host_name: String,
    /// `ipAddr`.
    pub ip_addr: String,
    /// `port`, enabled when set.
    pub port: Option<u16>,
    /// `securePort`, enabled when set.
    pub secure_port: Option<u16>,
    /// `UP`, `DOWN`, `STARTING`, `OUT_OF_SERVICE` or `UNKNOWN`.
    pub status: String,
    /// `vipAddress` (and `secureVipAddress`); omitted when `None`.
    pub vip_address: Option<String>,
    /// User metadata.
    pub metadata: BTreeMap<String, String>,
    /// `Some(zone)` makes the instance run in an `Amazon` data center in that availability
    /// zone; `None` is `MyOwn`.
    pub availability_zone: Option<String>,
}

impl Instance {
    /// An `UP` instance of `app` listening on `ip:port`, with the vip address `app`
    /// lower-cased and the IP as host name.
    pub fn new(app: &str, id: &str, ip: &str, port: u16) -> Self {
        Self {
            app: app.to_ascii_uppercase(),
            instance_id: id.into(),
            host_name: ip.into(),
            ip_addr: ip.into(),
            port: Some(port),
            secure_port: None,
            status: "UP".into(),
            vip_address: Some(app.to_ascii_lowercase()),
            metadata: BTreeMap::new(),
            availability_zone: None,
        }
    }

    /// Adds a metadata entry (builder style).
    pub fn meta(mut self, key: &str, value: &str) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Sets the status (builder style).
    pub fn status(mut self, status: &str) -> Self {
        self.status = status.into();
        self
    }

    /// Enables the secure port (builder style).
    pub fn secure_port(mut self, port: u16) -> Self {
        self.secure_port = Some(port);
        self
    }
}

/// Encodings real Eureka servers differ in. [`Quirks::default`] is what a current Spring Cloud
/// Eureka server sends: `"@enabled": "true"` strings, an empty metadata map as
/// `{"@class": "java.util.Collections$EmptyMap"}`, port numbers as numbers.
#[derive(Clone, Debug)]
pub struct Quirks {
    /// A list of one application or instance is sent as a bare object (XStream/Jettison).
    pub one_element_as_object: bool,
    /// Port numbers, lease durations and `countryId` are strings.
    pub string_numbers: bool,
    /// `"@enabled"` is a JSON bool instead of a string.
    pub enabled_as_bool: bool,
    /// Instances have no `instanceId` (old servers); clients key them by `hostName`.
    pub no_instance_id: bool,
    /// Empty metadata carries the `@class` marker.
    pub empty_map_class: bool,
}

impl Default for Quirks {
    fn default() -> Self {
        Self {
            one_element_as_object: false,
            string_numbers: false,
            enabled_as_bool: false,
            no_instance_id: false,
            empty_map_class: true,
        }
    }
}

/// A failure the fake injects into its GET answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Answer normally.
    None,
    /// Answer with this HTTP status.
    Status(u16),
    /// Hold requests until the fault changes (or the fake is dropped).
    Hang,
    /// Answer 200, send part of the body, then abort the connection.
    Reset,
    /// Answer 200 with this body.
    Malformed(String),
    /// Deltas carry a wrong `apps__hashcode`, so clients must reconcile with a full fetch.
    WrongHashcode,
    /// `/apps/delta` answers 403, as servers with deltas disabled do.
    DeltaForbidden,
}

/// GET requests the fake answered (fault answers included; a held request counts when it is
/// released).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `GET /eureka/apps`.
    pub full: u64,
    /// `GET /eureka/apps/delta`.
    pub delta: u64,
}

impl FakeEureka {
    /// Starts a server on `127.0.0.1` at a free port, with an empty registry.
    pub async fn start() -> io::Result<FakeEureka> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (fault, fault_rx) = watch::channel(Fault::None);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            fault: fault_rx,
        });
        let stop = CancellationToken::new();
        let router = routes::router(shared.clone());
        let stopped = stop.clone().cancelled_owned();
        tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, router)
                .with_graceful_shutdown(stopped)
                .await
            {
                tracing::warn!(%err, "fake Eureka server failed");
            }
        });
        Ok(FakeEureka {
            shared,
            fault,
            addr,
            stop,
        })
    }

    /// The base URL: `http://127.0.0.1:PORT/eureka`.
    pub fn url(&self) -> String {
        format!("http://{}/eureka", self.addr)
    }

    /// Adds an instance (`ADDED` in the recently-changed queue) or replaces the one with the
    /// same application and id (`MODIFIED`).
    pub fn register(&self, instance: Instance) {
        self.shared.lock().register(instance);
    }

    /// Removes an instance (`DELETED`); false when there was none.
    pub fn deregister(&self, app: &str, instance_id: &str) -> bool {
        self.shared.lock().deregister(app, instance_id)
    }

    /// Changes an instance's status (`MODIFIED`); does nothing for an unknown instance.
    pub fn set_status(&self, app: &str, instance_id: &str, status: &str) {
        self.shared
            .lock()
            .modify(app, instance_id, |r| r.instance.status = status.into());
    }

    /// Changes how answers are encoded.
    pub fn set_quirks(&self, quirks: Quirks) {
        self.shared.lock().quirks = quirks;
    }

    /// Changes the injected fault; held requests go on with the new one.
    pub fn set_fault(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// Changes how long changes stay in the recently-changed queue (default three minutes).
    pub fn set_retention(&self, retention: Duration) {
        self.shared.lock().retention = retention;
    }

    /// The GET requests answered so far.
    pub fn counts(&self) -> Counts {
        self.shared.lock().counts.clone()
    }
}

impl Drop for FakeEureka {
    fn drop(&mut self) {
        // Stops accepting connections; dropping `fault` releases held requests.
        self.stop.cancel();
    }
}

/// What the server's handlers share.
pub(crate) struct Shared {
    state: Mutex<State>,
    fault: watch::Receiver<Fault>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
