//! Which services a proxy in a given namespace sees.
//!
//! A service is visible from a namespace when its `exportTo` allows it. When several
//! namespaces hold the same hostname, a proxy sees exactly one of them: the one in its own
//! namespace if that one is visible to it, else the visible one whose namespace sorts first.
//! (Istio before 1.30 also picked the first namespace alphabetically.) Hostnames therefore map
//! to one service per proxy, and cluster names, which carry the hostname but not the
//! namespace, stay unique.

use std::collections::BTreeMap;
use std::sync::Arc;

use wayfinder_registry::ServiceKey;

use super::MergedService;

/// The services one namespace sees, one per hostname, in hostname order.
pub type Visible<'a> = Vec<&'a Arc<MergedService>>;

/// Services grouped by hostname, each group in namespace order.
#[derive(Debug, Default)]
pub(super) struct Index {
    by_host: BTreeMap<Arc<str>, Vec<ServiceKey>>,
}

impl Index {
    pub(super) fn build(services: &BTreeMap<ServiceKey, Arc<MergedService>>) -> Self {
        let mut by_host: BTreeMap<Arc<str>, Vec<ServiceKey>> = BTreeMap::new();
        // `services` iterates in (namespace, hostname) order, so every group is in namespace
        // order as it is built.
        for key in services.keys() {
            by_host
                .entry(key.hostname.clone())
                .or_default()
                .push(key.clone());
        }
        Self { by_host }
    }

    pub(super) fn visible<'a>(
        &self,
        services: &'a BTreeMap<ServiceKey, Arc<MergedService>>,
        namespace: &str,
        default: &[String],
    ) -> Visible<'a> {
        self.by_host
            .values()
            .filter_map(|keys| {
                let candidates = keys.iter().filter_map(|k| services.get(k)).filter(|s| {
                    let export_to = &s.service.export_to;
                    if export_to.0.is_empty() && !default.is_empty() {
                        return super::rules::exported(
                            &[],
                            default,
                            &s.service.namespace,
                            namespace,
                        );
                    }
                    export_to.visible_from(&s.service.namespace, namespace)
                });
                let mut first = None;
                for s in candidates {
                    if &*s.service.namespace == namespace {
                        return Some(s);
                    }
                    first.get_or_insert(s);
                }
                first
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Snapshot;
    use wayfinder_registry::{ExportTo, RegistryId, Service};

    fn merged(host: &str, ns: &str, export: &[&str]) -> (ServiceKey, Arc<MergedService>) {
        let mut service = Service::new(host, ns);
        service.export_to = ExportTo(export.iter().map(|e| (*e).into()).collect());
        let m = MergedService {
            service,
            registries: vec![RegistryId::new("Mock")],
            endpoints: vec![],
        };
        (m.service.key(), Arc::new(m))
    }

    #[test]
    fn own_namespace_wins_then_first_namespace_then_export_rules() {
        let services = [
            merged("db.example.com", "a", &[]),
            merged("db.example.com", "b", &[]),
            merged("private.example.com", "b", &["."]),
            merged("hidden.example.com", "a", &["~"]),
        ];
        let snap = Snapshot::new(
            1,
            services.into_iter().collect(),
            vec![],
            vec![],
            Default::default(),
        );
        let names = |ns: &str| -> Vec<String> {
            snap.visible(ns)
                .iter()
                .map(|s| s.service.key().to_string())
                .collect()
        };
        assert_eq!(names("b"), ["b/db.example.com", "b/private.example.com"]);
        assert_eq!(names("a"), ["a/db.example.com"]);
        assert_eq!(names("c"), ["a/db.example.com"]);
    }
}
