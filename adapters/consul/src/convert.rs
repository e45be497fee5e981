//! Consul instances into the model: one [`Instance`] per health entry, then one
//! [`Registration`] per hostname from every instance that maps to it. The rules are written
//! in the crate's documentation; this module is where they live.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use wayfinder_registry::{
    Endpoint, Health, Locality, Port, Protocol, Registration, Service, ServiceKey,
};

use crate::api::{HealthEntry, Weights};
use crate::{HOSTNAME_KEY, NAMESPACE_KEY, PORT_KEY};

/// One Consul instance, mapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Instance {
    /// The service it belongs to in the model.
    pub(crate) key: ServiceKey,
    /// The service port's name and protocol (from the `protocol` meta).
    pub(crate) port_name: Arc<str>,
    pub(crate) protocol: Protocol,
    /// The port clients dial (the `wayfinder.io/port` meta, else the instance's port).
    pub(crate) service_port: u16,
    /// The endpoint, serving `port_name` on the instance's own port.
    pub(crate) endpoint: Endpoint,
}

/// How instances are named and judged.
#[derive(Clone, Debug)]
pub(crate) struct Mapping {
    /// Hostname template with `{service}`, `{datacenter}` and `{namespace}`.
    pub(crate) template: String,
    /// Whether an instance whose worst check is `warning` still gets traffic.
    pub(crate) warning_is_healthy: bool,
}

/// The placeholders a hostname template may use.
pub(crate) const PLACEHOLDERS: [&str; 3] = ["{service}", "{datacenter}", "{namespace}"];

impl Mapping {
    /// Maps the entries of one service in one datacenter. Entries that cannot be mapped are
    /// left out and described in the second list.
    pub(crate) fn instances(
        &self,
        entries: &[HealthEntry],
        queried_dc: Option<&str>,
    ) -> (Vec<Instance>, Vec<String>) {
        let mut out = Vec::with_capacity(entries.len());
        let mut errors = Vec::new();
        for entry in entries {
            // Connect sidecars, gateways: Consul's own mesh infrastructure, not workloads.
            if !entry.service.kind.is_empty() {
                continue;
            }
            match self.instance(entry, queried_dc) {
                Ok(instance) => out.push(instance),
                Err(e) => errors.push(format!(
                    "instance {:?} of service {:?} on node {:?}: {e}",
                    entry.service.id, entry.service.service, entry.node.node
                )),
            }
        }
        (out, errors)
    }

    fn instance(&self, entry: &HealthEntry, queried_dc: Option<&str>) -> Result<Instance, String> {
        let s = &entry.service;
        let dc = if entry.node.datacenter.is_empty() {
            queried_dc.unwrap_or_default()
        } else {
            &entry.node.datacenter
        };
        let namespace = match (s.meta.get(NAMESPACE_KEY), s.namespace.as_str()) {
            (Some(ns), _) => ns.clone(),
            (None, "") => "default".to_string(),
            (None, ns) => ns.to_string(),
        };
        let hostname = match s.meta.get(HOSTNAME_KEY) {
            Some(h) => h.to_ascii_lowercase(),
            None => self
                .template
                .replace("{service}", &s.service)
                .replace("{datacenter}", dc)
                .replace("{namespace}", &namespace)
                .to_ascii_lowercase(),
        };
        let address = if s.address.is_empty() {
            &entry.node.address
        } else {
            &s.address
        };
        let ip: IpAddr = address.parse().map_err(|_| {
            format!("address {address:?} is not an IP address (DNS names are not supported)")
        })?;
        if s.port == 0 {
            return Err("port 0".into());
        }
        let service_port = match s.meta.get(PORT_KEY) {
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(format!("meta {PORT_KEY}={p:?} is not a port number")),
            },
            None => s.port,
        };
        let protocol_name = s
            .meta
            .get("protocol")
            .map(|p| p.to_ascii_lowercase())
            .unwrap_or_else(|| "tcp".into());
        let protocol = Protocol::parse(&protocol_name);
        let port_name: Arc<str> = if protocol == Protocol::Unsupported {
            "tcp".into()
        } else {
            protocol_name.into()
        };
        let (health, weight) = health(entry, self.warning_is_healthy);
        let mut endpoint = Endpoint::new(ip.to_string()).with_port(&port_name, s.port);
        endpoint.labels = labels(&s.tags, &s.meta);
        endpoint.health = health;
        endpoint.weight = weight;
        endpoint.locality = Locality {
            region: dc.into(),
            ..Locality::default()
        };
        endpoint.cluster_id = dc.into();
        Ok(Instance {
            key: ServiceKey::new(namespace, hostname),
            port_name,
            protocol,
            service_port,
            endpoint,
        })
    }
}

/// The registration of `key` from every instance mapped to it, or `None` when there are none.
/// A service has one port: the name, protocol and number most of its instances say (ties go to
/// the smallest), since Consul registers one port per instance.
pub(crate) fn registration<'a>(
    key: &ServiceKey,
    instances: impl Iterator<Item = &'a Instance>,
) -> Option<Registration> {
    // (port name, protocol, number) → how many instances say so.
    type Vote<'a> = (&'a Arc<str>, Protocol, u16);
    let mut votes: BTreeMap<Vote, usize> = BTreeMap::new();
    let mut endpoints = Vec::new();
    for i in instances {
        *votes
            .entry((&i.port_name, i.protocol, i.service_port))
            .or_default() += 1;
        endpoints.push(i.endpoint.clone());
    }
    let mut best: Option<(Vote, usize)> = None;
    for (port, n) in votes {
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((port, n));
        }
    }
    let ((name, protocol, number), _) = best?;
    let mut service = Service::new(key.hostname.clone(), key.namespace.clone());
    service.ports.push(Port::new(name, number, protocol));
    // Endpoints that named the port differently serve it on their own port all the same.
    for e in &mut endpoints {
        if !e.ports.contains_key(name.as_ref())
            && let Some(p) = e.ports.values().next().copied()
        {
            e.ports.clear();
            e.ports.insert(name.clone(), p);
        }
    }
    Some(Registration::new(service, endpoints).normalized())
}

/// Health from the worst check (node checks such as `serfHealth` included), and the weight
/// Consul's `Weights` give that state.
fn health(entry: &HealthEntry, warning_is_healthy: bool) -> (Health, u32) {
    let worst = entry
        .checks
        .iter()
        .map(|c| match c.status.as_str() {
            "passing" => 0,
            "warning" => 1,
            _ => 2, // critical, maintenance, or a status this version does not know
        })
        .max()
        .unwrap_or(0);
    let weights = entry.service.weights.unwrap_or(Weights {
        passing: 1,
        warning: 1,
    });
    match worst {
        0 => (Health::Healthy, weights.passing.max(1)),
        // A warning weight of 0 is Consul's way to take warning instances out of rotation.
        1 if warning_is_healthy && weights.warning > 0 => (Health::Healthy, weights.warning),
        _ => (Health::Unhealthy, 1),
    }
}

/// Labels from tags of the form `key|value` (Istio's Consul adapter) or `key=value`, then
/// service meta (which wins a clash); wayfinder's own `wayfinder.io/` keys are not labels.
fn labels(tags: &[String], meta: &BTreeMap<String, String>) -> wayfinder_registry::Labels {
    let mut labels = wayfinder_registry::Labels::new();
    for tag in tags {
        if let Some((k, v)) = tag.split_once('|').or_else(|| tag.split_once('='))
            && !k.is_empty()
        {
            labels.insert(k.into(), v.into());
        }
    }
    for (k, v) in meta {
        if !k.starts_with("wayfinder.io/") {
            labels.insert(k.as_str().into(), v.as_str().into());
        }
    }
    labels
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
