//! Answer bodies in the shape a Consul 1.x server sends them: PascalCase field names in
//! Consul's order, the fields a client usually ignores included, `Tags` never null, `Meta`
//! `{}` when empty. Serialized straight from the state (no intermediate JSON tree): answers
//! are built under the state lock, and load runs build a thousand at once.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use super::dc::{Dc, Inst, Node};

/// The reason Consul gives a check put in maintenance mode without one.
const MAINT_REASON: &str = "Maintenance mode is enabled for this service, but no reason was provided. This is a default message.";

/// `GET /v1/catalog/services`: service name → union of its instances' tags, sorted. Consul's
/// own `consul` service is always there.
pub(super) fn catalog_services(dc: &Dc) -> Vec<u8> {
    let mut out: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    out.insert("consul", Vec::new());
    for (name, svc) in &dc.services {
        if !svc.instances.is_empty() {
            out.insert(name, svc.tags.keys().collect());
        }
    }
    serde_json::to_vec(&out).unwrap_or_else(|_| b"{}".to_vec())
}

/// What a health read asks for besides the service.
pub(super) struct HealthFilter {
    /// Only instances whose checks all pass.
    pub(super) passing: bool,
    /// Only instances with all these tags.
    pub(super) tags: Vec<String>,
}

/// `GET /v1/health/service/<service>`: one entry per instance, sorted by node name then
/// service ID (Consul sorts by node; clients must not rely on any order).
pub(super) fn health(dc_name: &str, dc: &Dc, service: &str, filter: &HealthFilter) -> Vec<u8> {
    let Some(svc) = dc.services.get(service) else {
        return b"[]".to_vec();
    };
    let mut found: Vec<(&String, &Inst, &Node)> = svc
        .instances
        .iter()
        .filter_map(|(id, inst)| dc.nodes.get(&inst.node).map(|node| (id, inst, node)))
        .filter(|(_, inst, _)| filter.tags.iter().all(|t| inst.tags.contains(t)))
        .filter(|(_, inst, node)| !filter.passing || all_passing(inst, node))
        .collect();
    found.sort_by(|a, b| (&a.1.node, a.0).cmp(&(&b.1.node, b.0)));
    let entries: Vec<Entry<'_>> = found
        .into_iter()
        .map(|(id, inst, node)| Entry {
            node: node_out(dc_name, &inst.node, node),
            service: service_out(service, id, inst),
            checks: checks_out(service, id, inst, node),
        })
        .collect();
    serde_json::to_vec(&entries).unwrap_or_else(|_| b"[]".to_vec())
}

fn all_passing(inst: &Inst, node: &Node) -> bool {
    node.status == "passing"
        && !inst.maintenance
        && inst.check.as_deref().is_none_or(|s| s == "passing")
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Entry<'a> {
    node: NodeOut<'a>,
    service: ServiceOut<'a>,
    checks: Vec<CheckOut<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct NodeOut<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    node: &'a str,
    address: &'a str,
    datacenter: &'a str,
    tagged_addresses: BTreeMap<&'static str, &'a str>,
    meta: BTreeMap<&'static str, &'static str>,
    create_index: u64,
    modify_index: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ServiceOut<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    kind: &'a str,
    #[serde(rename = "ID")]
    id: &'a str,
    service: &'a str,
    tags: &'a [String],
    address: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    tagged_addresses: BTreeMap<&'static str, AddrOut<'a>>,
    meta: &'a BTreeMap<String, String>,
    port: u16,
    weights: WeightsOut,
    enable_tag_override: bool,
    proxy: ProxyOut,
    connect: Empty,
    peer_name: &'static str,
    create_index: u64,
    modify_index: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct AddrOut<'a> {
    address: &'a str,
    port: u16,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct WeightsOut {
    passing: u32,
    warning: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ProxyOut {
    mode: &'static str,
    mesh_gateway: Empty,
    expose: Empty,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct CheckOut<'a> {
    node: &'a str,
    #[serde(rename = "CheckID")]
    check_id: String,
    name: String,
    status: &'a str,
    notes: &'static str,
    output: &'static str,
    #[serde(rename = "ServiceID")]
    service_id: &'a str,
    service_name: &'a str,
    service_tags: &'a [String],
    #[serde(rename = "Type")]
    kind: &'static str,
    interval: &'static str,
    timeout: &'static str,
    exposed_port: u16,
    definition: Empty,
    create_index: u64,
    modify_index: u64,
}

fn node_out<'a>(dc_name: &'a str, name: &'a str, node: &'a Node) -> NodeOut<'a> {
    let a = node.address.as_str();
    let keys: &[&'static str] = match a.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => &["lan", "lan_ipv4", "wan", "wan_ipv4"],
        Ok(IpAddr::V6(_)) => &["lan", "lan_ipv6", "wan", "wan_ipv6"],
        Err(_) => &["lan", "wan"],
    };
    NodeOut {
        id: &node.id,
        node: name,
        address: a,
        datacenter: dc_name,
        tagged_addresses: keys.iter().map(|k| (*k, a)).collect(),
        meta: BTreeMap::from([("consul-network-segment", "")]),
        create_index: node.create_index,
        modify_index: node.modify_index,
    }
}

fn service_out<'a>(service: &'a str, id: &'a str, inst: &'a Inst) -> ServiceOut<'a> {
    let (a, port) = (inst.address.as_str(), inst.port);
    // Consul's agent tags a service address by its IP version; a name gets none.
    let keys: &[&'static str] = match a.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => &["lan_ipv4", "wan_ipv4"],
        Ok(IpAddr::V6(_)) => &["lan_ipv6", "wan_ipv6"],
        Err(_) => &[],
    };
    ServiceOut {
        kind: &inst.kind,
        id,
        service,
        tags: &inst.tags,
        address: a,
        tagged_addresses: keys
            .iter()
            .map(|k| (*k, AddrOut { address: a, port }))
            .collect(),
        meta: &inst.meta,
        port,
        weights: WeightsOut {
            passing: inst.weights.0,
            warning: inst.weights.1,
        },
        enable_tag_override: false,
        proxy: ProxyOut {
            mode: "",
            mesh_gateway: Empty {},
            expose: Empty {},
        },
        connect: Empty {},
        peer_name: "",
        create_index: inst.create_index,
        modify_index: inst.modify_index,
    }
}

fn checks_out<'a>(
    service: &'a str,
    id: &'a str,
    inst: &'a Inst,
    node: &'a Node,
) -> Vec<CheckOut<'a>> {
    let serf = CheckOut {
        check_id: "serfHealth".to_owned(),
        name: "Serf Health Status".to_owned(),
        status: &node.status,
        output: if node.status == "passing" {
            "Agent alive and reachable"
        } else {
            "Agent not live or unreachable"
        },
        create_index: node.check_create,
        modify_index: node.check_modify,
        ..blank(&inst.node)
    };
    let of_service = |check_id: String, name: String, status: &'a str| CheckOut {
        check_id,
        name,
        status,
        service_id: id,
        service_name: service,
        service_tags: &inst.tags,
        kind: "ttl",
        create_index: inst.check_create,
        modify_index: inst.check_modify,
        ..blank(&inst.node)
    };
    let mut checks = vec![serf];
    if let Some(status) = &inst.check {
        let name = format!("Service '{service}' check");
        checks.push(of_service(format!("service:{id}"), name, status));
    }
    if inst.maintenance {
        let name = "Service Maintenance Mode".to_owned();
        let mut check = of_service(format!("_service_maintenance:{id}"), name, "critical");
        check.notes = MAINT_REASON;
        check.kind = "maintenance";
        checks.push(check);
    }
    checks
}

/// A check with empty fields, to fill in.
fn blank(node: &str) -> CheckOut<'_> {
    CheckOut {
        node,
        check_id: String::new(),
        name: String::new(),
        status: "",
        notes: "",
        output: "",
        service_id: "",
        service_name: "",
        service_tags: &[],
        kind: "",
        interval: "",
        timeout: "",
        exposed_port: 0,
        definition: Empty {},
        create_index: 0,
        modify_index: 0,
    }
}
