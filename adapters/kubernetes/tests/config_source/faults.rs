//! An API server that fails: the failure is an Unavailable item naming the watch, the last
//! good state stays, and the source says `Recovered` (or what changed) when it answers again.

use wayfinder_config::{ConfigEvent, Kind};
use wayfinder_kubernetes::fake::{FakeApiServer, Fault};
use wayfinder_registry::RegistryError;

use crate::support::{
    CLUSTER, Items, client_without_retries, config_source, key, virtual_service, weight,
};

/// The watched kinds, by group: Istio's networking kinds, `PeerAuthentication`, and the
/// security policies the source reads to refuse them. Every one must be here: after the fault, the first watch to
/// fail names the error, and which one that is depends on timing.
const PLURALS: [(&str, &str, &str); 10] = [
    ("networking.istio.io", "v1", "virtualservices"),
    ("networking.istio.io", "v1", "destinationrules"),
    ("networking.istio.io", "v1", "gateways"),
    ("networking.istio.io", "v1", "sidecars"),
    ("networking.istio.io", "v1", "workloadgroups"),
    // Istio serves EnvoyFilter in v1alpha3 only.
    ("networking.istio.io", "v1alpha3", "envoyfilters"),
    // And ProxyConfig in v1beta1 only.
    ("networking.istio.io", "v1beta1", "proxyconfigs"),
    ("security.istio.io", "v1", "authorizationpolicies"),
    ("security.istio.io", "v1", "peerauthentications"),
    ("security.istio.io", "v1", "requestauthentications"),
];

/// A source over a fake holding one VirtualService, failing with 503 once it has listed.
async fn failing() -> (FakeApiServer, Items<ConfigEvent>) {
    let fake = FakeApiServer::start().await;
    fake.apply(virtual_service("reviews", 100));
    let mut items = config_source(client_without_retries(&fake));
    assert_eq!(items.reset().await.len(), 1);
    for (_, _, plural) in PLURALS {
        fake.until_watching(plural, 1).await;
    }
    fake.set_fault(Fault::Status(503));
    fake.cut_watches();
    let err = items.error().await;
    let RegistryError::Unavailable { origin, detail } = &err else {
        panic!("expected Unavailable, got {err:?}");
    };
    let prefix = format!("cluster {CLUSTER}: list/watch ");
    assert!(
        PLURALS.iter().any(|(group, version, plural)| origin
            .strip_prefix(&prefix)
            .is_some_and(|w| w == format!("{group}/{version} {plural}"))),
        "{origin}"
    );
    assert!(detail.contains("503"), "{detail}");
    (fake, items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_api_server_is_an_unavailable_item_then_recovered() {
    let (fake, mut items) = failing().await;
    fake.set_fault(Fault::None);
    let (event, errors) = items.next_ok().await;
    assert!(
        errors
            .iter()
            .all(|e| matches!(e, RegistryError::Unavailable { .. })),
        "{errors:?}"
    );
    assert_eq!(event, ConfigEvent::Recovered, "nothing changed meanwhile");
    items.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_changed_during_a_failure_is_sent_when_it_ends() {
    let (fake, mut items) = failing().await;
    fake.apply(virtual_service("reviews", 50));
    fake.set_fault(Fault::None);
    let (event, _) = items.next_ok().await;
    let ConfigEvent::Upsert(reviews) = event else {
        panic!("expected reviews' Upsert, got {event:?}");
    };
    assert_eq!(reviews.key(), key(Kind::VirtualService, "reviews"));
    assert_eq!(weight(&reviews), Some(50));
    items.stop().await;
}
