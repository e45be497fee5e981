//! Leader election with a `coordination.k8s.io/v1` Lease, as Istio's pilot elects its
//! controllers (client-go's `leaderelection` with a `LeaseLock`), so that the writes a
//! deployment makes once are made by one replica: the Events on invalid configuration
//! ([`crate::config_source`]) and the cleanup of auto-registered WorkloadEntries whose replica
//! has gone ([`crate::workload_entries`]).
//!
//! Start with [`election`]: an [`Election`] to run (until shutdown) and a [`Leadership`] that
//! everyone who writes reads. The rules, client-go's:
//! - every retry period (a quarter of the lease duration, as Istio sets it) a replica reads the
//!   Lease. It creates it (holding it) when there is none; it takes it when nobody holds it
//!   (`holderIdentity` empty, after a release) or when the holder has not renewed it for the
//!   lease duration, measured on this replica's clock from when it last saw the Lease change
//!   (so clocks need not agree); the holder renews it. Every write names the resourceVersion
//!   it read, so of two replicas that try at once, one gets `409 Conflict` and stays a
//!   follower;
//! - a leader that cannot renew for the renew deadline (half the lease duration) stops
//!   leading at once, before another replica may take the Lease;
//! - on shutdown the leader releases the Lease (holder empty, duration 1 s), so another
//!   replica takes it at its next try rather than a lease duration later.
//!
//! Permissions: `get`, `create` and `update` on `coordination.k8s.io` `leases` in the Lease's
//! namespace.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use wayfinder_registry::CancellationToken;

/// The Lease's name (one Lease for every write made once).
pub const LEASE_NAME: &str = "wayfinder-leader";
/// The Lease's namespace without `POD_NAMESPACE`, Istio's.
pub const DEFAULT_NAMESPACE: &str = "istio-system";
/// Istio's lease duration (its election TTL).
pub const LEASE_DURATION: Duration = Duration::from_secs(30);

/// Which Lease, and who this replica is.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's identity in `holderIdentity` (the pod's name).
    pub identity: String,
    /// How long a Lease not renewed stays its holder's.
    pub lease_duration: Duration,
}

impl Settings {
    /// [`LEASE_NAME`] in `namespace`, held as `identity`, for [`LEASE_DURATION`].
    pub fn new(namespace: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: LEASE_NAME.into(),
            identity: identity.into(),
            lease_duration: LEASE_DURATION,
        }
    }

    fn renew_deadline(&self) -> Duration {
        self.lease_duration / 2
    }

    fn retry_period(&self) -> Duration {
        self.lease_duration / 4
    }
}

/// What a replica knows of the election.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Whether this replica leads.
    pub leader: bool,
    /// Who held the Lease when it was last read (empty: nobody, or not read yet).
    pub holder: String,
}

/// Whether this replica leads now: a reader of the election (cheap to clone).
#[derive(Clone, Debug)]
pub struct Leadership(watch::Receiver<Status>);

impl Leadership {
    /// A replica alone, which always leads (no election: without Kubernetes).
    pub fn sole() -> Self {
        let (_, rx) = watch::channel(Status {
            leader: true,
            holder: String::new(),
        });
        Self(rx)
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        self.0.borrow().leader
    }

    /// The election's state now.
    pub fn status(&self) -> Status {
        self.0.borrow().clone()
    }

    /// Resolves when this replica leads (at once if it does); `false` when the election
    /// ended (shutdown) first.
    pub async fn until_leader(&mut self) -> bool {
        self.0.wait_for(|s| s.leader).await.is_ok()
    }
}

/// The election's loop; see [`Election::run`].
pub struct Election {
    api: Api<Lease>,
    settings: Settings,
    tx: watch::Sender<Status>,
    /// The Lease's holder, renew time and transitions when last read, and when (on this
    /// replica's clock) they last changed.
    observed: Option<(Record, Instant)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: String,
    renew: Option<Timestamp>,
    transitions: i32,
}

/// The election of `settings` through `client`, not yet running, and its reader.
pub fn election(client: kube::Client, settings: Settings) -> (Election, Leadership) {
    let (tx, rx) = watch::channel(Status::default());
    let api = Api::namespaced(client, &settings.namespace);
    let election = Election {
        api,
        settings,
        tx,
        observed: None,
    };
    (election, Leadership(rx))
}

impl Election {
    /// Tries to acquire or renew the Lease every retry period until `shutdown`, then releases
    /// it if held.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let lease = format!("{}/{}", self.settings.namespace, self.settings.name);
        let mut renewed = Instant::now();
        loop {
            let attempt = tokio::time::timeout(self.settings.renew_deadline(), self.try_once());
            let Some(outcome) = shutdown.run_until_cancelled(attempt).await else {
                break;
            };
            let was = self.tx.borrow().leader;
            let leader = match outcome {
                Ok(Ok(leader)) => {
                    if leader {
                        renewed = Instant::now();
                    }
                    leader
                }
                Ok(Err(error)) => {
                    tracing::warn!(%lease, %error, "leader election: cannot read or write the Lease");
                    was && renewed.elapsed() < self.settings.renew_deadline()
                }
                Err(_) => {
                    tracing::warn!(%lease, "leader election: no answer from the API server");
                    was && renewed.elapsed() < self.settings.renew_deadline()
                }
            };
            if leader != was {
                match leader {
                    true => {
                        tracing::info!(%lease, identity = %self.settings.identity, "leader election: this replica leads")
                    }
                    false => {
                        tracing::info!(%lease, identity = %self.settings.identity, "leader election: this replica no longer leads")
                    }
                }
            }
            let holder = match leader {
                true => self.settings.identity.clone(),
                false => self
                    .observed
                    .as_ref()
                    .map(|(r, _)| r.holder.clone())
                    .unwrap_or_default(),
            };
            self.tx.send_replace(Status { leader, holder });
            let wait = tokio::time::sleep(self.settings.retry_period());
            if shutdown.run_until_cancelled(wait).await.is_none() {
                break;
            }
        }
        if self.tx.borrow().leader {
            self.tx.send_replace(Status::default());
            match tokio::time::timeout(self.settings.renew_deadline(), self.release()).await {
                Ok(Ok(())) => tracing::info!(%lease, "leader election: released the Lease"),
                Ok(Err(error)) => {
                    tracing::warn!(%lease, %error, "leader election: cannot release the Lease")
                }
                Err(_) => {
                    tracing::warn!(%lease, "leader election: cannot release the Lease: no answer")
                }
            }
        }
    }

    /// One try: true when this replica holds the Lease after it.
    async fn try_once(&mut self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let s = &self.settings;
        let Some(mut lease) = self.api.get_opt(&s.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(s.name.clone()),
                    namespace: Some(s.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, 0)),
            };
            return conflict_is_false(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let record = Record {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renew: spec.renew_time.as_ref().map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        };
        if self.observed.as_ref().is_none_or(|(r, _)| *r != record) {
            self.observed = Some((record.clone(), Instant::now()));
        }
        let mine = record.holder == s.identity;
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        let seen = self
            .observed
            .as_ref()
            .map_or_else(Instant::now, |(_, at)| *at);
        if !mine && !record.holder.is_empty() && seen.elapsed() < duration {
            return Ok(false);
        }
        let mut new = self.spec(now, record.transitions);
        // client-go's rule: a renewal keeps the acquire time, a take counts a transition.
        if mine {
            new.acquire_time = spec.acquire_time;
        } else {
            new.lease_transitions = Some(record.transitions.saturating_add(1));
        }
        lease.spec = Some(new);
        // `replace` sends the resourceVersion read: a write in between is a 409.
        conflict_is_false(
            self.api
                .replace(&s.name, &PostParams::default(), &lease)
                .await,
        )
    }

    /// The Lease held by this replica from `now`.
    fn spec(&self, now: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.settings.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Gives the Lease up, as client-go releases it: nobody holds it, for 1 s.
    async fn release(&self) -> Result<(), kube::Error> {
        let s = &self.settings;
        let Some(mut lease) = self.api.get_opt(&s.name).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(s.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        lease.spec = Some(spec);
        self.api
            .replace(&s.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}

/// A write's outcome: done (true), or lost to another replica's write (409: false).
fn conflict_is_false(result: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_istios() {
        let s = Settings::new("istio-system", "a");
        assert_eq!(s.lease_duration, Duration::from_secs(30));
        assert_eq!(s.renew_deadline(), Duration::from_secs(15));
        assert_eq!(s.retry_period(), Duration::from_millis(7500));
    }

    #[tokio::test]
    async fn a_sole_replica_leads() {
        let mut sole = Leadership::sole();
        assert!(sole.is_leader());
        assert!(sole.until_leader().await);
    }
}
