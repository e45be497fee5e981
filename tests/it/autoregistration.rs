//! VMs that register themselves: an agent whose proxy's metadata names a WorkloadGroup
//! becomes a workload entry of the `AutoRegistration` registry, selected by a ServiceEntry
//! and reached through a gateway; when it stops, the entry goes after the grace period and
//! not before. The VM's agent gets its certificate with a bootstrap token and speaks to the
//! secure port (its Envoy's xDS and its own health reports), as Istio's VMs do; the gateway
//! uses the plaintext port. Real Envoy 1.40 under the real agent, in a network namespace of
//! its own.

use std::net::SocketAddr;

use serde_json::Value;

use crate::gateway::{backend_in, gateway, virtual_service};
use crate::support::agent::{Agent, mutual_tls, syncz_connection};
use crate::support::binary::Wayfinder;
use crate::support::eventually;
use crate::support::fixtures::write;
use crate::support::netns::Netns;
use crate::tools::tools;

const VM: &str = "vm.default.svc.cluster.local";

/// A ServiceEntry for `vm` selecting `app: vm`; a static WorkloadEntry `static` for it on
/// `static_port`; and the WorkloadGroup `vm`, whose template serves it on `port` and whose
/// probe connects to `health_port`.
fn vm_config(port: u16, static_port: u16, health_port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
         metadata: {{name: vm, namespace: default}}\nspec:\n  hosts: [{VM}]\n  \
         location: MESH_INTERNAL\n  resolution: STATIC\n  \
         ports: [{{number: 9080, name: http, protocol: HTTP}}]\n  \
         workloadSelector: {{labels: {{app: vm}}}}\n---\n\
         apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\n\
         metadata: {{name: static, namespace: default}}\nspec:\n  \
         address: 127.0.0.1\n  ports: {{http: {static_port}}}\n  labels: {{app: vm}}\n---\n\
         apiVersion: networking.istio.io/v1\nkind: WorkloadGroup\n\
         metadata: {{name: vm, namespace: default}}\nspec:\n  \
         metadata: {{labels: {{app: vm}}}}\n  \
         template: {{ports: {{http: {port}}}, serviceAccount: vm, labels: {{app: vm}}}}\n  \
         probe: {{periodSeconds: 1, failureThreshold: 1, tcpSocket: {{port: {health_port}}}}}\n"
    )
}

/// The VM agent's `PROXY_CONFIG`: the group's probe, as `istioctl x workload entry configure`
/// gives it to a VM.
fn proxy_config(health_port: u16) -> String {
    format!(
        r#"{{"readinessProbe": {{"periodSeconds": 1, "failureThreshold": 1, "tcpSocket": {{"port": {health_port}}}}}}}"#
    )
}

/// The `vm` service's endpoints in `/debug/endpointz` from the `AutoRegistration` registry:
/// `(address, labels, health)`.
async fn vm_endpoints(netns: &Netns, http: SocketAddr) -> Vec<(String, Value, String)> {
    let (status, body) = netns.get(http, &format!("/debug/endpointz?svc={VM}")).await;
    assert_eq!(status, 200, "{body}");
    let z: Value = serde_json::from_str(&body).unwrap();
    z.as_array()
        .and_then(|s| s.first())
        .and_then(|s| s["endpoints"].as_array())
        .map(|eps| {
            eps.iter()
                .filter(|e| e["registry"] == "AutoRegistration")
                .map(|e| {
                    let address = e["endpoint"]["address"].as_str().unwrap_or_default();
                    let health = e["endpoint"]["health"].as_str().unwrap_or_default();
                    (
                        address.to_string(),
                        e["endpoint"]["labels"].clone(),
                        health.to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One request through the gateway to the `vm` service: the answering backend's name, or
/// the failure.
async fn through_gateway(netns: &Netns) -> String {
    netns
        .block_on(|| async {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            match client
                .get("http://127.0.0.1:8080/")
                .header("host", VM)
                .send()
                .await
            {
                Ok(r) if r.status() == 200 => r.text().await.unwrap_or_default(),
                Ok(r) => format!("HTTP {}", r.status()),
                Err(e) => format!("{e}"),
            }
        })
        .await
}

/// Waits until the server removed the VM's entry, and checks it did so no sooner than
/// `grace` seconds after the entry's last stream closed (by the server's own log timestamps).
pub(crate) async fn removed_after_grace(w: &Wayfinder, grace: f64) {
    let closed = w
        .wait_log("the VM's last stream to close", |l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("the last stream of an auto-registered"))
        })
        .await;
    let removed = w
        .wait_log("the VM's entry to be removed", |l| {
            l["message"] == "removed an auto-registered WorkloadEntry"
        })
        .await;
    let waited = seconds(&removed) - seconds(&closed);
    assert!(
        waited >= grace,
        "removed {waited:.3} s after the last stream closed, before the grace period"
    );
}

/// A log line's time, in seconds (RFC 3339 `timestamp`, UTC, as `2026-11-25T02:00:55.546231Z`).
fn seconds(line: &Value) -> f64 {
    let t = line["timestamp"].as_str().expect("a timestamp");
    let time = t.split('T').nth(1).unwrap().trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: f64 = parts.next().unwrap().parse().unwrap();
    let m: f64 = parts.next().unwrap().parse().unwrap();
    let s: f64 = parts.next().unwrap().parse().unwrap();
    h * 3600.0 + m * 60.0 + s
}

#[tokio::test]
async fn a_vm_agent_registers_its_workload_which_gets_traffic_and_goes_after_the_grace_period() {
    let Some(tools) = tools() else { return };
    let netns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    let (config, empty) = (dir.path().join("config"), dir.path().join("empty"));
    for d in [&config, &empty] {
        std::fs::create_dir_all(d).unwrap();
    }
    let (_backend, port) = backend_in(netns.command(&tools.python), &tools, "vm", &[]).await;
    let (_static, static_port) =
        backend_in(netns.command(&tools.python), &tools, "static", &[]).await;
    // The VM's health endpoint, which its probe connects to; killed to fail the probe.
    let (mut health, health_port) =
        backend_in(netns.command(&tools.python), &tools, "health", &[]).await;
    write(
        &config,
        "vm.yaml",
        &vm_config(port, static_port, health_port),
    );
    write(&config, "gateway.yaml", &gateway(8080));
    write(
        &config,
        "vs.yaml",
        &virtual_service(
            "vm",
            VM,
            &format!("  - route: [{{destination: {{host: {VM}}}}}]\n"),
        ),
    );
    let wrapper = netns.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let (e, c) = (empty.display(), config.display());
    // The VM's bootstrap token, as an operator hands one to a VM.
    write(dir.path(), "tokens", "vm-bootstrap-token-01 default vm\n");
    write(dir.path(), "token", "vm-bootstrap-token-01\n");
    let tokens = dir.path().join("tokens").display().to_string();
    let flags = format!(
        "--registries=File --file-registry={e} --config-dir={c} --debounce-after=10ms \
         --workload-entry-grace-period=3s --bootstrap-tokens={tokens}"
    );
    let w = Wayfinder::start_under(&wrapper, &flags.split_whitespace().collect::<Vec<_>>()).await;
    let envoy = tools.envoy.display().to_string();
    let discovery = w.grpc.to_string();

    // The gateway, which sends the vm service's traffic on.
    let gateway_dir = dir.path().join("gateway");
    std::fs::create_dir_all(&gateway_dir).unwrap();
    let gw = Agent::start(
        &netns,
        &gateway_dir,
        "router",
        &[
            "--binary-path",
            &envoy,
            "--discovery-address",
            &discovery,
            "--certs-dir",
            "certs",
        ],
        &[
            ("INSTANCE_IP", "127.0.0.1"),
            ("POD_NAME", "ingress"),
            ("POD_NAMESPACE", "default"),
            ("ISTIO_METAJSON_LABELS", r#"{"istio": "ingressgateway"}"#),
        ],
    )
    .await;
    gw.ready(&netns).await;
    assert!(
        vm_endpoints(&netns, w.http).await.is_empty(),
        "no VM before its agent runs"
    );

    // The VM's agent, as Istio's VM instructions run it: its own ports, beside the
    // gateway's, a certificate got with its bootstrap token, and both its Envoy's xDS and its
    // own health stream over mutual TLS to the secure port.
    let vm_dir = dir.path().join("vm");
    std::fs::create_dir_all(&vm_dir).unwrap();
    let mut args = mutual_tls(&w, "--bootstrap-token-file", &dir.path().join("token")).await;
    args.extend(
        [
            "--binary-path",
            &envoy,
            "--certs-dir",
            "certs",
            "--service-registry",
            "Mock",
            "--proxy-admin-port",
            "15100",
            "--status-port",
            "15120",
            "--drain-duration",
            "1s",
        ]
        .map(String::from),
    );
    let mut vm = Agent::start_at(
        &netns,
        &vm_dir,
        "sidecar",
        "127.0.0.1:15120",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[
            ("INSTANCE_IP", "127.0.0.1"),
            ("ISTIO_META_NAMESPACE", "default"),
            ("ISTIO_META_AUTO_REGISTER_GROUP", "vm"),
            ("ISTIO_META_WAYFINDER_LISTEN_ADDRESS", "127.0.0.2"),
            ("ISTIO_METAJSON_LABELS", r#"{"version": "v1"}"#),
            ("PROXY_CONFIG", &proxy_config(health_port)),
        ],
    )
    .await;
    vm.ready(&netns).await;
    let registered = eventually("the VM, healthy, in /debug/endpointz", || async {
        let eps = vm_endpoints(&netns, w.http).await;
        (eps.len() == 1 && eps[0].2 == "Healthy").then_some(eps)
    })
    .await;
    let (address, labels, _) = &registered[0];
    assert_eq!(address, "127.0.0.1");
    let vm_conn = syncz_connection(&netns, w.http, "sidecar~").await;
    assert_eq!(
        vm_conn["identity"],
        "spiffe://cluster.local/ns/default/sa/vm"
    );
    assert_eq!(labels["app"], "vm");
    assert_eq!(
        labels["version"], "v1",
        "the node's labels over the template's"
    );

    // Traffic from the gateway reaches the VM's workload (and the static one).
    eventually("a request through the gateway to reach the VM", || async {
        (through_gateway(&netns).await == "vm").then_some(())
    })
    .await;

    // Its probe fails: the entry turns unhealthy, and traffic goes to the static workload only.
    health.start_kill().unwrap();
    health.wait().await.unwrap();
    eventually("the VM unhealthy in /debug/endpointz", || async {
        let eps = vm_endpoints(&netns, w.http).await;
        (eps.len() == 1 && eps[0].2 == "Unhealthy").then_some(())
    })
    .await;
    let gw_admin = gw.admin(0).await;
    eventually("the gateway's Envoy to see the VM unhealthy", || async {
        let (_, clusters) = netns.get(gw_admin, "/clusters").await;
        clusters
            .lines()
            .any(|l| {
                l.contains(&format!(
                    "127.0.0.1:{port}::health_flags::/failed_eds_health"
                ))
            })
            .then_some(())
    })
    .await;
    for _ in 0..20 {
        assert_eq!(through_gateway(&netns).await, "static");
    }

    // The VM's agent stops: the entry stays for the grace period, then goes.
    assert!(vm.terminate().await.success());
    removed_after_grace(&w, 3.0).await;
    eventually("the VM gone from /debug/endpointz", || async {
        vm_endpoints(&netns, w.http).await.is_empty().then_some(())
    })
    .await;
}
