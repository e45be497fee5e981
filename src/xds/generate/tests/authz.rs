//! AuthorizationPolicy where proxies enforce it: the RBAC filters of the policies that select
//! a sidecar in its inbound chains (HTTP before the router, network before `tcp_proxy`, the
//! catch-all included), and a gateway's in its listeners.

use prost::Message;
use wayfinder_config::ConfigSpec;

use super::mesh_tls::{get, proxy, snapshot};
use crate::xds::TypeUrl;
use crate::xds::pb::hcm::{HttpConnectionManager, http_filter};
use crate::xds::pb::http_rbac::Rbac as HttpRbac;
use crate::xds::pb::listener::{FilterChain, Listener, filter};
use crate::xds::pb::network_rbac::Rbac as NetworkRbac;
use crate::xds::proxy::{Proxy, ProxyKind};

fn policy(yaml: &str) -> ConfigSpec {
    ConfigSpec::AuthorizationPolicy(Box::new(serde_saphyr::from_str(yaml).unwrap()))
}

/// The policies: a DENY of DELETE for the namespace, an ALLOW of `sleep` for the reviews
/// workload, an AUDIT of everything from the root namespace; one selecting another workload
/// and one attached by `targetRefs` apply to neither.
fn policies() -> Vec<(&'static str, ConfigSpec)> {
    vec![
        (
            "deny-delete",
            policy("{action: DENY, rules: [{to: [{operation: {methods: [DELETE]}}]}]}"),
        ),
        (
            "allow-sleep",
            policy(
                "{selector: {matchLabels: {app: reviews}}, rules: [{from: [{source: {principals: \
                 [cluster.local/ns/default/sa/sleep]}}]}]}",
            ),
        ),
        (
            "istio-system/audit-all",
            policy("{action: AUDIT, rules: [{}]}"),
        ),
        (
            "other-workload",
            policy("{selector: {matchLabels: {app: ratings}}, action: DENY, rules: [{}]}"),
        ),
        (
            "attached",
            policy("{targetRefs: [{kind: Service, name: reviews}], action: DENY, rules: [{}]}"),
        ),
    ]
}

fn chain<'a>(listener: &'a Listener, name: &str) -> &'a FilterChain {
    listener
        .filter_chains
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no chain {name}"))
}

/// The RBAC filters' actions and policy names, in order, of an HTTP chain's manager.
fn http_rbac(chain: &FilterChain) -> Vec<(i32, Vec<String>)> {
    let Some(filter::ConfigType::TypedConfig(any)) = &chain.filters[0].config_type else {
        panic!("no typed config");
    };
    let hcm = HttpConnectionManager::decode(any.value.as_slice()).unwrap();
    let names: Vec<&str> = hcm.http_filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names.last(),
        Some(&"envoy.filters.http.router"),
        "{names:?}"
    );
    hcm.http_filters
        .iter()
        .filter(|f| f.name == "envoy.filters.http.rbac")
        .map(|f| {
            let Some(http_filter::ConfigType::TypedConfig(any)) = &f.config_type else {
                panic!("no typed config");
            };
            let rules = HttpRbac::decode(any.value.as_slice())
                .unwrap()
                .rules
                .unwrap();
            let mut keys: Vec<String> = rules.policies.into_keys().collect();
            keys.sort();
            (rules.action, keys)
        })
        .collect()
}

/// The network RBAC filters' actions before a chain's `tcp_proxy`.
fn network_rbac(chain: &FilterChain) -> Vec<i32> {
    let names: Vec<&str> = chain.filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names.last(),
        Some(&"envoy.filters.network.tcp_proxy"),
        "{names:?}"
    );
    chain
        .filters
        .iter()
        .filter(|f| f.name == "envoy.filters.network.rbac")
        .map(|f| {
            let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
                panic!("no typed config");
            };
            let rbac = NetworkRbac::decode(any.value.as_slice()).unwrap();
            assert_eq!(rbac.stat_prefix, "tcp.");
            rbac.rules.unwrap().action
        })
        .collect()
}

const LOG: i32 = 2;
const DENY: i32 = 1;
const ALLOW: i32 = 0;

#[test]
fn a_sidecar_checks_requests_and_connections_with_the_policies_that_select_it() {
    let config = policies();
    let snap = snapshot(&config);
    let sidecar = proxy(true);
    let inbound: Listener = get(&snap, &sidecar, TypeUrl::Listener, "virtualInbound");
    // The HTTP port: AUDIT, DENY, ALLOW, then the router.
    assert_eq!(
        http_rbac(chain(&inbound, "inbound|9080||-mtls")),
        [
            (
                LOG,
                vec!["ns[istio-system]-policy[audit-all]-rule[0]".to_string()]
            ),
            (
                DENY,
                vec!["ns[default]-policy[deny-delete]-rule[0]".to_string()]
            ),
            (
                ALLOW,
                vec!["ns[default]-policy[allow-sleep]-rule[0]".to_string()]
            ),
        ]
    );
    // The TCP port, TLS passed through, and the catch-all: the network filters.
    for name in [
        "inbound|5432||-mtls",
        "inbound|9080||-tls",
        "virtualInbound-catchall-tcp",
    ] {
        assert_eq!(
            network_rbac(chain(&inbound, name)),
            [LOG, DENY, ALLOW],
            "{name}"
        );
    }
    // Another workload of the namespace has the namespace's policy only; one in another
    // namespace the root namespace's.
    let other = Proxy {
        labels: [("app".to_string(), "ratings-not".to_string())].into(),
        ..proxy(false)
    };
    let inbound: Listener = get(&snap, &other, TypeUrl::Listener, "virtualInbound");
    assert_eq!(network_rbac(chain(&inbound, "inbound|5432||")), [LOG, DENY]);
    let elsewhere = Proxy {
        namespace: "prod".into(),
        ..other
    };
    let inbound: Listener = get(&snap, &elsewhere, TypeUrl::Listener, "virtualInbound");
    assert_eq!(network_rbac(chain(&inbound, "inbound|5432||")), [LOG]);
}

#[test]
fn a_gateway_checks_requests_with_the_policies_that_select_it() {
    let mut config = policies();
    config.push((
        "ingress",
        ConfigSpec::Gateway(
            serde_saphyr::from_str(
                "{selector: {app: reviews}, servers: [{port: {number: 8080, name: http, \
                 protocol: HTTP}, hosts: ['*']}, {port: {number: 9000, name: tcp, protocol: \
                 TCP}, hosts: ['*']}]}",
            )
            .unwrap(),
        ),
    ));
    let snap = snapshot(&config);
    let gateway = Proxy {
        kind: ProxyKind::Router,
        ..proxy(true)
    };
    let listener: Listener = get(&snap, &gateway, TypeUrl::Listener, "0.0.0.0_8080");
    let rbac = http_rbac(&listener.filter_chains[0]);
    let actions: Vec<i32> = rbac.iter().map(|(a, _)| *a).collect();
    assert_eq!(actions, [LOG, DENY, ALLOW]);
}
