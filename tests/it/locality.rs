//! Locality failover with real Envoy 1.40, as Istio's default mesh config has it: a
//! DestinationRule with outlier detection and no `localityLbSetting` makes a proxy prefer the
//! endpoints of its own zone, and fail over to another zone's only when its own are ejected.
//!
//! Envoy runs as the ingress gateway in zone `us-east/zone-a` (its node's locality); the
//! service's two endpoints are HTTP backends on loopback, one in each zone (the ServiceEntry's
//! `locality`).

use std::time::Duration;

use crate::envoy::Envoy;
use crate::gateway::{backend, gateway, virtual_service};
use crate::support::binary::{Wayfinder, get};
use crate::support::eventually;
use crate::support::fixtures::write;
use crate::tools::tools;

const HOST: &str = "checkout.example.com";
/// The gateway, at an address of its own: the backends' (127.0.0.1) would make it one of their
/// instances, whose registry locality wins over the node's (as in Istio).
const NODE: &str = "router~127.0.0.9~ingress.default~default.svc.cluster.local";

/// A ServiceEntry for [`HOST`] with an endpoint in each zone.
fn entry(zone_a: u16, zone_b: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
         metadata: {{name: checkout, namespace: default}}\nspec:\n  hosts: [{HOST}]\n  \
         location: MESH_INTERNAL\n  resolution: STATIC\n  \
         ports: [{{number: 9080, name: http, protocol: HTTP}}]\n  endpoints:\n  \
         - {{address: 127.0.0.1, ports: {{http: {zone_a}}}, locality: us-east/zone-a}}\n  \
         - {{address: 127.0.0.1, ports: {{http: {zone_b}}}, locality: us-east/zone-b}}\n"
    )
}

/// Outlier detection that ejects an endpoint on its first failure, and nothing else: the
/// mesh's default locality setting does the rest.
const RULE: &str = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\n\
    metadata: {name: checkout, namespace: default}\nspec:\n  host: checkout.example.com\n  \
    trafficPolicy:\n    outlierDetection: {consecutive5xxErrors: 1, interval: 1s, \
    baseEjectionTime: 3m, maxEjectionPercent: 100}\n";

#[tokio::test]
async fn a_client_in_zone_a_prefers_its_zone_and_fails_over_to_zone_b_when_ejected() {
    let Some(tools) = tools() else { return };
    let (mut zone_a, port_a) = backend(&tools, "zone-a", &[]).await;
    let (_zone_b, port_b) = backend(&tools, "zone-b", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let listener = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    write(dir.path(), "entry.yaml", &entry(port_a, port_b));
    write(dir.path(), "dr.yaml", RULE);
    write(dir.path(), "gateway.yaml", &gateway(listener));
    let route = format!("  - route: [{{destination: {{host: {HOST}}}}}]\n");
    write(
        dir.path(),
        "vs.yaml",
        &virtual_service("checkout", HOST, &route),
    );
    let (e, d) = (empty.path().display(), dir.path().display());
    let flags =
        format!("--registries=File --file-registry={e} --config-dir={d} --debounce-after=10ms");
    let w = Wayfinder::start(&flags.split(' ').collect::<Vec<_>>()).await;
    w.ready().await;
    let envoy = Envoy::start_at(
        &tools,
        w.grpc,
        NODE,
        "{LABELS: {istio: ingressgateway}}",
        "{region: us-east, zone: zone-a}",
    )
    .await;
    crate::support::tls_provider();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let request = || async {
        let url = format!("http://127.0.0.1:{listener}/");
        match http.get(url).header("host", HOST).send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => (0, format!("{e:?}")),
        }
    };

    // Zone b's endpoint is a priority below zone a's, for this proxy.
    let cluster = format!("outbound|9080||{HOST}");
    eventually("zone a's endpoint first", || async {
        let clusters = envoy.clusters().await;
        let priority = |port: u16| {
            clusters.lines().find_map(|l| {
                let rest = l.strip_prefix(&format!("{cluster}::127.0.0.1:{port}::priority::"))?;
                rest.parse::<u32>().ok()
            })
        };
        (priority(port_a) == Some(0) && priority(port_b) == Some(1)).then_some(())
    })
    .await;

    // Every request goes to its own zone, while it answers.
    eventually("an answer from zone a", || async {
        (request().await == (200, "zone-a".to_string())).then_some(())
    })
    .await;
    for _ in 0..30 {
        assert_eq!(request().await, (200, "zone-a".to_string()));
    }

    // Zone a's endpoint goes away: its first failure ejects it, and zone b takes over.
    zone_a.kill().await.unwrap();
    eventually("an answer from zone b", || async {
        (request().await == (200, "zone-b".to_string())).then_some(())
    })
    .await;
    for _ in 0..30 {
        assert_eq!(request().await, (200, "zone-b".to_string()));
    }
    let ejected = envoy
        .stat(&format!(
            "cluster.{cluster}.outlier_detection.ejections_active"
        ))
        .await;
    assert_eq!(ejected, 1, "zone a's endpoint is ejected");
    envoy.assert_nothing_rejected().await;
    let (status, _) = get(w.http, "/ready").await;
    assert_eq!(status, 200);
}
