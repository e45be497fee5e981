//! Which changes the registry sends: one Upsert per touched Service, nothing for changes the
//! model does not see.

use wayfinder_kubernetes::Config;
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::fixtures::{
    SliceEndpoint, endpoint_slice, namespace, node, pod, service,
};
use wayfinder_registry::{Event, Registration};

use crate::support::{Watch, watch};

/// A cluster with `web` (two pods) and `sentinel` (one pod) in `shop`.
async fn cluster() -> (FakeApiServer, Watch, Vec<Registration>) {
    let fake = FakeApiServer::start().await;
    fake.apply(node("n1", "us-east1", "us-east1-b"));
    for (name, ip) in [("web-1", "10.1.0.1"), ("web-2", "10.1.0.2")] {
        fake.apply(pod(
            "shop",
            name,
            ip,
            "n1",
            &[("app", "web"), ("version", "v1")],
            "web",
        ));
    }
    fake.apply(pod(
        "shop",
        "sentinel-1",
        "10.1.0.9",
        "n1",
        &[("app", "sentinel")],
        "default",
    ));
    fake.apply(service("shop", "web", "10.96.0.10", &[("http", 80, 8080)]));
    fake.apply(web_slice(&["web-1", "web-2"]));
    fake.apply(service(
        "shop",
        "sentinel",
        "10.96.0.11",
        &[("http", 80, 8080)],
    ));
    fake.apply(sentinel_slice(8080));
    let mut watch = watch(&fake, Config::default());
    let reset = watch.reset().await;
    (fake, watch, reset)
}

fn web_slice(pods: &[&str]) -> serde_json::Value {
    let endpoints: Vec<SliceEndpoint> = pods
        .iter()
        .map(|p| {
            let ip = format!("10.1.0.{}", p.trim_start_matches("web-"));
            SliceEndpoint::new(&ip, p, "n1")
        })
        .collect();
    endpoint_slice("shop", "web-abc", "web", &[("http", 8080)], &endpoints)
}

fn sentinel_slice(port: u16) -> serde_json::Value {
    let ep = SliceEndpoint::new("10.1.0.9", "sentinel-1", "n1");
    endpoint_slice("shop", "sentinel-xyz", "sentinel", &[("http", port)], &[ep])
}

/// Changes the sentinel and expects its Upsert next: proves nothing was sent in between.
async fn next_is_sentinel(fake: &FakeApiServer, watch: &mut Watch, port: u16) {
    fake.apply(sentinel_slice(port));
    let reg = watch.upsert().await;
    assert_eq!(&*reg.service.hostname, "sentinel.shop.svc.cluster.local");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_is_one_upsert_with_the_same_service() {
    let (fake, mut watch, reset) = cluster().await;
    let before = reset
        .iter()
        .find(|r| r.service.hostname.starts_with("web."))
        .unwrap();
    assert_eq!(before.endpoints.len(), 2);
    // A pod the cluster has not shown yet (its own event could come before or after the
    // slice's, and would re-send web with its labels): the slice alone is the scaling.
    fake.apply(web_slice(&["web-1", "web-2", "web-3"]));
    let after = watch.upsert().await;
    assert_eq!(after.service, before.service, "only endpoints changed");
    assert_eq!(after.endpoints.len(), 3);
    next_is_sentinel(&fake, &mut watch, 8081).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_change_changes_the_service() {
    let (fake, mut watch, _) = cluster().await;
    fake.apply(service("shop", "web", "10.96.0.10", &[("http", 81, 8080)]));
    let reg = watch.upsert().await;
    assert_eq!(reg.service.ports[0].number, 81);
    assert_eq!(reg.endpoints.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_labels_reach_endpoints_and_unrelated_pod_changes_send_nothing() {
    let (fake, mut watch, _) = cluster().await;
    // A new container image changes the pod but nothing the model reads.
    let mut same = pod(
        "shop",
        "web-1",
        "10.1.0.1",
        "n1",
        &[("app", "web"), ("version", "v1")],
        "web",
    );
    same["spec"]["containers"][0]["image"] = "example/app:2".into();
    fake.apply(same);
    // A node heartbeat: status only.
    let mut n1 = node("n1", "us-east1", "us-east1-b");
    n1["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-22T10:00:00Z".into();
    fake.apply(n1);
    next_is_sentinel(&fake, &mut watch, 8081).await;

    fake.apply(pod(
        "shop",
        "web-1",
        "10.1.0.1",
        "n1",
        &[("app", "web"), ("version", "v2")],
        "web",
    ));
    let reg = watch.upsert().await;
    let web1 = reg
        .endpoints
        .iter()
        .find(|e| &*e.address == "10.1.0.1")
        .unwrap();
    assert_eq!(web1.labels.get("version").map(|v| &**v), Some("v2"));

    // A node moving zone re-localises the endpoints on it (both services).
    fake.apply(node("n1", "us-east1", "us-east1-d"));
    let mut zones = Vec::new();
    for _ in 0..2 {
        let reg = watch.upsert().await;
        zones.extend(reg.endpoints.iter().map(|e| e.locality.zone.to_string()));
    }
    assert!(zones.iter().all(|z| z == "us-east1-d"), "{zones:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_s_network_label_is_its_pods_network_unless_a_pod_has_its_own() {
    let (fake, mut watch, reset) = cluster().await;
    assert!(
        reset
            .iter()
            .flat_map(|r| r.endpoints.iter())
            .all(|e| e.network.is_empty())
    );
    // Labelling the namespace re-sends both of its services, their endpoints on its network.
    fake.apply(namespace("shop", &[("topology.istio.io/network", "net2")]));
    let mut networks = Vec::new();
    for _ in 0..2 {
        let reg = watch.upsert().await;
        networks.extend(reg.endpoints.iter().map(|e| e.network.to_string()));
    }
    assert_eq!(networks, ["net2", "net2", "net2"]);
    // A pod's own label wins.
    fake.apply(pod(
        "shop",
        "web-1",
        "10.1.0.1",
        "n1",
        &[
            ("app", "web"),
            ("version", "v1"),
            ("topology.istio.io/network", "net3"),
        ],
        "web",
    ));
    let reg = watch.upsert().await;
    let network = |ip: &str| {
        let e = reg.endpoints.iter().find(|e| &*e.address == ip).unwrap();
        e.network.to_string()
    };
    assert_eq!(
        (network("10.1.0.1"), network("10.1.0.2")),
        ("net3".into(), "net2".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_seen_after_its_slice_fills_in_its_endpoint() {
    let (fake, mut watch, _) = cluster().await;
    fake.apply(web_slice(&["web-1", "web-2", "web-4"]));
    let reg = watch.upsert().await;
    let web4 = reg
        .endpoints
        .iter()
        .find(|e| &*e.address == "10.1.0.4")
        .unwrap();
    assert_eq!(web4.labels.get("version"), None, "pod not known yet");
    fake.apply(pod(
        "shop",
        "web-4",
        "10.1.0.4",
        "n1",
        &[("version", "v4")],
        "web",
    ));
    let reg = watch.upsert().await;
    let web4 = reg
        .endpoints
        .iter()
        .find(|e| &*e.address == "10.1.0.4")
        .unwrap();
    assert_eq!(web4.labels.get("version").map(|v| &**v), Some("v4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_service_removes_it_and_app_namespace_limits_the_watch() {
    let (fake, mut watch, _) = cluster().await;
    fake.delete("v1", "Service", Some("shop"), "web");
    match watch.next_ok().await {
        (Event::Remove(key), _) => assert_eq!(&*key.hostname, "web.shop.svc.cluster.local"),
        other => panic!("expected a Remove, got {other:?}"),
    }
    fake.apply(service("other", "api", "10.96.1.1", &[("http", 80, 80)]));
    let config = Config {
        namespace: Some("shop".into()),
        ..Config::default()
    };
    let regs = crate::support::watch(&fake, config).reset().await;
    let hosts: Vec<&str> = regs.iter().map(|r| &*r.service.hostname).collect();
    assert_eq!(hosts, ["sentinel.shop.svc.cluster.local"]);
}
