//! Kubernetes objects into the model, as Istio's Kubernetes registry maps them (see the crate
//! docs for every rule).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use wayfinder_registry::{
    Endpoint, ExportTo, Health, Labels, Locality, Port, Protocol, Registration, Resolution, Service,
};

use crate::objects::{
    CANONICAL_SAS, EXPORT_TO, EndpointObj, KUBERNETES_SAS, KubeLabels, NamespaceObj, NodeObj,
    PodObj, SliceObj, SvcObj, SvcPort,
};

/// Istio's default trust domain, for the SPIFFE ids of service accounts.
pub const TRUST_DOMAIN: &str = "cluster.local";
/// Pod label that overrides the locality (`region.zone.subzone`: label values cannot hold `/`).
pub const LOCALITY_LABEL: &str = "istio-locality";
/// Pod label naming the endpoint's network.
pub const NETWORK_LABEL: &str = "topology.istio.io/network";
/// Endpoint label carrying the cluster id (added as Istio does).
pub const CLUSTER_LABEL: &str = "topology.istio.io/cluster";

/// What the conversion needs besides the objects.
#[derive(Clone, Debug)]
pub(crate) struct Scope {
    /// Mesh domain: hostnames are `name.namespace.svc.<domain>`.
    pub(crate) domain: Arc<str>,
    /// The cluster id every endpoint carries.
    pub(crate) cluster_id: Arc<str>,
}

/// Looks up the objects an endpoint refers to.
pub(crate) trait Lookup {
    /// A pod by namespace and name.
    fn pod(&self, namespace: &str, name: &str) -> Option<&PodObj>;
    /// A node by name.
    fn node(&self, name: &str) -> Option<&NodeObj>;
    /// A namespace by name.
    fn namespace(&self, name: &str) -> Option<&NamespaceObj>;
}

/// A Service's hostname.
pub(crate) fn hostname(svc: &SvcObj, domain: &str) -> String {
    format!("{}.{}.svc.{domain}", svc.name, svc.namespace)
}

/// The registration for a Service and the EndpointSlices labelled with its name.
pub(crate) fn registration<'a>(
    svc: &SvcObj,
    slices: impl IntoIterator<Item = &'a SliceObj>,
    lookup: &dyn Lookup,
    scope: &Scope,
) -> Registration {
    let mut service = Service::new(hostname(svc, &scope.domain), svc.namespace.clone());
    // kube-dns and the like serve one number over UDP and TCP; the model has one port per
    // number, and proxies do not carry UDP.
    let shadowed = |p: &SvcPort| {
        p.protocol.eq_ignore_ascii_case("UDP")
            && svc
                .ports
                .iter()
                .any(|q| q.port == p.port && !q.protocol.eq_ignore_ascii_case("UDP"))
    };
    service.ports = svc
        .ports
        .iter()
        .filter(|p| !shadowed(p))
        .map(port)
        .collect();
    service.labels = labels(&svc.labels);
    service.export_to = ExportTo(list(svc.annotations.get(EXPORT_TO)).collect());
    service.addresses = svc
        .cluster_ips
        .iter()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    if svc.headless {
        service.resolution = Resolution::Passthrough;
    }
    let endpoints = if &*svc.kind == "ExternalName" {
        service.resolution = Resolution::Dns;
        service.mesh_external = true;
        service.addresses.clear();
        let name = svc.external_name.as_deref().unwrap_or_default();
        vec![with_cluster(Endpoint::new(name), scope)]
    } else {
        endpoints(svc, slices, lookup, scope)
    };
    service.service_accounts = service_accounts(svc, &endpoints);
    Registration::new(service, endpoints).normalized()
}

/// A Service port: its name (`port-<number>` for the one unnamed port Kubernetes allows), its
/// protocol and its numeric target port.
fn port(p: &SvcPort) -> Port {
    let number = u16::try_from(p.port).unwrap_or(0);
    Port {
        name: port_name(&p.name, p.port).into(),
        number,
        protocol: protocol(p),
        target_port: p.target_port.and_then(|t| u16::try_from(t).ok()),
    }
}

fn port_name(name: &str, number: i32) -> String {
    if name.is_empty() {
        format!("port-{number}")
    } else {
        name.to_owned()
    }
}

/// Istio's `ConvertProtocol`: UDP is UDP; otherwise `appProtocol` (with Kubernetes' standard
/// `kubernetes.io/h2c`, `/ws` and `/wss` names), else the port name's prefix before `-`
/// (`grpc-web` whole), case-insensitively; anything else is unsupported (served as TCP).
pub(crate) fn protocol(p: &SvcPort) -> Protocol {
    if p.protocol.eq_ignore_ascii_case("UDP") {
        return Protocol::Udp;
    }
    let name = match p.app_protocol.as_deref() {
        Some("kubernetes.io/h2c") => return Protocol::Http2,
        Some("kubernetes.io/ws") => return Protocol::Http,
        Some("kubernetes.io/wss") => return Protocol::Https,
        Some(app) => app,
        None => &p.name,
    };
    if name.to_ascii_lowercase().starts_with("grpc-web") {
        return Protocol::GrpcWeb;
    }
    Protocol::parse(name.split('-').next().unwrap_or_default())
}

/// The endpoints of every slice, one per pod: a dual-stack Service has one slice per address
/// family listing the same pods, and each pod is reached on the Service's first family.
fn endpoints<'a>(
    svc: &SvcObj,
    slices: impl IntoIterator<Item = &'a SliceObj>,
    lookup: &dyn Lookup,
    scope: &Scope,
) -> Vec<Endpoint> {
    let primary = match svc
        .cluster_ips
        .first()
        .and_then(|ip| ip.parse::<IpAddr>().ok())
    {
        Some(IpAddr::V6(_)) => "IPv6",
        _ => "IPv4",
    };
    let mut slices: Vec<&SliceObj> = slices
        .into_iter()
        .filter(|s| s.address_type == "IPv4" || s.address_type == "IPv6")
        .collect();
    // The primary family first, then by name, so that the result does not depend on the order
    // slices were seen.
    slices.sort_by_key(|s| (s.address_type != primary, s.name.clone()));
    let mut pods_seen = HashSet::new();
    let mut out = Vec::new();
    for slice in slices {
        for ep in &slice.endpoints {
            if let Some(pod) = &ep.pod
                && !pods_seen.insert(pod.clone())
            {
                continue;
            }
            if let Some(endpoint) = endpoint(svc, slice, ep, lookup, scope) {
                out.push(endpoint);
            }
        }
    }
    out
}

fn endpoint(
    svc: &SvcObj,
    slice: &SliceObj,
    ep: &EndpointObj,
    lookup: &dyn Lookup,
    scope: &Scope,
) -> Option<Endpoint> {
    // Kubernetes: the addresses of one endpoint are fungible; consumers may use the first.
    let address = ep.addresses.first()?;
    let mut endpoint = Endpoint::new(address.as_str());
    for (name, number) in &slice.ports {
        let Some(p) = svc.ports.iter().find(|p| &p.name == name) else {
            continue;
        };
        if let Ok(number) = u16::try_from(*number) {
            endpoint
                .ports
                .insert(port_name(&p.name, p.port).into(), number);
        }
    }
    endpoint.health = health(svc, ep);
    let pod = ep
        .pod
        .as_deref()
        .and_then(|name| lookup.pod(&slice.namespace, name));
    let node = ep
        .node
        .as_deref()
        .or(pod.and_then(|p| p.node.as_deref()))
        .and_then(|name| lookup.node(name));
    if let Some(pod) = pod {
        endpoint.labels = labels(&pod.labels);
        endpoint.service_account = pod.service_account.as_deref().map(Into::into);
        if let Some(network) = pod.labels.get(NETWORK_LABEL) {
            endpoint.network = network.as_str().into();
        }
    }
    // As Istio: the pod's label, else its namespace's.
    if endpoint.network.is_empty()
        && let Some(network) = lookup
            .namespace(&slice.namespace)
            .and_then(|ns| ns.network.clone())
    {
        endpoint.network = network;
    }
    endpoint.locality = locality(pod, node, ep);
    let mut endpoint = with_cluster(endpoint, scope);
    augment_labels(&mut endpoint);
    Some(endpoint)
}

/// Istio's `endpointHealthStatus`: ready (or no condition, or `publishNotReadyAddresses`) is
/// healthy; not ready and terminating is draining; not ready otherwise is unhealthy.
fn health(svc: &SvcObj, ep: &EndpointObj) -> Health {
    if svc.publish_not_ready || ep.ready.unwrap_or(true) {
        Health::Healthy
    } else if ep.terminating == Some(true) {
        Health::Draining
    } else {
        Health::Unhealthy
    }
}

/// The pod's `istio-locality` label, else its node's region, zone and subzone labels, else
/// the zone the EndpointSlice gives.
fn locality(pod: Option<&PodObj>, node: Option<&NodeObj>, ep: &EndpointObj) -> Locality {
    if let Some(label) = pod.and_then(|p| p.labels.get(LOCALITY_LABEL)) {
        return Locality::parse(&label.replace('.', "/"));
    }
    let part = |s: Option<&String>| Arc::<str>::from(s.map(String::as_str).unwrap_or_default());
    Locality {
        region: part(node.and_then(|n| n.region.as_ref())),
        zone: part(node.and_then(|n| n.zone.as_ref()).or(ep.zone.as_ref())),
        subzone: part(node.and_then(|n| n.subzone.as_ref())),
    }
}

fn with_cluster(mut endpoint: Endpoint, scope: &Scope) -> Endpoint {
    endpoint.cluster_id = scope.cluster_id.clone();
    endpoint
}

/// Istio's `AugmentLabels`: the cluster, the network and the locality as labels, so that
/// DestinationRule subsets can select on them.
fn augment_labels(endpoint: &mut Endpoint) {
    let mut add = |key: &str, value: &Arc<str>| {
        if !value.is_empty() {
            endpoint.labels.insert(key.into(), value.clone());
        }
    };
    add(CLUSTER_LABEL, &endpoint.cluster_id.clone());
    add(NETWORK_LABEL, &endpoint.network.clone());
    add(
        crate::objects::REGION_LABEL,
        &endpoint.locality.region.clone(),
    );
    add(crate::objects::ZONE_LABEL, &endpoint.locality.zone.clone());
    add(
        crate::objects::SUBZONE_LABEL,
        &endpoint.locality.subzone.clone(),
    );
}

/// The SPIFFE ids of the annotations' service accounts and of every endpoint's, sorted.
fn service_accounts(svc: &SvcObj, endpoints: &[Endpoint]) -> Vec<Arc<str>> {
    let spiffe = |sa: &str| format!("spiffe://{TRUST_DOMAIN}/ns/{}/sa/{sa}", svc.namespace);
    let mut all: Vec<Arc<str>> = list(svc.annotations.get(CANONICAL_SAS))
        .chain(list(svc.annotations.get(KUBERNETES_SAS)).map(|sa| spiffe(&sa).into()))
        .chain(
            endpoints
                .iter()
                .filter_map(|e| e.service_account.as_deref())
                .map(|sa| spiffe(sa).into()),
        )
        .collect();
    all.sort();
    all.dedup();
    all
}

fn list(value: Option<&String>) -> impl Iterator<Item = Arc<str>> + '_ {
    value
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Into::into)
}

fn labels(map: &KubeLabels) -> Labels {
    map.iter()
        .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
        .collect()
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
