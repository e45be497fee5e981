//! Which replica makes the writes a deployment makes once (Kubernetes Events on invalid
//! configuration, the cleanup of auto-registered WorkloadEntries whose replica has gone):
//! with `--config-source k8s`, the holder of the Lease `wayfinder-leader`
//! ([`wayfinder_kubernetes::leader`]); without it, every server alone, which leads itself.
//!
//! The replica's identity is `POD_NAME` (the downward API, as istiod's), else the host name
//! with a random suffix, so that two servers on one host differ; it also names the replica in
//! the WorkloadEntries it controls. The Lease lives in `POD_NAMESPACE`, else `istio-system`.
//! `/debug/leaderz` shows the election and `wayfinder_leader{lease="NAMESPACE/NAME"}` is 1
//! while this replica leads (`lease=""` and 1 without an election).

use std::fmt;
use std::hash::{BuildHasher, RandomState};

use futures::future::BoxFuture;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use serde_json::{Value, json};
use wayfinder_registry::CancellationToken;

/// What this replica knows of the election (cheap to clone).
#[derive(Clone)]
pub struct Leader {
    /// `namespace/name` of the Lease; empty without an election.
    lease: String,
    /// This replica's identity.
    identity: String,
    #[cfg(feature = "kubernetes")]
    leadership: wayfinder_kubernetes::leader::Leadership,
}

impl Leader {
    /// A server alone: it leads, without an election.
    pub fn sole() -> Self {
        Self {
            lease: String::new(),
            identity: identity(),
            #[cfg(feature = "kubernetes")]
            leadership: wayfinder_kubernetes::leader::Leadership::sole(),
        }
    }

    /// The election of `settings`, read through `leadership`.
    #[cfg(feature = "kubernetes")]
    pub fn elected(
        settings: &wayfinder_kubernetes::leader::Settings,
        leadership: wayfinder_kubernetes::leader::Leadership,
    ) -> Self {
        Self {
            lease: format!("{}/{}", settings.namespace, settings.name),
            identity: settings.identity.clone(),
            leadership,
        }
    }

    /// The election's reader, for the adapter's writers.
    #[cfg(feature = "kubernetes")]
    pub fn leadership(&self) -> wayfinder_kubernetes::leader::Leadership {
        self.leadership.clone()
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        #[cfg(feature = "kubernetes")]
        return self.leadership.is_leader();
        #[cfg(not(feature = "kubernetes"))]
        true
    }

    /// Who held the Lease when last read (empty: nobody, no election, or not read yet).
    fn holder(&self) -> String {
        #[cfg(feature = "kubernetes")]
        return self.leadership.status().holder;
        #[cfg(not(feature = "kubernetes"))]
        String::new()
    }

    /// `/debug/leaderz`: the Lease (`null` without an election), this replica's identity,
    /// whether it leads, and the holder last seen.
    pub fn page(&self) -> Value {
        json!({
            "lease": (!self.lease.is_empty()).then_some(&self.lease),
            "identity": self.identity,
            "leader": self.is_leader(),
            "holder": self.holder(),
        })
    }
}

impl fmt::Debug for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("lease", &self.lease)
            .field("identity", &self.identity)
            .field("leader", &self.is_leader())
            .finish()
    }
}

/// `wayfinder_leader`, read when scraped.
impl Collector for Leader {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "wayfinder_leader",
            "1 while this replica holds the Lease that makes the deployment's single writes (lease=\"\": no election, it leads alone)",
            None,
            MetricType::Gauge,
        )?;
        let labels = [("lease", self.lease.as_str())];
        let metric = metric.encode_family(&labels)?;
        ConstGauge::new(i64::from(self.is_leader())).encode(metric)
    }
}

/// This replica's name: `POD_NAME`, else the host name and a random suffix.
pub fn identity() -> String {
    if let Some(name) = std::env::var("POD_NAME").ok().filter(|n| !n.is_empty()) {
        return name;
    }
    let host = crate::net::host_name().unwrap_or_else(|| "wayfinder".into());
    // A random value from the standard library's randomly keyed hasher: no dependency for
    // one suffix.
    let suffix = RandomState::new().hash_one(std::process::id()) & 0xff_ffff;
    format!("{host}-{suffix:06x}")
}

/// The Lease's namespace: `POD_NAMESPACE`, else `istio-system`.
#[cfg(feature = "kubernetes")]
pub fn namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| wayfinder_kubernetes::leader::DEFAULT_NAMESPACE.into())
}

/// An election for the server to run ([`crate::server::Config::election`]): its reader, and
/// its loop, which releases the Lease when its token is cancelled.
pub struct Election {
    /// What this replica knows of it.
    pub leader: Leader,
    run: Box<dyn FnOnce(CancellationToken) -> BoxFuture<'static, ()> + Send>,
}

impl Election {
    /// The election of [`wayfinder_kubernetes::leader`] through `client` as `identity`.
    #[cfg(feature = "kubernetes")]
    pub fn kubernetes(client: wayfinder_kubernetes::Client, identity: &str) -> Self {
        let settings = wayfinder_kubernetes::leader::Settings::new(&namespace(), identity);
        let (election, leadership) =
            wayfinder_kubernetes::leader::election(client, settings.clone());
        Self {
            leader: Leader::elected(&settings, leadership),
            run: Box::new(move |shutdown| Box::pin(election.run(shutdown))),
        }
    }

    /// Runs it until `shutdown`.
    pub fn run(self, shutdown: CancellationToken) -> BoxFuture<'static, ()> {
        (self.run)(shutdown)
    }
}
