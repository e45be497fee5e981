//! Endpoints: the workload instances behind a service.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

use crate::service::{Labels, Port};

/// One workload instance of a service.
///
/// An endpoint names service ports by **name**, as Istio's endpoints do: a registry may see an
/// endpoint before the service that owns it, and names survive a change of port number.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Endpoint {
    /// IP address, or a DNS name for services resolved by DNS; empty for an endpoint known
    /// only by its network (see [`Endpoint::network_only`]), shown as `null`.
    #[serde(serialize_with = "address_or_null")]
    pub address: Arc<str>,
    /// Port the workload listens on, per service port name. A service port missing here is
    /// served on that port's `target_port`, or else its number (see [`Endpoint::port_for`]).
    pub ports: BTreeMap<Arc<str>, u16>,
    /// Labels of the workload (`version: v1`); DestinationRule subsets select on them.
    pub labels: Labels,
    /// Where the workload runs.
    pub locality: Locality,
    /// Whether the workload should get traffic.
    pub health: Health,
    /// Relative load-balancing weight; at least 1.
    pub weight: u32,
    /// Network the address belongs to; empty for the default network.
    pub network: Arc<str>,
    /// Cluster the workload runs in (a Kubernetes cluster id, a Consul datacenter); may be empty.
    pub cluster_id: Arc<str>,
    /// Service account the workload runs as.
    pub service_account: Option<Arc<str>>,
}

impl Endpoint {
    /// A healthy endpoint of weight 1 at `address`, with no explicit ports.
    pub fn new(address: impl Into<Arc<str>>) -> Self {
        Self {
            address: address.into(),
            ports: BTreeMap::new(),
            labels: Labels::new(),
            locality: Locality::default(),
            health: Health::Healthy,
            weight: 1,
            network: "".into(),
            cluster_id: "".into(),
            service_account: None,
        }
    }

    /// Adds an explicit port for a service port name (builder style).
    pub fn with_port(mut self, service_port: &str, port: u16) -> Self {
        self.ports.insert(service_port.into(), port);
        self
    }

    /// Adds a label (builder style).
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The port this endpoint serves `port` on: its explicit port for that name, else the
    /// service port's target port, else the service port's number.
    pub fn port_for(&self, port: &Port) -> u16 {
        self.ports
            .get(&port.name)
            .copied()
            .or(port.target_port)
            .unwrap_or(port.number)
    }

    /// The address as an IP, when it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.address.parse().ok()
    }

    /// True for an endpoint with no address, only a `network`: Istio's WorkloadEntry that
    /// names a network and no address, reached through that network's gateways. Nothing
    /// can connect to it directly; it counts only towards the weight of its network's
    /// gateways for proxies on other networks.
    pub fn network_only(&self) -> bool {
        self.address.is_empty()
    }
}

/// An empty address (an endpoint known only by its network) as `null`.
fn address_or_null<S: serde::Serializer>(address: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    if address.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(address)
    }
}

/// Where a workload runs: `region/zone/subzone`, each part possibly empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Locality {
    /// Region, e.g. `us-east1` or a Consul datacenter.
    pub region: Arc<str>,
    /// Zone within the region.
    pub zone: Arc<str>,
    /// Sub-zone within the zone.
    pub subzone: Arc<str>,
}

impl Locality {
    /// Parses Istio's `region/zone/subzone` form; missing parts are empty.
    pub fn parse(label: &str) -> Self {
        let mut parts = label.splitn(3, '/');
        let mut next = || Arc::<str>::from(parts.next().unwrap_or(""));
        Self {
            region: next(),
            zone: next(),
            subzone: next(),
        }
    }

    /// True when no part is set.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty() && self.zone.is_empty() && self.subzone.is_empty()
    }
}

impl fmt::Display for Locality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.region, self.zone, self.subzone)
    }
}

/// Health of an endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Health {
    /// Ready for traffic.
    #[default]
    Healthy,
    /// Not ready; proxies keep it but send it no traffic.
    Unhealthy,
    /// Shutting down; finishes existing requests, gets no new ones.
    Draining,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Protocol;

    #[test]
    fn locality_parses_partial_labels() {
        let l = Locality::parse("us-east1/b");
        assert_eq!((&*l.region, &*l.zone, &*l.subzone), ("us-east1", "b", ""));
        assert!(Locality::parse("").is_empty());
        assert_eq!(Locality::parse("r/z/s").to_string(), "r/z/s");
    }

    #[test]
    fn endpoint_port_falls_back_to_target_port_then_number() {
        let mut port = Port::new("http", 80, Protocol::Http);
        let ep = Endpoint::new("10.0.0.1");
        assert_eq!(ep.port_for(&port), 80);
        port.target_port = Some(8080);
        assert_eq!(ep.port_for(&port), 8080);
        assert_eq!(ep.with_port("http", 9000).port_for(&port), 9000);
    }
}
