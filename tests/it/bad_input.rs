//! Bad input loses nothing: malformed files and failing registries, against the binary.

use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::endpoint::ClusterLoadAssignment;

use crate::support::ads::{Ads, decode_all, names_of, sidecar};
use crate::support::binary::Wayfinder;
use crate::support::fixtures::{service_entry, write};

const HOST: &str = "echo.default.svc.cluster.local";
const CLUSTER: &str = "outbound|8080||echo.default.svc.cluster.local";

fn echo(ports: &[u16]) -> String {
    service_entry("echo", HOST, ("http", 8080, "HTTP"), ports)
}

/// Ports of the endpoints in an EDS response for [`CLUSTER`].
fn endpoint_ports(r: &wayfinder::xds::pb::discovery::DiscoveryResponse) -> Vec<u32> {
    use wayfinder::xds::pb::core::{address, socket_address};
    use wayfinder::xds::pb::endpoint::lb_endpoint::HostIdentifier;
    let cla = decode_all::<ClusterLoadAssignment>(r)
        .remove(CLUSTER)
        .expect("the echo assignment");
    let mut ports: Vec<u32> = cla
        .endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .filter_map(|e| match &e.host_identifier {
            Some(HostIdentifier::Endpoint(ep)) => match ep.address.as_ref()?.address.as_ref()? {
                address::Address::SocketAddress(s) => match s.port_specifier {
                    Some(socket_address::PortSpecifier::PortValue(p)) => Some(p),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect();
    ports.sort();
    ports
}

#[tokio::test]
async fn a_malformed_file_is_reported_with_its_place_and_the_last_good_state_stays() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "echo.yaml", &echo(&[9001]));
    let w = Wayfinder::with_files("", dir.path()).await;
    w.ready().await;
    let mut ads = Ads::connect(w.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(TypeUrl::Endpoint, &[CLUSTER]).await;
    let eds = ads.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(endpoint_ports(&eds), [9001]);
    ads.ack(&eds, &[CLUSTER]).await;

    // A good first document with a change, and a broken second one: the broken document is
    // refused alone, and the change of the good one is served.
    let broken = format!(
        "{}---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: broken}}\nspec:\n  hosts: [broken.example.com]\n  ports: [{{number: eighty, name: http}}]\n",
        echo(&[9005])
    );
    write(dir.path(), "echo.yaml", &broken);
    let line = w
        .wait_log("the error naming the file and document", |l| {
            l["error"]
                .as_str()
                .is_some_and(|e| e.contains("echo.yaml: document 2"))
        })
        .await;
    let error = line["error"].as_str().unwrap();
    let bad_line = broken.lines().position(|l| l.contains("eighty")).unwrap() + 1;
    assert!(
        error.contains(&format!("line {bad_line}")),
        "the line of the bad port, {bad_line}: {error}"
    );
    let status = w.wait_health("File", "degraded").await;
    assert!(
        status["last_error"]["error"]["origin"]
            .as_str()
            .unwrap()
            .contains("echo.yaml: document 2"),
        "{status}"
    );
    let eds = ads.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(
        endpoint_ports(&eds),
        [9005],
        "the good document took effect"
    );
    ads.ack(&eds, &[CLUSTER]).await;
    assert_eq!(w.get("/ready").await.0, 200);

    // The corrected file is picked up, and the stream sees it.
    write(dir.path(), "echo.yaml", &echo(&[9007]));
    let eds = ads.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(
        endpoint_ports(&eds),
        [9007],
        "no push carried the refused state"
    );
    assert_eq!(w.registry_status("File").await["health"], "healthy");
}

#[tokio::test]
async fn a_failing_registry_does_not_stop_the_others() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("entries");
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "echo.yaml", &echo(&[9001]));
    let w = Wayfinder::with_files("Mock,", &dir).await;
    w.ready().await;
    assert_eq!(w.endpoints(HOST).await, ["127.0.0.1:9001"]);

    std::fs::remove_dir_all(&dir).unwrap();
    let status = w.wait_health("File", "degraded").await;
    assert!(
        status["last_error"]["error"]["kind"] == "unavailable",
        "{status}"
    );
    assert_eq!(w.registry_status("Mock").await["health"], "healthy");
    assert_eq!(w.get("/ready").await.0, 200);
    let mut ads = Ads::connect(w.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    let clusters = names_of(&ads.recv_type(TypeUrl::Cluster).await);
    assert!(
        clusters.contains(&"outbound|9080||reviews.default.svc.cluster.local".to_string()),
        "Mock still served: {clusters:?}"
    );
    assert!(
        clusters.contains(&CLUSTER.to_string()),
        "File's last good state still served: {clusters:?}"
    );
}

#[tokio::test]
async fn a_registry_broken_from_the_start_does_not_keep_the_server_from_serving() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "bad.yaml",
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: x\n",
    );
    let w = Wayfinder::with_files("Mock,", dir.path()).await;
    w.ready().await;
    let status = w.wait_health("File", "degraded").await;
    assert!(
        status["last_error"]["error"]["origin"]
            .as_str()
            .unwrap()
            .contains("bad.yaml"),
        "{status}"
    );
    assert_eq!(
        w.endpoints("reviews.default.svc.cluster.local").await.len(),
        3
    );
}
