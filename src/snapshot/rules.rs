//! Which VirtualService and DestinationRule apply to a host, as seen from a namespace.
//!
//! Hosts in configuration objects may be short names, resolved in the object's namespace
//! (`reviews` in `default` is `reviews.default.svc.cluster.local`), or wildcards (`*`,
//! `*.example.com`). An object is visible from a namespace when its `exportTo` allows it.
//!
//! When several objects of a kind apply to one host, the most specific host wins (an exact
//! host over a wildcard, a longer wildcard over a shorter one), then an object in the asking
//! proxy's namespace, then one in the service's namespace, then the first by namespace and
//! name. (Istio prefers the oldest object where wayfinder, reading files without creation
//! times, takes namespace and name order.) Objects are not merged: one applies, whole.

use std::collections::BTreeMap;

use wayfinder_config::{ConfigMeta, DestinationRule, Sidecar, VirtualService};

use super::TrafficConfig;

/// A host as written in an object of `namespace`: short names (no dot) get the namespace and
/// the mesh domain; full names and wildcards stay.
pub fn resolve_host(host: &str, namespace: &str, domain: &str) -> String {
    if host.contains('.') || host == "*" {
        host.to_string()
    } else {
        format!("{host}.{namespace}.svc.{domain}")
    }
}

/// Istio's host matching: `*` matches everything, `*.example.com` matches any host ending in
/// `.example.com`, anything else only itself.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some("") => true,
        Some(suffix) => host.ends_with(suffix) && host.len() > suffix.len(),
        None => pattern == host,
    }
}

/// MeshConfig's `defaultServiceExportTo`, `defaultVirtualServiceExportTo` and
/// `defaultDestinationRuleExportTo`: where an object that gives no `exportTo` is exported
/// (empty: everywhere, Istio's default `*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportDefaults {
    /// For services.
    pub services: Vec<String>,
    /// For VirtualServices.
    pub virtual_services: Vec<String>,
    /// For DestinationRules.
    pub destination_rules: Vec<String>,
}

/// True when an object of `object_ns` with `export_to` (else `default`, MeshConfig's for its
/// kind) is visible from `namespace`.
pub fn exported(
    export_to: &[String],
    default: &[String],
    object_ns: &str,
    namespace: &str,
) -> bool {
    let export_to = if export_to.is_empty() {
        default
    } else {
        export_to
    };
    export_to.is_empty()
        || export_to.iter().any(|e| match e.as_str() {
            "*" => true,
            "." => object_ns == namespace,
            "~" => false,
            other => other == namespace,
        })
}

/// Sort key of a candidate: smaller is preferred.
fn rank(
    pattern: &str,
    meta: &ConfigMeta,
    proxy_ns: &str,
    service_ns: &str,
) -> (bool, std::cmp::Reverse<usize>, u8) {
    let wildcard = pattern.starts_with('*');
    let place = if &*meta.namespace == proxy_ns {
        0
    } else if &*meta.namespace == service_ns {
        1
    } else {
        2
    };
    (wildcard, std::cmp::Reverse(pattern.len()), place)
}

impl TrafficConfig {
    /// The DestinationRule for `host` (of a service in `service_ns`) seen from `proxy_ns`.
    pub fn destination_rule(
        &self,
        host: &str,
        service_ns: &str,
        proxy_ns: &str,
        domain: &str,
        defaults: &ExportDefaults,
    ) -> Option<(&ConfigMeta, &DestinationRule)> {
        let default = &defaults.destination_rules;
        self.destination_rules()
            .filter(|(meta, dr)| exported(&dr.export_to, default, &meta.namespace, proxy_ns))
            .filter_map(|(meta, dr)| {
                let pattern = resolve_host(&dr.host, &meta.namespace, domain);
                host_matches(&pattern, host)
                    .then(|| (rank(&pattern, meta, proxy_ns, service_ns), meta, dr))
            })
            .min_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, meta, dr)| (meta, dr))
    }

    /// The VirtualService for `host` seen by sidecars in `proxy_ns` (bound to `mesh`).
    pub fn mesh_virtual_service(
        &self,
        host: &str,
        service_ns: &str,
        proxy_ns: &str,
        domain: &str,
        defaults: &ExportDefaults,
    ) -> Option<(&ConfigMeta, &VirtualService)> {
        let default = &defaults.virtual_services;
        self.virtual_services()
            .filter(|(meta, vs)| {
                bound_to_mesh(vs) && exported(&vs.export_to, default, &meta.namespace, proxy_ns)
            })
            .filter_map(|(meta, vs)| {
                let best = vs
                    .hosts
                    .iter()
                    .map(|h| resolve_host(h, &meta.namespace, domain))
                    .filter(|pattern| host_matches(pattern, host))
                    .map(|pattern| rank(&pattern, meta, proxy_ns, service_ns))
                    .min()?;
                Some((best, meta, vs))
            })
            .min_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, meta, vs)| (meta, vs))
    }
}

/// The namespace whose namespace-less `Sidecar` applies to every namespace without one.
pub const ROOT_NAMESPACE: &str = "istio-system";

impl TrafficConfig {
    /// The Sidecar that scopes a sidecar proxy in `namespace` with `labels`: one of its
    /// namespace whose `workloadSelector` the labels satisfy, else its namespace's default (no
    /// selector), else the default of the root namespace (`istio-system`), as in Istio.
    pub fn sidecar_for(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<(&ConfigMeta, &Sidecar)> {
        let selects = |sc: &Sidecar| {
            sc.workload_selector.as_ref().is_some_and(|s| {
                !s.labels.is_empty() && s.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
        };
        let default = |sc: &Sidecar| {
            sc.workload_selector
                .as_ref()
                .is_none_or(|s| s.labels.is_empty())
        };
        let in_ns = || self.sidecars().filter(|(m, _)| &*m.namespace == namespace);
        in_ns()
            .find(|(_, sc)| selects(sc))
            .or_else(|| in_ns().find(|(_, sc)| default(sc)))
            .or_else(|| {
                self.sidecars()
                    .find(|(m, sc)| &*m.namespace == ROOT_NAMESPACE && default(sc))
            })
    }
}

/// True when a Sidecar's egress hosts let a proxy see a service (`hostname` in `service_ns`).
/// Entries are `namespace/host`: `*` any namespace, `.` the Sidecar's own, `~` none; hosts may
/// be wildcards. A Sidecar without egress listeners limits nothing.
pub fn egress_allows(
    sidecar: &Sidecar,
    sidecar_ns: &str,
    service_ns: &str,
    hostname: &str,
) -> bool {
    sidecar.egress.is_empty()
        || sidecar
            .egress
            .iter()
            .any(|e| hosts_allow(&e.hosts, sidecar_ns, service_ns, hostname))
}

/// True when one egress listener's `hosts` (`namespace/host` entries) take a service.
pub fn hosts_allow(hosts: &[String], sidecar_ns: &str, service_ns: &str, hostname: &str) -> bool {
    hosts.iter().any(|entry| {
        let (ns, host) = entry.split_once('/').unwrap_or(("*", entry.as_str()));
        let ns_ok = match ns {
            "*" => true,
            "." => service_ns == sidecar_ns,
            "~" => false,
            other => other == service_ns,
        };
        ns_ok && host_matches(host, hostname)
    })
}

/// True when a Sidecar sends traffic for unknown destinations nowhere (`REGISTRY_ONLY`).
pub fn registry_only(sidecar: Option<&Sidecar>, mesh: bool) -> bool {
    match sidecar
        .and_then(|s| s.outbound_traffic_policy.as_ref())
        .and_then(|p| p.mode.as_deref())
    {
        Some(mode) => mode == "REGISTRY_ONLY",
        None => mesh,
    }
}

/// True for VirtualServices that apply to sidecars: no gateways, or `mesh` among them.
pub fn bound_to_mesh(vs: &VirtualService) -> bool {
    vs.gateways.is_empty() || vs.gateways.iter().any(|g| g == "mesh")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_and_wildcards() {
        assert_eq!(
            resolve_host("reviews", "default", "cluster.local"),
            "reviews.default.svc.cluster.local"
        );
        assert_eq!(
            resolve_host("api.example.com", "default", "cluster.local"),
            "api.example.com"
        );
        assert!(host_matches("*", "x.y"));
        assert!(host_matches("*.example.com", "a.b.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("a.example.com", "b.example.com"));
    }

    #[test]
    fn export_rules() {
        assert!(exported(&[], &[], "a", "b"));
        assert!(exported(&[".".into()], &[], "a", "a"));
        assert!(!exported(&[".".into()], &[], "a", "b"));
        assert!(exported(&["b".into()], &[], "a", "b"));
        // MeshConfig's default, for objects that give none.
        assert!(!exported(&[], &[".".into()], "a", "b"));
        assert!(exported(&["*".into()], &[".".into()], "a", "b"));
    }
}
