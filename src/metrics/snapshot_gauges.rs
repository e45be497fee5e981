//! Istio's gauges of what the configuration in force holds, answered from the published
//! snapshot when Prometheus scrapes: VirtualServices, DestinationRule subsets Istio would
//! drop, clusters without endpoints, endpoints not ready, and cluster names that services of
//! one hostname in several namespaces share.
//!
//! istiod records these while it builds a push context and pushes (`push_context.go`:
//! `AddMetric`, then `UpdateMetrics`). Wayfinder counts them from the model, once per
//! snapshot version and only when scraped: a publication costs nothing more, and two scrapes
//! of one snapshot count once. The model has no notion of a proxy, so where Istio counts per
//! connected proxy (`pilot_endpoint_not_ready`) these count what the model holds; each field
//! of [`Counts`] says how.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use wayfinder_registry::{Health, Resolution};

use crate::snapshot::rules::resolve_host;
use crate::snapshot::{Snapshot, SnapshotReader};

/// The gauges, read from the snapshot `model` publishes; `domain` resolves the short hosts
/// of DestinationRules (`--domain`).
pub(super) struct SnapshotGauges {
    model: SnapshotReader,
    domain: Arc<str>,
    /// The counts of the last snapshot scraped, by its version.
    last: Mutex<Option<(u64, Counts)>>,
}

impl SnapshotGauges {
    pub(super) fn new(model: SnapshotReader, domain: &str) -> Self {
        Self {
            model,
            domain: domain.into(),
            last: Mutex::new(None),
        }
    }

    fn counts(&self) -> Counts {
        let snapshot = self.model.snapshot();
        // A poisoned lock holds a whole value or none: counts are replaced, never edited.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some((version, counts)) if *version == snapshot.version => *counts,
            _ => {
                let counts = Counts::of(&snapshot, &self.domain);
                *last = Some((snapshot.version, counts));
                counts
            }
        }
    }
}

impl fmt::Debug for SnapshotGauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotGauges")
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl Collector for SnapshotGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let c = self.counts();
        for (name, help, value) in [
            (
                "pilot_virt_services",
                "Total virtual services known to pilot.",
                c.virtual_services,
            ),
            (
                "pilot_destrule_subsets",
                "Duplicate subsets across destination rules for same host",
                c.destrule_subsets,
            ),
            (
                "pilot_eds_no_instances",
                "Number of clusters without instances.",
                c.eds_no_instances,
            ),
            (
                "pilot_endpoint_not_ready",
                "Endpoint found in unready state.",
                c.endpoints_not_ready,
            ),
            (
                "pilot_duplicate_envoy_clusters",
                "Duplicate envoy clusters caused by service entries with same hostname",
                c.duplicate_clusters,
            ),
        ] {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(metric)?;
        }
        Ok(())
    }
}

/// What one snapshot holds of what the gauges count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    /// `pilot_virt_services`: VirtualServices in force.
    virtual_services: usize,
    /// `pilot_destrule_subsets`: hosts for which two DestinationRules of one namespace (both
    /// without a workload selector, or with the same one) define a subset of the same name.
    /// Istio merges such rules and drops the second subset, counting the host; wayfinder
    /// applies one rule whole (`snapshot/rules.rs`), so the other's subsets are not served
    /// either.
    destrule_subsets: usize,
    /// `pilot_eds_no_instances`: EDS clusters (`outbound|PORT||HOST` of a client-side
    /// balanced service) that no endpoint serves. Istio counts the clusters a push generated
    /// without endpoints, subsets' too; subsets whose labels select nothing are generation's
    /// to find and are not counted here.
    eds_no_instances: usize,
    /// `pilot_endpoint_not_ready`: endpoints their registry reports not ready (unhealthy;
    /// draining ones are not counted, as in Istio). Istio counts the connected proxies whose
    /// own endpoint is not ready.
    endpoints_not_ready: usize,
    /// `pilot_duplicate_envoy_clusters`: cluster names (`outbound|PORT||HOST`) that services
    /// of one hostname in several namespaces would each make. Istio drops the second cluster
    /// of a name as it builds a proxy's clusters and counts it; wayfinder gives each proxy one
    /// of the services (`snapshot/visibility.rs`), so none is dropped, but the others are
    /// hidden from that proxy all the same.
    duplicate_clusters: usize,
}

impl Counts {
    fn of(snapshot: &Snapshot, domain: &str) -> Self {
        let mut counts = Self {
            virtual_services: snapshot.config.virtual_services().count(),
            destrule_subsets: duplicate_subsets(snapshot, domain),
            ..Self::default()
        };
        let mut by_host: HashMap<&str, Vec<&crate::snapshot::MergedService>> = HashMap::new();
        for (key, merged) in &snapshot.services {
            by_host.entry(&key.hostname).or_default().push(merged);
            counts.endpoints_not_ready += merged
                .endpoints
                .iter()
                .filter(|e| e.endpoint.health == Health::Unhealthy)
                .count();
            if merged.service.resolution == Resolution::ClientSideLb {
                counts.eds_no_instances += merged
                    .service
                    .ports
                    .iter()
                    .filter(|p| {
                        !merged
                            .endpoints
                            .iter()
                            .any(|e| e.ports.contains_key(&p.number))
                    })
                    .count();
            }
        }
        counts.duplicate_clusters = by_host
            .values()
            .filter(|services| services.len() > 1)
            .map(|services| {
                let mut ports: HashMap<u16, usize> = HashMap::new();
                for s in services {
                    for p in &s.service.ports {
                        *ports.entry(p.number).or_default() += 1;
                    }
                }
                ports.values().filter(|n| **n > 1).count()
            })
            .sum();
        counts
    }
}

/// Hosts whose DestinationRules Istio would merge and find a subset name twice in.
fn duplicate_subsets(snapshot: &Snapshot, domain: &str) -> usize {
    type Group<'a> = (
        &'a str,
        String,
        Option<&'a std::collections::BTreeMap<String, String>>,
    );
    let mut groups: HashMap<Group<'_>, HashSet<&str>> = HashMap::new();
    let mut hosts: HashSet<String> = HashSet::new();
    for (meta, dr) in snapshot.config.destination_rules() {
        let host = resolve_host(&dr.host, &meta.namespace, domain);
        let selector = dr.workload_selector.as_ref().map(|s| &s.labels);
        let names = groups
            .entry((&meta.namespace, host.clone(), selector))
            .or_default();
        let mut own = HashSet::new();
        for subset in &dr.subsets {
            // A name repeated within one rule is validation's to refuse, not a merge's.
            if own.insert(subset.name.as_str()) && names.contains(subset.name.as_str()) {
                hosts.insert(host.clone());
            }
        }
        names.extend(own);
    }
    hosts.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::snapshot_with_config;
    use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec, DestinationRule, Subset};
    use wayfinder_registry::{Endpoint, Protocol, Registration, RegistryId, Service};

    fn service(host: &str, ns: &str, ports: &[u16]) -> Service {
        ports.iter().fold(Service::new(host, ns), |s, n| {
            s.with_port(&format!("p{n}"), *n, Protocol::Http)
        })
    }

    fn rule(ns: &str, name: &str, host: &str, subsets: &[&str]) -> ConfigObject {
        let dr = DestinationRule {
            host: host.into(),
            subsets: subsets
                .iter()
                .map(|s| Subset {
                    name: (*s).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        ConfigObject {
            meta: ConfigMeta {
                name: name.into(),
                namespace: ns.into(),
                ..Default::default()
            },
            spec: ConfigSpec::DestinationRule(Box::new(dr)),
        }
    }

    #[test]
    fn counts_follow_istio_s_definitions() {
        let mut unready = Endpoint::new("10.0.0.2").with_port("p80", 80);
        unready.health = Health::Unhealthy;
        let registration = Registration::new(
            service("a.example.com", "x", &[80, 81]),
            vec![Endpoint::new("10.0.0.1").with_port("p80", 80), unready],
        );
        let sources = vec![(
            RegistryId::new("Mock"),
            vec![
                registration,
                // Without endpoints: three clusters without instances; b's port 80 is in
                // both namespaces.
                Registration::new(service("b.example.com", "x", &[80]), vec![]),
                Registration::new(service("b.example.com", "y", &[80, 90]), vec![]),
            ],
        )];
        let config = vec![
            rule("x", "one", "a.example.com", &["v1", "v2"]),
            rule("x", "two", "a.example.com", &["v2", "v3"]),
            // Another namespace: Istio does not merge it with x's.
            rule("y", "three", "a.example.com", &["v1"]),
        ];
        let snapshot = snapshot_with_config(sources, config).unwrap();
        assert_eq!(
            Counts::of(&snapshot, "cluster.local"),
            Counts {
                virtual_services: 0,
                destrule_subsets: 1,
                eds_no_instances: 1 + 2,
                endpoints_not_ready: 1,
                duplicate_clusters: 1,
            }
        );
    }
}
