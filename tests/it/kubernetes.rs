//! The Kubernetes registry through the server, against the in-process API server of
//! `wayfinder-kubernetes` (feature `fake`): what an ADS client receives when a deployment
//! scales or a Service port changes (`ads`), real grpcio and Envoy traffic in a hybrid
//! Kubernetes + Consul mesh (`traffic`), a 60 s API server outage with a restart and an
//! expired resourceVersion (`outage`), Istio objects read from the API (`config`), and a
//! VM's auto-registered entry written to the API (`autoregistration`), a pod's first
//! certificate with its service-account token (`certificates`), and a gateway's TLS
//! credential from a Secret, rotated without a restart (`credentials`), and two replicas
//! electing the one that writes Events (`replicas`) and serving equal versions, so that a
//! delta client moved between them is sent nothing again (`replica_versions`).

mod ads;
mod autoregistration;
mod certificates;
mod clusters;
mod config;
mod credentials;
mod outage;
mod replica_versions;
mod replicas;
#[cfg(feature = "consul")]
mod traffic;

use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::fixtures::{address_slice, service};

use crate::support::binary::Wayfinder;
use crate::support::netns::Netns;

/// Starts the binary against `fake` (`--kubeconfig` written into `dir`) with `extra` flags.
pub(crate) async fn start(
    fake: &FakeApiServer,
    dir: &std::path::Path,
    extra: &[&str],
) -> Wayfinder {
    let kubeconfig = fake.write_kubeconfig(dir, "east");
    let kubeconfig = kubeconfig.to_str().unwrap().to_owned();
    let mut args = vec!["--kubeconfig", &kubeconfig, "--debounce-after", "10ms"];
    args.extend_from_slice(extra);
    if !extra.contains(&"--registries") {
        args.extend_from_slice(&["--registries", "Kubernetes"]);
    }
    Wayfinder::start(&args).await
}

/// The fake API server, listening inside `netns`.
pub(crate) async fn fake_in(netns: &Netns) -> FakeApiServer {
    let tcp = netns
        .block_on(|| async { std::net::TcpListener::bind("127.0.0.1:0").expect("bind") })
        .await;
    FakeApiServer::start_on(tcp).await
}

/// The binary in `netns`, reading `fake`'s cluster as a registry and a config source
/// (`--kubeconfig` written into `dir`), with `extra` flags.
pub(crate) async fn start_in(
    netns: &Netns,
    fake: &FakeApiServer,
    dir: &std::path::Path,
    extra: &[&str],
) -> Wayfinder {
    let kubeconfig = fake.write_kubeconfig(dir, "east").display().to_string();
    let wrapper = netns.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut args = config_source_args(&kubeconfig);
    args.extend_from_slice(extra);
    Wayfinder::start_under(&wrapper, &args).await
}

/// The flags that read the cluster of `kubeconfig` as a registry and a config source, with a
/// short debounce.
pub(crate) fn config_source_args(kubeconfig: &str) -> Vec<&str> {
    vec![
        "--kubeconfig",
        kubeconfig,
        "--registries",
        "Kubernetes",
        "--config-source",
        "k8s",
        "--debounce-after",
        "10ms",
    ]
}

/// Service `web` (port `http` 8080, target 9080) in `default`, with endpoints
/// `10.<net>.0.1..=n`.
pub(crate) fn web(fake: &FakeApiServer, net: u8, n: u8) {
    fake.apply(service(
        "default",
        "web",
        "10.96.0.10",
        &[("http", 8080, 9080)],
    ));
    fake.apply(web_slice(net, n));
}

/// web's EndpointSlice with endpoints `10.<net>.0.1..=n`.
pub(crate) fn web_slice(net: u8, n: u8) -> serde_json::Value {
    let ips: Vec<String> = (1..=n).map(|i| format!("10.{net}.0.{i}")).collect();
    address_slice("default", "web", ("http", 9080), &ips)
}
