//! `--meshConfig FILE` and `--networksConfig FILE`: Istio's MeshConfig and MeshNetworks read
//! at start, followed while the server runs, and refused with their file and field without
//! losing the settings in force.

use std::process::Stdio;

use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::cluster::Cluster;
use wayfinder::xds::pb::discovery::DiscoveryResponse;
use wayfinder::xds::pb::endpoint::ClusterLoadAssignment;
use wayfinder::xds::pb::route::RouteConfiguration;

use crate::support::ads::{Ads, decode_all, sidecar, sidecar_with};
use crate::support::binary::{LOOPBACK, Wayfinder, path};
use crate::support::fixtures::write;
use crate::support::{DEADLINE, eventually};

/// The catch-all virtual host of route configuration `9080`: `allow_any` or `block_all`.
fn catch_all(r: &DiscoveryResponse) -> String {
    let rc = decode_all::<RouteConfiguration>(r)
        .remove("9080")
        .expect("route configuration 9080");
    let hosts: Vec<&str> = rc.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
    let found = hosts
        .iter()
        .find(|h| **h == "allow_any" || **h == "block_all");
    found
        .unwrap_or_else(|| panic!("no catch-all in {hosts:?}"))
        .to_string()
}

/// The connect timeout of the `reviews` cluster, in milliseconds.
fn reviews_timeout(r: &DiscoveryResponse) -> i64 {
    let c = decode_all::<Cluster>(r)
        .remove("outbound|9080||reviews.default.svc.cluster.local")
        .expect("the reviews cluster");
    let t = c.connect_timeout.expect("a connect timeout");
    t.seconds * 1000 + i64::from(t.nanos / 1_000_000)
}

#[tokio::test]
async fn a_mesh_config_change_reaches_proxies_and_a_bad_one_keeps_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh");
    write(dir.path(), "mesh", "connectTimeout: 2s\n");
    let w = Wayfinder::start(&["--meshConfig", file.to_str().unwrap()]).await;
    w.ready().await;
    let mut ads = Ads::connect(w.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    let cds = ads.recv_type(TypeUrl::Cluster).await;
    assert_eq!(reviews_timeout(&cds), 2000, "the file's connectTimeout");
    ads.ack(&cds, &[]).await;
    ads.subscribe(TypeUrl::Route, &["9080"]).await;
    let rds = ads.recv_type(TypeUrl::Route).await;
    assert_eq!(catch_all(&rds), "allow_any", "Istio's default is ALLOW_ANY");
    ads.ack(&rds, &["9080"]).await;

    // The file changes: the proxy is pushed the new policy and timeout, without a restart.
    write(
        dir.path(),
        "mesh",
        "connectTimeout: 3s\noutboundTrafficPolicy: {mode: REGISTRY_ONLY}\n",
    );
    let cds = ads.recv_type(TypeUrl::Cluster).await;
    assert_eq!(reviews_timeout(&cds), 3000);
    ads.ack(&cds, &[]).await;
    let rds = ads.recv_type(TypeUrl::Route).await;
    assert_eq!(catch_all(&rds), "block_all");
    ads.ack(&rds, &["9080"]).await;

    // A bad change: logged and shown with the file and field; the last good settings stay.
    write(
        dir.path(),
        "mesh",
        "connectTimeout: 4s\noutboundTrafficPolicy: {mode: BLOCK}\n",
    );
    let line = w
        .wait_log("the MeshConfig error", |l| {
            l["level"] == "ERROR"
                && l["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("outboundTrafficPolicy.mode"))
        })
        .await;
    let message = line["message"].as_str().unwrap();
    assert!(message.contains(file.to_str().unwrap()), "{message}");
    let z = eventually("configz to show the error", || async {
        let z = w.json("/debug/configz").await;
        z["mesh_config"]["error"].is_string().then_some(z)
    })
    .await;
    let mesh = &z["mesh_config"];
    assert_eq!(mesh["path"], file.to_str().unwrap());
    assert_eq!(
        mesh["config"]["outboundTrafficPolicy"]["mode"],
        "REGISTRY_ONLY"
    );
    assert_eq!(mesh["config"]["connectTimeout"], "3s");
    // What a new proxy is served is still the last good settings.
    let mut fresh = Ads::connect(w.grpc, sidecar("10.9.0.2", "default")).await;
    fresh.subscribe(TypeUrl::Cluster, &[]).await;
    assert_eq!(
        reviews_timeout(&fresh.recv_type(TypeUrl::Cluster).await),
        3000
    );
    fresh.subscribe(TypeUrl::Route, &["9080"]).await;
    assert_eq!(
        catch_all(&fresh.recv_type(TypeUrl::Route).await),
        "block_all"
    );

    // Fixed: the error clears.
    write(dir.path(), "mesh", "connectTimeout: 3s\n");
    let rds = ads.recv_type(TypeUrl::Route).await;
    assert_eq!(catch_all(&rds), "allow_any");
    let z = w.json("/debug/configz").await;
    assert!(z["mesh_config"]["error"].is_null(), "{}", z["mesh_config"]);
}

/// Starts the server with `flag` naming a file holding `text`, which must stop it: its
/// standard error, and the file's path.
async fn refused_at_start(flag: &str, text: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "settings", text);
    let file = dir.path().join("settings").to_str().unwrap().to_string();
    let child = tokio::process::Command::new(path())
        .args(["discovery", flag, &file])
        .args(LOOPBACK)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // A server that started anyway would run until killed: the deadline only bounds the test.
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("a server with a bad {flag} file must exit"))
        .unwrap();
    assert!(
        !out.status.success(),
        "a bad {flag} file must stop the start"
    );
    (String::from_utf8_lossy(&out.stderr).into_owned(), file)
}

#[tokio::test]
async fn a_bad_mesh_config_at_start_stops_the_server_with_its_file_and_field() {
    let bad = "rootNamespace: istio-system\noutboundTrafficPolicy: {mode: BLOCK}\n";
    let (stderr, file) = refused_at_start("--meshConfig", bad).await;
    assert!(
        stderr.contains(&file) && stderr.contains("outboundTrafficPolicy.mode"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_bad_mesh_networks_file_at_start_stops_the_server_with_its_file_and_field() {
    let bad = "networks:\n  net2:\n    gateways: [{address: eastwest.example.com, port: 15443}]\n";
    let (stderr, file) = refused_at_start("--networksConfig", bad).await;
    assert!(
        stderr.contains("--networksConfig")
            && stderr.contains(&file)
            && stderr.contains("networks.net2.gateways[0].address"),
        "{stderr}"
    );
}

/// The number of endpoints of `reviews` in an EDS response.
fn reviews_endpoints(r: &DiscoveryResponse) -> usize {
    decode_all::<ClusterLoadAssignment>(r)
        .remove(REVIEWS_CLUSTER)
        .expect("the reviews assignment")
        .endpoints
        .iter()
        .map(|l| l.lb_endpoints.len())
        .sum()
}

const REVIEWS_CLUSTER: &str = "outbound|9080||reviews.default.svc.cluster.local";

#[tokio::test]
async fn a_mesh_networks_change_reaches_proxies_and_a_bad_one_keeps_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("networks");
    write(dir.path(), "networks", "networks: {}\n");
    let w = Wayfinder::start(&["--networksConfig", file.to_str().unwrap()]).await;
    w.ready().await;
    let mut ads = Ads::connect(
        w.grpc,
        sidecar_with("10.9.0.1", "default", "NETWORK", "net1"),
    )
    .await;
    ads.subscribe(TypeUrl::Endpoint, &[REVIEWS_CLUSTER]).await;
    let eds = ads.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(reviews_endpoints(&eds), 3, "the demo's three reviews");
    ads.ack(&eds, &[REVIEWS_CLUSTER]).await;

    // The demo's reviews (10.1.13.0/24, plaintext) are now on another network, with a
    // gateway: no gateway could route plaintext, so the proxy on net1 is sent none of them.
    let net2 = "networks:\n  net2:\n    endpoints: [{fromCidr: 10.1.13.0/24}]\n    \
                gateways: [{address: 192.0.2.10, port: 15443}]\n";
    write(dir.path(), "networks", net2);
    let eds = ads.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(reviews_endpoints(&eds), 0);
    ads.ack(&eds, &[REVIEWS_CLUSTER]).await;

    // A bad change: logged and shown with the file and field; the last good networks stay.
    write(
        dir.path(),
        "networks",
        "networks:\n  net2:\n    gateways: [{address: 192.0.2.10, port: 0}]\n",
    );
    let line = w
        .wait_log("the MeshNetworks error", |l| {
            l["level"] == "ERROR"
                && l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("MeshNetworks") && m.contains("port"))
        })
        .await;
    let message = line["message"].as_str().unwrap();
    assert!(message.contains(file.to_str().unwrap()), "{message}");
    let z = eventually("configz to show the error", || async {
        let z = w.json("/debug/configz").await;
        z["mesh_config"]["networks_error"].is_string().then_some(z)
    })
    .await;
    assert_eq!(z["mesh_config"]["networks_path"], file.to_str().unwrap());
    let mut fresh = Ads::connect(
        w.grpc,
        sidecar_with("10.9.0.1", "default", "NETWORK", "net1"),
    )
    .await;
    fresh.subscribe(TypeUrl::Endpoint, &[REVIEWS_CLUSTER]).await;
    assert_eq!(
        reviews_endpoints(&fresh.recv_type(TypeUrl::Endpoint).await),
        0
    );

    // Fixed: the error clears and the endpoints are the proxy's network's again.
    write(dir.path(), "networks", "networks: {}\n");
    let eds = ads.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(reviews_endpoints(&eds), 3);
    let z = w.json("/debug/configz").await;
    assert!(
        z["mesh_config"]["networks_error"].is_null(),
        "{}",
        z["mesh_config"]
    );
}
