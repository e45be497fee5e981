//! A two-network mesh with real Envoy 1.40 under the real agent, in the two captured pods of
//! `workload_mtls`: pod A's sidecar is on network `net1`, pod B's `reviews` workload on
//! `net2`, whose east-west gateway (Istio's `AUTO_PASSTHROUGH` sample, an Envoy of its own on
//! `net2`) MeshNetworks names at 127.0.0.1:15443 (`--networksConfig`). Pod A's sidecar then
//! has the gateway, not the workload, as the service's endpoint, and pod A's request reaches
//! pod B through it, in mesh mTLS end to end.

use crate::capture::capture;
use crate::support::eventually;
use crate::support::fixtures::{istio_file, write};
use crate::support::pods::{Mesh, SLEEP, mesh_agent, mesh_agent_at, request, reviews_entry};
use crate::tools::tools;

const NETWORKS: &str = "networks:\n  net1: {}\n  net2:\n    \
                        gateways: [{address: 127.0.0.1, port: 15443}]\n";
const REVIEWS: &str = "outbound|80||reviews.default.svc.cluster.local";

#[tokio::test]
async fn a_workload_on_another_network_is_reached_only_through_its_east_west_gateway() {
    let Some(tools) = tools() else { return };
    let networks = tempfile::tempdir().unwrap();
    write(networks.path(), "networks.yaml", NETWORKS);
    let file = networks.path().join("networks.yaml").display().to_string();
    let eastwest = istio_file("corpus/other/multicluster_expose-services.yaml");
    let mesh = Mesh::start_with(
        tools.clone(),
        &[("expose-services.yaml", &eastwest)],
        &["--networksConfig", &file],
    )
    .await;
    // Pod B's workload is on net2.
    let entry =
        reviews_entry(mesh.port).replace("serviceAccount:", "network: net2, serviceAccount:");
    write(&mesh.dir.path().join("files"), "reviews.yaml", &entry);
    let _b = mesh.sidecar_b().await;

    // net2's east-west gateway (in pod A's network namespace, on its loopback).
    let token = mesh.token("eastwest");
    let gateway_env = [
        ("ISTIO_METAJSON_LABELS", r#"{"istio": "eastwestgateway"}"#),
        ("ISTIO_META_NETWORK", "net2"),
    ];
    let pod = ("eastwest", "10.1.1.5", "istio-eastwestgateway");
    // Its own status and admin ports: pod A's sidecar has the defaults.
    let ports = [(15021, 15100)];
    let gateway = mesh_agent_at(&mesh.a, &mesh, "router", pod, &gateway_env, &token, &ports).await;

    // Pod A's sidecar, on net1.
    let capture_args = [
        "-u",
        "0",
        "-g",
        "0",
        "-d",
        "15010,15012,15443",
        "-o",
        "15010,15012",
    ];
    capture(&mesh.a, &tools, &capture_args).await;
    let token = mesh.token("a");
    let pod = ("pod-a", "10.1.1.5", "sleep");
    let a = mesh_agent(
        &mesh.a,
        &mesh,
        "sidecar",
        pod,
        &[("ISTIO_META_NETWORK", "net1")],
        &token,
    )
    .await;

    // Its endpoint of reviews is the gateway, and only it.
    let admin = a.admin(a.envoys()[0].0).await;
    eventually("the gateway as reviews' endpoint", || async {
        let (_, clusters) = mesh.a.get(admin, "/clusters").await;
        let hosts: Vec<&str> = clusters
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{REVIEWS}::"))?.split("::").next())
            .filter(|h| h.contains(':'))
            .collect();
        (hosts.iter().all(|h| *h == "127.0.0.1:15443") && !hosts.is_empty()).then_some(())
    })
    .await;

    // Pod A's request reaches pod B, which sees pod A's identity: mTLS through the gateway.
    let answer = eventually("pod A's request to reach pod B", || async {
        let answer = request(&mesh.a, &tools, "nobody", "http://10.96.0.5/").await;
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
