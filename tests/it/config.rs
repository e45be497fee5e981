//! Traffic configuration from `--config-dir`: loading, bad input, `wayfinder validate`.

mod corpus;
mod refused;

use std::process::Command;

use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::route::{RouteConfiguration, route, route_action};

use crate::support::ads::{Ads, decode_all, names_of, sidecar};
use crate::support::binary::{Wayfinder, get, path};
use crate::support::eventually;
use crate::support::fixtures::write;

const DR: &str = "apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
";

fn vs(subset: &str, weight: u32) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: reviews, namespace: default}}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {{host: reviews, subset: {subset}}}
      weight: {weight}
"
    )
}

/// The cluster the `reviews` virtual host of route configuration `9080` sends to.
pub(crate) fn reviews_cluster(r: &wayfinder::xds::pb::discovery::DiscoveryResponse) -> String {
    let rc = decode_all::<RouteConfiguration>(r)
        .remove("9080")
        .expect("route configuration 9080");
    let vh = rc
        .virtual_hosts
        .iter()
        .find(|v| v.name == "reviews.default.svc.cluster.local:9080")
        .expect("reviews");
    match &vh.routes[0].action {
        Some(route::Action::Route(a)) => match &a.cluster_specifier {
            Some(route_action::ClusterSpecifier::Cluster(c)) => c.clone(),
            other => panic!("expected one cluster, got {other:?}"),
        },
        other => panic!("expected a route, got {other:?}"),
    }
}

#[tokio::test]
async fn an_invalid_virtual_service_is_reported_and_its_last_good_version_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "dr.yaml", DR);
    write(dir.path(), "vs.yaml", &vs("v2", 100));
    let dir_arg = dir.path().to_str().unwrap();
    let w = Wayfinder::start(&["--config-dir", dir_arg, "--debounce-after", "10ms"]).await;
    w.ready().await;
    let mut ads = Ads::connect(w.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    let clusters = names_of(&ads.recv_type(TypeUrl::Cluster).await);
    assert!(
        clusters.contains(&"outbound|9080|v2|reviews.default.svc.cluster.local".to_string()),
        "{clusters:?}"
    );
    ads.subscribe(TypeUrl::Route, &["9080"]).await;
    let rds = ads.recv_type(TypeUrl::Route).await;
    assert_eq!(
        reviews_cluster(&rds),
        "outbound|9080|v2|reviews.default.svc.cluster.local"
    );
    ads.ack(&rds, &["9080"]).await;

    // An invalid edit: refused with its file, document and field; the last good version stays.
    write(dir.path(), "vs.yaml", &vs("v1", 250));
    let line = w
        .wait_log("the rejection", |l| {
            l["error"]
                .as_str()
                .is_some_and(|e| e.contains("spec.http[0].route[0].weight"))
        })
        .await;
    let error = line["error"].as_str().unwrap();
    assert!(
        error.contains("vs.yaml: document 1") && error.contains("VirtualService"),
        "{error}"
    );
    // The debug page follows the log line by a moment.
    let configz = eventually("configz to show the source degraded", || async {
        let z = w.json("/debug/configz").await;
        (z["sources"][0]["health"] == "degraded").then_some(z)
    })
    .await;
    let reviews = w
        .json("/debug/configz?kind=VirtualService&namespace=default&name=reviews")
        .await;
    assert_eq!(
        reviews["objects"][0]["spec"]["http"][0]["route"][0]["destination"]["subset"], "v2",
        "{reviews}"
    );
    assert!(
        configz["sources"][0]["last_error"]["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("weight"),
        "{configz}"
    );
    let (_, metrics) = get(w.monitoring, "/metrics").await;
    assert!(
        metrics.contains("pilot_total_rejected_configs 1"),
        "{metrics}"
    );

    let out = Command::new(path())
        .arg("validate")
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("vs.yaml: document 1") && text.contains("spec.http[0].route[0].weight"),
        "{text}"
    );
    assert!(text.contains("1 error"), "{text}");

    // The fix is picked up and pushed; nothing was pushed for the refused version.
    write(dir.path(), "vs.yaml", &vs("v1", 100));
    let rds = ads.recv_type(TypeUrl::Route).await;
    assert_eq!(
        reviews_cluster(&rds),
        "outbound|9080|v1|reviews.default.svc.cluster.local"
    );
    let out = Command::new(path())
        .arg("validate")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test]
async fn config_dir_service_entries_feed_the_config_registry() {
    let dir = tempfile::tempdir().unwrap();
    let entry = crate::support::fixtures::service_entry(
        "api",
        "api.shop.internal",
        ("http", 8080, "HTTP"),
        &[9001],
    );
    write(dir.path(), "entries.yaml", &entry);
    write(dir.path(), "dr.yaml", DR);
    let w = Wayfinder::start(&["--config-dir", dir.path().to_str().unwrap()]).await;
    w.ready().await;
    let status = w.registry_status("Config").await;
    assert_eq!(status["services"], 1, "{status}");
    assert_eq!(w.endpoints("api.shop.internal").await, ["127.0.0.1:9001"]);
    assert_eq!(w.registry_status("Mock").await["services"], 4);
}
