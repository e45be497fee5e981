//! Mutual TLS between workloads with real Envoy 1.40 under the real agent: two pods (network
//! namespaces joined by a veth pair, traffic captured by `wayfinder agent capture`), each
//! sidecar with a workload certificate from the server's CA. Pod A's application asks pod B's
//! service in plain HTTP; its sidecar originates mesh mTLS (auto mTLS, then Istio's bookinfo
//! `destination-rule-all-mtls.yaml`), pod B's sidecar terminates it as its PeerAuthentication
//! says: STRICT, PERMISSIVE, DISABLE. Certificates rotate under a request loop. An east-west
//! gateway (`AUTO_PASSTHROUGH`) passes a mesh client's mTLS through to pod B by Istio's SNI.

use std::path::Path;
use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bookinfo::{MUTUAL, sample};
use crate::mesh_identity::envoy_certificates;
use crate::support::eventually;
use crate::support::fixtures::{istio_file, write};
use crate::support::netns::Netns;
use crate::support::pods::{Mesh, SLEEP, mesh_agent, mtls_request, request};
use crate::tools::{Tools, tools};

/// The namespace `default`'s PeerAuthentication in `mode`.
fn peer_authentication(mode: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\n\
         metadata: {{name: default, namespace: default}}\nspec:\n  mtls: {{mode: {mode}}}\n"
    )
}

/// Pod A's application asking the `reviews` service through its sidecar.
pub(crate) async fn from_mesh(a: &Netns, tools: &Tools) -> String {
    request(a, tools, "nobody", "http://10.96.0.5/").await
}

/// A client outside the mesh asking pod B's workload directly, in plaintext.
async fn from_outside(a: &Netns, tools: &Tools, port: u16) -> String {
    request(a, tools, "root", &format!("http://10.1.1.6:{port}/")).await
}

/// The value of the counter `name` on an Envoy's admin port (0 when it has none yet).
async fn counter(netns: &Netns, admin: std::net::SocketAddr, name: &str) -> u64 {
    let (_, stats) = netns.get(admin, &format!("/stats?filter=^{name}$")).await;
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Pod A's cluster of the `reviews` service, as its Envoy holds it.
async fn reviews_cluster(a: &Netns, admin: std::net::SocketAddr) -> Option<Value> {
    let (_, dump) = a
        .get(admin, "/config_dump?resource=dynamic_active_clusters")
        .await;
    let clusters: Value = serde_json::from_str(&dump).ok()?;
    let reviews = clusters["configs"]
        .as_array()?
        .iter()
        .find(|c| c["cluster"]["name"] == "outbound|80||reviews.default.svc.cluster.local")?;
    Some(reviews["cluster"].clone())
}

/// How many filter chains of the inbound listener an Envoy holds terminate TLS (none when it
/// has no such listener yet).
async fn inbound_mtls_chains(netns: &Netns, admin: std::net::SocketAddr) -> Option<usize> {
    let (_, dump) = netns
        .get(admin, "/config_dump?resource=dynamic_listeners")
        .await;
    let listeners: Value = serde_json::from_str(&dump).ok()?;
    let inbound = listeners["configs"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == "virtualInbound")?;
    let chains = inbound["active_state"]["listener"]["filter_chains"].as_array()?;
    Some(
        chains
            .iter()
            .filter(|c| !c["transport_socket"].is_null())
            .count(),
    )
}

/// pod B's inbound TLS handshakes.
const HANDSHAKES: &str = "listener.0.0.0.0_15006.ssl.handshake";

/// Requests from pod A's application in a loop (Python as nobody), until its stdin closes:
/// `OK FAILED` and the first failures.
struct AppLoop(tokio::process::Child);

impl AppLoop {
    fn start(a: &Netns, tools: &Tools) -> Self {
        let script = "import sys, threading, urllib.request\n\
                      stop = threading.Event()\n\
                      threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()\n\
                      ok, failed = 0, []\n\
                      while not stop.is_set():\n    \
                          try:\n        \
                              r = urllib.request.urlopen('http://10.96.0.5/', timeout=5)\n        \
                              body = r.read().decode()\n        \
                              if r.status == 200 and body == 'pod-b':\n            \
                                  ok += 1\n        \
                              else:\n            \
                                  failed.append(f'{r.status} {body}')\n    \
                          except Exception as e:\n        \
                              failed.append(repr(e))\n\
                      print(ok, len(failed), failed[:5])";
        let child = a
            .command("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&tools.python)
            .args(["-c", script])
            .env("no_proxy", "*")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the request loop");
        Self(child)
    }

    /// Stops the loop: requests answered by pod B, and the failures' summary.
    async fn stop(mut self) -> (u64, String) {
        let mut stdin = self.0.stdin.take().unwrap();
        stdin.shutdown().await.unwrap();
        drop(stdin);
        let mut out = String::new();
        self.0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        let (ok, rest) = out.trim().split_once(' ').expect("OK FAILED [...]");
        (ok.parse().unwrap(), rest.to_string())
    }
}

#[tokio::test]
async fn sidecars_speak_mutual_tls_as_peer_authentication_says_and_rotate_certificates_under_load()
{
    let Some(tools) = tools() else { return };
    let mesh = Mesh::start(tools, &[("peer.yaml", &peer_authentication("STRICT"))]).await;
    let Mesh {
        tools,
        a,
        b,
        config,
        port,
        ..
    } = &mesh;
    let (tools, port) = (tools, *port);
    let agent_a = mesh.sidecar_a().await;
    let agent_b = mesh.sidecar_b().await;
    let (admin_a, admin_b) = (agent_a.admin(0).await, agent_b.admin(0).await);

    // STRICT, auto mTLS: pod A's request reaches pod B's workload over mTLS, which names pod
    // A's identity to it; a plaintext client outside the mesh is refused.
    let answer = eventually("pod A's request to reach pod B over mTLS", || async {
        let answer = from_mesh(a, tools).await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(answer.contains(&format!("URI={SLEEP}")), "{answer}");
    let handshakes = counter(b, admin_b, HANDSHAKES).await;
    assert!(
        handshakes > 0,
        "no TLS handshake on pod B's inbound listener"
    );
    let outside = from_outside(a, tools, port).await;
    assert!(outside.starts_with("failed:"), "STRICT served {outside:?}");

    // Istio's bookinfo rule turns ISTIO_MUTUAL on explicitly: served to pod A's sidecar with
    // Istio's SNI, and requests still reach pod B over mTLS.
    write(config, MUTUAL, &sample(MUTUAL));
    eventually("pod A's cluster to carry the rule's mTLS", || async {
        let reviews = reviews_cluster(a, admin_a).await?;
        let socket = &reviews["transport_socket"]["typed_config"];
        (socket["sni"] == "outbound_.80_._.reviews.default.svc.cluster.local").then_some(())
    })
    .await;
    let answer = from_mesh(a, tools).await;
    assert!(
        answer.starts_with("200 pod-b ") && answer.contains(SLEEP),
        "{answer}"
    );

    // Rotation: both certificates (30 s) are renewed during a request loop, which loses no
    // request, and neither Envoy restarts.
    let first_b = envoy_certificates(b, admin_b).await;
    let requests = AppLoop::start(a, tools);
    for agent in [&agent_a, &agent_b] {
        agent
            .logs
            .wait("the renewed certificate", |l| {
                l["message"] == "obtained the workload certificate" && l["serial"] == 2
            })
            .await;
    }
    eventually("pod B's Envoy to hold its renewed certificate", || async {
        let now = envoy_certificates(b, admin_b).await;
        (!now.is_empty() && now.iter().all(|c| !first_b.contains(c))).then_some(())
    })
    .await;
    let (ok, failed) = requests.stop().await;
    eprintln!("workload mTLS: {ok} requests through the rotation, failures: {failed}");
    assert!(ok > 0, "{failed}");
    assert!(
        failed.starts_with("0 "),
        "requests failed during the rotation: {failed}"
    );
    for agent in [&agent_a, &agent_b] {
        assert_eq!(agent.envoys().len(), 1, "an Envoy was restarted");
    }

    // PERMISSIVE: mTLS from the mesh and plaintext from outside, both served.
    write(config, "peer.yaml", &peer_authentication("PERMISSIVE"));
    let outside = eventually("PERMISSIVE to serve plaintext", || async {
        let answer = from_outside(a, tools, port).await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(
        outside.ends_with(" -"),
        "no client identity in plaintext: {outside}"
    );
    let answer = from_mesh(a, tools).await;
    assert!(answer.contains(SLEEP), "{answer}");

    // DISABLE: plaintext only. Once pod B's Envoy has it, pod A's ISTIO_MUTUAL requests fail
    // (as soon as the connections of the old chains have drained); without the rule, auto
    // mTLS sees pod B's DISABLE and sends plaintext, which is served.
    write(config, "peer.yaml", &peer_authentication("DISABLE"));
    eventually("pod B's Envoy to take plaintext only", || async {
        (inbound_mtls_chains(b, admin_b).await == Some(0)).then_some(())
    })
    .await;
    eventually("DISABLE to refuse pod A's mTLS", || async {
        let answer = from_mesh(a, tools).await;
        (!answer.starts_with("200 ")).then_some(())
    })
    .await;
    assert!(from_outside(a, tools, port).await.starts_with("200 pod-b "));
    std::fs::remove_file(config.join(MUTUAL)).unwrap();
    // Pod A's cluster is replaced (its pooled mTLS connections with it).
    eventually("pod A's cluster to turn to auto mTLS", || async {
        let reviews = reviews_cluster(a, admin_a).await?;
        reviews["transport_socket_matches"].is_array().then_some(())
    })
    .await;
    let answer = eventually("auto mTLS to send plaintext under DISABLE", || async {
        let answer = from_mesh(a, tools).await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(
        answer.ends_with(" -"),
        "plaintext has no client identity: {answer}"
    );
}

/// Istio's east-west gateway, as its multicluster sample exposes services: a TLS server on
/// 15443 that passes mesh mTLS through by SNI (`AUTO_PASSTHROUGH`), selecting
/// `istio: eastwestgateway`, in the namespace `default`.
const EASTWEST: &str = "corpus/other/multicluster_expose-services.yaml";

/// Through the east-west gateway at 127.0.0.1:15443.
async fn through_gateway(mesh: &Mesh, dir: &Path, sni: &str) -> String {
    mtls_request(mesh, dir, ("127.0.0.1", 15443), sni, "GET", "/").await
}

#[tokio::test]
async fn an_east_west_gateway_passes_mesh_mtls_through_by_istio_s_sni() {
    let Some(tools) = tools() else { return };
    let mesh = Mesh::start(
        tools,
        &[
            ("peer.yaml", &peer_authentication("STRICT")),
            ("expose-services.yaml", &istio_file(EASTWEST)),
        ],
    )
    .await;
    let _b = mesh.sidecar_b().await;
    let token = mesh.token("eastwest");
    let labels = [("ISTIO_METAJSON_LABELS", r#"{"istio": "eastwestgateway"}"#)];
    let pod = ("eastwest", "10.1.1.5", "istio-eastwestgateway");
    let _gateway = mesh_agent(&mesh.a, &mesh, "router", pod, &labels, &token).await;

    // The client's own certificate, as `sleep`, from the CA (its key made here).
    let client = mesh.client_certificate("pod-a-token-000000001").await;

    // Istio's SNI for reviews' port 80: the gateway passes the client's mTLS through to pod
    // B's sidecar, which is the server the client sees, and which names the client.
    let sni = "outbound_.80_._.reviews.default.svc.cluster.local";
    let answer = eventually("the gateway to pass mTLS through to reviews", || async {
        let answer = through_gateway(&mesh, &client, sni).await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(
        answer.contains("['spiffe://cluster.local/ns/default/sa/reviews']"),
        "the server is pod B's sidecar, not the gateway: {answer}"
    );
    assert!(answer.contains(&format!("URI={SLEEP}")), "{answer}");
    // A name that is no cluster of the gateway's goes nowhere.
    let nowhere = through_gateway(
        &mesh,
        &client,
        "outbound_.80_._.nothing.default.svc.cluster.local",
    )
    .await;
    assert!(nowhere.starts_with("failed:"), "{nowhere}");
}
