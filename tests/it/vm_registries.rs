//! Consul and Eureka, the registries of VM fleets, through the binary: real grpcio traffic to
//! backends known only to Consul, only to Eureka, and to Consul and the File registry under
//! one shared hostname; outages that leave the last good state served and recover without a
//! push, including a Consul that fails new requests while its blocking queries stay parked.
//! The registries are the in-process fakes of each adapter crate, on loopback.

use std::collections::BTreeMap;

use wayfinder_consul::fake::{FakeConsul, Fault as ConsulFault, Instance as ConsulInstance};
use wayfinder_eureka::fake::{FakeEureka, Fault as EurekaFault, Instance as EurekaInstance};

use crate::grpc::{Client, Driven, backend, call, until};
use crate::support::binary::{Wayfinder, get};
use crate::support::eventually;
use crate::support::fixtures::{service_entry, write};
use crate::tools::tools;

/// Makes `n` calls; every one must be answered and every backend in `names` reached.
async fn reaches_all(client: &mut Driven, n: u32, names: &[&str]) {
    let (ok, answer) = call(client, n, &[]).await;
    assert_eq!(ok.values().sum::<u64>(), u64::from(n), "{answer}");
    for name in names {
        assert!(
            ok.contains_key(*name),
            "backend {name} not reached: {answer}"
        );
    }
}

/// Waits until every call reaches `left` (another backend left), then checks 20 more.
async fn only(client: &mut Driven, left: &str) {
    until(client, "one backend to leave", 4, &[], |ok| {
        ok.get(left) == Some(&4)
    })
    .await;
    let (ok, answer) = call(client, 20, &[]).await;
    assert_eq!(ok, BTreeMap::from([(left.to_string(), 20)]), "{answer}");
}

/// A gRPC instance on loopback in Consul, dialled on port 7070.
fn consul_grpc(service: &str, id: &str, port: u16) -> ConsulInstance {
    ConsulInstance::new(service, id, "127.0.0.1", port)
        .meta("protocol", "grpc")
        .meta(wayfinder_consul::PORT_KEY, "7070")
}

async fn start_with_consul(consul: &FakeConsul, extra: &[&str]) -> Wayfinder {
    let url = consul.url();
    let mut args = vec![
        "--registries",
        "Consul",
        "--consul-addr",
        &url,
        "--debounce-after",
        "10ms",
    ];
    args.extend_from_slice(extra);
    Wayfinder::start(&args).await
}

#[tokio::test]
async fn grpcio_reaches_backends_known_only_to_consul() {
    let Some(tools) = tools() else { return };
    let (_a, port_a) = backend(&tools, "a").await;
    let (_b, port_b) = backend(&tools, "b").await;
    let consul = FakeConsul::start().await.unwrap();
    consul.register(consul_grpc("echo", "echo-a", port_a));
    consul.register(consul_grpc("echo", "echo-b", port_b));
    let w = start_with_consul(&consul, &[]).await;
    w.ready().await;
    let mut client = Client::Python.spawn(
        &tools,
        "xds:///echo.service.consul:7070",
        &w.grpc.to_string(),
        "consul-client",
    );
    reaches_all(&mut client, 20, &["a", "b"]).await;

    // A failing check takes b out of rotation; passing again brings it back.
    consul.set_check_status("dc1", "echo", "echo-b", "critical");
    only(&mut client, "a").await;
    consul.set_check_status("dc1", "echo", "echo-b", "passing");
    until(&mut client, "b to return", 10, &[], |ok| {
        ok.contains_key("b")
    })
    .await;
    client.quit().await;
}

#[tokio::test]
async fn grpcio_reaches_backends_known_only_to_eureka() {
    let Some(tools) = tools() else { return };
    let (_a, port_a) = backend(&tools, "a").await;
    let (_b, port_b) = backend(&tools, "b").await;
    let eureka = FakeEureka::start().await.unwrap();
    let instance = |id: &str, port: u16| {
        EurekaInstance::new("ECHO", id, "127.0.0.1", port)
            .meta("protocol", "grpc")
            .meta(wayfinder_eureka::PORT_KEY, "7070")
    };
    eureka.register(instance("echo-a", port_a));
    eureka.register(instance("echo-b", port_b));
    let url = eureka.url();
    let w = Wayfinder::start(&[
        "--registries",
        "Eureka",
        "--eureka-url",
        &url,
        "--eureka-interval",
        "100ms",
        "--debounce-after",
        "10ms",
    ])
    .await;
    w.ready().await;
    let mut client = Client::Python.spawn(
        &tools,
        "xds:///echo.eureka:7070",
        &w.grpc.to_string(),
        "eureka-client",
    );
    reaches_all(&mut client, 20, &["a", "b"]).await;

    // Only UP instances get traffic.
    eureka.set_status("ECHO", "echo-b", "OUT_OF_SERVICE");
    only(&mut client, "a").await;
    client.quit().await;
}

#[tokio::test]
async fn one_hostname_is_served_from_consul_and_the_file_registry_at_once() {
    let Some(tools) = tools() else { return };
    let (_k, port_k) = backend(&tools, "file").await;
    let (_v, port_v) = backend(&tools, "consul").await;
    let host = "echo.default.svc.cluster.local";
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "echo.yaml",
        &service_entry("echo", host, ("grpc", 7070, "GRPC"), &[port_k]),
    );
    let consul = FakeConsul::start().await.unwrap();
    consul.register(
        consul_grpc("echo-vm", "vm-1", port_v).meta(wayfinder_consul::HOSTNAME_KEY, host),
    );
    let (url, files) = (consul.url(), dir.path().to_str().unwrap().to_string());
    let w = Wayfinder::start(&[
        "--registries",
        "File,Consul",
        "--file-registry",
        &files,
        "--consul-addr",
        &url,
        "--debounce-after",
        "10ms",
    ])
    .await;
    w.ready().await;
    let z = w.json(&format!("/debug/endpointz?svc={host}")).await;
    let mut sources: Vec<(String, String)> = z[0]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["registry"].as_str().unwrap_or_default().to_string(),
                e["endpoint"]["locality"]["region"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    sources.sort();
    assert_eq!(
        sources,
        [
            ("Consul".to_string(), "dc1".to_string()),
            ("File".to_string(), String::new())
        ],
        "each endpoint keeps its registry and locality: {z}"
    );
    let target = format!("xds:///{host}:7070");
    let mut client = Client::Python.spawn(&tools, &target, &w.grpc.to_string(), "hybrid");
    // Calls reach the Kubernetes-side (file) and the VM (Consul) backend.
    reaches_all(&mut client, 40, &["file", "consul"]).await;
    client.quit().await;
}

/// The value of a metric line `name{labels} value` (or `name value`).
fn metric(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

#[tokio::test]
async fn outages_keep_the_last_good_state_show_degraded_and_recover_without_a_push() {
    let consul = FakeConsul::start().await.unwrap();
    consul.register(ConsulInstance::new("web", "web-1", "10.0.0.1", 8080));
    let eureka = FakeEureka::start().await.unwrap();
    eureka.register(EurekaInstance::new("PAYMENT", "pay-1", "10.0.1.1", 8080));
    let (c, e) = (consul.url(), eureka.url());
    let w = Wayfinder::start(&[
        "--registries",
        "Consul,Eureka",
        "--consul-addr",
        &c,
        "--consul-wait",
        "1s",
        "--eureka-url",
        &e,
        "--eureka-interval",
        "100ms",
        "--ready-requires-healthy",
        "--debounce-after",
        "10ms",
    ])
    .await;
    w.ready().await;
    let served = || async {
        (
            w.endpoints("web.service.consul").await,
            w.endpoints("payment.eureka").await,
        )
    };
    let before = served().await;
    assert_eq!(
        before,
        (
            vec!["10.0.0.1:8080".to_string()],
            vec!["10.0.1.1:8080".to_string()]
        )
    );
    let version = |m: &str| metric(m, "wayfinder_snapshot_version").unwrap_or(-1.0);
    let v0 = version(&get(w.monitoring, "/metrics").await.1);

    // First 500s, then no answer at all.
    consul.set_fault(ConsulFault::Status(500));
    eureka.set_fault(EurekaFault::Status(500));
    for name in ["Consul", "Eureka"] {
        let status = w.wait_health(name, "degraded").await;
        let error = status["last_error"].to_string();
        assert!(error.contains("HTTP 500"), "{name}: {status}");
    }
    consul.set_fault(ConsulFault::Hang);
    eureka.set_fault(EurekaFault::Hang);
    let (code, body) = w.get("/ready").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("degraded: Consul, Eureka"), "{body}");
    let metrics = get(w.monitoring, "/metrics").await.1;
    for name in ["Consul", "Eureka"] {
        let line = format!("wayfinder_registry_degraded{{registry=\"{name}\"}}");
        assert_eq!(metric(&metrics, &line), Some(1.0), "{metrics}");
    }
    assert_eq!(
        served().await,
        before,
        "the last good state is still served"
    );

    consul.set_fault(ConsulFault::None);
    eureka.set_fault(EurekaFault::None);
    for name in ["Consul", "Eureka"] {
        w.wait_health(name, "healthy").await;
    }
    eventually("/ready to answer 200 again", || async {
        (w.get("/ready").await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(served().await, before);
    let v1 = version(&get(w.monitoring, "/metrics").await.1);
    assert_eq!(
        v0, v1,
        "recovering without a change publishes no new snapshot"
    );

    // And changes flow again.
    consul.register(ConsulInstance::new("web", "web-2", "10.0.0.2", 8080));
    eventually("the new Consul instance", || async {
        (w.endpoints("web.service.consul").await.len() == 2).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_consul_failing_new_requests_shows_degraded_while_its_queries_stay_parked() {
    let consul = FakeConsul::start().await.unwrap();
    consul.register(ConsulInstance::new("web", "web-1", "10.0.0.1", 8080));
    // The defaults: blocking queries wait 5 min, the liveness probe runs every 5 s.
    let w = start_with_consul(&consul, &[]).await;
    w.ready().await;
    consul.until_waiting(2).await;
    let parked = consul.counts();

    // An agent cut off from its servers: new requests get 500, the parked queries wait on.
    consul.set_new_request_fault(ConsulFault::Status(500));
    let status = w.wait_health("Consul", "degraded").await;
    let error = status["last_error"].to_string();
    assert!(
        error.contains(&format!("GET {}/v1/status/leader", consul.url()))
            && error.contains("HTTP 500"),
        "{status}"
    );
    assert_eq!(consul.waiting(), 2, "the blocking queries are still parked");
    assert_eq!(consul.counts().health_total(), parked.health_total());
    assert_eq!(
        w.endpoints("web.service.consul").await,
        ["10.0.0.1:8080"],
        "the last good endpoints are still served"
    );

    consul.set_new_request_fault(ConsulFault::None);
    w.wait_health("Consul", "healthy").await;
    assert_eq!(
        consul.counts().health_total(),
        parked.health_total(),
        "recovered by the probe, not by a query returning"
    );
}

#[tokio::test]
async fn a_malformed_answer_is_reported_with_the_registry_and_the_request() {
    let consul = FakeConsul::start().await.unwrap();
    consul.register(ConsulInstance::new("web", "web-1", "10.0.0.1", 8080));
    let w = start_with_consul(&consul, &[]).await;
    w.ready().await;
    consul.set_service_fault("web", ConsulFault::Malformed("[{\"Node\": {".into()));
    consul.register(ConsulInstance::new("web", "web-2", "10.0.0.2", 8080));
    let status = w.wait_health("Consul", "degraded").await;
    let error = &status["last_error"];
    let text = error.to_string();
    assert!(
        text.contains(&format!("GET {}/v1/health/service/web", consul.url()))
            && text.contains("EOF while parsing"),
        "{status}"
    );
    w.wait_log("the error logged with its registry", |l| {
        l["source"] == "Consul" && l["error"].as_str().is_some_and(|e| e.contains("malformed"))
    })
    .await;
    assert_eq!(
        w.endpoints("web.service.consul").await,
        ["10.0.0.1:8080"],
        "the last good state stays"
    );
    consul.set_service_fault("web", ConsulFault::None);
    consul.register(ConsulInstance::new("web", "web-3", "10.0.0.3", 8080));
    eventually("the repaired answers", || async {
        (w.endpoints("web.service.consul").await.len() == 3).then_some(())
    })
    .await;
    w.wait_health("Consul", "healthy").await;
}
