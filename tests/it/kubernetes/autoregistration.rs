//! Auto-registration with `--config-source k8s`: a VM's agent connects, and its entry is a
//! `WorkloadEntry` object in the (fake) API server, annotated as istiod annotates it and with
//! its health as a condition, read back like any other entry; when the agent stops, the object
//! is marked disconnected and deleted after the grace period. The VM proves who it is as
//! Istio's VM onboarding has it: a service-account token in `istio-token` (`--token-file`),
//! which the server checks with the API server's TokenReview before it issues the VM's
//! certificate; Envoy then speaks to the secure port with it. The API server, wayfinder and
//! the agent with real Envoy share a network namespace of the test's own.

use serde_json::{Value, json};

use crate::gateway::backend_in;
use crate::support::agent::{Agent, mutual_tls, syncz_connection};
use crate::support::eventually;
use crate::support::netns::Netns;
use crate::tools::tools;

const WE: &str = "networking.istio.io/v1";

#[tokio::test]
async fn a_vm_agent_s_entry_is_a_workload_entry_object_written_and_deleted() {
    let Some(tools) = tools() else { return };
    let netns = Netns::new();
    let fake = super::fake_in(&netns).await;
    let (_app, port) = backend_in(netns.command(&tools.python), &tools, "vm", &[]).await;
    fake.apply(json!({
        "apiVersion": WE, "kind": "ServiceEntry",
        "metadata": {"name": "vm", "namespace": "default"},
        "spec": {"hosts": ["vm.default.svc.cluster.local"], "location": "MESH_INTERNAL",
                 "resolution": "STATIC", "ports": [{"number": 9080, "name": "http", "protocol": "HTTP"}],
                 "workloadSelector": {"labels": {"app": "vm"}}},
    }));
    fake.apply(json!({
        "apiVersion": WE, "kind": "WorkloadGroup",
        "metadata": {"name": "vm", "namespace": "default"},
        "spec": {"metadata": {"labels": {"app": "vm"}},
                 "template": {"ports": {"http": port}, "serviceAccount": "vm", "labels": {"app": "vm"}}},
    }));
    let dir = tempfile::tempdir().unwrap();
    let w = super::start_in(
        &netns,
        &fake,
        dir.path(),
        &["--workload-entry-grace-period", "3s"],
    )
    .await;
    let envoy = tools.envoy.display().to_string();
    // The VM's service-account token, as `istioctl x workload entry configure` writes it.
    fake.add_token("vm-service-account-token", "default", "vm", &["istio-ca"]);
    std::fs::write(dir.path().join("istio-token"), "vm-service-account-token\n").unwrap();
    let mut args = mutual_tls(&w, "--token-file", &dir.path().join("istio-token")).await;
    args.extend(
        [
            "--binary-path",
            &envoy,
            "--certs-dir",
            "certs",
            "--service-registry",
            "Mock",
            "--drain-duration",
            "1s",
        ]
        .map(String::from),
    );
    let mut vm = Agent::start(
        &netns,
        dir.path(),
        "sidecar",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[
            ("INSTANCE_IP", "127.0.0.1"),
            ("ISTIO_META_NAMESPACE", "default"),
            ("ISTIO_META_AUTO_REGISTER_GROUP", "vm"),
            ("ISTIO_META_WAYFINDER_LISTEN_ADDRESS", "127.0.0.2"),
        ],
    )
    .await;
    vm.ready(&netns).await;
    assert!(
        fake.counts().token_reviews >= 1,
        "the token was never reviewed"
    );
    let vm_conn = syncz_connection(&netns, w.http, "sidecar~").await;
    assert_eq!(
        vm_conn["identity"],
        "spiffe://cluster.local/ns/default/sa/vm"
    );

    // The object, as istiod writes it.
    let get = || fake.get(WE, "WorkloadEntry", Some("default"), "vm-127-0-0-1");
    let object: Value = eventually("the WorkloadEntry in the API server, healthy", || async {
        get().filter(|o| o["status"]["conditions"][0]["status"] == "True")
    })
    .await;
    let annotations = &object["metadata"]["annotations"];
    assert_eq!(
        annotations["istio.io/autoRegistrationGroup"], "vm",
        "{object}"
    );
    assert!(
        annotations["istio.io/workloadController"].is_string(),
        "{object}"
    );
    assert!(annotations["istio.io/connectedAt"].is_string(), "{object}");
    assert_eq!(object["spec"]["address"], "127.0.0.1");
    assert_eq!(object["spec"]["ports"]["http"], port);
    assert_eq!(object["status"]["conditions"][0]["type"], "Healthy");

    // Read back through the Kubernetes config source, like any WorkloadEntry.
    eventually("the entry's endpoint in /debug/endpointz", || async {
        let (_, body) = netns
            .get(w.http, "/debug/endpointz?svc=vm.default.svc.cluster.local")
            .await;
        let z: Value = serde_json::from_str(&body).ok()?;
        let endpoint = &z[0]["endpoints"][0];
        (endpoint["registry"] == "Config/k8s" && endpoint["endpoint"]["address"] == "127.0.0.1")
            .then_some(())
    })
    .await;

    // The agent stops: the object is marked disconnected, and deleted after the grace period.
    assert!(vm.terminate().await.success());
    eventually("the WorkloadEntry marked disconnected", || async {
        get().filter(|o| o["metadata"]["annotations"]["istio.io/disconnectedAt"].is_string())
    })
    .await;
    eventually("the WorkloadEntry deleted", || async {
        get().is_none().then_some(())
    })
    .await;
    crate::autoregistration::removed_after_grace(&w, 3.0).await;
}
