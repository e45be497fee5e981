//! EnvoyFilter: the rules of Istio's `ValidateEnvoyFilter`, its patch values read as the
//! Envoy messages their `applyTo` names ([`crate::envoy_types`]), as Istio's validation reads
//! them: a value of another shape, or naming a type unknown here, rejects the object; fields
//! the message does not have are a warning.

use super::Problems;
use super::names::check_labels;
use crate::envoy_filter::{
    ApplyTo, ConfigPatch, EnvoyFilter, MAX_PROXY_VERSION_LEN, Operation, PatchContext,
};

/// The name of Envoy's HTTP connection manager filter, and its deprecated one.
const HCM: [&str; 2] = [
    "envoy.filters.network.http_connection_manager",
    "envoy.http_connection_manager",
];

/// Checks an EnvoyFilter as Istio does: each patch has a kind, an operation and a value
/// (but for `REMOVE`), its match fits its kind, filter matches name their filters.
pub(super) fn check(ef: &EnvoyFilter, p: &mut Problems) {
    p.warn(
        "spec",
        "EnvoyFilter exposes internal implementation details that may change at any time: \
         prefer other APIs if possible, and take care on upgrades",
    );
    if let Some(selector) = &ef.workload_selector {
        if selector.labels.is_empty() {
            p.warn(
                "spec.workloadSelector.labels",
                "no labels: the EnvoyFilter applies to every workload of its namespace",
            );
        }
        check_labels(p, "spec.workloadSelector.labels", &selector.labels);
    }
    if ef.workload_selector.is_some() && !ef.target_refs.is_empty() {
        p.error(
            "spec",
            "sets workloadSelector and targetRefs: set only one of them",
        );
    }
    if !ef.target_refs.is_empty() {
        p.warn(
            "spec.targetRefs",
            "attaches the EnvoyFilter to Kubernetes Gateway API gateways and waypoints, which \
             wayfinder does not serve: it applies to no sidecar or gateway here (use a \
             workloadSelector)",
        );
    }
    for (i, cp) in ef.config_patches.iter().enumerate() {
        let path = format!("spec.configPatches[{i}]");
        match cp {
            None => p.error(path, "null config patch"),
            Some(cp) => check_patch(cp, &path, p),
        }
    }
}

fn check_patch(cp: &ConfigPatch, path: &str, p: &mut Problems) {
    let context = cp.matches.as_ref().map(|m| m.context);
    if context == Some(PatchContext::Waypoint) {
        p.warn(
            format!("{path}.match.context"),
            "WAYPOINT: wayfinder serves no waypoint, the patch applies to nothing",
        );
        return;
    }
    if cp.apply_to == ApplyTo::Invalid {
        return p.error(format!("{path}.applyTo"), "missing applyTo");
    }
    let Some(patch) = &cp.patch else {
        return p.error(format!("{path}.patch"), "missing patch");
    };
    if patch.operation == Operation::Invalid {
        return p.error(format!("{path}.patch.operation"), "missing patch operation");
    }
    if patch.operation != Operation::Remove && patch.value.is_none() {
        return p.error(
            format!("{path}.patch.value"),
            "missing patch value for non-remove operation",
        );
    }
    if let Some(value) = &patch.value {
        match crate::envoy_types::read_patch_value(cp.apply_to, value) {
            Ok(Some(read)) => {
                if let Some(warning) = read.warning {
                    p.warn(format!("{path}.patch.value"), warning);
                }
            }
            Ok(None) => {}
            Err(err) => p.error(format!("{path}.patch.value"), err),
        }
    }
    if let Some(version) = cp.matches.as_ref().and_then(|m| m.proxy.as_ref()) {
        let field = format!("{path}.match.proxy.proxyVersion");
        if version.proxy_version.len() > MAX_PROXY_VERSION_LEN {
            p.warn(
                field,
                "longer than 1024 characters: ignored, matches no proxy",
            );
        } else if let Err(err) = super::regex::check_re2(&version.proxy_version) {
            p.error(field, format!("invalid regex for proxy version: {err}"));
        }
    }
    if matches!(cp.apply_to, ApplyTo::ExtensionConfig | ApplyTo::Bootstrap) {
        p.warn(
            format!("{path}.applyTo"),
            format!(
                "{:?}: wayfinder serves no extension configuration and patches no bootstrap; \
                 the patch applies to nothing",
                cp.apply_to
            ),
        );
    }
    let Some(m) = &cp.matches else { return };
    let has_object = m.listener.is_some() || m.route_configuration.is_some() || m.cluster.is_some();
    match cp.apply_to {
        ApplyTo::Listener | ApplyTo::FilterChain | ApplyTo::NetworkFilter | ApplyTo::HttpFilter
            if has_object =>
        {
            let Some(listener) = &m.listener else {
                return p.error(
                    format!("{path}.match"),
                    "applyTo for listener class objects cannot have non listener match",
                );
            };
            let Some(filter) = listener
                .filter_chain
                .as_ref()
                .and_then(|c| c.filter.as_ref())
            else {
                return;
            };
            let field = format!("{path}.match.listener.filterChain.filter");
            if matches!(cp.apply_to, ApplyTo::Listener | ApplyTo::FilterChain) {
                p.warn(
                    &field,
                    format!(
                        "filter match has no effect when used with {:?}",
                        cp.apply_to
                    ),
                );
            }
            if filter.name.is_empty() {
                return p.error(
                    format!("{field}.name"),
                    "filter match has no name to match on",
                );
            }
            if let Some(sub) = &filter.sub_filter {
                if cp.apply_to != ApplyTo::HttpFilter {
                    return p.error(
                        format!("{field}.subFilter"),
                        "subfilter match can be used with applyTo HTTP_FILTER only",
                    );
                }
                if !HCM.contains(&filter.name.as_str()) {
                    return p.error(
                        format!("{field}.subFilter"),
                        format!("subfilter match requires filter match with {}", HCM[0]),
                    );
                }
                if sub.name.is_empty() {
                    p.error(
                        format!("{field}.subFilter.name"),
                        "subfilter match has no name to match on",
                    );
                }
            }
            if filter.name == HCM[1] {
                p.deprecated(format!("{field}.name"), HCM[0]);
            }
        }
        ApplyTo::RouteConfiguration | ApplyTo::VirtualHost | ApplyTo::HttpRoute
            if has_object && m.route_configuration.is_none() =>
        {
            p.error(
                format!("{path}.match"),
                "applyTo for http route class objects cannot have non route configuration match",
            )
        }
        ApplyTo::Cluster if has_object && m.cluster.is_none() => p.error(
            format!("{path}.match"),
            "applyTo for cluster class objects cannot have non cluster match",
        ),
        _ => {}
    }
}
