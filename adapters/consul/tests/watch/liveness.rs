//! Outages that leave the watches' blocking queries parked: new requests fail, or hang, or the
//! cluster loses its leader. The liveness probe shows each within 15 s (of the paused, virtual
//! clock), the last good state stays, and the registry recovers without a change.

use std::time::Duration;

use tokio::time::Instant;
use wayfinder_consul::Config;
use wayfinder_consul::fake::{FakeConsul, Fault, Instance};
use wayfinder_registry::{Event, RegistryError};

use crate::{Watch, config};

/// The design bound: an outage shows within this much (virtual) time.
const BOUND: Duration = Duration::from_secs(15);

/// A fake with two services, a watch synced on it, and its three blocking queries (the
/// catalog and both services) parked.
async fn parked(config: impl Fn(&FakeConsul) -> Config) -> (FakeConsul, Watch) {
    let fake = FakeConsul::start().await.unwrap();
    for s in ["alpha", "beta"] {
        fake.register(Instance::new(s, "i0", "10.0.0.1", 80));
    }
    let mut watch = Watch::start(config(&fake));
    assert_eq!(watch.reset().await.len(), 2);
    fake.until_waiting(3).await;
    (fake, watch)
}

/// The next item, which must be an `Unavailable` error: its origin and detail.
async fn unavailable(watch: &mut Watch) -> (String, String) {
    match watch.next().await {
        Err(RegistryError::Unavailable { origin, detail }) => (origin, detail),
        other => panic!("expected the registry to go degraded, got {other:?}"),
    }
}

/// Starts an outage and waits for the registry to go degraded: the error comes from the probe
/// within [`BOUND`], while the blocking queries stay parked. Returns the error's detail.
async fn shown_by_the_probe(fake: &FakeConsul, watch: &mut Watch, outage: impl FnOnce()) -> String {
    let before = fake.counts();
    outage();
    let start = Instant::now();
    let (origin, detail) = unavailable(watch).await;
    assert!(start.elapsed() < BOUND, "shown after {:?}", start.elapsed());
    assert_eq!(origin, format!("GET {}/v1/status/leader", fake.url()));
    // The blocking queries never returned: the probe alone saw the outage.
    assert!(fake.waiting() >= 3, "the queries are still parked");
    let during = fake.counts();
    assert_eq!(
        (during.catalog_services, during.health_total()),
        (before.catalog_services, before.health_total())
    );
    detail
}

/// Errors may repeat while the outage lasts; then `Recovered`, and nothing that changes the
/// last good state.
async fn recovers(watch: &mut Watch) {
    loop {
        match watch.next().await {
            Ok(Event::Recovered) => return,
            Err(_) => {}
            other => panic!("nothing changed, so only Recovered may come, got {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn new_requests_failing_while_queries_are_parked_show_degraded_within_seconds() {
    let (fake, mut watch) = parked(config).await;
    // An agent that lost its servers: every new request gets a 500, parked ones wait on.
    let detail = shown_by_the_probe(&fake, &mut watch, || {
        fake.set_new_request_fault(Fault::Status(500));
    })
    .await;
    assert!(
        detail.starts_with("HTTP 500") && detail.contains("liveness probe"),
        "{detail}"
    );
    let before = fake.counts();
    fake.set_new_request_fault(Fault::None);
    recovers(&mut watch).await;
    assert_eq!(fake.counts().health_total(), before.health_total());
    // And changes still flow through the queries that stayed parked.
    fake.register(Instance::new("alpha", "i1", "10.0.0.2", 80));
    assert_eq!(crate::upserted(watch.next().await).endpoints.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn new_requests_hanging_show_degraded_when_the_probe_times_out() {
    let (fake, mut watch) = parked(config).await;
    // A partition that new connections do not cross: new requests are never answered.
    let detail = shown_by_the_probe(&fake, &mut watch, || {
        fake.set_new_request_fault(Fault::Hang);
    })
    .await;
    assert!(detail.contains("no answer in time"), "{detail}");
    fake.set_new_request_fault(Fault::None);
    recovers(&mut watch).await;
}

#[tokio::test(start_paused = true)]
async fn a_cluster_without_a_leader_shows_degraded_and_recovers_when_one_is_elected() {
    let (fake, mut watch) = parked(config).await;
    let detail = shown_by_the_probe(&fake, &mut watch, || fake.set_leader(false)).await;
    assert!(detail.contains("no cluster leader"), "{detail}");
    fake.set_leader(true);
    recovers(&mut watch).await;
}

#[tokio::test(start_paused = true)]
async fn answers_without_a_known_leader_show_degraded_even_without_the_probe() {
    let (fake, mut watch) = parked(|fake| Config {
        wait: Duration::from_secs(1),
        liveness_interval: Duration::ZERO,
        ..config(fake)
    })
    .await;

    // The parked queries answer when their wait runs out, from a server without a leader.
    fake.set_leader(false);
    let (origin, detail) = unavailable(&mut watch).await;
    assert!(
        origin.starts_with(&format!("GET {}/v1/", fake.url())),
        "{origin}"
    );
    assert!(
        detail.contains("X-Consul-KnownLeader: false") && detail.contains("last contact"),
        "{detail}"
    );
    assert_eq!(fake.counts().status_leader, 0, "the probe is off");

    fake.set_leader(true);
    recovers(&mut watch).await;
}

#[tokio::test]
async fn a_too_short_liveness_interval_is_refused() {
    let fake = FakeConsul::start().await.unwrap();
    let err = Config {
        liveness_interval: Duration::from_millis(10),
        ..config(&fake)
    }
    .build(wayfinder_registry::RegistryId::new("Consul"))
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("at least 100ms"), "{err}");
}
