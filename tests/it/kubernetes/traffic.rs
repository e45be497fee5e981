//! Real traffic in a hybrid mesh, `--registries Kubernetes,Consul`: a gRPC service and an
//! HTTP service each have one backend known only through the (fake) Kubernetes API and one
//! known only to Consul, under one hostname. grpcio reaches both gRPC backends; an Envoy
//! gateway reaches both HTTP backends; scaling the Kubernetes side to zero leaves only the VM.

use std::time::Duration;

use wayfinder_consul::fake::{FakeConsul, Instance};
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::fixtures::{SliceEndpoint, endpoint_slice, service};

use crate::envoy::Envoy;
use crate::gateway::{NODE, backend as http_backend, gateway, tally, virtual_service};
use crate::grpc::{Client, backend, call, until};
use crate::support::binary::get;
use crate::support::eventually;
use crate::support::fixtures::write;
use crate::tools::tools;

const ECHO: &str = "echo.default.svc.cluster.local";
const WEB: &str = "web.default.svc.cluster.local";

/// A loopback endpoint of a Kubernetes Service, on `port` (a pod's container port).
fn slice(service: &str, port_name: &str, ports: &[u16]) -> serde_json::Value {
    let endpoints: Vec<SliceEndpoint> = ports
        .iter()
        .map(|_| SliceEndpoint {
            pod: None,
            node: None,
            ..SliceEndpoint::new("127.0.0.1", "", "")
        })
        .collect();
    let port = ports.first().copied().unwrap_or(1);
    endpoint_slice(
        "default",
        &format!("{service}-abc"),
        service,
        &[(port_name, port)],
        &endpoints,
    )
}

/// A Consul instance on loopback that joins a Kubernetes hostname on `port_number`.
fn vm(service: &str, protocol: &str, host: &str, port: u16, port_number: u16) -> Instance {
    Instance::new(service, &format!("{service}-1"), "127.0.0.1", port)
        .meta("protocol", protocol)
        .meta(wayfinder_consul::HOSTNAME_KEY, host)
        .meta(wayfinder_consul::PORT_KEY, &port_number.to_string())
}

#[tokio::test]
async fn grpcio_and_envoy_reach_kubernetes_and_consul_backends_of_one_hostname() {
    let Some(tools) = tools() else { return };
    let (_gk, grpc_k8s) = backend(&tools, "k8s").await;
    let (_gv, grpc_vm) = backend(&tools, "vm").await;
    let (_hk, http_k8s) = http_backend(&tools, "k8s-http", &[]).await;
    let (_hv, http_vm) = http_backend(&tools, "vm-http", &[]).await;

    let fake = FakeApiServer::start().await;
    fake.apply(service(
        "default",
        "echo",
        "10.96.0.10",
        &[("grpc", 7070, 7070)],
    ));
    fake.apply(slice("echo", "grpc", &[grpc_k8s]));
    fake.apply(service(
        "default",
        "web",
        "10.96.0.11",
        &[("http", 8080, 8080)],
    ));
    fake.apply(slice("web", "http", &[http_k8s]));
    let consul = FakeConsul::start().await.unwrap();
    consul.register(vm("echo-vm", "grpc", ECHO, grpc_vm, 7070));
    consul.register(vm("web-vm", "http", WEB, http_vm, 8080));

    let dir = tempfile::tempdir().unwrap();
    let gateway_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    write(dir.path(), "gateway.yaml", &gateway(gateway_port));
    let route = format!("  - route: [{{destination: {{host: {WEB}}}}}]\n");
    write(dir.path(), "vs.yaml", &virtual_service("web", WEB, &route));
    let (url, config) = (consul.url(), dir.path().to_str().unwrap().to_owned());
    let w = super::start(
        &fake,
        dir.path(),
        &[
            "--registries",
            "Kubernetes,Consul",
            "--consul-addr",
            &url,
            "--config-dir",
            &config,
        ],
    )
    .await;
    w.ready().await;

    // Each endpoint keeps its registry and cluster.
    let z = w.json(&format!("/debug/endpointz?svc={ECHO}")).await;
    let mut sources: Vec<(String, String)> = z[0]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let cluster = e["endpoint"]["cluster_id"].as_str().unwrap_or_default();
            (
                e["registry"].as_str().unwrap_or_default().to_owned(),
                cluster.to_owned(),
            )
        })
        .collect();
    sources.sort();
    let want = [("Consul", "dc1"), ("Kubernetes", "Kubernetes")]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(sources, want, "{z}");

    // grpcio: both backends of echo.
    let target = format!("xds:///{ECHO}:7070");
    let mut client = Client::Python.spawn(&tools, &target, &w.grpc.to_string(), "k8s-hybrid");
    let (ok, answer) = call(&mut client, 40, &[]).await;
    assert_eq!(ok.values().sum::<u64>(), 40, "{answer}");
    assert!(ok.contains_key("k8s") && ok.contains_key("vm"), "{answer}");

    // Envoy as the ingress gateway: both backends of web.
    let envoy = Envoy::start(&tools, w.grpc, NODE, "{LABELS: {istio: ingressgateway}}").await;
    crate::support::tls_provider();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let request = || async {
        let url = format!("http://127.0.0.1:{gateway_port}/");
        match http
            .get(url)
            .header(reqwest::header::HOST, WEB)
            .send()
            .await
        {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        }
    };
    eventually("the gateway to answer", || async {
        (request().await.0 == 200).then_some(())
    })
    .await;
    let mut answers = Vec::new();
    for _ in 0..40 {
        answers.push(request().await);
    }
    let t = tally(answers);
    let reached = |name: &str| {
        t.keys()
            .any(|(status, body)| *status == 200 && body.contains(name))
    };
    assert!(reached("k8s-http") && reached("vm-http"), "{t:?}");
    assert_eq!(t.keys().filter(|(s, _)| *s != 200).count(), 0, "{t:?}");

    // The deployment scales to zero: only the VM is left, for both clients.
    fake.apply(slice("echo", "grpc", &[]));
    fake.apply(slice("web", "http", &[]));
    until(
        &mut client,
        "the Kubernetes backend to leave",
        4,
        &[],
        |ok| ok.get("vm") == Some(&4),
    )
    .await;
    eventually("Envoy to drop the Kubernetes endpoint", || async {
        let clusters = get(envoy.admin, "/clusters").await.1;
        let out = format!("outbound|8080||{WEB}::127.0.0.1:{http_k8s}");
        (!clusters.contains(&out)).then_some(())
    })
    .await;
    for _ in 0..10 {
        let (status, body) = request().await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("vm-http"), "{body}");
    }
    client.quit().await;
}
