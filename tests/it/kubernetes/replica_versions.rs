//! Two replicas on one API server serve identical versions for identical input, though one
//! learnt the objects from its first list and the other from watch events, one by one: so a
//! delta client that moves from replica A to replica B (its connection aged out, A stopped)
//! and tells B, with `initial_resource_versions`, what A sent it, gets nothing again: B's
//! answers to its requests are empty, and its next responses hold only what changes after the
//! move.

use std::collections::{BTreeMap, HashMap};

use serde_json::json;
use wayfinder::xds::TypeUrl::{
    self, Cluster as CDS, Endpoint as EDS, Listener as LDS, Route as RDS,
};
use wayfinder::xds::pb::discovery::DeltaDiscoveryRequest;
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::fixtures::{address_slice, service};

use crate::support::ads::sidecar;
use crate::support::binary::Wayfinder;
use crate::support::delta::{Delta, summary};
use crate::support::eventually;

const WEB: &str = "web.default.svc.cluster.local";

fn client() -> wayfinder::xds::pb::core::Node {
    sidecar("10.9.0.1", "default")
}

/// `web`'s second EndpointSlice (`web-xyz`), with endpoints `10.2.0.1..=n`.
fn second_slice(n: u8) -> serde_json::Value {
    let ips: Vec<String> = (1..=n).map(|i| format!("10.2.0.{i}")).collect();
    let mut slice = address_slice("default", "web", ("http", 9080), &ips);
    slice["metadata"]["name"] = json!("web-xyz");
    slice
}

/// The versions a new delta stream to `w` is sent, per type and name: every cluster and
/// listener, the EDS assignments of the clusters, the routes of ports 8080 and 9090.
async fn versions(w: &Wayfinder) -> (Delta, BTreeMap<(TypeUrl, String), String>) {
    let mut d = Delta::connect(w.grpc, client()).await;
    let mut all = BTreeMap::new();
    let mut record = |t: TypeUrl, r: &wayfinder::xds::pb::discovery::DeltaDiscoveryResponse| {
        for (name, version) in summary(r).0 {
            all.insert((t, name), version);
        }
    };
    d.change(CDS, &[], &[], "").await;
    let r = d.recv_type(CDS).await;
    record(CDS, &r);
    d.ack(&r).await;
    let eds: Vec<String> = summary(&r)
        .0
        .into_keys()
        .filter(|n| n.starts_with("outbound|"))
        .collect();
    let eds: Vec<&str> = eds.iter().map(String::as_str).collect();
    d.change(EDS, &eds, &[], "").await;
    let r = d.recv_type(EDS).await;
    record(EDS, &r);
    d.ack(&r).await;
    d.change(LDS, &[], &[], "").await;
    let r = d.recv_type(LDS).await;
    record(LDS, &r);
    d.ack(&r).await;
    d.change(RDS, &["8080", "9090"], &[], "").await;
    let r = d.recv_type(RDS).await;
    record(RDS, &r);
    d.ack(&r).await;
    (d, all)
}

#[tokio::test]
async fn replicas_serve_equal_versions_and_a_moved_delta_client_gets_nothing_again() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    super::web(&fake, 1, 3);
    fake.apply(service(
        "default",
        "api",
        "10.96.0.11",
        &[("http", 9090, 9090)],
    ));
    let api_ips = |n: u8| (1..=n).map(|i| format!("10.3.0.{i}")).collect::<Vec<_>>();
    fake.apply(address_slice("default", "api", ("http", 9090), &api_ips(2)));
    let a = super::start(&fake, dir.path(), &[]).await;
    a.ready().await;
    // A hears of these as watch events, one at a time; B will list them.
    fake.apply(second_slice(2));
    fake.apply(super::web_slice(1, 4));
    let want = [
        "10.1.0.1:9080",
        "10.1.0.2:9080",
        "10.1.0.3:9080",
        "10.1.0.4:9080",
        "10.2.0.1:9080",
        "10.2.0.2:9080",
    ];
    eventually("A to serve web's endpoints", || async {
        (a.endpoints(WEB).await == want).then_some(())
    })
    .await;
    let b = super::start(&fake, dir.path(), &[]).await;
    b.ready().await;
    assert_eq!(b.endpoints(WEB).await, want);

    let (from_a, sent_by_a) = versions(&a).await;
    let (_, sent_by_b) = versions(&b).await;
    assert!(
        sent_by_a
            .keys()
            .any(|(t, n)| *t == EDS && n.contains("web"))
            && sent_by_a.len() > 8,
        "{sent_by_a:#?}"
    );
    assert_eq!(
        sent_by_a, sent_by_b,
        "replicas version identical input alike"
    );

    // The client moves to B, holding what A sent it.
    drop(from_a);
    let held = |t: TypeUrl| -> HashMap<String, String> {
        sent_by_a
            .iter()
            .filter(|((ty, _), _)| *ty == t)
            .map(|((_, n), v)| (n.clone(), v.clone()))
            .collect()
    };
    let mut d = Delta::connect(b.grpc, client()).await;
    d.send(DeltaDiscoveryRequest {
        type_url: CDS.as_str().into(),
        initial_resource_versions: held(CDS),
        ..Default::default()
    })
    .await;
    let eds = held(EDS);
    d.send(DeltaDiscoveryRequest {
        type_url: EDS.as_str().into(),
        resource_names_subscribe: eds.keys().cloned().collect(),
        initial_resource_versions: eds,
        ..Default::default()
    })
    .await;
    // B answers each (Envoy's initialization waits for an answer) with nothing to send.
    for t in [CDS, EDS] {
        let r = d.recv_type(t).await;
        assert_eq!(
            summary(&r),
            (BTreeMap::new(), Vec::new()),
            "{t}: nothing again"
        );
        d.ack(&r).await;
    }
    // Then one endpoint of api changes, and a service is added: B's next responses are
    // exactly these.
    fake.apply(address_slice("default", "api", ("http", 9090), &api_ips(3)));
    let r = d.recv_type(EDS).await;
    let (changed, removed) = summary(&r);
    let api = "outbound|9090||api.default.svc.cluster.local";
    assert_eq!(changed.keys().collect::<Vec<_>>(), [api], "{r:?}");
    assert!(removed.is_empty(), "{removed:?}");
    d.ack(&r).await;
    fake.apply(service(
        "default",
        "extra",
        "10.96.0.12",
        &[("http", 7070, 7070)],
    ));
    let r = d.recv_type(CDS).await;
    let (changed, removed) = summary(&r);
    assert_eq!(
        changed.keys().collect::<Vec<_>>(),
        ["outbound|7070||extra.default.svc.cluster.local"]
    );
    assert!(removed.is_empty(), "{removed:?}");
}
