//! Istio's bookinfo networking samples, as the test copies under `tests/it/bookinfo/`: every
//! one validates (but the mutual-TLS one, refused by design), every one loads into a running
//! server, and consistent sets route as Istio would route them.
//!
//! Several samples define objects with the same names (VirtualService `reviews` above all):
//! they are alternatives applied one at a time, so the tests load them one at a time too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use serde_json::Value;
use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::discovery::DiscoveryResponse;
use wayfinder::xds::pb::fault::{HttpFault, fault_abort};
use wayfinder::xds::pb::matcher::string_matcher::MatchPattern;
use wayfinder::xds::pb::route::{
    Route, RouteConfiguration, header_matcher::HeaderMatchSpecifier, route, route_action,
};
use wayfinder::xds::pb::types::fractional_percent::DenominatorType;

use crate::support::ads::{Ads, decode_all, names_of, sidecar};
use crate::support::binary::{Wayfinder, path};
use crate::support::eventually;
use crate::support::fixtures::write;

/// An object a sample defines: `(kind, namespace, name)`.
pub(crate) type Object = (&'static str, &'static str, &'static str);

/// Every sample, with the objects it defines.
pub(crate) const SAMPLES: [(&str, &[Object]); 22] = [
    (
        "bookinfo-gateway.yaml",
        &[
            ("Gateway", "default", "bookinfo-gateway"),
            ("VirtualService", "default", "bookinfo"),
        ],
    ),
    (
        "bookinfo-gateway2.yaml",
        &[
            ("Gateway", "default", "bookinfo-gateway2"),
            ("VirtualService", "default", "bookinfo2"),
        ],
    ),
    (
        "certmanager-gateway.yaml",
        &[
            ("Gateway", "istio-system", "cert-manager-gateway"),
            ("VirtualService", "istio-system", "cert-manager"),
        ],
    ),
    ("destination-rule-all.yaml", ALL_RULES),
    (MUTUAL, ALL_RULES),
    (
        "destination-rule-reviews.yaml",
        &[("DestinationRule", "default", "reviews")],
    ),
    (
        "egress-rule-google-apis.yaml",
        &[
            ("ServiceEntry", "default", "googleapis"),
            ("VirtualService", "default", "rewrite-port-for-googleapis"),
            ("DestinationRule", "default", "originate-tls-for-googleapis"),
        ],
    ),
    (
        "fault-injection-details-v1.yaml",
        &[
            ("VirtualService", "default", "details"),
            ("DestinationRule", "default", "details"),
        ],
    ),
    (
        "virtual-service-all-v1.yaml",
        &[
            ("VirtualService", "default", "productpage"),
            ("VirtualService", "default", "reviews"),
            ("VirtualService", "default", "ratings"),
            ("VirtualService", "default", "details"),
        ],
    ),
    ("virtual-service-details-v2.yaml", &[DETAILS]),
    ("virtual-service-ratings-db.yaml", &[REVIEWS, RATINGS]),
    ("virtual-service-ratings-mysql.yaml", &[REVIEWS, RATINGS]),
    ("virtual-service-ratings-mysql-vm.yaml", &[REVIEWS, RATINGS]),
    ("virtual-service-ratings-test-abort.yaml", &[RATINGS]),
    ("virtual-service-ratings-test-delay.yaml", &[RATINGS]),
    ("virtual-service-reviews-50-v3.yaml", &[REVIEWS]),
    ("virtual-service-reviews-80-20.yaml", &[REVIEWS]),
    ("virtual-service-reviews-90-10.yaml", &[REVIEWS]),
    ("virtual-service-reviews-jason-v2-v3.yaml", &[REVIEWS]),
    ("virtual-service-reviews-test-v2.yaml", &[REVIEWS]),
    ("virtual-service-reviews-v2-v3.yaml", &[REVIEWS]),
    ("virtual-service-reviews-v3.yaml", &[REVIEWS]),
];

/// The sample that turns on mesh mTLS (`ISTIO_MUTUAL`) for every bookinfo service.
pub(crate) const MUTUAL: &str = "destination-rule-all-mtls.yaml";

const ALL_RULES: &[Object] = &[
    ("DestinationRule", "default", "productpage"),
    ("DestinationRule", "default", "reviews"),
    ("DestinationRule", "default", "ratings"),
    ("DestinationRule", "default", "details"),
];
const REVIEWS: Object = ("VirtualService", "default", "reviews");
const RATINGS: Object = ("VirtualService", "default", "ratings");
const DETAILS: Object = ("VirtualService", "default", "details");

/// Kinds that feed the `Config` service registry rather than the configuration snapshot.
const REGISTRY_KINDS: [&str; 2] = ["ServiceEntry", "WorkloadEntry"];

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/bookinfo")
}

pub(crate) fn sample(name: &str) -> String {
    let file = samples_dir().join(name);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()))
}

fn fqdn(app: &str) -> String {
    format!("{app}.default.svc.cluster.local")
}

fn subset_cluster(subset: &str, app: &str) -> String {
    format!("outbound|9080|{subset}|{}", fqdn(app))
}

#[test]
fn the_sample_copies_are_all_here() {
    let mut on_disk: Vec<String> = std::fs::read_dir(samples_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = SAMPLES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

#[test]
fn every_sample_validates() {
    let mut failures = Vec::new();
    for (name, objects) in SAMPLES {
        let out = Command::new(path())
            .arg("validate")
            .arg(samples_dir().join(name))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report = format!(
            "{name}: exit {:?}\n{stdout}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        let checked = format!("checked {} object", objects.len());
        assert!(stdout.contains(&checked), "{checked}: {report}");
        if out.status.code() != Some(0) || !stdout.contains(" 0 errors") {
            failures.push(report);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `/debug/configz`'s `config-dir` source.
fn config_dir_source(z: &Value) -> &Value {
    z["sources"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["source"] == "config-dir"))
        .unwrap_or_else(|| panic!("no config-dir source in {z}"))
}

/// The `(kind, namespace, name)` of every object in `/debug/configz`.
fn configz_objects(z: &Value) -> BTreeSet<(String, String, String)> {
    z["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let field = |f: &str| o[f].as_str().unwrap_or_default().to_string();
            (field("kind"), field("namespace"), field("name"))
        })
        .collect()
}

/// The objects of `files` that the configuration snapshot holds (not ServiceEntries).
fn config_objects_of(files: &[&str]) -> BTreeSet<(String, String, String)> {
    files
        .iter()
        .flat_map(|f| {
            SAMPLES
                .iter()
                .find(|(n, _)| n == f)
                .unwrap_or_else(|| panic!("{f} is not a sample"))
                .1
        })
        .filter(|(kind, _, _)| !REGISTRY_KINDS.contains(kind))
        .map(|(k, ns, n)| (k.to_string(), ns.to_string(), n.to_string()))
        .collect()
}

/// Starts a server on the Mock bookinfo registry with `dir` as its configuration directory.
async fn start(dir: &Path) -> Wayfinder {
    let dir = dir.to_str().expect("a UTF-8 temporary path");
    let w = Wayfinder::start(&["--config-dir", dir, "--debounce-after", "10ms"]).await;
    w.ready().await;
    w
}

/// Waits until `/debug/configz` holds exactly `want`, each from a file named in `files`, or
/// the source reports an error; returns the page.
async fn wait_configz(
    w: &Wayfinder,
    want: &BTreeSet<(String, String, String)>,
    files: &[&str],
) -> Value {
    let what = format!("/debug/configz to show the objects of {files:?}");
    let z = eventually(&what, || async {
        let z = w.json("/debug/configz").await;
        let from_files = z["objects"].as_array().into_iter().flatten().all(|o| {
            let origin = o["origin"].as_str().unwrap_or_default();
            files.iter().any(|f| origin.contains(&format!("/{f}: ")))
        });
        let done = (configz_objects(&z) == *want && from_files)
            || !config_dir_source(&z)["last_error"].is_null();
        done.then_some(z)
    })
    .await;
    let source = config_dir_source(&z);
    assert_eq!(source["health"], "healthy", "{files:?}: {source}");
    assert!(source["last_error"].is_null(), "{files:?}: {source}");
    assert_eq!(source["objects"], want.len(), "{files:?}: {source}");
    z
}

/// The next response of type `t`, acknowledging (and skipping) any other type pushed first.
async fn next_of(ads: &mut Ads, t: TypeUrl) -> DiscoveryResponse {
    loop {
        let r = ads.recv().await;
        if r.type_url == t.as_str() {
            return r;
        }
        let names: &[&str] = if r.type_url == TypeUrl::Route.as_str() {
            &["9080"]
        } else {
            &[]
        };
        ads.ack(&r, names).await;
    }
}

/// The next RDS push for route configuration `9080`, acknowledged; returns the routes of the
/// `app` virtual host.
async fn next_routes(ads: &mut Ads, app: &str) -> Vec<Route> {
    let r = next_of(ads, TypeUrl::Route).await;
    ads.ack(&r, &["9080"]).await;
    routes_of(&r, app)
}

fn routes_of(r: &DiscoveryResponse, app: &str) -> Vec<Route> {
    let config = decode_all::<RouteConfiguration>(r)
        .remove("9080")
        .unwrap_or_else(|| panic!("no route configuration 9080 in {:?}", names_of(r)));
    let vhost = format!("{}:9080", fqdn(app));
    config
        .virtual_hosts
        .into_iter()
        .find(|v| v.name == vhost)
        .unwrap_or_else(|| panic!("no virtual host {vhost} in route configuration 9080"))
        .routes
}

/// Where a route sends requests: `(cluster, weight)`, weight 100 for a single cluster.
fn destinations(r: &Route) -> Vec<(String, u32)> {
    let Some(route::Action::Route(action)) = &r.action else {
        panic!("route {} does not forward: {:?}", r.name, r.action)
    };
    match &action.cluster_specifier {
        Some(route_action::ClusterSpecifier::Cluster(c)) => vec![(c.clone(), 100)],
        Some(route_action::ClusterSpecifier::WeightedClusters(w)) => w
            .clusters
            .iter()
            .map(|c| (c.name.clone(), c.weight.as_ref().map_or(0, |w| w.value)))
            .collect(),
        other => panic!("route {} has no cluster: {other:?}", r.name),
    }
}

/// A route's exact header matches, `(name, value)`.
fn exact_headers(r: &Route) -> Vec<(String, String)> {
    r.r#match
        .iter()
        .flat_map(|m| &m.headers)
        .map(|h| {
            let value = match &h.header_match_specifier {
                Some(HeaderMatchSpecifier::StringMatch(s)) => match &s.match_pattern {
                    Some(MatchPattern::Exact(v)) => v.clone(),
                    other => panic!("not an exact match on {}: {other:?}", h.name),
                },
                other => panic!("not a string match on {}: {other:?}", h.name),
            };
            (h.name.clone(), value)
        })
        .collect()
}

fn single(cluster: String) -> Vec<(String, u32)> {
    vec![(cluster, 100)]
}

#[tokio::test]
async fn bookinfo_routing_follows_the_virtual_service_samples() {
    let dir = tempfile::tempdir().unwrap();
    // The VirtualService samples take turns in one file, each replacing the last in one atomic
    // save, so each change is one state.
    const ROUTING: &str = "routing.yaml";
    let rules = "destination-rule-all.yaml";
    let gateway = "bookinfo-gateway.yaml";
    write(dir.path(), rules, &sample(rules));
    write(dir.path(), gateway, &sample(gateway));
    write(dir.path(), ROUTING, &sample("virtual-service-all-v1.yaml"));
    let w = start(dir.path()).await;

    let want = config_objects_of(&[rules, gateway, "virtual-service-all-v1.yaml"]);
    assert_eq!(want.len(), 10);
    wait_configz(&w, &want, &[rules, gateway, ROUTING]).await;
    // One object by name comes with its spec.
    let z = w
        .json("/debug/configz?kind=DestinationRule&namespace=default&name=reviews")
        .await;
    let reviews = &z["objects"][0];
    assert_eq!(reviews["spec"]["host"], "reviews", "{reviews}");
    assert_eq!(
        reviews["spec"]["subsets"].as_array().unwrap().len(),
        3,
        "{reviews}"
    );

    let mut ads = Ads::connect(w.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    let cds = ads.recv_type(TypeUrl::Cluster).await;
    let clusters: BTreeSet<String> = names_of(&cds).into_iter().collect();
    let subsets = [
        ("productpage", &["v1"][..]),
        ("reviews", &["v1", "v2", "v3"]),
        ("ratings", &["v1", "v2", "v2-mysql", "v2-mysql-vm"]),
        ("details", &["v1", "v2"]),
    ];
    for (app, versions) in subsets {
        for v in versions {
            let c = subset_cluster(v, app);
            assert!(clusters.contains(&c), "{c} missing from {clusters:?}");
        }
        let plain = format!("outbound|9080||{}", fqdn(app));
        assert!(clusters.contains(&plain), "{plain} missing");
    }
    ads.ack(&cds, &[]).await;

    // virtual-service-all-v1: every service to its v1 subset.
    ads.subscribe(TypeUrl::Route, &["9080"]).await;
    let rds = next_of(&mut ads, TypeUrl::Route).await;
    ads.ack(&rds, &["9080"]).await;
    for app in ["productpage", "reviews", "ratings", "details"] {
        let routes = routes_of(&rds, app);
        assert_eq!(routes.len(), 1, "{app}: {routes:?}");
        assert_eq!(destinations(&routes[0]), single(subset_cluster("v1", app)));
    }

    // virtual-service-reviews-80-20: reviews split 80/20 between v1 and v2; the other
    // VirtualServices are gone, so the others take the default route again.
    write(
        dir.path(),
        ROUTING,
        &sample("virtual-service-reviews-80-20.yaml"),
    );
    let routes = next_routes(&mut ads, "reviews").await;
    assert_eq!(routes.len(), 1, "{routes:?}");
    assert_eq!(
        destinations(&routes[0]),
        [
            (subset_cluster("v1", "reviews"), 80),
            (subset_cluster("v2", "reviews"), 20)
        ]
    );
    assert!(exact_headers(&routes[0]).is_empty());

    // virtual-service-reviews-jason-v2-v3: jason's requests to v2, everyone else's to v3.
    write(
        dir.path(),
        ROUTING,
        &sample("virtual-service-reviews-jason-v2-v3.yaml"),
    );
    let routes = next_routes(&mut ads, "reviews").await;
    assert_eq!(routes.len(), 2, "{routes:?}");
    assert_eq!(
        exact_headers(&routes[0]),
        [("end-user".to_string(), "jason".to_string())]
    );
    assert_eq!(
        destinations(&routes[0]),
        single(subset_cluster("v2", "reviews"))
    );
    assert!(exact_headers(&routes[1]).is_empty(), "{:?}", routes[1]);
    assert_eq!(
        destinations(&routes[1]),
        single(subset_cluster("v3", "reviews"))
    );

    // virtual-service-ratings-test-abort: jason's ratings requests fail with 500.
    write(
        dir.path(),
        ROUTING,
        &sample("virtual-service-ratings-test-abort.yaml"),
    );
    let r = next_of(&mut ads, TypeUrl::Route).await;
    ads.ack(&r, &["9080"]).await;
    let routes = routes_of(&r, "ratings");
    assert_eq!(routes.len(), 2, "{routes:?}");
    assert_eq!(
        exact_headers(&routes[0]),
        [("end-user".to_string(), "jason".to_string())]
    );
    assert_eq!(
        destinations(&routes[0]),
        single(subset_cluster("v1", "ratings"))
    );
    let fault = routes[0]
        .typed_per_filter_config
        .get("envoy.filters.http.fault")
        .unwrap_or_else(|| panic!("no fault configuration on {:?}", routes[0]));
    let fault = HttpFault::decode(fault.value.as_slice()).unwrap();
    let abort = fault.abort.expect("an abort");
    assert_eq!(
        abort.error_type,
        Some(fault_abort::ErrorType::HttpStatus(500))
    );
    let percentage = abort.percentage.expect("a percentage");
    assert_eq!(
        (percentage.numerator, percentage.denominator),
        (1_000_000, DenominatorType::Million as i32),
        "100 %"
    );
    assert!(fault.delay.is_none());
    assert!(
        routes[1].typed_per_filter_config.is_empty(),
        "{:?}",
        routes[1]
    );
    assert_eq!(
        destinations(&routes[1]),
        single(subset_cluster("v1", "ratings"))
    );
    // The reviews VirtualService went away with the last file: the default route again.
    let reviews = routes_of(&r, "reviews");
    assert_eq!(
        destinations(&reviews[0]),
        single(format!("outbound|9080||{}", fqdn("reviews")))
    );

    let z = w.json("/debug/configz").await;
    let source = config_dir_source(&z);
    assert_eq!(source["health"], "healthy", "{source}");
    assert!(source["last_error"].is_null(), "{source}");
}

#[tokio::test]
async fn every_sample_loads_into_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let w = start(dir.path()).await;
    let mut previous: Option<&str> = None;
    for (name, _) in SAMPLES.iter() {
        // One sample at a time, with an empty state between: an object whose content did not
        // change is not announced again, so it would keep the origin of the removed file.
        if let Some(p) = previous.take() {
            std::fs::remove_file(dir.path().join(p)).unwrap();
            wait_configz(&w, &BTreeSet::new(), &[]).await;
        }
        write(dir.path(), name, &sample(name));
        previous = Some(name);
        wait_configz(&w, &config_objects_of(&[name]), &[name]).await;
        if *name == "egress-rule-google-apis.yaml" {
            // Its ServiceEntry feeds the `Config` registry.
            let status = w.wait_health("Config", "healthy").await;
            assert!(status["last_error"].is_null(), "{status}");
            let z = w.json("/debug/registryz").await;
            let config = z["registries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["status"]["registry"] == "Config")
                .unwrap();
            assert!(
                config["services"]
                    .to_string()
                    .contains("www.googleapis.com"),
                "{config}"
            );
        }
    }

    assert_eq!(w.get("/ready").await.0, 200);
}
