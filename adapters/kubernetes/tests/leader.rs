//! Leader election (`leader`) against the in-process API server through the real kube client:
//! of two replicas exactly one leads, the Lease names it, and when it stops (releasing the
//! Lease) the other takes over; a replace naming an old resourceVersion is a 409 Conflict.
//! Every wait polls with a deadline; nothing sleeps to synchronize.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::leader::{self, Leadership, Settings};
use wayfinder_registry::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(30);

/// A replica named `identity` holding the Lease for `lease` (short, so the test runs quickly).
fn replica_for(
    fake: &FakeApiServer,
    identity: &str,
    lease: Duration,
) -> (Leadership, CancellationToken) {
    let settings = Settings {
        lease_duration: lease,
        ..Settings::new("istio-system", identity)
    };
    let (election, leadership) = leader::election(fake.client(), settings);
    let stop = CancellationToken::new();
    tokio::spawn(election.run(stop.clone()));
    (leadership, stop)
}

fn replica(fake: &FakeApiServer, identity: &str) -> (Leadership, CancellationToken) {
    replica_for(fake, identity, Duration::from_secs(2))
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "no {what} within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn holder(fake: &FakeApiServer) -> Option<String> {
    let lease = fake.get(
        "coordination.k8s.io/v1",
        "Lease",
        Some("istio-system"),
        leader::LEASE_NAME,
    )?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn one_replica_leads_and_the_other_takes_over_when_it_stops() {
    let fake = FakeApiServer::start().await;
    let (a, stop_a) = replica(&fake, "a");
    let (b, stop_b) = replica(&fake, "b");
    until("leader", || a.is_leader() || b.is_leader()).await;
    // Both have read the Lease at least once: each names the holder.
    until("both replicas seeing the holder", || {
        !a.status().holder.is_empty() && !b.status().holder.is_empty()
    })
    .await;
    assert!(a.is_leader() != b.is_leader(), "exactly one leads");
    let (first, first_stop, second, second_name) = match a.is_leader() {
        true => (&a, &stop_a, &b, "b"),
        false => (&b, &stop_b, &a, "a"),
    };
    let first_name = if second_name == "a" { "b" } else { "a" };
    assert_eq!(holder(&fake).as_deref(), Some(first_name));
    assert_eq!(second.status().holder, first_name);

    first_stop.cancel();
    until("a leader after the first stopped", || second.is_leader()).await;
    assert!(!first.is_leader());
    until("the Lease naming the new leader", || {
        holder(&fake).as_deref() == Some(second_name)
    })
    .await;
    let lease = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("istio-system"),
            leader::LEASE_NAME,
        )
        .unwrap();
    assert_eq!(
        lease["spec"]["leaseTransitions"], 1,
        "one transition: {lease}"
    );
    stop_a.cancel();
    stop_b.cancel();
}

#[tokio::test]
async fn a_lease_replaced_at_an_old_version_is_a_conflict() {
    let fake = FakeApiServer::start().await;
    let api: Api<Lease> = Api::namespaced(fake.client(), "istio-system");
    let mut lease = Lease::default();
    lease.metadata.name = Some("l".into());
    let created = api.create(&PostParams::default(), &lease).await.unwrap();
    let mut update = created.clone();
    update.spec = Some(Default::default());
    update.spec.as_mut().unwrap().holder_identity = Some("a".into());
    api.replace("l", &PostParams::default(), &update)
        .await
        .unwrap();
    update.spec.as_mut().unwrap().holder_identity = Some("b".into());
    match api.replace("l", &PostParams::default(), &update).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 409, "{status:?}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let got = api.get("l").await.unwrap();
    assert_eq!(got.spec.unwrap().holder_identity.as_deref(), Some("a"));
}

#[tokio::test]
async fn a_leader_that_stops_releases_the_lease_at_once() {
    let fake = FakeApiServer::start().await;
    // A lease far longer than the deadline: only a release lets b take it in time.
    let (a, stop_a) = replica_for(&fake, "a", Duration::from_secs(600));
    until("a to lead", || a.is_leader()).await;
    let (b, stop_b) = replica(&fake, "b");
    until("b to see a hold it", || b.status().holder == "a").await;
    assert!(!b.is_leader());
    stop_a.cancel();
    until("b to lead", || b.is_leader()).await;
    assert_eq!(holder(&fake).as_deref(), Some("b"));
    stop_b.cancel();
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_stops_leading() {
    let fake = FakeApiServer::start().await;
    let (a, stop_a) = replica(&fake, "a");
    until("a to lead", || a.is_leader()).await;
    fake.stop().await;
    until("a to stop leading", || !a.is_leader()).await;
    stop_a.cancel();
}
