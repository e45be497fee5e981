//! EnvoyFilter: Istio's sample, each of `ValidateEnvoyFilter`'s rules with its field, and
//! patch values read as the Envoy messages they name.

use super::{object, validate};
use crate::ConfigSpec;

/// Every problem but the warning every EnvoyFilter gets.
fn problems(yaml: &str) -> Vec<String> {
    let object = object(yaml, |ef| ConfigSpec::EnvoyFilter(Box::new(ef)));
    validate(&object)
        .iter()
        .map(ToString::to_string)
        .filter(|p| !p.contains("internal implementation details"))
        .collect()
}

/// A patch of `apply_to` with `rest` (YAML at the patch's indentation).
fn patch(apply_to: &str, rest: &str) -> String {
    format!("configPatches:\n- applyTo: {apply_to}\n{rest}")
}

#[test]
fn istio_s_rate_limit_sample_is_valid() {
    let http_filter = patch(
        "HTTP_FILTER",
        "  match:\n    context: GATEWAY\n    listener:\n      filterChain:\n        filter:\n          \
         name: envoy.filters.network.http_connection_manager\n          \
         subFilter: {name: envoy.filters.http.router}\n  patch:\n    operation: INSERT_BEFORE\n    \
         value:\n      name: envoy.ratelimit\n      typed_config:\n        \
         '@type': type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit\n        \
         domain: productpage-ratelimit\n        failure_mode_deny: true\n        timeout: 10s\n",
    );
    assert_eq!(problems(&http_filter), Vec::<String>::new());
}

#[test]
fn each_rule_names_its_field() {
    let cases = [
        (
            "configPatches:\n- patch: {operation: MERGE, value: {}}\n".to_string(),
            "error: spec.configPatches[0].applyTo: missing applyTo",
        ),
        (
            patch("CLUSTER", ""),
            "error: spec.configPatches[0].patch: missing patch",
        ),
        (
            patch("CLUSTER", "  patch: {value: {}}\n"),
            "error: spec.configPatches[0].patch.operation: missing patch operation",
        ),
        (
            patch("CLUSTER", "  patch: {operation: MERGE}\n"),
            "error: spec.configPatches[0].patch.value: missing patch value for non-remove operation",
        ),
        (
            patch(
                "NETWORK_FILTER",
                "  match: {listener: {filterChain: {filter: {name: envoy.filters.network.tcp_proxy, \
                 subFilter: {name: x}}}}}\n  patch: {operation: REMOVE}\n",
            ),
            "error: spec.configPatches[0].match.listener.filterChain.filter.subFilter: subfilter \
             match can be used with applyTo HTTP_FILTER only",
        ),
        (
            patch(
                "HTTP_FILTER",
                "  match: {listener: {filterChain: {filter: {name: envoy.filters.network.tcp_proxy, \
                 subFilter: {name: x}}}}}\n  patch: {operation: REMOVE}\n",
            ),
            "error: spec.configPatches[0].match.listener.filterChain.filter.subFilter: subfilter \
             match requires filter match with envoy.filters.network.http_connection_manager",
        ),
        (
            patch(
                "CLUSTER",
                "  match: {listener: {portNumber: 80}}\n  patch: {operation: REMOVE}\n",
            ),
            "error: spec.configPatches[0].match: applyTo for cluster class objects cannot have \
             non cluster match",
        ),
        (
            patch(
                "VIRTUAL_HOST",
                "  match: {cluster: {service: a}}\n  patch: {operation: REMOVE}\n",
            ),
            "error: spec.configPatches[0].match: applyTo for http route class objects cannot \
             have non route configuration match",
        ),
        (
            patch(
                "CLUSTER",
                "  match: {proxy: {proxyVersion: '^1\\.(2'}}\n  patch: {operation: REMOVE}\n",
            ),
            "error: spec.configPatches[0].match.proxy.proxyVersion: invalid regex for proxy version",
        ),
    ];
    for (yaml, want) in cases {
        let got = problems(&yaml);
        assert!(
            got.iter().any(|p| p.starts_with(want)),
            "{yaml}\nwant {want}\ngot {got:?}"
        );
    }
}

#[test]
fn values_are_read_as_the_message_their_kind_names() {
    let value = |v: &str| {
        patch(
            "CLUSTER",
            &format!("  patch:\n    operation: MERGE\n    value: {v}\n"),
        )
    };
    assert_eq!(
        problems(&value("{connect_timeout: 2s, lb_policy: RING_HASH}")),
        Vec::<String>::new()
    );
    let wrong = problems(&value("{connect_timeout: soon}"));
    assert!(
        wrong.len() == 1
            && wrong[0].starts_with(
                "error: spec.configPatches[0].patch.value: not a envoy.config.cluster.v3.Cluster"
            ),
        "{wrong:?}"
    );
    let unknown_type = problems(&patch(
        "HTTP_FILTER",
        "  patch:\n    operation: ADD\n    value:\n      name: x\n      typed_config:\n        \
         '@type': type.googleapis.com/example.NotAnEnvoyType\n",
    ));
    assert!(
        unknown_type.len() == 1
            && unknown_type[0].starts_with("error: spec.configPatches[0].patch.value"),
        "{unknown_type:?}"
    );
    let misspelt = problems(&value("{connect_timeout: 2s, conect_timeout: 3s}"));
    assert!(
        misspelt.len() == 1
            && misspelt[0].starts_with("warning: spec.configPatches[0].patch.value: read without")
            && misspelt[0].contains("conect_timeout"),
        "{misspelt:?}"
    );
}

#[test]
fn a_filter_attached_by_target_refs_applies_to_nothing_here_and_says_so() {
    let got = problems(&format!(
        "targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]\n{}",
        patch("CLUSTER", "  patch: {operation: REMOVE}\n")
    ));
    assert!(
        got.iter()
            .any(|p| p.starts_with("warning: spec.targetRefs: attaches the EnvoyFilter")),
        "{got:?}"
    );
}
