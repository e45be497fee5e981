//! The binary's commands, flags, debug pages and refusals.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use wayfinder::xds::TypeUrl;

use crate::support::ads::{Ads, names_of, sidecar};
use crate::support::binary::{LOOPBACK, Wayfinder, get, path};

#[test]
fn version_prints_the_version() {
    let out = Command::new(path()).arg("version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("wayfinder {}", env!("CARGO_PKG_VERSION"))
    );
}

fn refused(args: &[&str]) -> String {
    let out = Command::new(path())
        .arg("discovery")
        .args(args)
        .args(LOOPBACK)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} should be refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_registries_and_paths_are_refused_at_start_with_the_reason() {
    let err = refused(&["--registries", "Mock,Zookeeper"]);
    assert!(
        err.contains("unknown registry \"Zookeeper\"") && err.contains("Mock, File"),
        "{err}"
    );
    let err = refused(&[
        "--registries",
        "File",
        "--file-registry",
        "/nonexistent/entries.yaml",
    ]);
    assert!(err.contains("/nonexistent/entries.yaml"), "{err}");
    let err = refused(&["--registries", "File"]);
    assert!(err.contains("--file-registry"), "{err}");
    let err = refused(&["--registries", "mock,MOCK"]);
    assert!(err.contains("twice"), "{err}");
    let err = refused(&["--debounce-after", "soon"]);
    assert!(err.contains("\"soon\" is not a duration"), "{err}");
}

/// pilot-discovery's flags that wayfinder does not take are refused by name, with what to use
/// instead, not with clap's guess at a flag spelled alike.
#[test]
fn pilot_discovery_flags_not_supported_are_refused_with_what_to_use_instead() {
    let err = refused(&["--plugins", "ext_authz"]);
    assert!(
        err.contains("pilot-discovery's `--plugins` is not supported: there are no"),
        "{err}"
    );
    assert!(!err.contains("tip:"), "no guessed spelling: {err}");
    let err = refused(&["--cfConfig=/etc/cf.yaml"]);
    assert!(
        err.contains("`--cfConfig` is not supported") && err.contains("--registries"),
        "{err}"
    );
    let err = refused(&["--caCertFile", "ca.pem"]);
    assert!(err.contains("--cacerts-dir"), "{err}");
}

/// A registry whose cargo feature this build lacks is refused by name, with the feature to
/// rebuild with, and so are the Kubernetes config source and the Kubernetes flags that can only
/// have been given on purpose. Runs in `cargo test --no-default-features` (`scripts/test`).
#[test]
#[cfg(not(all(feature = "kubernetes", feature = "consul", feature = "eureka")))]
fn registries_left_out_of_the_build_are_refused_naming_their_feature() {
    let registries = [
        ("Kubernetes", cfg!(feature = "kubernetes")),
        ("Consul", cfg!(feature = "consul")),
        ("Eureka", cfg!(feature = "eureka")),
    ];
    for (name, _) in registries.iter().filter(|(_, compiled)| !compiled) {
        let err = refused(&["--registries", &format!("Mock,{name}")]);
        let feature = name.to_lowercase();
        let want = format!(
            "registry {name} is not compiled into this build; rebuild with the cargo feature \
             `{feature}`"
        );
        assert!(err.contains(&want), "{err}");
    }
    if !cfg!(feature = "kubernetes") {
        let err = refused(&["--registries", "Kubernetes,Consul"]);
        assert!(err.contains("registry Kubernetes is not compiled"), "{err}");
        for (args, what) in [
            (
                ["--config-source", "k8s"],
                "config source (--config-source k8s)",
            ),
            (["--kubeconfig", "east=/nonexistent"], "flag --kubeconfig"),
            (["-a", "default"], "flag --app-namespace"),
        ] {
            let err = refused(&args);
            let want = format!(
                "{what} is not compiled into this build; rebuild with the cargo feature \
                 `kubernetes`"
            );
            assert!(err.contains(&want), "{args:?}: {err}");
        }
    }
}

/// Every build has every flag, so that scripts and help read the same whichever registries
/// it was built with.
#[test]
fn every_build_has_every_registry_flag() {
    let out = Command::new(path())
        .args(["discovery", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--registries",
        "--consul-addr",
        "--consul-datacenters",
        "--consul-hostname-template",
        "--eureka-url",
        "--kubeconfig",
        "--cluster-id",
        "--config-source",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    assert!(
        help.contains("[default: {service}.service.consul]"),
        "{help}"
    );
    assert!(help.contains("[default: Kubernetes]"), "{help}");
}

#[test]
fn text_logs_name_each_bound_address_on_one_line() {
    let mut child = Command::new(path())
        .arg("discovery")
        .args(LOOPBACK)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut found = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.split("listening listener=").nth(1) {
            let (listener, address) = rest
                .split_once(" address=")
                .expect("listener=NAME address=ADDR");
            let addr: std::net::SocketAddr = address.trim().parse().expect("an actual address");
            assert_ne!(addr.port(), 0);
            found.push(listener.to_string());
        }
        if found.len() == 3 {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(found, ["grpc", "http", "monitoring"]);
}

#[tokio::test]
async fn the_demo_registry_serves_bookinfo_with_debug_pages_and_metrics() {
    let w = Wayfinder::start(&[]).await;
    w.ready().await;
    let z = w.json("/debug/registryz").await;
    let mock = &z["registries"][0];
    assert_eq!(mock["status"]["registry"], "Mock");
    assert_eq!(mock["status"]["health"], "healthy");
    assert_eq!(mock["services"].as_array().unwrap().len(), 4);
    assert_eq!(
        w.endpoints("reviews.default.svc.cluster.local").await.len(),
        3
    );

    let node = sidecar("10.1.13.1", "default");
    let id = node.id.clone();
    let mut ads = Ads::connect(w.grpc, node).await;
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    let clusters = names_of(&ads.recv_type(TypeUrl::Cluster).await);
    for app in ["productpage", "details", "ratings", "reviews"] {
        assert!(
            clusters.contains(&format!("outbound|9080||{app}.default.svc.cluster.local")),
            "{clusters:?}"
        );
    }
    assert!(
        clusters.contains(&"inbound|9080||".to_string()),
        "reviews v1 runs at 10.1.13.1: {clusters:?}"
    );

    let syncz = w.json("/debug/syncz").await;
    assert_eq!(syncz[0]["proxy"], id);
    let status = w.json("/debug/push_status").await;
    let cds = status["pushes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "cds")
        .cloned()
        .unwrap_or_else(|| panic!("no clusters push in {status}"));
    assert_eq!(
        (&cds["proxy"], &cds["variant"]),
        (&id.clone().into(), &"sotw".into()),
        "{status}"
    );
    assert_eq!(cds["resources"], clusters.len(), "{status}");
    assert!(
        status["totals"]["cds"]["bytes"].as_u64().unwrap() > 0,
        "{status}"
    );
    assert!(syncz[0]["types"]["cds"]["nonce"].is_string(), "{syncz}");
    let dump = w.json(&format!("/debug/config_dump?proxyID={id}")).await;
    assert_eq!(dump["clusters"].as_array().unwrap().len(), clusters.len());
    assert_eq!(w.get("/debug/config_dump?proxyID=nobody").await.0, 404);
    assert_eq!(w.get("/debug/config_dump").await.0, 400);

    let out = Command::new(path())
        .args(["request", "/debug/syncz", "--addr", &w.http.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(&id));

    let (status, metrics) = get(w.monitoring, "/metrics").await;
    assert_eq!(status, 200);
    for line in [
        "pilot_xds 1",
        "pilot_xds_pushes{type=\"cds\"} 1",
        "wayfinder_registry_synced{registry=\"Mock\"} 1",
        "pilot_services 4",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    let (status, version) = get(w.monitoring, "/version").await;
    assert_eq!(status, 200);
    assert!(version.contains(env!("CARGO_PKG_VERSION")));
}
