//! The server's API calls, recorded by two in-process API servers (a primary and a
//! secondary cluster) while it does everything it does with a cluster: list and watch the
//! registry's kinds and Istio's, take the leader Lease from a replica that released it (after
//! refusing a VirtualService as a follower: the new leader looks for the Event before it posts
//! one) and create it again when it is gone, write a VM's WorkloadEntry and delete it, review a
//! pod's token, watch Secrets for a Gateway's credential and ask whether a gateway may read
//! them.

use std::collections::BTreeSet;

use serde_json::json;
use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::pb::protobuf::{Struct, Value as PbValue, value::Kind};
use wayfinder_kubernetes::fake::{Call, FakeApiServer};

use super::calls::call;
use crate::secure::{channel, create, csr};
use crate::support::ads::Ads;
use crate::support::binary::Wayfinder;
use crate::support::eventually;

/// The calls each cluster's API server received: (primary, secondary).
pub(crate) async fn record() -> (BTreeSet<Call>, BTreeSet<Call>) {
    let primary = FakeApiServer::start().await;
    let secondary = FakeApiServer::start().await;
    let istio = "networking.istio.io/v1";
    // The group VMs of `shop` register into.
    primary.apply(json!({
        "apiVersion": istio, "kind": "WorkloadGroup",
        "metadata": {"name": "vm", "namespace": "shop"},
        "spec": {"metadata": {"labels": {"app": "vm"}},
                 "template": {"ports": {"http": 8080}, "serviceAccount": "vm"}},
    }));
    // A Gateway naming a credential: Secrets are read from then on.
    primary.apply(json!({
        "apiVersion": istio, "kind": "Gateway",
        "metadata": {"name": "ingress", "namespace": "shop"},
        "spec": {"selector": {"istio": "ingressgateway"},
                 "servers": [{"port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                              "hosts": ["www.example.com"],
                              "tls": {"mode": "SIMPLE", "credentialName": "www-cert"}}]},
    }));
    let dir = tempfile::tempdir().unwrap();
    let east = primary.write_kubeconfig(dir.path(), "east");
    let west = secondary.write_kubeconfig(dir.path(), "west");
    let (east, west) = (
        format!("east={}", east.display()),
        format!("west={}", west.display()),
    );
    // The leader Lease, held by a replica that renewed it when this one first reads it: the
    // server starts as a follower (it counts the lease duration on its own clock, so the
    // renew time's value does not matter).
    let lease = |holder: &str| {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "wayfinder-leader", "namespace": "istio-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30,
                     "renewTime": "2026-01-01T00:00:00.000000Z"},
        })
    };
    primary.apply(lease("wayfinder-1"));
    let mut command = tokio::process::Command::new(crate::support::binary::path());
    command
        .env("POD_NAME", "wayfinder-0")
        .env("POD_NAMESPACE", "istio-system");
    let w = Wayfinder::start_in(
        command,
        "127.0.0.1:0",
        &[
            "--registries",
            "Kubernetes",
            "--config-source",
            "k8s",
            "--kubeconfig",
            &east,
            "--kubeconfig",
            &west,
            "--workload-entry-grace-period",
            "1s",
            "--debounce-after",
            "10ms",
        ],
    )
    .await;
    w.ready().await;
    until(&primary, call("get", "coordination.k8s.io", "leases")).await;

    // An invalid VirtualService, refused by a follower: no Event yet.
    primary.apply(json!({
        "apiVersion": istio, "kind": "VirtualService",
        "metadata": {"name": "bad", "namespace": "shop"},
        "spec": {"hosts": ["web"], "http": [{"route": [{"destination": {"host": "web"}, "weight": 250}]}]},
    }));
    eventually("the VirtualService refused", || async {
        let z = w.json("/debug/configz").await;
        z["refused"]
            .as_array()?
            .iter()
            .any(|r| r["kind"] == "VirtualService" && r["name"] == "bad")
            .then_some(())
    })
    .await;
    // The other replica releases the Lease (as on its shutdown): this one takes it, asks
    // whether an Event was posted for the object, and posts it.
    primary.apply(lease(""));
    until(&primary, call("create", "", "events")).await;
    // The Lease is deleted: the leader creates it again at its next renewal (awaited last).
    primary.delete(
        "coordination.k8s.io/v1",
        "Lease",
        Some("istio-system"),
        "wayfinder-leader",
    );

    // Certificates for a VM and a gateway by their tokens: TokenReviews.
    let secure = w.secure_grpc().await;
    let root = std::fs::read_to_string(w.ca_dir().join("root-cert.pem")).unwrap();
    let anonymous = channel(secure, &root, None).await;
    let identity = |account: &str| {
        let token = format!("{account}-token");
        primary.add_token(&token, "shop", account, &["istio-ca"]);
        let anonymous = anonymous.clone();
        async move {
            let (csr, key) = csr();
            let chain = create(anonymous, &csr, Some(&token)).await.unwrap();
            (chain[..1].concat(), key)
        }
    };
    let vm = identity("vm").await;
    let gateway = identity("ingress").await;

    // The VM registers itself: its WorkloadEntry is written, then removed after it leaves.
    let mutual = channel(secure, &root, Some(&vm)).await;
    let vm_node = node(
        "sidecar",
        "10.1.0.7",
        "vm",
        &[("AUTO_REGISTER_GROUP", "vm")],
    );
    let mut ads = Ads::open(mutual, vm_node).await.unwrap();
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    ads.recv_type(TypeUrl::Cluster).await;
    until(
        &primary,
        call("patch", "networking.istio.io", "workloadentries/status"),
    )
    .await;
    drop(ads);
    until(
        &primary,
        call("delete", "networking.istio.io", "workloadentries"),
    )
    .await;

    // The gateway asks for its credential: the API server is asked whether it may.
    let mutual = channel(secure, &root, Some(&gateway)).await;
    let labels = r#"{"istio": "ingressgateway"}"#;
    let gateway_node = node("router", "10.1.0.8", "ingress", &[("LABELS", labels)]);
    let mut ads = Ads::open(mutual, gateway_node).await.unwrap();
    ads.subscribe(TypeUrl::Secret, &["kubernetes://www-cert"])
        .await;
    until(
        &primary,
        call("create", "authorization.k8s.io", "subjectaccessreviews"),
    )
    .await;
    until(&secondary, call("watch", "", "secrets")).await;
    drop(ads);
    until(&primary, call("create", "coordination.k8s.io", "leases")).await;
    drop(w);
    (primary.counts().calls, secondary.counts().calls)
}

/// Waits until `fake` has received `call`.
async fn until(fake: &FakeApiServer, call: Call) {
    let what = format!("{} {}/{}", call.verb, call.group, call.resource);
    eventually(&what, || async {
        fake.counts().calls.contains(&call).then_some(())
    })
    .await;
}

/// A proxy of namespace `shop` with service account `account` and `metadata` (the labels'
/// value as JSON).
fn node(role: &str, ip: &str, account: &str, metadata: &[(&str, &str)]) -> Node {
    let string = |s: &str| PbValue {
        kind: Some(Kind::StringValue(s.into())),
    };
    let mut fields: std::collections::BTreeMap<String, PbValue> = metadata
        .iter()
        .map(|(k, v)| ((*k).to_owned(), string(v)))
        .collect();
    fields.insert("SERVICE_ACCOUNT".into(), string(account));
    if let Some(labels) = fields.get("LABELS").and_then(|v| match &v.kind {
        Some(Kind::StringValue(s)) => Some(s.clone()),
        _ => None,
    }) {
        let labels: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&labels).unwrap();
        let labels = labels
            .into_iter()
            .map(|(k, v)| (k, string(v.as_str().unwrap())))
            .collect();
        fields.insert(
            "LABELS".into(),
            PbValue {
                kind: Some(Kind::StructValue(Struct { fields: labels })),
            },
        );
    }
    Node {
        id: format!("{role}~{ip}~{account}-0.shop~shop.svc.cluster.local"),
        metadata: Some(Struct {
            fields: fields.into_iter().collect(),
        }),
        ..Default::default()
    }
}
