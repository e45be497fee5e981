//! Istio objects read from the API server (`--config-source k8s`): an invalid VirtualService
//! written through the API (an HTTP PUT, as `kubectl apply` does) is reported in the log, the
//! metrics, the debug page and as a Kubernetes Event on the object, and changes nothing else.

use serde_json::{Value, json};
use wayfinder::xds::TypeUrl;
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::fixtures::{SliceEndpoint, endpoint_slice, pod, service};

use crate::config::reviews_cluster;
use crate::support::ads::{Ads, sidecar};
use crate::support::binary::get;
use crate::support::eventually;

const REVIEWS: &str = "reviews.default.svc.cluster.local";

fn object(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn reviews_vs(subset: &str, weight: u32) -> Value {
    let route = json!([{"destination": {"host": "reviews", "subset": subset}, "weight": weight}]);
    object(
        "VirtualService",
        "reviews",
        json!({"hosts": ["reviews"], "http": [{"route": route}]}),
    )
}

#[tokio::test]
async fn an_invalid_virtual_service_from_the_api_is_reported_and_changes_nothing_else() {
    let fake = FakeApiServer::start().await;
    fake.apply(service(
        "default",
        "reviews",
        "10.96.0.10",
        &[("http", 9080, 9080)],
    ));
    fake.apply(service(
        "default",
        "ratings",
        "10.96.0.11",
        &[("http", 9080, 9080)],
    ));
    let mut endpoints = Vec::new();
    for (i, version) in ["v1", "v2"].iter().enumerate() {
        let (name, ip) = (format!("reviews-{version}"), format!("10.1.0.{}", i + 1));
        fake.apply(pod(
            "default",
            &name,
            &ip,
            "",
            &[("app", "reviews"), ("version", version)],
            "reviews",
        ));
        endpoints.push(SliceEndpoint {
            node: None,
            ..SliceEndpoint::new(&ip, &name, "")
        });
    }
    fake.apply(endpoint_slice(
        "default",
        "reviews-abc",
        "reviews",
        &[("http", 9080)],
        &endpoints,
    ));
    let subsets = json!([{"name": "v1", "labels": {"version": "v1"}}, {"name": "v2", "labels": {"version": "v2"}}]);
    fake.apply(object(
        "DestinationRule",
        "reviews",
        json!({"host": "reviews", "subsets": subsets}),
    ));
    fake.apply(reviews_vs("v2", 100));
    let ratings = json!({"hosts": ["ratings"], "http": [{"route": [{"destination": {"host": "ratings"}}], "timeout": "3s"}]});
    fake.apply(object("VirtualService", "ratings", ratings));

    let dir = tempfile::tempdir().unwrap();
    let w = super::start(&fake, dir.path(), &["--config-source", "k8s"]).await;
    w.ready().await;
    let mut ads = Ads::connect(w.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(TypeUrl::Route, &["9080"]).await;
    let rds = ads.recv_type(TypeUrl::Route).await;
    assert_eq!(reviews_cluster(&rds), format!("outbound|9080|v2|{REVIEWS}"));
    ads.ack(&rds, &["9080"]).await;

    // kubectl apply of an invalid edit: a PUT of the whole object.
    crate::support::tls_provider();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let put = |vs: Value| {
        let url = format!(
            "{}/apis/networking.istio.io/v1/namespaces/default/virtualservices/reviews",
            fake.url()
        );
        http.put(url).json(&vs).send()
    };
    assert_eq!(put(reviews_vs("v1", 250)).await.unwrap().status(), 200);
    let line = w
        .wait_log("the rejection", |l| {
            l["error"]
                .as_str()
                .is_some_and(|e| e.contains("spec.http[0].route[0].weight"))
        })
        .await;
    let error = line["error"].as_str().unwrap();
    assert!(error.contains("VirtualService default/reviews"), "{error}");
    let event = eventually("a Kubernetes Event on the VirtualService", || async {
        fake.events()
            .into_iter()
            .find(|e| e["involvedObject"]["name"] == "reviews")
    })
    .await;
    assert_eq!(
        (&event["type"], &event["reason"]),
        (&json!("Warning"), &json!("InvalidConfig")),
        "{event}"
    );
    assert!(
        event["message"].as_str().unwrap().contains("weight"),
        "{event}"
    );
    assert_eq!(event["involvedObject"]["kind"], "VirtualService", "{event}");

    // The last good version and every other object stay in force.
    let configz = eventually("configz to show the source degraded", || async {
        let z = w.json("/debug/configz").await;
        let degraded = z["sources"]
            .as_array()?
            .iter()
            .any(|s| s["health"] == "degraded");
        degraded.then_some(z)
    })
    .await;
    let objects = configz["objects"].as_array().unwrap();
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["name"] == name)
            .cloned()
    };
    assert!(find("VirtualService", "reviews").is_some(), "{configz}");
    let reviews = w
        .json("/debug/configz?kind=VirtualService&name=reviews")
        .await;
    assert_eq!(
        reviews["objects"][0]["spec"]["http"][0]["route"][0]["destination"]["subset"], "v2",
        "the last good reviews: {reviews}"
    );
    let refused = &configz["refused"][0];
    assert_eq!(
        (&refused["kind"], &refused["name"]),
        (&json!("VirtualService"), &json!("reviews")),
        "{configz}"
    );
    assert!(
        find("VirtualService", "ratings").is_some() && find("DestinationRule", "reviews").is_some(),
        "{configz}"
    );
    let (_, metrics) = get(w.monitoring, "/metrics").await;
    assert!(
        metrics.contains("pilot_total_rejected_configs 1"),
        "{metrics}"
    );

    // The fix arrives through the API and is pushed; nothing was pushed for the refused one.
    assert_eq!(put(reviews_vs("v1", 100)).await.unwrap().status(), 200);
    let rds = ads.recv_type(TypeUrl::Route).await;
    assert_eq!(reviews_cluster(&rds), format!("outbound|9080|v1|{REVIEWS}"));
}

/// A mesh moved from Istio keeps its CUSTOM AuthorizationPolicies in the cluster: they are
/// refused, never skipped, so that nobody believes they are enforced.
#[tokio::test]
async fn security_policies_in_the_cluster_are_refused_with_an_event() {
    let fake = FakeApiServer::start().await;
    fake.apply(service(
        "default",
        "ratings",
        "10.96.0.11",
        &[("http", 9080, 9080)],
    ));
    fake.apply(json!({
        "apiVersion": "security.istio.io/v1",
        "kind": "AuthorizationPolicy",
        "metadata": {"name": "deny-all", "namespace": "default"},
        "spec": {"action": "CUSTOM", "provider": {"name": "opa"}, "rules": [{}]},
    }));
    let dir = tempfile::tempdir().unwrap();
    let w = super::start(&fake, dir.path(), &["--config-source", "k8s"]).await;
    w.ready().await;
    w.wait_log("the refusal's log line", |l| {
        l["level"] == "WARN"
            && l.to_string()
                .contains("CUSTOM needs an external authorizer")
    })
    .await;
    let z = eventually("the policy listed as refused", || async {
        let z = w.json("/debug/configz").await;
        let listed = z["refused"]
            .as_array()?
            .iter()
            .any(|r| r["kind"] == "AuthorizationPolicy" && r["name"] == "deny-all");
        listed.then_some(z)
    })
    .await;
    assert!(
        z["objects"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["kind"] != "AuthorizationPolicy"),
        "{z}"
    );
    let event = eventually("a Kubernetes Event on the policy", || async {
        fake.events()
            .into_iter()
            .find(|e| e["involvedObject"]["name"] == "deny-all")
    })
    .await;
    assert_eq!(
        event["involvedObject"]["kind"], "AuthorizationPolicy",
        "{event}"
    );
    assert_eq!(event["reason"], "InvalidConfig", "{event}");
}
