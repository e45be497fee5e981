//! The incremental (delta) rules of `shared/notes/xds-protocol.md`, with a raw delta client
//! against an in-process server fed by a memory registry.
//!
//! As in `ads_sotw`, proving that nothing was sent uses a fence: a change whose response is
//! known must be the next thing on the stream.

use std::collections::BTreeMap;

use wayfinder::xds::TypeUrl::{Cluster as CDS, Endpoint as EDS, Listener as LDS, Route as RDS};
use wayfinder::xds::ads::Limits;
use wayfinder_registry::{Endpoint, Protocol};

use crate::support::ads::sidecar;
use crate::support::delta::{Delta, sent, summary};
use crate::support::fixtures::{cluster, http, with_protocol};
use crate::support::inproc;

const CATCH_ALL: [&str; 3] = [
    "BlackHoleCluster",
    "InboundPassthroughCluster",
    "PassthroughCluster",
];

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn wildcard_gets_everything_then_only_changes_and_removals() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut d = Delta::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    d.change(CDS, &[], &[], "").await;
    let r = d.recv_type(CDS).await;
    let (first, removed) = summary(&r);
    let mut want = names(&CATCH_ALL);
    want.extend([cluster("a"), cluster("b")]);
    want.sort();
    assert_eq!(first.keys().cloned().collect::<Vec<_>>(), want);
    assert!(removed.is_empty());
    d.ack(&r).await;

    // A new service: only its cluster, with its own version.
    srv.registry.upsert(http("c", &["10.0.0.3"])).await;
    let r = d.recv_type(CDS).await;
    assert_eq!(sent(&r), [cluster("c")]);
    assert!(r.removed_resources.is_empty());
    d.ack(&r).await;
    // A changed one: only it, under a new version.
    srv.registry
        .upsert(with_protocol(&http("a", &["10.0.0.1"]), Protocol::Http2))
        .await;
    let r = d.recv_type(CDS).await;
    let (changed, _) = summary(&r);
    assert_eq!(changed.keys().collect::<Vec<_>>(), [&cluster("a")]);
    assert_ne!(changed[&cluster("a")], first[&cluster("a")]);
    d.ack(&r).await;
    // A deleted one: removed_resources, nothing else.
    srv.registry.remove(&http("b", &[]).key()).await;
    let r = d.recv_type(CDS).await;
    assert_eq!(summary(&r), (BTreeMap::new(), vec![cluster("b")]));
}

#[tokio::test]
async fn explicit_names_missing_names_and_unsubscribe() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"])]).await;
    let mut d = Delta::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    let (a, x) = (cluster("a"), cluster("x"));
    d.change(EDS, &[&a], &[], "").await;
    let r = d.recv_type(EDS).await;
    assert_eq!(summary(&r).0.keys().collect::<Vec<_>>(), [&a]);
    d.ack(&r).await;
    // A name that does not exist is answered at once as removed.
    d.change(EDS, &[&x], &[], &r.nonce).await;
    let r = d.recv_type(EDS).await;
    assert_eq!(summary(&r), (BTreeMap::new(), vec![x.clone()]));
    d.ack(&r).await;
    // ... and sent when it appears.
    srv.registry.upsert(http("x", &["10.0.0.9"])).await;
    let r = d.recv_type(EDS).await;
    assert_eq!(sent(&r), std::slice::from_ref(&x));
    d.ack(&r).await;
    // Unsubscribing gets no answer, and a's changes no longer come: the next response is x's.
    d.change(EDS, &[], &[&a], &r.nonce).await;
    srv.registry
        .add_endpoint(&http("a", &[]).key(), Endpoint::new("10.0.0.5"))
        .await
        .unwrap();
    srv.registry
        .add_endpoint(&http("x", &[]).key(), Endpoint::new("10.0.0.6"))
        .await
        .unwrap();
    let r = d.recv_type(EDS).await;
    assert_eq!(
        summary(&r),
        (
            BTreeMap::from([(x, r.resources[0].version.clone())]),
            vec![]
        )
    );
}

#[tokio::test]
async fn a_reconnect_with_initial_versions_gets_only_what_changed_and_what_vanished() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let node = || sidecar("10.9.0.1", "default");
    let mut d = Delta::connect(srv.grpc, node()).await;
    d.change(CDS, &[], &[], "").await;
    let r = d.recv_type(CDS).await;
    let (held, _) = summary(&r);
    d.ack(&r).await;

    // Then a changes and b goes (published: the old stream hears of both), and the client
    // comes back holding what it had, plus a name never served.
    srv.registry
        .upsert(with_protocol(&http("a", &["10.0.0.1"]), Protocol::Http2))
        .await;
    srv.registry.remove(&http("b", &[]).key()).await;
    let mut heard = (BTreeMap::new(), Vec::new());
    while heard.0.is_empty() || heard.1.is_empty() {
        let (sent, removed) = summary(&d.recv_type(CDS).await);
        heard.0.extend(sent);
        heard.1.extend(removed);
    }
    drop(d);
    let mut initial: std::collections::HashMap<String, String> = held.into_iter().collect();
    initial.insert(
        "outbound|1||ghost.default.svc.cluster.local".into(),
        "1".into(),
    );
    let mut d = Delta::connect(srv.grpc, node()).await;
    d.send(wayfinder::xds::pb::discovery::DeltaDiscoveryRequest {
        type_url: CDS.as_str().into(),
        initial_resource_versions: initial,
        ..Default::default()
    })
    .await;
    let r = d.recv_type(CDS).await;
    let (changed, removed) = summary(&r);
    assert_eq!(
        changed.keys().collect::<Vec<_>>(),
        [&cluster("a")],
        "unchanged ones are skipped"
    );
    let ghost = "outbound|1||ghost.default.svc.cluster.local".to_string();
    assert_eq!(
        removed,
        [ghost, cluster("b")],
        "sorted: what vanished, and what never was"
    );
}

#[tokio::test]
async fn a_subscription_change_counts_even_with_a_stale_nonce_and_a_nack_is_not_answered() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut d = Delta::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    let (a, b) = (cluster("a"), cluster("b"));
    d.change(EDS, &[&a], &[], "").await;
    let first = d.recv_type(EDS).await;
    d.nack(&first).await;
    // Stale nonce, new name: honoured.
    d.change(EDS, &[&b], &[], "stale-nonce").await;
    let r = d.recv_type(EDS).await;
    assert_eq!(
        sent(&r),
        std::slice::from_ref(&b),
        "the NACKed a is not sent again, b is"
    );
    let syncz: serde_json::Value = serde_json::from_str(
        &crate::support::binary::get(srv.server.http_addr, "/debug/syncz")
            .await
            .1,
    )
    .unwrap();
    assert_eq!(
        syncz[0]["types"]["eds"]["last_nack"]["message"], "rejected by test",
        "{syncz}"
    );
}

#[tokio::test]
async fn an_endpoint_change_is_an_eds_push_of_that_assignment_only() {
    let srv = inproc::start(vec![http("a", &["10.0.0.1"]), http("b", &["10.0.0.2"])]).await;
    let mut d = Delta::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    let (a, b) = (cluster("a"), cluster("b"));
    for (t, ask) in [
        (CDS, vec![]),
        (EDS, vec![a.as_str(), b.as_str()]),
        (LDS, vec![]),
        (RDS, vec!["8080"]),
    ] {
        d.change(t, &ask, &[], "").await;
        let r = d.recv_type(t).await;
        d.ack(&r).await;
    }
    // Another client subscribed to b's endpoints only.
    let mut other = Delta::connect(srv.grpc, sidecar("10.9.0.2", "default")).await;
    other.change(EDS, &[b.as_str()], &[], "").await;
    let r = other.recv_type(EDS).await;
    other.ack(&r).await;
    srv.registry
        .add_endpoint(&http("a", &[]).key(), Endpoint::new("10.0.0.3"))
        .await
        .unwrap();
    let r = d.recv().await;
    assert_eq!(
        (r.type_url.as_str(), sent(&r)),
        (EDS.as_str(), vec![a.clone()])
    );
    d.ack(&r).await;
    srv.registry
        .add_endpoint(&http("b", &[]).key(), Endpoint::new("10.0.0.4"))
        .await
        .unwrap();
    let r = d.recv().await;
    assert_eq!(
        (r.type_url.as_str(), sent(&r)),
        (EDS.as_str(), vec![b.clone()]),
        "fence: nothing else came"
    );
    d.ack(&r).await;
    let r = other.recv().await;
    assert_eq!(
        (r.type_url.as_str(), sent(&r)),
        (EDS.as_str(), vec![b]),
        "a's change reached a client that does not subscribe to it"
    );
    // A cluster change re-sends that cluster's endpoints (Envoy warms until they come).
    srv.registry
        .upsert(with_protocol(
            &http("a", &["10.0.0.1", "10.0.0.3"]),
            Protocol::Http2,
        ))
        .await;
    let r = d.recv_type(CDS).await;
    assert_eq!(sent(&r), std::slice::from_ref(&a));
    let r = d.recv_type(EDS).await;
    assert_eq!(sent(&r), [a]);
}

#[tokio::test]
async fn a_delta_client_that_does_not_read_does_not_delay_the_others() {
    stalled_and_live(Limits::default()).await;
}

#[tokio::test]
async fn a_client_that_does_not_read_does_not_hold_the_only_place_under_the_push_throttle() {
    // With one place, the stalled stream holds it while its client does not take a push, at
    // most DELIVERY_WAIT (5 s), once; after that it sends without a place until it catches
    // up. Were the place held until the client read, the live client's `recv_type` would fail
    // after DEADLINE.
    stalled_and_live(Limits {
        push_throttle: 1,
        ..Limits::default()
    })
    .await;
}

async fn stalled_and_live(limits: Limits) {
    // Every round changes all 2,000 clusters (their protocol flips), so each delta response is
    // large: the stalled stream's flow-control window and small queue fill within a few
    // rounds and its task waits, while the live one gets every round.
    let services = |round: usize| -> Vec<_> {
        let protocol = if round.is_multiple_of(2) {
            Protocol::Http
        } else {
            Protocol::Http2
        };
        (0..2000)
            .map(|i| {
                with_protocol(
                    &http(&format!("service-with-a-long-name-{i:04}"), &["10.0.0.1"]),
                    protocol,
                )
            })
            .collect()
    };
    let srv = inproc::start_limited(services(0), limits).await;
    let mut stalled = Delta::connect(srv.grpc, sidecar("10.9.0.1", "default")).await;
    stalled.change(CDS, &[], &[], "").await;
    let mut live = Delta::connect(srv.grpc, sidecar("10.9.0.2", "default")).await;
    live.change(CDS, &[], &[], "").await;
    live.recv_type(CDS).await;
    for round in 1..=30 {
        srv.registry.replace_all(services(round)).await;
        let r = live.recv_type(CDS).await;
        assert_eq!(r.resources.len(), 2000, "round {round}");
    }
    let syncz: serde_json::Value = serde_json::from_str(
        &crate::support::binary::get(srv.server.http_addr, "/debug/syncz")
            .await
            .1,
    )
    .unwrap();
    let mut responses: Vec<u64> = syncz
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["types"]["cds"]["responses"].as_u64().unwrap())
        .collect();
    responses.sort();
    assert_eq!(responses[1], 31, "{responses:?}");
    assert!(
        responses[0] < 25,
        "the stalled stream should have fallen behind: {responses:?}"
    );
    drop(stalled);
}
