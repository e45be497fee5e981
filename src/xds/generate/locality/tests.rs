//! Locality load balancing against Istio's own cases (`pilot/pkg/networking/core/loadbalancer/
//! loadbalancer_test.go`): priorities by proximity, `failover`, `failoverPriority` and
//! `distribute`, each for a proxy at a given place.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message;
use wayfinder_config::{LocalityDistribute, LocalityFailover, LocalityLbSetting};
use wayfinder_registry::{Endpoint, Locality};

use super::*;
use crate::xds::pb::endpoint::{LbEndpoint, LocalityLbEndpoints};

/// An endpoint at `locality` (`region/zone/subzone`) with `labels`.
fn endpoint(address: &str, locality: &str, labels: &[(&str, &str)]) -> Endpoint {
    let mut e = Endpoint::new(address);
    e.locality = Locality::parse(locality);
    e.labels = labels
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    e
}

/// An assignment of `endpoints`, grouped by locality as `endpoint::grouped` groups them.
fn localized(endpoints: &[Endpoint], plan: Plan) -> Localized {
    let mut groups: BTreeMap<&Locality, Vec<&Endpoint>> = BTreeMap::new();
    for e in endpoints {
        groups.entry(&e.locality).or_default().push(e);
    }
    let members: Vec<Vec<&Endpoint>> = groups.values().cloned().collect();
    let cla = ClusterLoadAssignment {
        cluster_name: "outbound|80||svc".into(),
        endpoints: groups
            .iter()
            .map(|(l, group)| LocalityLbEndpoints {
                locality: Some(core::Locality {
                    region: l.region.to_string(),
                    zone: l.zone.to_string(),
                    sub_zone: l.subzone.to_string(),
                }),
                lb_endpoints: group
                    .iter()
                    .map(|e| LbEndpoint {
                        load_balancing_weight: Some(UInt32Value { value: e.weight }),
                        ..Default::default()
                    })
                    .collect(),
                load_balancing_weight: Some(UInt32Value {
                    value: u32::try_from(group.len()).unwrap(),
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    Localized::new(cla, &members, plan)
}

fn decode(r: &Resource) -> ClusterLoadAssignment {
    ClusterLoadAssignment::decode(r.any().value.as_slice()).unwrap()
}

/// `(locality, priority, endpoints)` of each group.
fn shape(cla: &ClusterLoadAssignment) -> Vec<(String, u32, usize)> {
    cla.endpoints
        .iter()
        .map(|g| {
            let l = g.locality.clone().unwrap_or_default();
            (
                format!("{}/{}/{}", l.region, l.zone, l.sub_zone),
                g.priority,
                g.lb_endpoints.len(),
            )
        })
        .collect()
}

fn at(locality: &str) -> Place {
    place(
        &Locality::parse(locality),
        &BTreeMap::new(),
        "",
        "",
        &BTreeSet::new(),
    )
}

#[test]
fn without_outlier_detection_or_when_disabled_nothing_is_shaped() {
    assert_eq!(plan(None, false), None);
    let off = LocalityLbSetting {
        enabled: Some(false),
        ..Default::default()
    };
    assert_eq!(plan(Some(&off), true), None);
    assert!(
        plan(None, true).is_some(),
        "the mesh default, with outlier detection"
    );
}

#[test]
fn priorities_follow_proximity_to_the_proxy() {
    let eps = [
        endpoint("1.1.1.1", "region1/zone1/subzone1", &[]),
        endpoint("2.2.2.2", "region1/zone1/subzone2", &[]),
        endpoint("3.3.3.3", "region1/zone2/subzone1", &[]),
        endpoint("4.4.4.4", "region2/zone1/subzone1", &[]),
    ];
    let l = localized(&eps, plan(None, true).unwrap());
    let cla = decode(&l.for_place(&at("region1/zone1/subzone1")));
    assert_eq!(
        shape(&cla),
        [
            ("region1/zone1/subzone1".into(), 0, 1),
            ("region1/zone1/subzone2".into(), 1, 1),
            ("region1/zone2/subzone1".into(), 2, 1),
            ("region2/zone1/subzone1".into(), 3, 1),
        ]
    );
    // Priorities are compacted: from region2, two levels only.
    let cla = decode(&l.for_place(&at("region2/zone1/subzone1")));
    let priorities: Vec<u32> = shape(&cla).into_iter().map(|(_, p, _)| p).collect();
    assert_eq!(priorities, [1, 1, 1, 0]);
}

#[test]
fn a_failover_rule_puts_its_region_before_the_others() {
    let eps = [
        endpoint("1.1.1.1", "region1/zone1/subzone1", &[]),
        endpoint("2.2.2.2", "region2/zone1/subzone1", &[]),
        endpoint("3.3.3.3", "region3/zone1/subzone1", &[]),
    ];
    let setting = LocalityLbSetting {
        failover: vec![LocalityFailover {
            from: "region1".into(),
            to: "region3".into(),
        }],
        ..Default::default()
    };
    let p = plan(Some(&setting), true).unwrap();
    let mut common = None;
    p.apply_to_cluster(&mut common);
    assert!(common.is_some(), "locality weighted load balancing");
    let cla = decode(&localized(&eps, p).for_place(&at("region1/zone1/subzone1")));
    let priorities: Vec<u32> = shape(&cla).into_iter().map(|(_, p, _)| p).collect();
    assert_eq!(priorities, [0, 2, 1]);
}

#[test]
fn failover_priority_splits_groups_by_the_labels_shared_with_the_proxy() {
    let eps = [
        endpoint("1.1.1.1", "r/z/s", &[("key", "a"), ("version", "v1")]),
        endpoint("2.2.2.2", "r/z/s", &[("key", "a"), ("version", "v2")]),
        endpoint("3.3.3.3", "r/z/s", &[("key", "b"), ("version", "v1")]),
    ];
    let setting = LocalityLbSetting {
        failover_priority: vec!["key".into(), "version".into()],
        ..Default::default()
    };
    let p = plan(Some(&setting), true).unwrap();
    let wanted: BTreeSet<&str> = p.priority_labels().collect();
    assert_eq!(wanted, BTreeSet::from(["key", "version"]));
    let proxy: BTreeMap<String, String> =
        [("key".into(), "a".into()), ("version".into(), "v1".into())].into();
    let place = place(&Locality::parse("r/z/s"), &proxy, "", "", &wanted);
    let cla = decode(&localized(&eps, p).for_place(&place));
    assert_eq!(
        shape(&cla),
        [
            ("r/z/s".into(), 0, 1),
            ("r/z/s".into(), 1, 1),
            ("r/z/s".into(), 2, 1)
        ]
    );
}

#[test]
fn distribute_shares_traffic_and_starves_localities_it_does_not_name() {
    let eps = [
        endpoint("1.1.1.1", "region1/zone1/subzone1", &[]),
        endpoint("2.2.2.2", "region1/zone2/subzone1", &[]),
        endpoint("3.3.3.3", "region2/zone1/subzone1", &[]),
    ];
    let setting = LocalityLbSetting {
        distribute: vec![LocalityDistribute {
            from: "region1/zone1/*".into(),
            to: [
                ("region1/zone1/*".to_string(), 80),
                ("region1/zone2/*".to_string(), 20),
            ]
            .into(),
        }],
        ..Default::default()
    };
    // Without outlier detection too.
    let p = plan(Some(&setting), false).unwrap();
    let cla = decode(&localized(&eps, p).for_place(&at("region1/zone1/subzone1")));
    let weights: Vec<(u32, usize)> = cla
        .endpoints
        .iter()
        .map(|g| (g.load_balancing_weight.unwrap().value, g.lb_endpoints.len()))
        .collect();
    assert_eq!(weights, [(80, 1), (20, 1), (1, 0)]);
}

#[test]
fn a_workload_s_labels_give_its_locality_before_anything_else() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    };
    let topology = labels(&[
        ("topology.kubernetes.io/region", "us-east"),
        ("topology.kubernetes.io/zone", "zone-a"),
    ]);
    assert_eq!(
        from_labels(&topology),
        Some(Locality::parse("us-east/zone-a"))
    );
    let istio = labels(&[("istio-locality", "us-east.zone-b.rack-1")]);
    assert_eq!(
        from_labels(&istio),
        Some(Locality::parse("us-east/zone-b/rack-1"))
    );
    assert_eq!(from_labels(&labels(&[("app", "web")])), None);
}

#[test]
fn an_assignment_is_made_once_per_place() {
    let eps = [
        endpoint("1.1.1.1", "region1/zone1", &[]),
        endpoint("2.2.2.2", "region1/zone2", &[]),
    ];
    let l = localized(&eps, plan(None, true).unwrap());
    let here = l.for_place(&at("region1/zone1"));
    assert!(Arc::ptr_eq(&here, &l.for_place(&at("region1/zone1"))));
    assert_ne!(here.version, l.for_place(&at("region1/zone2")).version);
}
