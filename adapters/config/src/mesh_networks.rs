//! Istio's MeshNetworks (pilot-discovery's `--networksConfig`, the `meshNetworks` key of the
//! `istio` ConfigMap): the networks of a multi-network mesh and the gateways through which
//! each is reached from the others.
//!
//! ```yaml
//! networks:
//!   network2:
//!     endpoints:
//!     - fromCidr: 10.2.0.0/16        # endpoints in this range are on network2
//!     - fromRegistry: Kubernetes     # endpoints of this registry are on network2
//!     gateways:
//!     - address: 192.0.2.10          # its east-west gateway, as the other networks reach it
//!       port: 15443
//! ```
//!
//! An endpoint's network is the one its registry gives it (a WorkloadEntry's or
//! ServiceEntry endpoint's `network`, a Kubernetes namespace's `topology.istio.io/network`
//! label); without one, the first network whose `endpoints` match it. [`parse`] checks the
//! file as Istio's `ValidateMeshNetworks` does.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The networks of the mesh, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeshNetworks {
    /// Each network: which endpoints are on it, and its gateways.
    #[serde(default)]
    pub networks: BTreeMap<String, Network>,
}

/// One network.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Network {
    /// Which endpoints are on it.
    #[serde(default)]
    pub endpoints: Vec<NetworkEndpoints>,
    /// The gateways that reach it from other networks.
    #[serde(default)]
    pub gateways: Vec<Gateway>,
}

/// Endpoints on a network: by address range or by registry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEndpoints {
    /// Endpoints whose address is in this range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_cidr: Option<String>,
    /// Endpoints of this registry (`Kubernetes`, a cluster's name, `File`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_registry: Option<String>,
}

/// A network's gateway.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gateway {
    /// Its address, as other networks reach it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// A service whose addresses are the gateway's (not supported yet: use `address`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_service_name: Option<String>,
    /// Its mTLS port (Istio's 15443).
    #[serde(default)]
    pub port: u32,
    /// Its locality (read, not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<String>,
}

impl MeshNetworks {
    /// Each network's gateways, as addresses and ports (those given by address).
    pub fn gateways(&self) -> BTreeMap<&str, Vec<(IpAddr, u16)>> {
        self.networks
            .iter()
            .map(|(name, n)| {
                let gateways = n
                    .gateways
                    .iter()
                    .filter_map(|g| {
                        let address = g.address.as_deref()?.parse().ok()?;
                        Some((address, u16::try_from(g.port).ok()?))
                    })
                    .collect();
                (name.as_str(), gateways)
            })
            .filter(|(_, g): &(&str, Vec<_>)| !g.is_empty())
            .collect()
    }

    /// The network `meshNetworks` puts an endpoint at `address` of `registry` on, if any.
    pub fn network_of(&self, address: &str, registry: &str) -> Option<&str> {
        let ip: Option<IpAddr> = address.parse().ok();
        self.networks.iter().find_map(|(name, n)| {
            n.endpoints
                .iter()
                .any(|e| {
                    let cidr = e.from_cidr.as_deref().and_then(|c| c.parse::<IpNet>().ok());
                    cidr.zip(ip).is_some_and(|(c, ip)| c.contains(&ip))
                        || e.from_registry.as_deref() == Some(registry)
                })
                .then_some(name.as_str())
        })
    }
}

/// Reads a MeshNetworks file's YAML (or JSON) and checks it as Istio's `ValidateMeshNetworks`:
/// every endpoint entry names a range or a registry (a range that parses), every gateway an
/// address (an IP address here) and a port.
pub fn parse(text: &str) -> Result<MeshNetworks, String> {
    let networks: MeshNetworks = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    let mut errors = Vec::new();
    for (name, n) in &networks.networks {
        for (i, e) in n.endpoints.iter().enumerate() {
            let at = format!("networks.{name}.endpoints[{i}]");
            match (&e.from_cidr, &e.from_registry) {
                (Some(_), Some(_)) | (None, None) => {
                    errors.push(format!("{at}: set one of fromCidr and fromRegistry"))
                }
                (Some(cidr), None) if cidr.parse::<IpNet>().is_err() => {
                    errors.push(format!("{at}.fromCidr: {cidr:?} is not an address range"))
                }
                _ => {}
            }
        }
        for (i, g) in n.gateways.iter().enumerate() {
            let at = format!("networks.{name}.gateways[{i}]");
            match (&g.address, &g.registry_service_name) {
                (Some(a), None) if a.parse::<IpAddr>().is_err() => errors.push(format!(
                    "{at}.address: {a:?} is not an IP address (host names are not resolved)"
                )),
                (Some(_), None) => {}
                (None, Some(_)) => errors.push(format!(
                    "{at}.registryServiceName: not supported yet: give the gateway's address"
                )),
                _ => errors.push(format!("{at}: set one of address and registryServiceName")),
            }
            if !(1..=65535).contains(&g.port) {
                errors.push(format!("{at}.port: {} is not a port (1 to 65535)", g.port));
            }
        }
    }
    if errors.is_empty() {
        Ok(networks)
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istio_s_layout_reads_and_bad_entries_are_named() {
        let good = "networks:\n  net2:\n    endpoints: [{fromCidr: 10.2.0.0/16}, {fromRegistry: east}]\n    \
                    gateways: [{address: 192.0.2.10, port: 15443}]\n  net1:\n    endpoints: [{fromRegistry: Kubernetes}]\n";
        let n = parse(good).unwrap();
        assert_eq!(n.network_of("10.2.3.4", "File"), Some("net2"));
        assert_eq!(n.network_of("10.9.3.4", "east"), Some("net2"));
        assert_eq!(n.network_of("10.9.3.4", "Kubernetes"), Some("net1"));
        assert_eq!(n.network_of("10.9.3.4", "File"), None);
        let gateways = n.gateways();
        assert_eq!(gateways["net2"], [("192.0.2.10".parse().unwrap(), 15443)]);
        assert!(!gateways.contains_key("net1"), "no gateway, no entry");

        let bad = "networks:\n  n:\n    endpoints: [{}]\n    gateways: [{address: gw.example.com, port: 0}]\n";
        let err = parse(bad).unwrap_err();
        for want in [
            "networks.n.endpoints[0]: set one of fromCidr and fromRegistry",
            "networks.n.gateways[0].address: \"gw.example.com\" is not an IP address",
            "networks.n.gateways[0].port: 0 is not a port",
        ] {
            assert!(err.contains(want), "{err}\nwant {want}");
        }
    }
}
