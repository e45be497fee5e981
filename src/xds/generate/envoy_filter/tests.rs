//! EnvoyFilter patches on what a sidecar and a gateway are generated: each operation where
//! Istio applies it, the filters' scope and order, and failures that leave resources as they
//! were.

use std::collections::BTreeSet;
use std::sync::Arc;

use prost::Message;
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec};
use wayfinder_registry::{Endpoint, Protocol, Registration, RegistryId, Service};

use crate::aggregate::snapshot_with_config;
use crate::xds::fixtures::{DOMAIN, sidecar};
use crate::xds::pb::cluster::Cluster;
use crate::xds::pb::core::Node;
use crate::xds::pb::hcm::HttpConnectionManager;
use crate::xds::pb::listener::Listener;
use crate::xds::pb::route::RouteConfiguration;
use crate::xds::proxy::Proxy;
use crate::xds::{TypeUrl, XdsSnapshot};

const REVIEWS: &str = "outbound|9080||reviews.default.svc.cluster.local";

/// `reviews` (HTTP 9080) with an endpoint at the sidecar's own address (10.0.0.1), and the
/// EnvoyFilters of `filters`, named `NAME` (in `default`) or `NAMESPACE/NAME`.
fn snapshot(filters: &[(&str, &str)]) -> XdsSnapshot {
    let mut reviews = Service::new("reviews.default.svc.cluster.local", "default").with_port(
        "http",
        9080,
        Protocol::Http,
    );
    reviews.addresses = vec![[10, 96, 0, 1].into()];
    let registrations = vec![Registration::new(
        reviews,
        vec![Endpoint::new("10.0.0.1").with_label("app", "reviews")],
    )];
    let objects = filters
        .iter()
        .map(|(name, yaml)| {
            let (namespace, name) = name.split_once('/').unwrap_or(("default", name));
            ConfigObject {
                meta: ConfigMeta {
                    name: name.into(),
                    namespace: namespace.into(),
                    ..Default::default()
                },
                spec: ConfigSpec::EnvoyFilter(Box::new(serde_saphyr::from_str(yaml).unwrap())),
            }
        })
        .collect();
    let model =
        snapshot_with_config(vec![(RegistryId::new("Mock"), registrations)], objects).unwrap();
    assert_eq!(
        model.config.objects.len(),
        filters.len(),
        "every filter is valid"
    );
    XdsSnapshot::new(Arc::new(model), DOMAIN)
}

fn gateway() -> Proxy {
    let node = Node {
        id: "router~10.0.0.9~gw.istio-system~istio-system.svc.cluster.local".into(),
        ..Default::default()
    };
    let mut proxy = Proxy::from_node(&node, DOMAIN).unwrap();
    proxy.labels.insert("istio".into(), "ingressgateway".into());
    proxy
}

fn decode<M: Message + Default>(
    s: &XdsSnapshot,
    proxy: &Proxy,
    t: TypeUrl,
    name: &str,
) -> Option<M> {
    let resources = s.resources(proxy, t, &BTreeSet::new());
    let r = resources.get(name)?;
    Some(M::decode(r.any().value.as_slice()).unwrap())
}

fn names(s: &XdsSnapshot, proxy: &Proxy, t: TypeUrl) -> Vec<String> {
    s.resources(proxy, t, &BTreeSet::new())
        .iter()
        .map(|r| r.name.to_string())
        .collect()
}

/// The HTTP filter names of the HTTP connection manager of `listener`'s chains whose
/// destination port is `port` (any port: 0), in order.
fn http_filters(listener: &Listener, port: u32) -> Vec<Vec<String>> {
    listener
        .filter_chains
        .iter()
        .filter(|fc| {
            port == 0
                || fc
                    .filter_chain_match
                    .as_ref()
                    .and_then(|m| m.destination_port)
                    == Some(crate::xds::pb::protobuf::UInt32Value { value: port })
        })
        .flat_map(|fc| &fc.filters)
        .filter(|f| f.name == "envoy.filters.network.http_connection_manager")
        .map(|f| {
            let Some(crate::xds::pb::listener::filter::ConfigType::TypedConfig(any)) =
                &f.config_type
            else {
                panic!("an HCM with a typed config")
            };
            let hcm = HttpConnectionManager::decode(any.value.as_slice()).unwrap();
            hcm.http_filters.into_iter().map(|f| f.name).collect()
        })
        .collect()
}

const LUA_BEFORE_ROUTER: &str = r#"
configPatches:
- applyTo: HTTP_FILTER
  match:
    context: SIDECAR_OUTBOUND
    listener:
      filterChain:
        filter:
          name: envoy.filters.network.http_connection_manager
          subFilter:
            name: envoy.filters.http.router
  patch:
    operation: INSERT_BEFORE
    value:
      name: envoy.filters.http.lua
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
        default_source_code:
          inline_string: "function envoy_on_response(h) h:headers():add('x-lua', 'yes') end"
"#;

#[test]
fn an_http_filter_inserted_before_the_router_on_the_outbound_side_only() {
    let s = snapshot(&[("lua", LUA_BEFORE_ROUTER)]);
    let proxy = sidecar();
    let outbound: Listener = decode(&s, &proxy, TypeUrl::Listener, "0.0.0.0_9080").unwrap();
    let chains = http_filters(&outbound, 0);
    assert!(!chains.is_empty(), "the outbound listener has HTTP chains");
    for filters in chains {
        let at = filters.iter().position(|f| f == "envoy.filters.http.lua");
        let router = filters
            .iter()
            .position(|f| f == "envoy.filters.http.router");
        assert!(at.is_some() && at.map(|i| i + 1) == router, "{filters:?}");
    }
    let inbound: Listener = decode(&s, &proxy, TypeUrl::Listener, "virtualInbound").unwrap();
    let all = http_filters(&inbound, 0);
    assert!(!all.is_empty(), "the inbound side has HTTP chains");
    assert!(
        all.iter().flatten().all(|f| f != "envoy.filters.http.lua"),
        "{all:?}"
    );
    assert!(
        s.envoy_filter_failures().is_empty(),
        "{:?}",
        s.envoy_filter_failures()
    );
}

#[test]
fn filters_apply_by_selector_in_their_namespace_and_from_the_root_namespace_to_all() {
    let selected = LUA_BEFORE_ROUTER.replace(
        "configPatches:",
        "workloadSelector:\n  labels:\n    app: other\nconfigPatches:",
    );
    let proxy = sidecar();
    let lua_in = |s: &XdsSnapshot| {
        let l: Listener = decode(s, &proxy, TypeUrl::Listener, "0.0.0.0_9080").unwrap();
        http_filters(&l, 0)
            .iter()
            .flatten()
            .any(|f| f == "envoy.filters.http.lua")
    };
    assert!(
        !lua_in(&snapshot(&[("lua", &selected)])),
        "another workload's"
    );
    assert!(
        !lua_in(&snapshot(&[("other/lua", LUA_BEFORE_ROUTER)])),
        "another namespace's"
    );
    assert!(
        lua_in(&snapshot(&[("istio-system/lua", LUA_BEFORE_ROUTER)])),
        "the root's"
    );
    let mut labelled = sidecar();
    labelled.labels.insert("app".into(), "other".into());
    let s = snapshot(&[("lua", &selected)]);
    let l: Listener = decode(&s, &labelled, TypeUrl::Listener, "0.0.0.0_9080").unwrap();
    assert!(
        http_filters(&l, 0)
            .iter()
            .flatten()
            .any(|f| f == "envoy.filters.http.lua")
    );
}

#[test]
fn clusters_merge_by_service_and_are_added_and_removed_and_durations_are_replaced() {
    let s = snapshot(&[(
        "clusters",
        r#"
configPatches:
- applyTo: CLUSTER
  match:
    context: SIDECAR_OUTBOUND
    cluster:
      service: reviews.default.svc.cluster.local
      portNumber: 9080
  patch:
    operation: MERGE
    value:
      connect_timeout: 7s
      per_connection_buffer_limit_bytes: 1024
- applyTo: CLUSTER
  patch:
    operation: ADD
    value:
      name: rate_limit_cluster
      type: STRICT_DNS
      connect_timeout: 10s
      load_assignment:
        cluster_name: rate_limit_cluster
        endpoints:
        - lb_endpoints:
          - endpoint:
              address:
                socket_address: {address: ratelimit.default.svc.cluster.local, port_value: 8081}
- applyTo: CLUSTER
  match:
    cluster:
      name: BlackHoleCluster
  patch:
    operation: REMOVE
"#,
    )]);
    let proxy = sidecar();
    let reviews: Cluster = decode(&s, &proxy, TypeUrl::Cluster, REVIEWS).unwrap();
    let timeout = reviews.connect_timeout.unwrap();
    assert_eq!((timeout.seconds, timeout.nanos), (7, 0));
    assert_eq!(
        reviews.per_connection_buffer_limit_bytes.map(|v| v.value),
        Some(1024)
    );
    let all = names(&s, &proxy, TypeUrl::Cluster);
    assert!(all.iter().any(|n| n == "rate_limit_cluster"), "{all:?}");
    assert!(!all.iter().any(|n| n == "BlackHoleCluster"), "{all:?}");
    assert!(all.iter().any(|n| n == "PassthroughCluster"), "{all:?}");
    let added: Cluster = decode(&s, &proxy, TypeUrl::Cluster, "rate_limit_cluster").unwrap();
    assert_eq!(added.connect_timeout.unwrap().seconds, 10);
}

#[test]
fn istio_s_rate_limit_sample_patches_the_ingress_gateway_and_nothing_else() {
    let sample = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/istio/corpus/other/bookinfo_policy_productpage_envoy_ratelimit.yaml"
    ))
    .unwrap();
    let specs: Vec<&str> = sample.split("\n---").collect();
    let spec = |doc: &str| {
        let v: serde_json::Value = serde_saphyr::from_str(doc).unwrap();
        serde_saphyr::to_string(&v["spec"]).unwrap()
    };
    let (a, b) = (spec(specs[0]), spec(specs[1]));
    let s = snapshot(&[
        ("istio-system/filter-ratelimit", &a),
        ("istio-system/filter-ratelimit-svc", &b),
    ]);
    let gw = gateway();
    // The gateway's clusters gain the rate limit service's (its `service` names a host the
    // mesh does not have: the ADD stands on its own).
    assert!(
        names(&s, &gw, TypeUrl::Cluster)
            .iter()
            .any(|n| n == "rate_limit_cluster")
    );
    // A sidecar's do not: the filters select the gateway.
    assert!(
        !names(&s, &sidecar(), TypeUrl::Cluster)
            .iter()
            .any(|n| n == "rate_limit_cluster")
    );
    assert!(
        s.envoy_filter_failures().is_empty(),
        "{:?}",
        s.envoy_filter_failures()
    );
}

#[test]
fn route_configurations_virtual_hosts_and_routes_are_patched() {
    let s = snapshot(&[(
        "routes",
        r#"
configPatches:
- applyTo: ROUTE_CONFIGURATION
  match:
    context: SIDECAR_OUTBOUND
    routeConfiguration:
      portNumber: 9080
  patch:
    operation: MERGE
    value:
      request_headers_to_add:
      - header: {key: x-patched, value: "yes"}
- applyTo: VIRTUAL_HOST
  match:
    context: SIDECAR_OUTBOUND
  patch:
    operation: ADD
    value:
      name: added
      domains: ["added.example.com"]
      routes:
      - match: {prefix: "/"}
        direct_response: {status: 204}
- applyTo: HTTP_ROUTE
  match:
    context: SIDECAR_OUTBOUND
    routeConfiguration:
      vhost:
        domainName: reviews.default.svc.cluster.local
  patch:
    operation: INSERT_FIRST
    value:
      name: first
      match: {prefix: "/first"}
      direct_response: {status: 200}
"#,
    )]);
    let rc: RouteConfiguration = decode(&s, &sidecar(), TypeUrl::Route, "9080").unwrap();
    assert!(
        rc.request_headers_to_add
            .iter()
            .any(|h| h.header.as_ref().unwrap().key == "x-patched")
    );
    let route_names = |domain: &str| -> Vec<String> {
        let vh = rc
            .virtual_hosts
            .iter()
            .find(|v| v.domains.iter().any(|d| d == domain));
        vh.expect(domain)
            .routes
            .iter()
            .map(|r| r.name.clone())
            .collect()
    };
    let reviews = route_names("reviews.default.svc.cluster.local");
    assert_eq!(
        reviews.first().map(String::as_str),
        Some("first"),
        "{reviews:?}"
    );
    assert!(
        reviews.len() > 1,
        "inserted before the generated routes: {reviews:?}"
    );
    // As Istio, a host the patches add is added after the routes were patched.
    assert_eq!(route_names("added.example.com"), [""]);
}

#[test]
fn a_patch_the_server_cannot_read_is_reported_and_left_out() {
    // A valid RE2 pattern (validation accepts it) with a Unicode class, which the server's
    // pattern engine does not have.
    let unreadable = r#"
configPatches:
- applyTo: CLUSTER
  match:
    proxy:
      proxyVersion: '^\p{N}'
  patch:
    operation: MERGE
    value:
      connect_timeout: 3s
- applyTo: CLUSTER
  match:
    cluster:
      service: reviews.default.svc.cluster.local
  patch:
    operation: MERGE
    value:
      per_connection_buffer_limit_bytes: 2048
"#;
    let s = snapshot(&[("unreadable", unreadable)]);
    let reviews: Cluster = decode(&s, &sidecar(), TypeUrl::Cluster, REVIEWS).unwrap();
    let limit = reviews.per_connection_buffer_limit_bytes.map(|v| v.value);
    assert_eq!(limit, Some(2048), "the other patch applies");
    assert_ne!(reviews.connect_timeout.map(|d| d.seconds), Some(3));
    let failures = s.envoy_filter_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(&*failures[0].key.name, "unreadable");
    let message = &failures[0].message;
    assert!(
        message.starts_with("configPatches[0]: proxyVersion:"),
        "{message}"
    );
}

/// A Lua config merged into the router's: other types, which cannot merge.
const WRONG: &str = r#"
configPatches:
- applyTo: HTTP_FILTER
  match:
    context: SIDECAR_OUTBOUND
    listener:
      filterChain:
        filter:
          name: envoy.filters.network.http_connection_manager
          subFilter:
            name: envoy.filters.http.router
  patch:
    operation: MERGE
    value:
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
        default_source_code: {inline_string: "x"}
"#;

#[test]
fn a_patch_that_fails_where_it_applies_is_left_out_and_the_others_apply() {
    let wrong = snapshot(&[("wrong-type", WRONG)]);
    let proxy = sidecar();
    let none = BTreeSet::new();
    let versions = |s: &XdsSnapshot| -> Vec<_> {
        let r = s.resources(&proxy, TypeUrl::Listener, &none);
        r.iter().map(|r| (r.name.clone(), r.version)).collect()
    };
    assert_eq!(versions(&wrong), versions(&snapshot(&[])), "as generated");
    let failures = wrong.envoy_filter_failures();
    assert!(!failures.is_empty());
    assert!(
        failures.iter().all(|f| f.message.contains("cannot merge")),
        "{failures:?}"
    );
    // With the Lua insert beside it, the listeners are those of the insert alone.
    let both = snapshot(&[("lua", LUA_BEFORE_ROUTER), ("wrong-type", WRONG)]);
    assert_eq!(
        versions(&both),
        versions(&snapshot(&[("lua", LUA_BEFORE_ROUTER)]))
    );
}

#[test]
fn the_same_patches_on_the_same_layers_are_made_once_per_snapshot() {
    let s = snapshot(&[("lua", LUA_BEFORE_ROUTER)]);
    let none = BTreeSet::new();
    let a = s.resources(&sidecar(), TypeUrl::Listener, &none);
    let b = s.resources(&sidecar(), TypeUrl::Listener, &none);
    let lua = "0.0.0.0_9080";
    assert!(Arc::ptr_eq(a.get(lua).unwrap(), b.get(lua).unwrap()));
}
