//! IST0109: VirtualServices of the mesh gateway (the sidecars) that define the same host,
//! where one namespace sees both (Istio's `virtualservice.ConflictingMeshGatewayHostsAnalyzer`).
//!
//! A sidecar takes one VirtualService per host; which one wins depends on the order the
//! objects were created in, so the routes of the others are silently ignored.

use std::collections::{BTreeMap, BTreeSet};

use super::lines::Field;
use super::message::Code;
use super::{Context, Found};
use crate::ConfigKey;
use crate::objects::Located;
use crate::validate::names::hosts_overlap;

/// One `ConflictingMeshGatewayVirtualServiceHosts` per VirtualService in a conflict (its first
/// one), naming every VirtualService of it and the host as Istio scopes it (`*/reviews.default.svc.cluster.local`:
/// exported to every namespace; `shop/…`: seen from `shop`).
pub(crate) fn mesh_hosts(cx: &Context<'_>, found: &mut Vec<Found>) {
    // Scope ("*" or a namespace) and full host name → the VirtualServices defining it.
    let mut hosts: BTreeMap<(String, String), Vec<&Located>> = BTreeMap::new();
    for (located, vs) in cx.virtual_services() {
        let mesh = vs.gateways.is_empty() || vs.gateways.iter().any(|g| g == "mesh");
        if !mesh {
            continue;
        }
        let namespace = &*located.object.meta.namespace;
        let scopes: BTreeSet<&str> =
            if vs.export_to.is_empty() || vs.export_to.iter().any(|e| e == "*") {
                BTreeSet::from(["*"])
            } else {
                vs.export_to
                    .iter()
                    .map(|e| if e == "." { namespace } else { e.as_str() })
                    .collect()
            };
        for scope in scopes {
            for host in &vs.hosts {
                let key = (scope.to_owned(), cx.fqdn(host, namespace));
                hosts.entry(key).or_default().push(located);
            }
        }
    }
    let mut reported: BTreeSet<ConfigKey> = BTreeSet::new();
    for ((scope, host), defining) in &hosts {
        let mut all = defining.clone();
        if scope != "*" {
            // Those exported everywhere are seen from this namespace too.
            for ((other_scope, other), more) in &hosts {
                if other_scope == "*" && hosts_overlap(host, other) {
                    all.extend(more);
                }
            }
        }
        // A VirtualService naming one host twice (`reviews` and its full name) is one.
        let mut seen = BTreeSet::new();
        all.retain(|l| seen.insert(l.object.key()));
        if all.len() < 2 {
            continue;
        }
        let mut names: Vec<String> = all
            .iter()
            .map(|l| format!("{}/{}", l.object.meta.namespace, l.object.meta.name))
            .collect();
        names.sort();
        let names = names.join(",");
        for located in all {
            if !reported.insert(located.object.key()) {
                continue;
            }
            let text = format!(
                "The VirtualServices {names} associated with mesh gateway define the same host \
                 {scope}/{host} which can lead to undefined behavior. This can be fixed by \
                 merging the conflicting VirtualServices into a single resource."
            );
            let field = Field::at("metadata").key("name");
            let code = Code::ConflictingMeshGatewayVirtualServiceHosts;
            found.push(Found::on(located, field, code, text));
        }
    }
}
