//! The state machines against consecutive snapshots, where the order of a request and a push
//! matters.

use std::sync::Arc;

use super::{DeltaState, StreamState};
use crate::xds::XdsSnapshot;
use crate::xds::fixtures::{DOMAIN, endpoints_changed, model, sidecar};
use crate::xds::generate::Picked;
use crate::xds::pb::discovery::{DeltaDiscoveryRequest, DiscoveryRequest};
use crate::xds::types::TypeUrl;

const SVC_0: &str = "outbound|8080||svc-0.default.svc.cluster.local";
const SVC_1: &str = "outbound|8080||svc-1.default.svc.cluster.local";

fn eds(names: &[&str], nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        type_url: TypeUrl::Endpoint.as_str().into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        response_nonce: nonce.into(),
        node: Some(Default::default()),
        ..Default::default()
    }
}

/// Names, as strings.
fn names_of(names: &[Arc<str>]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// The names of the resources in a response.
fn names(resources: &Picked) -> Vec<String> {
    resources.iter().map(|r| r.name.to_string()).collect()
}

#[test]
fn sotw_a_request_answered_from_a_newer_snapshot_does_not_hide_that_snapshots_changes() {
    let first = XdsSnapshot::new(Arc::new(model(2)), DOMAIN);
    let mut state = StreamState::new(Arc::new(sidecar()), "test".into());
    let out = state
        .on_request(&eds(&[SVC_1], "").into(), &first)
        .expect("a valid request");
    assert_eq!(names(&out.responses[0].resources), [SVC_1]);
    let nonce = out.responses[0].nonce.clone();
    // svc-1's endpoints change; before the stream pushes that snapshot, the client asks for
    // svc-0 too, and the answer comes from the new snapshot.
    let second = XdsSnapshot::next(Arc::new(endpoints_changed(first.model())), DOMAIN, &first);
    let out = state
        .on_request(&eds(&[SVC_1, SVC_0], &nonce).into(), &second)
        .expect("a valid request");
    assert_eq!(
        names(&out.responses[0].resources),
        [SVC_0],
        "only the added name"
    );
    // The push of that snapshot still brings svc-1's new assignment.
    let pushed = state.on_snapshot(&second);
    assert_eq!(pushed.len(), 1);
    assert_eq!(names(&pushed[0].resources), [SVC_1]);
    assert!(state.on_snapshot(&second).is_empty(), "and only once");
}

#[test]
fn delta_an_endpoint_change_sends_the_one_assignment_and_a_removal_is_named() {
    let first = XdsSnapshot::new(Arc::new(model(2)), DOMAIN);
    let mut state = DeltaState::new(Arc::new(sidecar()), "test".into());
    let subscribe = DeltaDiscoveryRequest {
        type_url: TypeUrl::Endpoint.as_str().into(),
        resource_names_subscribe: vec![SVC_0.into(), SVC_1.into()],
        node: Some(Default::default()),
        ..Default::default()
    };
    let out = state
        .on_request(&subscribe, &first)
        .expect("a valid request");
    assert_eq!(out.responses[0].resources.len(), 2);
    let second = XdsSnapshot::next(Arc::new(endpoints_changed(first.model())), DOMAIN, &first);
    let pushed = state.on_snapshot(&second);
    assert_eq!(pushed.len(), 1);
    let sent: Vec<&str> = pushed[0].resources.iter().map(|r| &*r.name).collect();
    assert_eq!(sent, [SVC_1]);
    assert!(pushed[0].removed.is_empty());
    assert_ne!(
        pushed[0].system_version_info,
        out.responses[0].system_version_info
    );
    // svc-1 disappears: its assignment is removed by name.
    let mut services = second.model().services.clone();
    services.retain(|k, _| !k.hostname.starts_with("svc-1."));
    let third_model = crate::snapshot::Snapshot::new(
        3,
        services,
        Vec::new(),
        Vec::new(),
        second.model().config.clone(),
    );
    let third = XdsSnapshot::next(Arc::new(third_model), DOMAIN, &second);
    let pushed = state.on_snapshot(&third);
    assert_eq!(pushed.len(), 1);
    assert!(pushed[0].resources.is_empty());
    assert_eq!(names_of(&pushed[0].removed), [SVC_1]);
}

#[test]
fn sotw_a_removed_cluster_is_pushed_as_the_full_set_without_it() {
    let first = XdsSnapshot::new(Arc::new(model(2)), DOMAIN);
    let mut state = StreamState::new(Arc::new(sidecar()), "test".into());
    let cds = DiscoveryRequest {
        type_url: TypeUrl::Cluster.as_str().into(),
        node: Some(Default::default()),
        ..Default::default()
    };
    let out = state
        .on_request(&cds.into(), &first)
        .expect("a valid request");
    assert!(names(&out.responses[0].resources).contains(&SVC_1.to_string()));
    let mut services = first.model().services.clone();
    services.retain(|k, _| !k.hostname.starts_with("svc-1."));
    let second_model = crate::snapshot::Snapshot::new(
        2,
        services,
        Vec::new(),
        Vec::new(),
        first.model().config.clone(),
    );
    let second = XdsSnapshot::next(Arc::new(second_model), DOMAIN, &first);
    let pushed = state.on_snapshot(&second);
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    let sent = names(&pushed[0].resources);
    assert!(sent.contains(&SVC_0.to_string()) && !sent.contains(&SVC_1.to_string()));
}

/// The debug copy of one type's state.
fn status_of(state: &StreamState, t: TypeUrl) -> super::TypeStatus {
    let mut out = crate::xds::PerType::default();
    state.status_into(&mut out);
    out.get_or_default(t).clone()
}

#[test]
fn sotw_a_type_is_stale_until_acknowledged_synced_after_and_nacked_when_rejected() {
    use super::SyncState;
    let first = XdsSnapshot::new(Arc::new(model(2)), DOMAIN);
    let mut state = StreamState::new(Arc::new(sidecar()), "test".into());
    assert_eq!(
        status_of(&state, TypeUrl::Endpoint).sync(),
        SyncState::NotSent
    );
    let out = state.on_request(&eds(&[SVC_1], "").into(), &first).unwrap();
    let sent = status_of(&state, TypeUrl::Endpoint);
    assert_eq!(sent.sync(), SyncState::Stale);
    let at = sent.sent_at.expect("the time of the send");
    assert_eq!(sent.unacked_for(at + 4.0), Some(4.0));
    let nonce = out.responses[0].nonce.clone();
    let mut ack = eds(&[SVC_1], &nonce);
    ack.version_info = out.responses[0].version_info.clone();
    state.on_request(&ack.into(), &first).unwrap();
    let acked = status_of(&state, TypeUrl::Endpoint);
    assert_eq!(acked.sync(), SyncState::Synced);
    assert_eq!(acked.unacked_for(at + 4.0), None);

    // A push is stale until its answer, and NACKED when the answer rejects it.
    let second = XdsSnapshot::next(Arc::new(endpoints_changed(first.model())), DOMAIN, &first);
    let pushed = state.on_snapshot(&second);
    assert_eq!(
        status_of(&state, TypeUrl::Endpoint).sync(),
        SyncState::Stale
    );
    let mut nack = eds(&[SVC_1], &pushed[0].nonce);
    nack.error_detail = Some(crate::xds::pb::rpc::Status {
        message: "rejected by test".into(),
        ..Default::default()
    });
    state.on_request(&nack.into(), &second).unwrap();
    let nacked = status_of(&state, TypeUrl::Endpoint);
    assert_eq!(nacked.sync(), SyncState::Nacked);
    assert_eq!(
        nacked.acked_version.as_deref(),
        Some(out.responses[0].version_info.as_str()),
        "the proxy still runs what it acknowledged"
    );
}

#[test]
fn the_sync_section_lists_what_the_stream_has_not_sent_yet() {
    let first = XdsSnapshot::new(Arc::new(model(2)), DOMAIN);
    let proxy = Arc::new(sidecar());
    let mut state = StreamState::new(proxy.clone(), "test".into());
    state
        .on_request(&eds(&[SVC_0, SVC_1], "").into(), &first)
        .unwrap();
    let status = status_of(&state, TypeUrl::Endpoint);
    let now = super::state::now();
    let resources =
        |snap: &XdsSnapshot| snap.resources(&proxy, TypeUrl::Endpoint, &status.subscription.names);
    let same = super::pages::sync(&status, &resources(&first), now);
    assert_eq!(same["changed"]["count"], 0, "{same}");
    assert_eq!(same["missing"]["count"], 0, "{same}");
    // A snapshot the stream has not pushed yet: svc-1's assignment differs.
    let second = XdsSnapshot::next(Arc::new(endpoints_changed(first.model())), DOMAIN, &first);
    let behind = super::pages::sync(&status, &resources(&second), now);
    assert_eq!(
        behind["changed"]["names"],
        serde_json::json!([SVC_1]),
        "{behind}"
    );
    assert_eq!(behind["status"], "STALE");
    assert_eq!(behind["missing"]["count"], 0);
    assert_eq!(behind["removed"]["count"], 0);
}
