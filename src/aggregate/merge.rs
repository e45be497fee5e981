//! The one rule for a service several registries report.
//!
//! Istio merges services from several registries in four places with four rules. Wayfinder
//! merges in exactly one place, here, when the aggregate builds a snapshot. For one
//! [`ServiceKey`] (namespace and hostname), the registries that report it are taken in
//! `--registries` order, earliest first (it has **precedence**), and:
//!
//! 1. **There is one service.** Its endpoints are the union of every registry's endpoints,
//!    each tagged with the registry that reported it. An endpoint reported identically (same
//!    address and ports) by two registries is kept once, from the registry with precedence.
//! 2. **Ports merge by number.** The merged service has every port number any registry reports.
//!    For a number several registries report, the registry with precedence decides the name,
//!    protocol and target port; each disagreement is a [`Conflict`]. A port whose name is
//!    already taken by another number is renamed `<name>-<number>` (also a conflict).
//!    An endpoint serves exactly the ports *its own* registry's service has: a Consul instance
//!    never lands in the cluster of a port only Kubernetes knows.
//! 3. **Single-valued attributes** (resolution, mesh-external, exportTo) come from the registry
//!    with precedence; a different value elsewhere is a conflict.
//! 4. **Set-valued attributes** are unions, in precedence order: addresses (VIPs), service
//!    accounts, and labels (for a label key with two values, precedence decides: a conflict).
//! 5. An endpoint that cannot be served under the merged resolution (a DNS name when the merged
//!    service is resolved client-side) is dropped, and that is a conflict too.
//!
//! Conflicts are logged when they first appear, counted in `wayfinder_merge_conflicts`, and
//! listed in `/debug/registryz`.
//!
//! **Cost:** a merge is linear in the endpoints of the key it merges. Repeats (rule 1) are
//! found with a set of what was kept, and each endpoint is a [`SharedEndpoint`] into its
//! registration's list, not a copy. The aggregate merges only the keys that changed since the
//! last snapshot, and checks only those (`build.rs`); `benches/merge.rs` measures it.

use std::collections::{BTreeMap, HashSet};

use wayfinder_registry::{Port, Registration, RegistryId, Resolution, Service, ServiceKey};

use crate::snapshot::{Conflict, EndpointView, MergedService, SharedEndpoint};

/// Merges what each registry reports for one key. `contributions` are in precedence order and
/// not empty.
pub fn merge(
    key: &ServiceKey,
    contributions: &[(&RegistryId, &Registration)],
) -> (MergedService, Vec<Conflict>) {
    let mut conflicts = Vec::new();
    let (first_id, first) = contributions[0];
    let mut service = Service {
        ports: Vec::new(),
        addresses: Vec::new(),
        service_accounts: Vec::new(),
        labels: Default::default(),
        ..(*first.service).clone()
    };
    let mut conflict =
        |field: String, winner: &RegistryId, wv: String, loser: &RegistryId, lv: String| {
            conflicts.push(Conflict {
                key: key.clone(),
                field,
                winner: winner.clone(),
                winner_value: wv,
                loser: loser.clone(),
                loser_value: lv,
            });
        };
    // Which registry decided each port number, to name the winner of a later disagreement.
    let mut port_owner: BTreeMap<u16, &RegistryId> = BTreeMap::new();
    // Every registry's endpoints in precedence order; repeats are dropped at the end.
    let mut endpoints: Vec<EndpointView> = Vec::new();
    for &(id, reg) in contributions {
        let s = &*reg.service;
        if id != first_id {
            let f = &*first.service;
            if s.resolution != f.resolution {
                conflict(
                    "resolution".into(),
                    first_id,
                    format!("{:?}", f.resolution),
                    id,
                    format!("{:?}", s.resolution),
                );
            }
            if s.mesh_external != f.mesh_external {
                conflict(
                    "mesh_external".into(),
                    first_id,
                    f.mesh_external.to_string(),
                    id,
                    s.mesh_external.to_string(),
                );
            }
            if s.export_to != f.export_to {
                conflict(
                    "export_to".into(),
                    first_id,
                    format!("{:?}", f.export_to.0),
                    id,
                    format!("{:?}", s.export_to.0),
                );
            }
        }
        for port in &s.ports {
            merge_port(&mut service.ports, &mut port_owner, id, port, &mut conflict);
        }
        push_unique(&mut service.addresses, &s.addresses);
        push_unique(&mut service.address_ranges, &s.address_ranges);
        push_unique(&mut service.service_accounts, &s.service_accounts);
        for (k, v) in &s.labels {
            match service.labels.get(k) {
                Some(existing) if existing != v => {
                    conflict(
                        format!("labels.{k}"),
                        first_id,
                        existing.to_string(),
                        id,
                        v.to_string(),
                    );
                }
                Some(_) => {}
                None => {
                    service.labels.insert(k.clone(), v.clone());
                }
            }
        }
        for ep in SharedEndpoint::all(&reg.endpoints) {
            if service.resolution == Resolution::ClientSideLb
                && !ep.network_only()
                && ep.ip().is_none()
            {
                conflict(
                    format!("endpoints[{}]", ep.address),
                    first_id,
                    "client-side resolution needs IP addresses".into(),
                    id,
                    "dropped: not an IP address".into(),
                );
                continue;
            }
            let ports = s.ports.iter().map(|p| (p.number, ep.port_for(p))).collect();
            endpoints.push(EndpointView {
                registry: id.clone(),
                endpoint: ep,
                ports,
            });
        }
    }
    let registries = contributions.iter().map(|(id, _)| (*id).clone()).collect();
    (
        MergedService {
            service,
            registries,
            endpoints: without_repeats(endpoints),
        },
        conflicts,
    )
}

/// `endpoints` without those whose address and resolved ports an earlier one has: an endpoint
/// reported identically by two registries is kept once, from the one with precedence, and the
/// order is otherwise kept. An endpoint without an address (known only by its network) has
/// no address to tell it by: it is a repeat only of one equal in every field. One set of what
/// was kept, not a scan of the list per endpoint, which made a service of n endpoints cost n²
/// (25 million comparisons at 5,000).
fn without_repeats(endpoints: Vec<EndpointView>) -> Vec<EndpointView> {
    let keep: Vec<bool> = {
        let mut seen = HashSet::with_capacity(endpoints.len());
        let mut remote = HashSet::new();
        endpoints
            .iter()
            .map(|e| {
                if e.endpoint.network_only() {
                    remote.insert((&*e.endpoint, &e.ports))
                } else {
                    seen.insert((&*e.endpoint.address, &e.ports))
                }
            })
            .collect()
    };
    if keep.iter().all(|k| *k) {
        return endpoints;
    }
    endpoints
        .into_iter()
        .zip(keep)
        .filter_map(|(e, keep)| keep.then_some(e))
        .collect()
}

fn merge_port<'a>(
    ports: &mut Vec<Port>,
    owner: &mut BTreeMap<u16, &'a RegistryId>,
    id: &'a RegistryId,
    port: &Port,
    conflict: &mut impl FnMut(String, &RegistryId, String, &RegistryId, String),
) {
    if let Some(existing) = ports.iter().find(|p| p.number == port.number) {
        let winner = owner[&port.number];
        let field = |f: &str| format!("ports[{}].{f}", port.number);
        if existing.name != port.name {
            conflict(
                field("name"),
                winner,
                existing.name.to_string(),
                id,
                port.name.to_string(),
            );
        }
        if existing.protocol != port.protocol {
            conflict(
                field("protocol"),
                winner,
                existing.protocol.to_string(),
                id,
                port.protocol.to_string(),
            );
        }
        if existing.target_port != port.target_port {
            let show = |t: Option<u16>| t.map_or("unset".to_string(), |t| t.to_string());
            conflict(
                field("target_port"),
                winner,
                show(existing.target_port),
                id,
                show(port.target_port),
            );
        }
        return;
    }
    let mut port = port.clone();
    if let Some(taken) = ports.iter().find(|p| p.name == port.name) {
        let renamed = format!("{}-{}", port.name, port.number);
        let winner = owner[&taken.number];
        conflict(
            format!("ports[{}].name", port.number),
            winner,
            format!("{} is port {}", taken.name, taken.number),
            id,
            format!("renamed to {renamed}"),
        );
        port.name = renamed.into();
    }
    owner.insert(port.number, id);
    ports.push(port);
}

fn push_unique<T: PartialEq + Clone>(into: &mut Vec<T>, from: &[T]) {
    for item in from {
        if !into.contains(item) {
            into.push(item.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wayfinder_registry::{Endpoint, Protocol};

    fn key() -> ServiceKey {
        ServiceKey::new("default", "reviews.default.svc.cluster.local")
    }

    fn svc(ports: &[(&str, u16, Protocol)]) -> Service {
        let mut s = Service::new("reviews.default.svc.cluster.local", "default");
        for (n, p, proto) in ports {
            s = s.with_port(n, *p, *proto);
        }
        s
    }

    #[test]
    fn unions_endpoints_and_ports_with_registry_tags() {
        let k8s = RegistryId::new("Kubernetes");
        let consul = RegistryId::new("Consul");
        let mut a = svc(&[("http", 9080, Protocol::Http)]);
        a.addresses = vec!["10.96.0.1".parse().unwrap()];
        let b = svc(&[
            ("http", 9080, Protocol::Http),
            ("metrics", 9090, Protocol::Tcp),
        ]);
        let ra = Registration::new(a, vec![Endpoint::new("10.0.0.1")]);
        let rb = Registration::new(b, vec![Endpoint::new("10.0.1.1").with_port("http", 8080)]);
        let (m, conflicts) = merge(&key(), &[(&k8s, &ra), (&consul, &rb)]);
        assert!(conflicts.is_empty(), "{conflicts:?}");
        assert_eq!(m.registries, [k8s.clone(), consul.clone()]);
        let numbers: Vec<u16> = m.service.ports.iter().map(|p| p.number).collect();
        assert_eq!(numbers, [9080, 9090]);
        assert_eq!(m.endpoints.len(), 2);
        assert_eq!(m.endpoints[0].registry, k8s);
        assert_eq!(
            m.endpoints[0].ports,
            BTreeMap::from([(9080, 9080)]),
            "a Kubernetes endpoint does not serve Consul's 9090"
        );
        assert_eq!(m.endpoints[1].registry, consul);
        assert_eq!(
            m.endpoints[1].ports,
            BTreeMap::from([(9080, 8080), (9090, 9090)])
        );
        assert_eq!(m.service.addresses.len(), 1);
    }

    #[test]
    fn precedence_settles_conflicts_and_records_them() {
        let first = RegistryId::new("File");
        let second = RegistryId::new("Mock");
        let a = svc(&[("http", 9080, Protocol::Http)]);
        let mut b = svc(&[
            ("tcp", 9080, Protocol::Tcp),
            ("http", 9443, Protocol::Https),
        ]);
        b.resolution = Resolution::Dns;
        let ra = Registration::new(a, vec![]);
        let rb = Registration::new(b, vec![Endpoint::new("reviews.example.com")]);
        let (m, conflicts) = merge(&key(), &[(&first, &ra), (&second, &rb)]);
        let fields: Vec<&str> = conflicts.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "resolution",
                "ports[9080].name",
                "ports[9080].protocol",
                "ports[9443].name",
                "endpoints[reviews.example.com]"
            ]
        );
        assert!(
            conflicts
                .iter()
                .all(|c| c.winner == first && c.loser == second)
        );
        assert_eq!(m.service.ports[0].protocol, Protocol::Http);
        assert_eq!(&*m.service.ports[1].name, "http-9443");
        assert_eq!(m.service.resolution, Resolution::ClientSideLb);
        assert!(
            m.endpoints.is_empty(),
            "a DNS name cannot be an endpoint of a client-side service"
        );
    }

    #[test]
    fn repeats_are_dropped_and_the_order_is_kept() {
        let (a, b) = (RegistryId::new("A"), RegistryId::new("B"));
        let http = svc(&[("http", 80, Protocol::Http)]);
        let ra = Registration::new(
            http.clone(),
            vec![
                Endpoint::new("10.0.0.2"),
                Endpoint::new("10.0.0.1"),
                Endpoint::new("10.0.0.2").with_port("http", 8080),
            ],
        );
        let mut repeat = Endpoint::new("10.0.0.1");
        repeat.weight = 5;
        let rb = Registration::new(
            http,
            vec![
                Endpoint::new("10.0.0.3"),
                repeat,
                Endpoint::new("10.0.0.2").with_port("http", 8080),
                Endpoint::new("10.0.0.4"),
            ],
        );
        let (m, _) = merge(&key(), &[(&a, &ra), (&b, &rb)]);
        let kept: Vec<(&str, &str, u16, u32)> = m
            .endpoints
            .iter()
            .map(|e| {
                let ep = &e.endpoint;
                (e.registry.as_str(), &*ep.address, e.ports[&80], ep.weight)
            })
            .collect();
        assert_eq!(
            kept,
            [
                ("A", "10.0.0.2", 80, 1),
                ("A", "10.0.0.1", 80, 1),
                ("A", "10.0.0.2", 8080, 1),
                ("B", "10.0.0.3", 80, 1),
                ("B", "10.0.0.4", 80, 1),
            ],
            "same address and ports: the first kept, whatever else differs"
        );
    }

    #[test]
    fn identical_endpoints_are_kept_once() {
        let (a, b) = (RegistryId::new("A"), RegistryId::new("B"));
        let r = Registration::new(
            svc(&[("http", 80, Protocol::Http)]),
            vec![Endpoint::new("10.0.0.1")],
        );
        let (m, _) = merge(&key(), &[(&a, &r), (&b, &r)]);
        assert_eq!(m.endpoints.len(), 1);
        assert_eq!(m.endpoints[0].registry, a);
    }

    #[test]
    fn endpoints_known_only_by_their_network_are_repeats_only_when_equal() {
        let (a, b) = (RegistryId::new("A"), RegistryId::new("B"));
        let on = |network: &str| {
            let mut e = Endpoint::new("");
            e.network = network.into();
            e
        };
        let r = Registration::new(
            svc(&[("http", 80, Protocol::Http)]),
            vec![on("net2"), on("net3"), Endpoint::new("10.0.0.1")],
        );
        // A client-side service keeps them (they have no address to be an IP), once each.
        let (m, conflicts) = merge(&key(), &[(&a, &r), (&b, &r)]);
        assert!(conflicts.is_empty(), "{conflicts:?}");
        let kept: Vec<(&str, &str)> = m
            .endpoints
            .iter()
            .map(|e| (&*e.endpoint.address, &*e.endpoint.network))
            .collect();
        assert_eq!(kept, [("", "net2"), ("", "net3"), ("10.0.0.1", "")]);
    }
}
