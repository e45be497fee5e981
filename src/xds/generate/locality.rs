//! Locality load balancing, as Istio's `loadbalancer` package applies it: a cluster's load
//! assignment, shaped for where the proxy is.
//!
//! The setting in force for a cluster is its DestinationRule's `localityLbSetting`, else the
//! mesh's (Istio's default mesh config: enabled, nothing else set); `enabled: false` turns it
//! off. Then, for an EDS cluster:
//!
//! - with `distribute`, the localities' weights follow the first entry whose `from` matches
//!   the proxy's locality, and localities it gives no share get no traffic;
//! - else, only when the cluster has outlier detection (without it Envoy would never notice
//!   endpoints to fail over from, as Istio says), priorities: with `failoverPriority`, by how
//!   many of its labels (in order) an endpoint shares with the proxy, then, with `failover`
//!   too, by region; without it, by proximity: the proxy's region, zone and subzone (0), its
//!   zone (1), its region (2), elsewhere (3), or, when a `failover` entry names the proxy's
//!   region, a region other than its `to` (4). Priorities are compacted to 0..N.
//!
//! Such an assignment depends on the proxy, so it is not shared by every proxy as others are:
//! it is made per [`Place`] (the proxy's locality, and the labels `failoverPriority` compares),
//! which proxies of one zone and deployment share. The cluster itself gets Envoy's locality
//! weighted load balancing when `distribute`, or with outlier detection `failover` or
//! `failoverPriority`, is set, as Istio's `ApplyToCluster`. DNS-resolved clusters, whose
//! endpoints are in the cluster, keep one priority.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use wayfinder_config::LocalityLbSetting;
use wayfinder_registry::{Endpoint, Labels, Locality};

use crate::xds::pb::cluster::cluster::{CommonLbConfig, common_lb_config};
use crate::xds::pb::core;
use crate::xds::pb::endpoint::ClusterLoadAssignment;
use crate::xds::pb::protobuf::UInt32Value;
use crate::xds::resource::Resource;

/// Istio's network label, which `failoverPriority` may name first: endpoints of another
/// network then come after every other priority rather than at the lowest one.
pub(super) const NETWORK_LABEL: &str = "topology.istio.io/network";
/// The labels that say where a workload is, added to its own as Istio's `AugmentLabels` does.
const REGION_LABEL: &str = "topology.kubernetes.io/region";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const SUBZONE_LABEL: &str = "topology.istio.io/subzone";
const CLUSTER_LABEL: &str = "topology.istio.io/cluster";
/// Istio's label that gives a workload's locality as `region.zone.subzone`.
const LOCALITY_LABEL: &str = "istio-locality";

/// Where a proxy is, as locality load balancing sees it: its locality, and its values of the
/// labels `failoverPriority` compares (only those, so proxies of one zone share a place).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Place {
    pub(super) locality: Locality,
    /// The proxy's network: endpoints of other networks with gateways are reached through
    /// them (`network.rs`).
    pub(super) network: Arc<str>,
    /// Each label `failoverPriority` names, with the proxy's value (empty when it has none).
    pub(super) labels: Vec<(String, String)>,
    /// Whether the proxy has any label (its own, or one of where it is): Istio compares
    /// nothing for a proxy without labels.
    pub(super) labelled: bool,
}

/// The setting in force for a cluster (`rule`: its DestinationRule's, else the mesh's
/// default), and whether it shapes the cluster: `None` when it changes nothing.
pub(super) fn plan(rule: Option<&LocalityLbSetting>, outlier_detection: bool) -> Option<Plan> {
    let setting = match rule {
        Some(s) if s.enabled == Some(false) => return None,
        Some(s) => s.clone(),
        // Istio's default mesh config: `localityLbSetting: {enabled: true}`.
        None => LocalityLbSetting::default(),
    };
    (!setting.distribute.is_empty() || outlier_detection).then_some(Plan {
        setting,
        failover: outlier_detection,
    })
}

/// What locality load balancing does to one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    setting: LocalityLbSetting,
    /// The cluster has outlier detection, so priorities apply.
    failover: bool,
}

impl Plan {
    /// A plan that shapes nothing: for an assignment made per place for its networks only.
    pub(super) fn none() -> Self {
        Self {
            setting: LocalityLbSetting::default(),
            failover: false,
        }
    }

    /// The cluster's locality weighted load balancing, when Istio's `ApplyToCluster` sets it.
    pub(super) fn apply_to_cluster(&self, common: &mut Option<CommonLbConfig>) {
        let s = &self.setting;
        let weighted = !s.distribute.is_empty()
            || (self.failover && (!s.failover.is_empty() || !s.failover_priority.is_empty()));
        if weighted {
            common
                .get_or_insert_with(Default::default)
                .locality_config_specifier = Some(
                common_lb_config::LocalityConfigSpecifier::LocalityWeightedLbConfig(
                    common_lb_config::LocalityWeightedLbConfig {},
                ),
            );
        }
    }

    /// The names of the labels `failoverPriority` compares (without `=VALUE`), when it applies.
    pub(super) fn priority_labels(&self) -> impl Iterator<Item = &str> {
        let applies = self.failover && self.setting.distribute.is_empty();
        self.setting
            .failover_priority
            .iter()
            .filter(move |_| applies)
            .map(|l| l.split_once('=').map_or(l.as_str(), |(name, _)| name))
    }
}

/// A load assignment shaped per proxy place: the assignment as it is for every proxy, the
/// labels of each of its endpoints (group by group, as `failoverPriority` compares them) and
/// the plan.
#[derive(Debug)]
pub(super) struct Localized {
    pub(super) name: Arc<str>,
    base: ClusterLoadAssignment,
    labels: Vec<Vec<Labels>>,
    plan: Plan,
    /// The endpoints' networks, when some are on a network with gateways.
    network: Option<super::network::View>,
    /// The assignment made for each place so far. A `Localized` belongs to one version of its
    /// service, so an endpoint change elsewhere in the mesh re-encodes nothing here.
    made: Mutex<HashMap<Place, Arc<Resource>>>,
}

/// The places a [`Localized`] keeps its assignment for; past them, each is made when asked.
/// Places are zones and the values of `failoverPriority` labels, so few.
const PLACES_KEPT: usize = 64;

impl Localized {
    /// `base`, whose endpoints are `endpoints` (group by group, in order), shaped by `plan`.
    pub(super) fn new(
        base: ClusterLoadAssignment,
        endpoints: &[Vec<&Endpoint>],
        plan: Plan,
    ) -> Self {
        // Only `failoverPriority` compares labels: without it, none are kept.
        let labels = if plan.priority_labels().next().is_some() {
            endpoints
                .iter()
                .map(|group| group.iter().map(|e| endpoint_labels(e)).collect())
                .collect()
        } else {
            Vec::new()
        };
        Self {
            name: base.cluster_name.as_str().into(),
            base,
            labels,
            plan,
            network: None,
            made: Mutex::new(HashMap::new()),
        }
    }

    /// The same, with its endpoints' networks: each place's assignment reaches endpoints of
    /// other networks through their gateways.
    pub(super) fn with_network(mut self, view: super::network::View) -> Self {
        self.network = Some(view);
        self
    }

    /// The plan, for the labels a place needs.
    pub(super) fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The assignment for proxies at `place`, made once per place.
    pub(super) fn for_place(&self, place: &Place) -> Arc<Resource> {
        // A poisoned lock holds whole entries only: it is safe to use.
        let made = |m: &Mutex<HashMap<Place, Arc<Resource>>>| {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(place)
                .cloned()
        };
        if let Some(resource) = made(&self.made) {
            return resource;
        }
        let resource = Arc::new(self.make(place));
        let mut kept = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < PLACES_KEPT {
            kept.insert(place.clone(), resource.clone());
        }
        resource
    }

    fn make(&self, place: &Place) -> Resource {
        let mut cla = self.base.clone();
        let s = &self.plan.setting;
        let locality = &place.locality;
        if !s.distribute.is_empty() {
            apply_weights(locality, &mut cla, s);
        } else if self.plan.failover {
            let proxy_labels: BTreeMap<&str, &str> = place
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            if !s.failover_priority.is_empty() {
                if place.labelled {
                    apply_failover_priorities(
                        &mut cla,
                        &self.labels,
                        &proxy_labels,
                        &s.failover_priority,
                    );
                }
                if !s.failover.is_empty() {
                    apply_failover(locality, &mut cla, s);
                }
            } else {
                apply_failover(locality, &mut cla, s);
            }
        }
        if let Some(view) = &self.network {
            view.apply(&mut cla, &place.network);
            // Groups the network emptied are gone: their priorities leave no gap.
            compact(&mut cla);
        }
        debug_assert!(
            cla.endpoints
                .iter()
                .flat_map(|g| &g.lb_endpoints)
                .all(|lb| super::network::marked(lb).is_none()),
            "an endpoint known only by its network left in {}",
            self.name
        );
        Resource::encode(self.name.clone(), &cla)
    }
}

/// A workload's labels and those that say where it is, as Istio's `AugmentLabels` adds them
/// (its own win).
pub(super) fn endpoint_labels(e: &Endpoint) -> Labels {
    let mut labels = e.labels.clone();
    let mut add = |k: &str, v: &Arc<str>| {
        if !v.is_empty() {
            labels.entry(k.into()).or_insert_with(|| v.clone());
        }
    };
    add(REGION_LABEL, &e.locality.region);
    add(ZONE_LABEL, &e.locality.zone);
    add(SUBZONE_LABEL, &e.locality.subzone);
    add(NETWORK_LABEL, &e.network);
    add(CLUSTER_LABEL, &e.cluster_id);
    labels
}

/// A proxy's place: `locality`, and its values (from `labels`, augmented likewise with its
/// locality, `network` and `cluster`) of the labels named in `wanted`.
pub(super) fn place(
    locality: &Locality,
    labels: &BTreeMap<String, String>,
    network: &str,
    cluster: &str,
    wanted: &BTreeSet<&str>,
) -> Place {
    let value = |name: &str| -> String {
        if let Some(v) = labels.get(name) {
            return v.clone();
        }
        match name {
            REGION_LABEL => locality.region.to_string(),
            ZONE_LABEL => locality.zone.to_string(),
            SUBZONE_LABEL => locality.subzone.to_string(),
            NETWORK_LABEL => network.to_string(),
            CLUSTER_LABEL => cluster.to_string(),
            _ => String::new(),
        }
    };
    let placed = [&locality.region, &locality.zone, &locality.subzone]
        .iter()
        .any(|v| !v.is_empty())
        || !network.is_empty()
        || !cluster.is_empty();
    Place {
        locality: locality.clone(),
        network: network.into(),
        labels: wanted
            .iter()
            .map(|name| ((*name).to_string(), value(name)))
            .collect(),
        labelled: !labels.is_empty() || placed,
    }
}

/// The locality a workload's labels give, as Istio's `localityFromProxyLabels` reads them:
/// the topology labels, else `istio-locality` (`region.zone.subzone`).
pub(super) fn from_labels(labels: &BTreeMap<String, String>) -> Option<Locality> {
    let get = |k: &str| labels.get(k).map(String::as_str);
    match (get(REGION_LABEL), get(ZONE_LABEL), get(SUBZONE_LABEL)) {
        (None, None, None) => {
            let label = get(LOCALITY_LABEL).filter(|l| !l.is_empty())?;
            Some(Locality::parse(&label.replace('.', "/")))
        }
        (region, zone, subzone) => Some(Locality {
            region: region.unwrap_or_default().into(),
            zone: zone.unwrap_or_default().into(),
            subzone: subzone.unwrap_or_default().into(),
        }),
    }
}

/// Istio's `LocalityMatch`: a rule locality (`region/zone/subzone`, `*` for any) matches
/// `locality` part by part; a missing zone or subzone matches any.
fn locality_match(locality: &Locality, rule: &str) -> bool {
    let mut parts = rule.splitn(3, '/');
    let (region, zone, subzone) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let part = |want: &str, have: &str| want == "*" || want == have;
    part(region, &locality.region)
        && (zone.is_empty() || part(zone, &locality.zone))
        && (subzone.is_empty() || part(subzone, &locality.subzone))
}

/// The locality of a group of endpoints.
fn group_locality(group: Option<&core::Locality>) -> Locality {
    group.map_or_else(Locality::default, |l| Locality {
        region: l.region.as_str().into(),
        zone: l.zone.as_str().into(),
        subzone: l.sub_zone.as_str().into(),
    })
}

/// Istio's `applyLocalityWeights`: the first `distribute` entry from the proxy's locality
/// spreads each `to` locality's share over its groups by their weights; other groups lose
/// their endpoints.
fn apply_weights(locality: &Locality, cla: &mut ClusterLoadAssignment, s: &LocalityLbSetting) {
    let Some(rule) = s
        .distribute
        .iter()
        .find(|d| locality_match(locality, &d.from))
    else {
        return;
    };
    let mut unmatched: BTreeSet<usize> = (0..cla.endpoints.len()).collect();
    for (to, share) in &rule.to {
        let mut weights: BTreeMap<usize, u32> = BTreeMap::new();
        for (i, group) in cla.endpoints.iter().enumerate() {
            if unmatched.contains(&i)
                && locality_match(&group_locality(group.locality.as_ref()), to)
            {
                unmatched.remove(&i);
                weights.insert(
                    i,
                    group.load_balancing_weight.as_ref().map_or(1, |w| w.value),
                );
            }
        }
        let total: u32 = weights.values().copied().fold(0, u32::saturating_add);
        for (i, weight) in weights {
            let shared = f64::from(weight.saturating_mul(*share)) / f64::from(total.max(1));
            if shared > 0.0 {
                // Within u32: at most weight × 100 over a total of at least weight.
                let value = shared.ceil() as u32;
                cla.endpoints[i].load_balancing_weight = Some(UInt32Value { value });
            }
        }
    }
    for i in unmatched {
        cla.endpoints[i].lb_endpoints.clear();
    }
}

/// Istio's `applyLocalityFailover`: each group's priority, times 5 plus its proximity to the
/// proxy (see the module docs), then compacted.
fn apply_failover(locality: &Locality, cla: &mut ClusterLoadAssignment, s: &LocalityLbSetting) {
    for group in &mut cla.endpoints {
        let there = group_locality(group.locality.as_ref());
        let mut priority = proximity(locality, &there);
        if priority == 3
            && let Some(rule) = s.failover.iter().find(|f| *f.from == *locality.region)
            && *there.region != *rule.to
        {
            priority = 4;
        }
        group.priority = group.priority * 5 + priority;
    }
    compact(cla);
}

/// Istio's `LbPriority`.
fn proximity(proxy: &Locality, endpoints: &Locality) -> u32 {
    match (
        proxy.region == endpoints.region,
        proxy.zone == endpoints.zone,
        proxy.subzone == endpoints.subzone,
    ) {
        (true, true, true) => 0,
        (true, true, false) => 1,
        (true, false, _) => 2,
        (false, _, _) => 3,
    }
}

/// Priorities renumbered 0..N in their order, without gaps (Envoy's rule).
fn compact(cla: &mut ClusterLoadAssignment) {
    let used: BTreeSet<u32> = cla.endpoints.iter().map(|g| g.priority).collect();
    let rank: BTreeMap<u32, u32> = used.into_iter().zip(0..).collect();
    for group in &mut cla.endpoints {
        group.priority = rank.get(&group.priority).copied().unwrap_or_default();
    }
}

/// Istio's `applyFailoverPriorities`: each group split by how many of `priorities`' labels
/// (in order) its endpoints share with the proxy (`proxy`: its value of each), then compacted.
fn apply_failover_priorities(
    cla: &mut ClusterLoadAssignment,
    labels: &[Vec<Labels>],
    proxy: &BTreeMap<&str, &str>,
    priorities: &[String],
) {
    let lowest = u32::try_from(priorities.len()).unwrap_or(u32::MAX);
    let network_first = priorities.first().is_some_and(|p| p == NETWORK_LABEL);
    let rules: Vec<(&str, Option<&str>)> = priorities
        .iter()
        .map(|p| match p.split_once('=') {
            Some((name, value)) if !value.contains('=') => (name, Some(value)),
            _ => (p.as_str(), None),
        })
        .collect();
    let mut split = Vec::new();
    for (group, group_labels) in cla.endpoints.iter().zip(labels) {
        let mut by_priority: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, endpoint) in group_labels.iter().enumerate() {
            let (mut priority, mut adjust) = (0, 0);
            for (j, (name, value)) in rules.iter().enumerate() {
                let want = value
                    .or_else(|| proxy.get(name).copied())
                    .unwrap_or_default();
                let have = endpoint.get(*name).map_or("", |v| &**v);
                if want != have {
                    if j == 0 && network_first {
                        adjust = lowest;
                        continue;
                    }
                    priority = lowest - u32::try_from(j).unwrap_or(lowest);
                    break;
                }
            }
            by_priority.entry(priority + adjust).or_default().push(i);
        }
        for (priority, members) in by_priority {
            let mut part = group.clone();
            part.lb_endpoints = members
                .iter()
                .filter_map(|i| group.lb_endpoints.get(*i).cloned())
                .collect();
            part.priority = priority;
            let weight = part
                .lb_endpoints
                .iter()
                .map(|e| e.load_balancing_weight.as_ref().map_or(0, |w| w.value))
                .fold(0u32, u32::saturating_add);
            part.load_balancing_weight = Some(UInt32Value { value: weight });
            split.push(part);
        }
    }
    cla.endpoints = split;
    compact(cla);
}

#[cfg(test)]
mod tests;
