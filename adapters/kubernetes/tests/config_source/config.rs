//! The config source's stream contract, and what becomes of invalid objects: an error item, a
//! Warning Event on the object, the last good version kept. PeerAuthentication is read as the
//! networking kinds are.

use std::collections::BTreeSet;

use serde_json::json;
use wayfinder_config::{ConfigEvent, ConfigSpec, Kind, MtlsMode};
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_registry::RegistryError;

use crate::support::{
    CLUSTER, Items, config_source, config_source_in, destination_rule, events_about, eventually,
    key, virtual_service, vs_origin, weight,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_in_the_reset_then_updates_are_upserts_and_deletes_removes() {
    let fake = FakeApiServer::start().await;
    fake.apply(virtual_service("reviews", 100));
    fake.apply(destination_rule("reviews"));
    let mut items = config_source(fake.client());

    let objects = items.reset().await;
    let keys: BTreeSet<_> = objects.iter().map(|o| o.key()).collect();
    let want = [
        key(Kind::VirtualService, "reviews"),
        key(Kind::DestinationRule, "reviews"),
    ];
    assert_eq!(keys, BTreeSet::from(want));
    let vs = objects
        .iter()
        .find(|o| o.kind() == Kind::VirtualService)
        .unwrap();
    assert_eq!(&*vs.meta.origin, vs_origin("reviews"));

    fake.apply(virtual_service("reviews", 50));
    match items.next().await {
        Ok(ConfigEvent::Upsert(object)) => {
            assert_eq!(object.key(), key(Kind::VirtualService, "reviews"));
            assert_eq!(weight(&object), Some(50));
        }
        other => panic!("expected the VirtualService's Upsert, got {other:?}"),
    }

    assert!(fake.delete(
        "networking.istio.io/v1",
        "DestinationRule",
        Some("default"),
        "reviews"
    ));
    match items.next().await {
        Ok(ConfigEvent::Remove(removed)) => {
            assert_eq!(removed, key(Kind::DestinationRule, "reviews"));
        }
        other => panic!("expected the DestinationRule's Remove, got {other:?}"),
    }
    items.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_object_is_an_error_item_and_an_event_and_keeps_its_last_good_version() {
    let fake = FakeApiServer::start().await;
    fake.apply(virtual_service("reviews", 100));
    fake.apply(virtual_service("ratings", 100));
    let mut items = config_source(fake.client());
    assert_eq!(items.reset().await.len(), 2);

    let version = fake.apply(virtual_service("reviews", 120));
    assert_eq!(items.refused().await, ["reviews"]);
    let err = items.error().await;
    let RegistryError::Invalid { origin, detail } = &err else {
        panic!("expected Invalid, got {err:?}");
    };
    assert_eq!(origin, &vs_origin("reviews"));
    assert_eq!(
        detail,
        "VirtualService default/reviews: spec.http[0].route[0].weight: weight 120 is out of \
         range 0..=100"
    );

    let events = eventually(
        "the Event",
        || events_about(&fake, "reviews"),
        |e| !e.is_empty(),
    )
    .await;
    let [event] = events.as_slice() else {
        panic!("one Event expected: {events:#?}");
    };
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "InvalidConfig");
    assert_eq!(
        event["message"],
        "spec.http[0].route[0].weight: weight 120 is out of range 0..=100"
    );
    assert_eq!(event["source"]["component"], "wayfinder");
    assert_eq!(event["reportingComponent"], "wayfinder");
    assert_eq!(event["metadata"]["namespace"], "default");
    let involved = &event["involvedObject"];
    assert_eq!(involved["apiVersion"], "networking.istio.io/v1");
    assert_eq!(involved["kind"], "VirtualService");
    assert_eq!(involved["namespace"], "default");
    assert_eq!(involved["resourceVersion"], version.to_string());
    assert!(
        involved["uid"].as_str().is_some_and(|uid| !uid.is_empty()),
        "{involved}"
    );

    // Other objects are unaffected; the broken one is still reported after the change.
    fake.apply(virtual_service("ratings", 50));
    let (event, _) = items.next_ok().await;
    let ConfigEvent::Upsert(ratings) = event else {
        panic!("expected ratings' Upsert (reviews keeps its last good version), got {event:?}");
    };
    assert_eq!(ratings.key(), key(Kind::VirtualService, "ratings"));
    assert!(matches!(items.error().await, RegistryError::Invalid { .. }));

    // Fixing it sends it.
    fake.apply(virtual_service("reviews", 50));
    let (event, _) = items.next_ok().await;
    let ConfigEvent::Upsert(reviews) = event else {
        panic!("expected reviews' Upsert, got {event:?}");
    };
    assert_eq!(weight(&reviews), Some(50));
    items.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_invalid_from_the_start_is_reported_after_the_reset_and_a_relist_posts_no_event()
{
    let fake = FakeApiServer::start().await;
    fake.apply(virtual_service("bad", 120));
    fake.apply(virtual_service("good", 100));
    let mut items = config_source(fake.client());
    let objects = items.reset().await;
    assert_eq!(
        objects.iter().map(|o| o.key()).collect::<Vec<_>>(),
        [key(Kind::VirtualService, "good")]
    );
    rejected_with_one_event(&mut items, &fake, "bad").await;

    // etcd compacts and the watches break: the source lists again, which changes nothing.
    fake.until_watching("virtualservices", 1).await;
    fake.compact();
    fake.cut_watches();
    // A second invalid object after the relist: its Event shows the relist was read.
    fake.apply(virtual_service("worse", 130));
    rejected_with_one_event(&mut items, &fake, "worse").await;
    assert!(
        fake.counts().gone > 0,
        "the watch was not resumed from a compacted version"
    );
    assert_eq!(
        events_about(&fake, "bad").len(),
        1,
        "the relist posted bad's Event again"
    );
    items.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_for_one_namespace_reads_only_that_namespace() {
    let fake = FakeApiServer::start().await;
    fake.apply(virtual_service("reviews", 100));
    let mut ratings = virtual_service("ratings", 100);
    ratings["metadata"]["namespace"] = json!("shop");
    fake.apply(ratings);
    let mut items = config_source_in(fake.client(), Some("shop"));
    let objects = items.reset().await;
    let names: Vec<(&str, &str)> = objects
        .iter()
        .map(|o| (&*o.meta.namespace, &*o.meta.name))
        .collect();
    assert_eq!(names, [("shop", "ratings")]);
    items.stop().await;
}

/// The next item rejects the VirtualService `name`, and the fake receives one Event about it.
async fn rejected_with_one_event(items: &mut Items<ConfigEvent>, fake: &FakeApiServer, name: &str) {
    let refused = items.refused().await;
    assert!(refused.iter().any(|n| n == name), "{refused:?}");
    let err = items.error().await;
    assert_eq!(err.origin(), vs_origin(name));
    let what = format!("{name}'s Event");
    eventually(&what, || events_about(fake, name).len(), |n| *n == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_authentications_are_read_and_one_with_ports_but_no_selector_is_refused() {
    let fake = FakeApiServer::start().await;
    let policy = |name: &str, spec: serde_json::Value| {
        json!({
            "apiVersion": "security.istio.io/v1",
            "kind": "PeerAuthentication",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        })
    };
    fake.apply(policy("default", json!({"mtls": {"mode": "STRICT"}})));
    // JSON keys are strings: the API server's form of `portLevelMtls: {8080: …}`.
    fake.apply(policy(
        "finance",
        json!({
            "selector": {"matchLabels": {"app": "finance"}},
            "portLevelMtls": {"8080": {"mode": "DISABLE"}},
        }),
    ));
    let mut items = config_source(fake.client());
    let objects = items.reset().await;
    let keys: BTreeSet<_> = objects.iter().map(|o| o.key()).collect();
    let want = [
        key(Kind::PeerAuthentication, "default"),
        key(Kind::PeerAuthentication, "finance"),
    ];
    assert_eq!(keys, BTreeSet::from(want));
    let finance = objects.iter().find(|o| &*o.meta.name == "finance").unwrap();
    let ConfigSpec::PeerAuthentication(pa) = &finance.spec else {
        panic!("not a PeerAuthentication: {finance:?}");
    };
    assert_eq!(pa.port_level_mtls[&8080].mode, MtlsMode::Disable);

    fake.apply(policy(
        "bad",
        json!({"portLevelMtls": {"8080": {"mode": "DISABLE"}}}),
    ));
    assert_eq!(items.refused().await, ["bad"]);
    let err = items.error().await;
    let RegistryError::Invalid { origin, detail } = &err else {
        panic!("expected Invalid, got {err:?}");
    };
    assert_eq!(
        origin,
        &format!(
            "{CLUSTER}: /apis/security.istio.io/v1/namespaces/default/peerauthentications/bad"
        )
    );
    assert!(
        detail
            .starts_with("PeerAuthentication default/bad: spec.portLevelMtls: requires a selector"),
        "{detail}"
    );
    let events = eventually(
        "the Event",
        || events_about(&fake, "bad"),
        |e| !e.is_empty(),
    )
    .await;
    let involved = &events[0]["involvedObject"];
    assert_eq!(involved["apiVersion"], "security.istio.io/v1");
    assert_eq!(involved["kind"], "PeerAuthentication");
    items.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_filters_are_read_in_v1alpha3_and_one_whose_value_is_not_its_message_is_refused() {
    let fake = FakeApiServer::start().await;
    let filter = |name: &str, value: serde_json::Value| {
        json!({
            "apiVersion": "networking.istio.io/v1alpha3",
            "kind": "EnvoyFilter",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"configPatches": [{
                "applyTo": "CLUSTER",
                "match": {"cluster": {"service": "reviews.default.svc.cluster.local"}},
                "patch": {"operation": "MERGE", "value": value},
            }]},
        })
    };
    fake.apply(filter("timeout", json!({"connect_timeout": "2s"})));
    let mut items = config_source(fake.client());
    let objects = items.reset().await;
    let keys: Vec<_> = objects.iter().map(|o| o.key()).collect();
    assert_eq!(keys, [key(Kind::EnvoyFilter, "timeout")]);

    fake.apply(filter("bad", json!({"connect_timeout": "soon"})));
    assert_eq!(items.refused().await, ["bad"]);
    let err = items.error().await;
    let RegistryError::Invalid { origin, detail } = &err else {
        panic!("expected Invalid, got {err:?}");
    };
    assert_eq!(
        origin,
        &format!(
            "{CLUSTER}: /apis/networking.istio.io/v1alpha3/namespaces/default/envoyfilters/bad"
        )
    );
    assert!(
        detail.starts_with(
            "EnvoyFilter default/bad: spec.configPatches[0].patch.value: not a \
             envoy.config.cluster.v3.Cluster"
        ),
        "{detail}"
    );
    items.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_configs_are_read_in_v1beta1_and_a_negative_concurrency_is_refused() {
    let fake = FakeApiServer::start().await;
    let config = |name: &str, concurrency: i32| {
        json!({
            "apiVersion": "networking.istio.io/v1beta1",
            "kind": "ProxyConfig",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "reviews"}},
                "concurrency": concurrency,
                "environmentVariables": {"ISTIO_META_TEAM": "blue"},
            },
        })
    };
    fake.apply(config("reviews", 2));
    let mut items = config_source(fake.client());
    let objects = items.reset().await;
    let keys: Vec<_> = objects.iter().map(|o| o.key()).collect();
    assert_eq!(keys, [key(Kind::ProxyConfig, "reviews")]);

    fake.apply(config("bad", -1));
    assert_eq!(items.refused().await, ["bad"]);
    let err = items.error().await;
    let RegistryError::Invalid { origin, detail } = &err else {
        panic!("expected Invalid, got {err:?}");
    };
    assert_eq!(
        origin,
        &format!(
            "{CLUSTER}: /apis/networking.istio.io/v1beta1/namespaces/default/proxyconfigs/bad"
        )
    );
    assert_eq!(
        detail,
        "ProxyConfig default/bad: spec.concurrency: concurrency must be greater than or equal to 0"
    );
    items.stop().await;
}
