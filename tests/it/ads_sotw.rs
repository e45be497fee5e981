//! The state-of-the-world rules of `shared/notes/xds-protocol.md`, with a raw ADS client.
//!
//! Proving that the server sent *nothing* uses a fence: a request or change that must produce
//! a known response, whose arrival shows nothing came before it (one stream is ordered).

use std::collections::BTreeSet;

use futures::StreamExt;
use tokio::sync::oneshot;
use wayfinder::xds::TypeUrl::{Cluster as CDS, Endpoint as EDS, Listener as LDS, Route as RDS};
use wayfinder::xds::pb::discovery::DiscoveryResponse;
use wayfinder_memory::MemoryRegistry;
use wayfinder_registry::{
    CancellationToken, Endpoint, EventStream, Protocol, Registration, RegistryId, Source,
};

use crate::support::ads::{Ads, grpc, names_of, request, sidecar};
use crate::support::binary::get;
use crate::support::fixtures::{cluster, http, with_protocol};
use crate::support::inproc;

fn names(r: &DiscoveryResponse) -> BTreeSet<String> {
    names_of(r).into_iter().collect()
}

fn set(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Subscribes to every type (clusters and listeners by wildcard, a's and b's endpoints, route
/// `8080`) and acknowledges each answer.
async fn subscribe_all(ads: &mut Ads) {
    let (a, b) = (cluster("a"), cluster("b"));
    for (t, ask) in [
        (CDS, vec![]),
        (EDS, vec![a.as_str(), b.as_str()]),
        (LDS, vec![]),
        (RDS, vec!["8080"]),
    ] {
        ads.subscribe(t, &ask).await;
        let r = ads.recv_type(t).await;
        ads.ack(&r, &ask).await;
    }
}

const CATCH_ALL: [&str; 3] = [
    "BlackHoleCluster",
    "InboundPassthroughCluster",
    "PassthroughCluster",
];

#[tokio::test]
async fn acks_get_no_answer_and_versions_depend_only_on_content() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(CDS, &[]).await;
    let r = ads.recv_type(CDS).await;
    let mut want = set(&CATCH_ALL);
    want.extend([cluster("a"), cluster("b")]);
    assert_eq!(names(&r), want);
    assert_eq!(
        r.version_info.len(),
        16,
        "a 64-bit content hash: {}",
        r.version_info
    );
    assert!(
        r.control_plane
            .as_ref()
            .is_some_and(|c| c.identifier.starts_with("wayfinder"))
    );
    ads.ack(&r, &[]).await;
    ads.assert_silent(LDS).await;

    let mut other = Ads::connect(srv.grpc, sidecar("10.9.0.2", "default")).await;
    other.subscribe(CDS, &[]).await;
    assert_eq!(
        other.recv_type(CDS).await.version_info,
        r.version_info,
        "same content, same version"
    );
}

#[tokio::test]
async fn every_type_answers_with_its_own_type_url_and_unique_names() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.0.0.1", "default")).await;
    let asks: [(_, Vec<String>); 4] = [
        (CDS, vec![]),
        (EDS, vec![cluster("a"), cluster("b")]),
        (LDS, vec![]),
        (RDS, vec!["8080".into()]),
    ];
    for (t, ask) in asks {
        let ask: Vec<&str> = ask.iter().map(String::as_str).collect();
        ads.subscribe(t, &ask).await;
        let r = ads.recv_type(t).await;
        assert!(!r.resources.is_empty(), "{t} is empty");
        assert!(
            r.resources.iter().all(|any| any.type_url == t.as_str()),
            "{t}: an Any of another type"
        );
        let list = names_of(&r);
        assert_eq!(
            list.len(),
            names(&r).len(),
            "{t}: duplicate names in {list:?}"
        );
    }
}

#[tokio::test]
async fn a_nack_is_recorded_and_the_same_content_is_not_sent_again() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(CDS, &[]).await;
    let cds = ads.recv_type(CDS).await;
    ads.subscribe(EDS, &[&cluster("a")]).await;
    let eds = ads.recv_type(EDS).await;
    ads.ack(&eds, &[&cluster("a")]).await;
    ads.nack(&cds, &[], "").await;
    // An endpoint change is a new snapshot with the same clusters: the rejected clusters must
    // not come again. CDS is pushed before EDS, so the EDS push fences any CDS resend.
    srv.registry
        .set_endpoints(&http("a", &[]).key(), vec![Endpoint::new("10.0.0.9")])
        .await
        .unwrap();
    assert_eq!(
        names(&ads.recv().await),
        set(&[&cluster("a")]),
        "expected only the EDS push"
    );

    let syncz: serde_json::Value =
        serde_json::from_str(&get(srv.server.http_addr, "/debug/syncz").await.1).unwrap();
    let nack = &syncz[0]["types"]["cds"]["last_nack"];
    assert_eq!(nack["message"], "rejected by test");
    assert_eq!(nack["nonce"], cds.nonce);
    let metrics = get(srv.server.monitoring_addr, "/metrics").await.1;
    assert!(metrics.contains("pilot_total_xds_rejects 1"), "{metrics}");
    assert!(metrics.contains("pilot_xds_cds_reject 1"), "{metrics}");

    // New content is sent.
    srv.registry
        .upsert(with_protocol(&http("b", &["10.0.0.2"]), Protocol::Http2))
        .await;
    let r = ads.recv_type(CDS).await;
    assert_ne!(r.version_info, cds.version_info);
}

#[tokio::test]
async fn a_request_with_a_stale_nonce_is_ignored() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(EDS, &[&cluster("a")]).await;
    let first = ads.recv_type(EDS).await;
    srv.registry
        .set_endpoints(&http("a", &[]).key(), vec![Endpoint::new("10.0.0.7")])
        .await
        .unwrap();
    let second = ads.recv_type(EDS).await;
    // Growing the subscription with the superseded nonce: must be ignored entirely.
    ads.send(request(
        EDS,
        &[&cluster("a"), &cluster("b")],
        &first.version_info,
        &first.nonce,
    ))
    .await;
    ads.assert_silent(CDS).await;
    // The same with the current nonce is honoured.
    ads.resubscribe(&second, &[&cluster("a"), &cluster("b")])
        .await;
    assert_eq!(names(&ads.recv_type(EDS).await), set(&[&cluster("b")]));
    let metrics = get(srv.server.monitoring_addr, "/metrics").await.1;
    assert!(metrics.contains("pilot_xds_expired_nonce 1"), "{metrics}");
}

#[tokio::test]
async fn legacy_wildcard_then_explicit_names_then_nothing() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let (a, b) = (http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"]));
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    // 1. [] on a fresh stream: wildcard.
    ads.subscribe(CDS, &[]).await;
    let r = ads.recv_type(CDS).await;
    assert!(names(&r).contains(&cluster("b")));
    // 2. ["*", A]: still wildcard, nothing new to send.
    ads.resubscribe(&r, &["*", &cluster("a")]).await;
    ads.assert_silent(LDS).await;
    // 3. [A]: A only; the next change of A sends A alone.
    ads.resubscribe(&r, &[&cluster("a")]).await;
    srv.registry
        .upsert(with_protocol(&a, Protocol::Http2))
        .await;
    let r = ads.recv_type(CDS).await;
    assert_eq!(names(&r), set(&[&cluster("a")]));
    // 4. []: after explicit names this means nothing. One change to A's cluster and its
    //    endpoints: only the endpoints may come (a cluster response would come first).
    ads.subscribe(EDS, &[&cluster("a")]).await;
    let eds = ads.recv_type(EDS).await;
    ads.ack(&eds, &[&cluster("a")]).await;
    ads.resubscribe(&r, &[]).await;
    let changed = with_protocol(&a, Protocol::Grpc);
    let changed = wayfinder_registry::Registration::new(
        (*changed.service).clone(),
        vec![Endpoint::new("10.0.0.8")],
    );
    srv.registry.upsert(changed).await;
    srv.registry
        .upsert(with_protocol(&b, Protocol::Http2))
        .await;
    let next = ads.recv().await;
    assert_eq!(
        next.type_url,
        EDS.as_str(),
        "no CDS response for an empty subscription"
    );
}

#[tokio::test]
async fn names_asked_for_before_they_exist_arrive_when_created() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(EDS, &[&cluster("c")]).await;
    ads.assert_silent(LDS).await;
    srv.registry.upsert(http("c", &["10.0.3.1"])).await;
    assert_eq!(names(&ads.recv_type(EDS).await), set(&[&cluster("c")]));

    // A gRPC client's listener: first an answer without it (so it knows it does not exist
    // yet, instead of waiting for a timer), then the listener once it exists.
    let mut g = Ads::connect(srv.grpc, grpc("grpc-1")).await;
    let name = "d.default.svc.cluster.local:8080";
    g.subscribe(LDS, &[name]).await;
    assert!(g.recv_type(LDS).await.resources.is_empty());
    srv.registry.upsert(http("d", &["10.0.4.1"])).await;
    assert_eq!(names(&g.recv_type(LDS).await), set(&[name]));
}

#[tokio::test]
async fn listeners_and_clusters_are_deleted_by_omission() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(CDS, &[]).await;
    ads.recv_type(CDS).await;
    srv.registry.remove(&http("b", &[]).key()).await;
    let r = ads.recv_type(CDS).await;
    let mut want = set(&CATCH_ALL);
    want.insert(cluster("a"));
    assert_eq!(names(&r), want, "the full set without b");

    let mut g = Ads::connect(srv.grpc, grpc("grpc-1")).await;
    g.subscribe(CDS, &[&cluster("a")]).await;
    assert_eq!(names(&g.recv_type(CDS).await), set(&[&cluster("a")]));
    srv.registry.remove(&http("a", &[]).key()).await;
    assert!(
        g.recv_type(CDS).await.resources.is_empty(),
        "an empty response deletes the last cluster"
    );
}

#[tokio::test]
async fn a_larger_name_set_at_the_same_version_gets_the_new_names() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(EDS, &[&cluster("a")]).await;
    let r = ads.recv_type(EDS).await;
    ads.ack(&r, &[&cluster("a"), &cluster("b")]).await;
    let r = ads.recv_type(EDS).await;
    assert_eq!(names(&r), set(&[&cluster("b")]));
    // Dropped and asked for again: sent again, though unchanged.
    ads.ack(&r, &[&cluster("a")]).await;
    ads.ack(&r, &[&cluster("a"), &cluster("b")]).await;
    assert_eq!(names(&ads.recv_type(EDS).await), set(&[&cluster("b")]));
}

#[tokio::test]
async fn a_changed_cluster_gets_its_endpoints_again() {
    let a = http("a", &["10.0.0.1"]);
    let srv = inproc::start(vec![a.clone(), http("b", &["10.0.0.2"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(CDS, &[]).await;
    let cds = ads.recv_type(CDS).await;
    ads.ack(&cds, &[]).await;
    ads.subscribe(EDS, &[&cluster("a"), &cluster("b")]).await;
    let eds = ads.recv_type(EDS).await;
    ads.ack(&eds, &[&cluster("a"), &cluster("b")]).await;
    srv.registry
        .upsert(with_protocol(&a, Protocol::Http2))
        .await;
    let cds2 = ads.recv_type(CDS).await;
    assert_ne!(cds2.version_info, cds.version_info);
    let eds2 = ads.recv_type(EDS).await;
    assert_eq!(
        names(&eds2),
        set(&[&cluster("a")]),
        "a's unchanged endpoints, so its cluster can finish warming"
    );
}

#[tokio::test]
async fn an_endpoint_change_pushes_only_that_assignment() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    subscribe_all(&mut ads).await;
    // Another client subscribed to b's endpoints only.
    let mut other = Ads::connect(srv.grpc, sidecar("10.9.0.2", "default")).await;
    let only_b = [cluster("b")];
    let only_b: Vec<&str> = only_b.iter().map(String::as_str).collect();
    other.subscribe(EDS, &only_b).await;
    let r = other.recv_type(EDS).await;
    other.ack(&r, &only_b).await;
    srv.registry
        .add_endpoint(&http("a", &[]).key(), Endpoint::new("10.0.0.3"))
        .await
        .unwrap();
    let r = ads.recv().await;
    assert_eq!(
        (r.type_url.as_str(), names(&r)),
        (EDS.as_str(), set(&[&cluster("a")]))
    );
    // Fence: the next change's push must come next; nothing else was sent in between, and
    // the client that does not subscribe to a's endpoints got nothing for a's change.
    srv.registry
        .add_endpoint(&http("b", &[]).key(), Endpoint::new("10.0.0.4"))
        .await
        .unwrap();
    let r = ads.recv().await;
    assert_eq!(
        (r.type_url.as_str(), names(&r)),
        (EDS.as_str(), set(&[&cluster("b")]))
    );
    let r = other.recv().await;
    assert_eq!(
        (r.type_url.as_str(), names(&r)),
        (EDS.as_str(), set(&[&cluster("b")])),
        "a's change reached a client that does not subscribe to it"
    );
}

#[tokio::test]
async fn pushes_go_out_clusters_endpoints_listeners_routes() {
    let a = http("a", &["10.0.0.1"]);
    let srv = inproc::start(vec![a.clone(), http("b", &["10.0.0.2"])]).await;
    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    subscribe_all(&mut ads).await;
    // One change touching every type: a's cluster (gRPC now), endpoints and VIP (its route
    // domains), and a new TCP service with a VIP (a new listener).
    let mut changed = with_protocol(&a, Protocol::Grpc);
    let mut svc = (*changed.service).clone();
    svc.addresses = vec!["10.96.0.1".parse().unwrap()];
    changed = wayfinder_registry::Registration::new(
        svc,
        vec![Endpoint::new("10.0.0.1"), Endpoint::new("10.0.0.5")],
    );
    let mut db = wayfinder_registry::Service::new("db.default.svc.cluster.local", "default")
        .with_port("tcp", 5432, Protocol::Tcp);
    db.addresses = vec!["10.96.0.2".parse().unwrap()];
    let db = wayfinder_registry::Registration::new(db, vec![]);
    srv.registry
        .replace_all(vec![changed, http("b", &["10.0.0.2"]), db])
        .await;
    let order: Vec<String> = [
        ads.recv().await,
        ads.recv().await,
        ads.recv().await,
        ads.recv().await,
    ]
    .iter()
    .map(|r| r.type_url.rsplit('.').next().unwrap().to_string())
    .collect();
    assert_eq!(
        order,
        [
            "Cluster",
            "ClusterLoadAssignment",
            "Listener",
            "RouteConfiguration"
        ]
    );
}

#[tokio::test]
async fn malformed_requests_are_refused_and_unknown_types_ignored() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"])]).await;
    let mut ads = Ads::connect(srv.grpc, Default::default())
        .await
        .without_node();
    ads.send(request(CDS, &[], "", "")).await;
    let status = ads.recv_error().await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("node"), "{status}");

    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(CDS, &[]).await;
    ads.recv_type(CDS).await;
    let mut no_type = request(CDS, &[], "", "");
    no_type.type_url.clear();
    ads.send(no_type).await;
    let status = ads.recv_error().await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("type_url"), "{status}");

    let mut ads = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    let mut secret = request(CDS, &["default"], "", "");
    secret.type_url = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret".into();
    ads.send(secret).await;
    ads.assert_silent(CDS).await;

    let mut bad_node = Ads::connect(srv.grpc, sidecar("not-an-ip", "default")).await;
    bad_node.subscribe(CDS, &[]).await;
    let status = bad_node.recv_error().await;
    assert!(
        status.message().contains("not-an-ip") && status.message().contains("not an IP"),
        "{status}"
    );
}

#[tokio::test]
async fn a_client_that_does_not_read_does_not_delay_the_others() {
    // Enough services that a few responses overflow the stalled stream's buffers.
    let many: Vec<_> = (0..2000)
        .map(|i| http(&format!("service-with-a-long-name-{i:04}"), &["10.0.0.1"]))
        .collect();
    let srv = inproc::start(many).await;
    let mut stalled = Ads::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    stalled.subscribe(CDS, &[]).await;
    let mut live = Ads::connect(srv.grpc, sidecar("10.9.0.2", "default")).await;
    live.subscribe(CDS, &[]).await;
    live.recv_type(CDS).await;
    for round in 0..60 {
        srv.registry
            .upsert(http(&format!("added-{round}"), &["10.0.0.2"]))
            .await;
        let r = live.recv_type(CDS).await;
        assert!(
            names(&r).contains(&cluster(&format!("added-{round}"))),
            "round {round}"
        );
    }
    // The stalled stream really is stalled: once its buffers filled, it was sent nothing more,
    // while the live one got all 61 responses.
    let syncz: serde_json::Value =
        serde_json::from_str(&get(srv.server.http_addr, "/debug/syncz").await.1).unwrap();
    let mut responses: Vec<u64> = syncz
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["types"]["cds"]["responses"].as_u64().unwrap())
        .collect();
    responses.sort();
    assert_eq!(responses[1], 61, "{responses:?}");
    assert!(
        responses[0] < 40,
        "the stalled stream should have fallen behind: {responses:?}"
    );
    drop(stalled);
}

/// A registry that syncs only when the test says so.
struct Gated(MemoryRegistry, oneshot::Receiver<()>);

impl Source<Registration> for Gated {
    fn id(&self) -> &RegistryId {
        self.0.id()
    }
    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream {
        let Gated(inner, gate) = *self;
        futures::stream::once(async move {
            let _ = gate.await;
            Box::new(inner).watch(shutdown)
        })
        .flatten()
        .boxed()
    }
}

#[tokio::test]
async fn nothing_is_served_until_the_registries_synced() {
    let (registry, handle) = MemoryRegistry::new("Slow");
    handle.upsert(http("a", &["10.0.0.1"])).await;
    let (open, gate) = oneshot::channel();
    let server = inproc::start_with(vec![Box::new(Gated(registry, gate))]).await;
    let mut ads = Ads::connect(
        server.grpc_addr.expect("a plaintext port"),
        sidecar("10.9.0.1", "default"),
    )
    .await;
    ads.subscribe(CDS, &[]).await;
    let (status, body) = get(server.http_addr, "/ready").await;
    assert_eq!((status, body.trim()), (503, "not ready: waiting for Slow"));
    open.send(()).unwrap();
    assert!(names(&ads.recv_type(CDS).await).contains(&cluster("a")));
    assert_eq!(get(server.http_addr, "/ready").await.0, 200);
    server.shutdown();
}
