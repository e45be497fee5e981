//! A two-network mesh with real Envoy 1.40 under the real agent, in the two captured pods of
//! `workload_mtls`: pod A's sidecar is on network `net1`, pod B's `reviews` workload on
//! `net2`, whose east-west gateway (Istio's `AUTO_PASSTHROUGH` sample, an Envoy of its own on
//! `net2`) MeshNetworks names at 127.0.0.1:15443 (`--networksConfig`). Pod A's sidecar then
//! has the gateway, not the workload, as the service's endpoint, and pod A's request reaches
//! pod B through it, in mesh mTLS end to end.
//!
//! Also as in Istio's multi-primary meshes, where each network's control plane knows its own
//! workloads' addresses and the other's only by network: net1's control plane knows pod B
//! only as a WorkloadEntry with `network: net2` and no address, net2's (a second server,
//! with the same CA) knows its address and serves pod B's sidecar and the gateway.

use crate::capture::{capture, discovery_in_pod_a_at};
use crate::support::agent::Agent;
use crate::support::eventually;
use crate::support::fixtures::{istio_file, write};
use crate::support::pods::{At, Mesh, SLEEP, mesh_agent, mesh_agent_at, request, reviews_entry};
use crate::tools::{Tools, tools};

const NETWORKS: &str = "networks:\n  net1: {}\n  net2:\n    \
                        gateways: [{address: 127.0.0.1, port: 15443}]\n";
const REVIEWS: &str = "outbound|80||reviews.default.svc.cluster.local";
/// net2's control plane's secure port (net1's is at 15012), on pod A's address.
const NET2_DISCOVERY: &str = "10.1.1.5:15013";

/// `reviews` as net1's control plane knows it when its workload is on net2: a ServiceEntry
/// that selects `app: reviews`, and a WorkloadEntry with only a network (no address), of
/// weight 3, running as `reviews` (so it speaks mesh mTLS).
const REVIEWS_BY_NETWORK: &str = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
    metadata: {name: reviews, namespace: default}\nspec:\n  \
    hosts: [reviews.default.svc.cluster.local]\n  addresses: [10.96.0.5]\n  \
    location: MESH_INTERNAL\n  resolution: STATIC\n  \
    ports: [{number: 80, name: http, protocol: HTTP}]\n  \
    workloadSelector: {labels: {app: reviews}}\n---\n\
    apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\n\
    metadata: {name: reviews-net2, namespace: default}\n\
    spec: {network: net2, serviceAccount: reviews, labels: {app: reviews}, weight: 3}\n";

#[tokio::test]
async fn a_workload_on_another_network_is_reached_only_through_its_east_west_gateway() {
    let Some(tools) = tools() else { return };
    let (_networks, file) = networks_file();
    let eastwest = istio_file("corpus/other/multicluster_expose-services.yaml");
    let mesh = Mesh::start_with(
        tools.clone(),
        &[("expose-services.yaml", &eastwest)],
        &["--networksConfig", &file],
    )
    .await;
    // Pod B's workload is on net2.
    write(
        &mesh.dir.path().join("files"),
        "reviews.yaml",
        &on_net2(mesh.port),
    );
    let _b = mesh.sidecar_b().await;
    let gateway = eastwest_gateway(&mesh, At::default()).await;
    let a = sidecar_a_on_net1(&mesh, &tools).await;

    // Its endpoint of reviews is the gateway, and only it.
    only_the_gateway(&mesh, &a, 1).await;
    reaches_pod_b_through(&mesh, &tools, &gateway).await;
}

#[tokio::test]
async fn a_workload_known_only_by_its_network_is_reached_through_its_east_west_gateway() {
    let Some(tools) = tools() else { return };
    let (_networks, file) = networks_file();
    // net1's control plane (the mesh's own server): reviews by network only.
    let mesh = Mesh::start_with(tools.clone(), &[], &["--networksConfig", &file]).await;
    write(
        &mesh.dir.path().join("files"),
        "reviews.yaml",
        REVIEWS_BY_NETWORK,
    );
    // net2's control plane, with the same CA and tokens: reviews at pod B's address, and the
    // east-west Gateway.
    let net2 = mesh.dir.path().join("net2");
    let (files, config) = (net2.join("files"), net2.join("config"));
    for dir in [&files, &config] {
        std::fs::create_dir_all(dir).unwrap();
    }
    write(&files, "reviews.yaml", &on_net2(mesh.port));
    let eastwest = istio_file("corpus/other/multicluster_expose-services.yaml");
    write(&config, "expose-services.yaml", &eastwest);
    let arg = |p: &std::path::Path| p.display().to_string();
    let (c, ca, t) = (
        arg(&config),
        arg(&mesh.ca),
        arg(&mesh.dir.path().join("tokens")),
    );
    let flags = [
        "--config-dir",
        &c,
        "--secure-grpc-addr",
        NET2_DISCOVERY,
        "--secure-grpc-san",
        "10.1.1.5,localhost",
        "--ca-dir",
        &ca,
        "--bootstrap-tokens",
        &t,
        "--networksConfig",
        &file,
    ];
    let _net2_server = discovery_in_pod_a_at(&mesh.a, &tools, &files, "127.0.0.1:0", &flags).await;

    // net1's control plane shows the entry honestly: no address, its network.
    let path = "/debug/endpointz?svc=reviews.default.svc.cluster.local";
    eventually("reviews' entry known by its network", || async {
        let (_, body) = mesh.a.get(mesh.server.http, path).await;
        let services: serde_json::Value = serde_json::from_str(&body).ok()?;
        let endpoints = services[0]["endpoints"].as_array()?.clone();
        let only = (endpoints.len() == 1).then(|| endpoints[0]["endpoint"].clone())?;
        (only["address"].is_null() && only["network"] == "net2" && only["weight"] == 3)
            .then_some(())
    })
    .await;

    // Pod B's sidecar and the gateway are net2's, served by net2's control plane.
    let at = At {
        discovery: NET2_DISCOVERY,
        ..At::default()
    };
    let _b = mesh
        .sidecar_b_with(&[("ISTIO_META_NETWORK", "net2")], at)
        .await;
    let gateway = eastwest_gateway(&mesh, at).await;
    let a = sidecar_a_on_net1(&mesh, &tools).await;

    // Pod A's endpoint of reviews is net2's gateway, with the entry's weight; Envoy took the
    // assignment (no endpoint without an address in it).
    only_the_gateway(&mesh, &a, 3).await;
    reaches_pod_b_through(&mesh, &tools, &gateway).await;
}

/// The MeshNetworks file (in a directory kept while the test runs) and its path.
fn networks_file() -> (tempfile::TempDir, String) {
    let networks = tempfile::tempdir().unwrap();
    write(networks.path(), "networks.yaml", NETWORKS);
    let file = networks.path().join("networks.yaml").display().to_string();
    (networks, file)
}

/// `reviews` with pod B's workload at its address, on net2.
fn on_net2(port: u16) -> String {
    reviews_entry(port).replace("serviceAccount:", "network: net2, serviceAccount:")
}

/// net2's east-west gateway (in pod A's network namespace, on its loopback, with its own
/// status and admin ports: pod A's sidecar has the defaults), served where `at` says.
async fn eastwest_gateway(mesh: &Mesh, at: At<'_>) -> Agent {
    let token = mesh.token("eastwest");
    let gateway_env = [
        ("ISTIO_METAJSON_LABELS", r#"{"istio": "eastwestgateway"}"#),
        ("ISTIO_META_NETWORK", "net2"),
    ];
    let pod = ("eastwest", "10.1.1.5", "istio-eastwestgateway");
    let at = At {
        ports: &[(15021, 15100)],
        ..at
    };
    mesh_agent_at(&mesh.a, mesh, "router", pod, &gateway_env, &token, at).await
}

/// Pod A's sidecar, on net1, with pod A's traffic captured but the control planes' ports.
async fn sidecar_a_on_net1(mesh: &Mesh, tools: &Tools) -> Agent {
    let capture_args = [
        "-u",
        "0",
        "-g",
        "0",
        "-d",
        "15010,15012,15013,15443",
        "-o",
        "15010,15012,15013",
    ];
    capture(&mesh.a, tools, &capture_args).await;
    let token = mesh.token("a");
    let pod = ("pod-a", "10.1.1.5", "sleep");
    mesh_agent(
        &mesh.a,
        mesh,
        "sidecar",
        pod,
        &[("ISTIO_META_NETWORK", "net1")],
        &token,
    )
    .await
}

/// Waits until pod A's sidecar has net2's gateway as reviews' only endpoint, of `weight`.
async fn only_the_gateway(mesh: &Mesh, a: &Agent, weight: u32) {
    let admin = a.admin(a.envoys()[0].0).await;
    let want = format!("127.0.0.1:15443::weight::{weight}");
    eventually("the gateway as reviews' endpoint", || async {
        let (_, clusters) = mesh.a.get(admin, "/clusters").await;
        let of_reviews: Vec<&str> = clusters
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{REVIEWS}::")))
            .collect();
        let hosts: Vec<&str> = of_reviews
            .iter()
            .filter_map(|l| l.split("::").next())
            .filter(|h| h.contains(':'))
            .collect();
        (hosts.iter().all(|h| *h == "127.0.0.1:15443")
            && !hosts.is_empty()
            && of_reviews.contains(&want.as_str()))
        .then_some(())
    })
    .await;
}

/// Pod A's request reaches pod B, which sees pod A's identity (mTLS through the gateway),
/// and the gateway counted the connection.
async fn reaches_pod_b_through(mesh: &Mesh, tools: &Tools, gateway: &Agent) {
    let answer = eventually("pod A's request to reach pod B", || async {
        let answer = request(&mesh.a, tools, "nobody", "http://10.96.0.5/").await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(answer.contains(&format!("URI={SLEEP}")), "{answer}");
    let gateway_admin = gateway.admin(gateway.envoys()[0].0).await;
    let (_, stats) = mesh
        .a
        .get(
            gateway_admin,
            "/stats?filter=^listener.0.0.0.0_15443.downstream_cx_total$",
        )
        .await;
    let through: u64 = stats
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(through > 0, "connections through the gateway: {stats}");
}
