//! The helper methods: what `apply` sets, `get` and `list`, and the handle's auto traits.

use serde_json::json;
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::{node, raw, service};

#[tokio::test]
async fn apply_sets_server_metadata_and_get_reads_it_back() {
    let fake = FakeApiServer::start().await;
    let start = fake.resource_version();
    let rv = fake.apply(service("a", "s1", &[]));
    assert_eq!(rv, start + 1);
    let first = fake.get("v1", "Service", Some("a"), "s1").unwrap();
    assert_eq!(
        (first["apiVersion"].as_str(), first["kind"].as_str()),
        (Some("v1"), Some("Service"))
    );
    assert_eq!(first["metadata"]["resourceVersion"], rv.to_string());
    assert_eq!(first["metadata"]["generation"], 1);
    assert_eq!(
        first["metadata"]["managedFields"][0]["manager"],
        "wayfinder-fake"
    );

    // Labels alone keep the generation; a spec change bumps it; the uid stays.
    fake.apply(service("a", "s1", &[("app", "web")]));
    let relabelled = fake.get("v1", "Service", Some("a"), "s1").unwrap();
    assert_eq!(relabelled["metadata"]["generation"], 1);
    let mut changed = service("a", "s1", &[("app", "web")]);
    changed["spec"]["clusterIP"] = json!("10.0.0.2");
    let rv3 = fake.apply(changed);
    let changed = fake.get("v1", "Service", Some("a"), "s1").unwrap();
    assert_eq!(changed["metadata"]["generation"], 2);
    assert_eq!(changed["metadata"]["uid"], first["metadata"]["uid"]);
    assert_eq!(
        changed["metadata"]["creationTimestamp"],
        first["metadata"]["creationTimestamp"]
    );
    assert_eq!(fake.resource_version(), rv3);

    // Cluster-scoped kinds ignore the namespace; list covers every namespace.
    fake.apply_many([node("n1"), service("b", "s2", &[])]);
    assert!(
        fake.get("v1", "Node", Some("whatever"), "n1").unwrap()["metadata"]
            .get("namespace")
            .is_none()
    );
    let names: Vec<_> = fake
        .list("v1", "Service")
        .iter()
        .map(|s| s["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("s1"), json!("s2")]);
    assert!(fake.delete("v1", "Node", None, "n1"));
    assert!(!fake.delete("v1", "Node", None, "n1"));
    assert!(fake.resource_version() > rv3);
    assert_eq!(fake.counts(), Default::default());
}

#[tokio::test]
async fn events_of_both_apis_are_recorded() {
    let fake = FakeApiServer::start().await;
    let event = r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"e1"},
        "eventTime":"2025-01-01T00:00:00.000000Z","reportingController":"wayfinder","reportingInstance":"w-1",
        "action":"Sync","reason":"Synced","type":"Normal","regarding":{"kind":"Service","name":"s1"}}"#;
    let created = raw::request(
        &fake.url(),
        "POST",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        Some(("application/json", event)),
    )
    .await;
    assert_eq!(created.status, 201);
    let recorded = fake.events();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(recorded[0]["metadata"]["namespace"], "default");
}

#[test]
fn the_handle_can_be_shared_across_tasks() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<FakeApiServer>();
}
