//! The Consul registry: services and their health read from Consul's HTTP API with blocking
//! queries, one watch per service, so that a change to one service re-reads that service
//! only and becomes that service's update only.
//!
//! Start with [`Config`]: set the address (and a token, TLS files, datacenters), then
//! [`Config::build`] a [`ConsulRegistry`] and hand it to the server as any other
//! [`Registry`]. With the `fake` feature, the `fake` module holds an in-process Consul for tests.
//!
//! # How it watches
//!
//! One task long-polls `GET /v1/catalog/services` per datacenter; for each service it lists,
//! one task long-polls `GET /v1/health/service/<name>`. Each keeps its own `X-Consul-Index`
//! and follows Consul's rules for it: an index that goes backwards starts over at 0, an index
//! of 0 counts as 1, and a watch never asks again sooner than 100 ms after its last question
//! (a busy service can answer every blocking query at once). Reads use `?stale`, so any
//! Consul server can answer, as Consul advises for reads at scale. With
//! [`Config::interval`] set, the same tasks poll at that period instead of blocking.
//!
//! Nothing is sent until every datacenter's catalog and every listed service has been read
//! once; then the first event is a `Reset` with all of them. After that, an answer that
//! changes nothing sends nothing, and one that changes a service sends that service's
//! `Upsert` (or `Remove`). The service named `consul` (the servers themselves) and Connect
//! proxies and gateways (instances with a `Kind`) are not services of the mesh and are left
//! out.
//!
//! # Mapping (Istio's, where Istio had one)
//!
//! - **Hostname**: the service meta [`HOSTNAME_KEY`] (`wayfinder.io/hostname`) when set, so a
//!   Consul service can share a hostname such as `reviews.default.svc.cluster.local` with
//!   Kubernetes or file entries; else the [`Config::hostname_template`], by default
//!   `{service}.service.consul` (Istio's). Lowercased.
//! - **Namespace**: the meta [`NAMESPACE_KEY`], else the Consul Enterprise namespace, else
//!   `default`. A hostname shared with another registry needs the same namespace there.
//! - **Port**: Consul registers one port per instance, so a service has one port. Its
//!   protocol (and name) comes from the `protocol` service meta (`http`, `grpc`, …; Consul's
//!   own convention), TCP by default. Its number, the one clients dial, is the meta
//!   [`PORT_KEY`] when set, else the instance's port; when instances disagree, the value most
//!   of them give wins (ties: the smallest). Each endpoint is reached on its own instance
//!   port, like a Kubernetes target port.
//! - **Address**: the service address, else the node address. It must be an IP address; an
//!   instance registered with a DNS name is reported as invalid and left out.
//! - **Labels**: tags of the form `key|value` (as Istio read them) or `key=value`, then
//!   service meta (wayfinder's own `wayfinder.io/` keys excepted).
//! - **Locality**: the datacenter is the region; it is also the endpoint's cluster id.
//! - **Health**: the worst check of the instance and its node (`serfHealth` counts):
//!   `passing` is healthy; `warning` is healthy unless [`Config::warning_is_healthy`] is off,
//!   or the instance's `Weights.Warning` is 0; `critical` and `maintenance` are unhealthy.
//!   `Weights.Passing` and `Weights.Warning` become the endpoint's load-balancing weight.
//!
//! # When Consul fails
//!
//! Every failure is an error item naming the request (`GET http://…/v1/health/service/web`)
//! and what went wrong (connection refused, `HTTP 500: …`, a parse error with its line and
//! column). The last good state stays in force; each watch retries on its own with jittered
//! exponential backoff (500 ms to 30 s), so a thousand watches failing together do not come
//! back together. A watch that recovers re-reads its service and sends an update only if the
//! service changed meanwhile; when every watch works again and nothing changed, the stream
//! sends `Recovered`. While many watches fail alike, one error is sent every 10 s rather than
//! one per watch.
//!
//! A blocking query can stay parked for its `wait` and jitter, over five minutes by default,
//! on a Consul that no longer answers anything new: a cluster that lost its quorum, an agent
//! that lost its servers, a partition that new connections do not cross. The watches alone
//! would see such an outage only when a parked query returned. So a liveness probe asks
//! `GET /v1/status/leader` of each datacenter read, every [`Config::liveness_interval`] (5 s
//! by default, [`DEFAULT_LIVENESS_INTERVAL`]), with a timeout of the same length (at least
//! 1 s, at most [`Config::timeout`]). A probe that is refused, fails, gets no answer in time
//! or finds no leader (`""`) is an error item naming `GET …/v1/status/leader`, so an outage
//! shows within one interval plus one timeout: 10 s by default. So is any answer carrying
//! `X-Consul-KnownLeader: false` (a server without a leader still answers `?stale` reads from
//! its own state, which the registry uses, but which may be stale), until a probe or a later
//! answer finds a leader again. The last good state stays in force throughout; when the next
//! probe succeeds and nothing changed, the stream sends `Recovered`. The probe costs one small
//! request per datacenter per interval, on one pooled connection.
//!
//! Consul limits concurrent HTTP connections per client address
//! (`limits.http_max_conns_per_client`, default 200) and each watched service holds one. For
//! more services than that, raise the limit or set [`Config::interval`].
//!
//! # Dependencies
//!
//! Among wayfinder's crates, only `wayfinder-registry` (the contract). Outside: reqwest (HTTP,
//! with rustls and the ring provider for TLS to Consul), serde and serde_json (the answers),
//! tokio and futures (the watch tasks and the stream), tracing. With `fake`, axum serves the
//! in-process Consul.

mod api;
mod client;
mod convert;
#[cfg(feature = "fake")]
pub mod fake;
mod watch;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use watch::fuzz;

use std::path::PathBuf;
use std::time::Duration;

use wayfinder_registry::answer::DEFAULT_MAX_ANSWER_BYTES;
use wayfinder_registry::{CancellationToken, EventStream, Registration, RegistryId, Source};

#[cfg(doc)]
use wayfinder_registry::Registry;

use crate::convert::{Mapping, PLACEHOLDERS};

/// Service meta key naming the hostname a Consul service shares with other registries.
pub const HOSTNAME_KEY: &str = "wayfinder.io/hostname";
/// Service meta key naming the service's namespace (default `default`).
pub const NAMESPACE_KEY: &str = "wayfinder.io/namespace";
/// Service meta key naming the port number clients dial, when it differs from the instance's.
pub const PORT_KEY: &str = "wayfinder.io/port";
/// Istio's hostname for Consul services.
pub const DEFAULT_TEMPLATE: &str = "{service}.service.consul";
/// How often the liveness probe asks for the leader by default.
pub const DEFAULT_LIVENESS_INTERVAL: Duration = Duration::from_secs(5);
/// The shortest liveness interval accepted (as short as a watch's pause between questions).
const MIN_LIVENESS_INTERVAL: Duration = Duration::from_millis(100);

/// How to reach Consul and map what it holds.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address of a Consul agent or server: `host:port`, `http://…` or `https://…`.
    pub addr: String,
    /// Zero: blocking queries (the default). Otherwise poll every service at this period.
    pub interval: Duration,
    /// How long a blocking query may wait on the server (Consul's `wait`; at most 10 min).
    pub wait: Duration,
    /// Timeout of requests that do not block, and of connecting.
    pub timeout: Duration,
    /// Which datacenters to read.
    pub datacenters: Datacenters,
    /// ACL token, sent as `X-Consul-Token`.
    pub token: Option<String>,
    /// TLS files; without a CA file the system's roots are trusted.
    pub tls: Tls,
    /// Hostname template with `{service}`, `{datacenter}` and `{namespace}`.
    pub hostname_template: String,
    /// Whether an instance whose worst check is `warning` still gets traffic (Consul's DNS
    /// interface serves them too).
    pub warning_is_healthy: bool,
    /// Period of the liveness probe (`GET /v1/status/leader` per datacenter; see "When Consul
    /// fails" in the crate documentation). Zero turns it off; otherwise at least 100 ms.
    pub liveness_interval: Duration,
    /// The largest answer read; a larger one is refused as an error, nothing more of it read
    /// (default [`DEFAULT_MAX_ANSWER_BYTES`], 64 MiB).
    pub max_answer_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            addr: "http://127.0.0.1:8500".into(),
            interval: Duration::ZERO,
            wait: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
            datacenters: Datacenters::Local,
            token: None,
            tls: Tls::default(),
            hostname_template: DEFAULT_TEMPLATE.into(),
            warning_is_healthy: true,
            liveness_interval: DEFAULT_LIVENESS_INTERVAL,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
        }
    }
}

/// Which datacenters the registry reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Datacenters {
    /// The datacenter of the agent addressed.
    Local,
    /// These datacenters (queried with `?dc=`).
    List(Vec<String>),
    /// Every datacenter `GET /v1/catalog/datacenters` lists, re-read every minute.
    All,
}

impl std::str::FromStr for Datacenters {
    type Err = String;

    /// Parses the `--consul-datacenters` flag: empty for the local one, `*` for all, else a
    /// comma-separated list.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(Self::Local);
        }
        if s == "*" {
            return Ok(Self::All);
        }
        let list: Vec<String> = s.split(',').map(|d| d.trim().to_string()).collect();
        if list.iter().any(|d| d.is_empty() || d == "*") {
            return Err(format!(
                "{s:?}: expected `*` or a comma-separated list of datacenter names"
            ));
        }
        Ok(Self::List(list))
    }
}

/// TLS files for an `https://` Consul address.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    /// PEM bundle of the CA certificates to trust instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (Consul's `verify_incoming`).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    pub key_file: Option<PathBuf>,
}

/// A configuration the registry cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The address is not a usable URL.
    #[error("consul address {0}")]
    Addr(String),
    /// A TLS file is missing or unreadable.
    #[error("consul TLS: {0}")]
    Tls(String),
    /// The hostname template uses an unknown placeholder.
    #[error("consul hostname template {0:?}: {1}")]
    Template(String, String),
    /// A blocking wait outside Consul's range.
    #[error("consul wait {0:?}: must be between 1 s and 10 min")]
    Wait(Duration),
    /// A liveness interval so short that the probe would flood Consul.
    #[error("consul liveness interval {0:?}: must be 0 (off) or at least 100ms")]
    Liveness(Duration),
}

impl Config {
    /// Checks the configuration and builds the registry. Nothing is read from Consul until
    /// the registry is watched.
    pub fn build(self, id: RegistryId) -> Result<ConsulRegistry, BuildError> {
        check_template(&self.hostname_template)?;
        if self.wait < Duration::from_secs(1) || self.wait > Duration::from_secs(600) {
            return Err(BuildError::Wait(self.wait));
        }
        let liveness = self.liveness_interval;
        if !liveness.is_zero() && liveness < MIN_LIVENESS_INTERVAL {
            return Err(BuildError::Liveness(liveness));
        }
        let client = client::Client::new(&self)?;
        Ok(ConsulRegistry {
            id,
            client,
            mapping: Mapping {
                template: self.hostname_template,
                warning_is_healthy: self.warning_is_healthy,
            },
            interval: self.interval,
            datacenters: self.datacenters,
            liveness: self.liveness_interval,
        })
    }
}

fn check_template(template: &str) -> Result<(), BuildError> {
    let mut rest = template.to_string();
    for p in PLACEHOLDERS {
        rest = rest.replace(p, "x");
    }
    if rest.contains(['{', '}']) {
        return Err(BuildError::Template(
            template.into(),
            format!("placeholders are {}", PLACEHOLDERS.join(", ")),
        ));
    }
    if !template.contains("{service}") {
        return Err(BuildError::Template(
            template.into(),
            "must contain {service}, or every service gets the same hostname".into(),
        ));
    }
    Ok(())
}

/// A registry watching one Consul (see the crate documentation).
pub struct ConsulRegistry {
    id: RegistryId,
    client: client::Client,
    mapping: Mapping,
    interval: Duration,
    datacenters: Datacenters,
    liveness: Duration,
}

impl Source<Registration> for ConsulRegistry {
    fn id(&self) -> &RegistryId {
        &self.id
    }

    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream {
        let this = *self;
        watch::start(
            watch::Setup {
                client: this.client,
                mapping: this.mapping,
                interval: this.interval,
                datacenters: this.datacenters,
                liveness: this.liveness,
            },
            shutdown,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datacenter_flags_parse() {
        assert_eq!("".parse(), Ok(Datacenters::Local));
        assert_eq!("*".parse(), Ok(Datacenters::All));
        assert_eq!(
            "dc1, dc2".parse(),
            Ok(Datacenters::List(vec!["dc1".into(), "dc2".into()]))
        );
        assert!("dc1,,dc2".parse::<Datacenters>().is_err());
    }

    #[test]
    fn unusable_tls_files_are_refused_with_their_path() {
        let dir = std::env::temp_dir().join(format!("wayfinder-consul-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("ca.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let build = |tls: Tls| {
            Config {
                addr: "https://consul.example:8501".into(),
                tls,
                ..Config::default()
            }
            .build(RegistryId::new("Consul"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
        };
        let missing = build(Tls {
            ca_file: Some(dir.join("absent.pem")),
            ..Tls::default()
        });
        assert!(missing.contains("absent.pem"), "{missing}");
        let empty = build(Tls {
            ca_file: Some(garbage.clone()),
            ..Tls::default()
        });
        assert!(empty.contains("no PEM certificate"), "{empty}");
        let half = build(Tls {
            cert_file: Some(garbage),
            ..Tls::default()
        });
        assert!(half.contains("needs both"), "{half}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn templates_are_checked() {
        assert!(check_template(DEFAULT_TEMPLATE).is_ok());
        assert!(check_template("{service}.{datacenter}.consul").is_ok());
        let err = check_template("{svc}.consul").unwrap_err().to_string();
        assert!(err.contains("placeholders are {service}"), "{err}");
        assert!(check_template("web.consul").is_err());
    }
}
