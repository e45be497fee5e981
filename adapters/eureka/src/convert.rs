//! Eureka instances into wayfinder registrations: one service per (namespace, hostname), with
//! the rules written in the crate docs (`# Mapping`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use wayfinder_registry::{
    Endpoint, Health, Labels, Locality, Protocol, Registration, RegistryError, Resolution, Service,
    ServiceKey,
};

use crate::api::Instance;
use crate::mirror::Mirror;
use crate::{HOSTNAME_KEY, NAMESPACE_KEY, PORT_KEY};

/// Metadata key naming the protocol of the `http` port.
const PROTOCOL_KEY: &str = "protocol";

/// What a registry's instances map to.
#[derive(Debug, Default)]
pub(crate) struct Converted {
    /// Valid registrations, normalized.
    pub(crate) registrations: BTreeMap<ServiceKey, Registration>,
    /// Services whose registration failed validation: they keep their last good state.
    pub(crate) refused: BTreeSet<ServiceKey>,
    /// An `Invalid` item per skipped instance and refused registration.
    pub(crate) problems: Vec<RegistryError>,
}

/// One instance that passed its own checks, on its way to being an endpoint.
struct Member<'a> {
    app: &'a str,
    id: &'a str,
    endpoint: Endpoint,
    http: Option<(u16, Protocol)>,
    https: Option<u16>,
    declared_port: Option<u16>,
}

/// Maps every instance of `mirror`. `base` (the registry URL, password redacted) prefixes the
/// origins of problems; `suffix` makes hostnames of vip addresses and application names.
pub(crate) fn convert(mirror: &Mirror, base: &str, suffix: &str) -> Converted {
    let mut out = Converted::default();
    let mut groups = BTreeMap::<ServiceKey, Vec<Member<'_>>>::new();
    for ((app, id), instance) in &mirror.instances {
        match member(app, id, instance, suffix) {
            Ok((key, member)) => groups.entry(key).or_default().push(member),
            Err(detail) => out.problems.push(RegistryError::Invalid {
                origin: format!("{base}/apps/{app}/{id}"),
                detail: format!("application {app} instance {id}: {detail}; instance skipped"),
            }),
        }
    }
    for (key, members) in groups {
        match registration(&key, members) {
            Ok(reg) => {
                out.registrations.insert(key, reg);
            }
            Err(detail) => {
                out.refused.insert(key);
                out.problems.push(RegistryError::Invalid {
                    origin: format!("{base}/apps"),
                    detail,
                });
            }
        }
    }
    out
}

fn member<'a>(
    app: &'a str,
    id: &'a str,
    instance: &Instance,
    suffix: &str,
) -> Result<(ServiceKey, Member<'a>), String> {
    let meta = &instance.metadata;
    let hostname = hostname(app, instance, suffix)?;
    let namespace = match meta.get(NAMESPACE_KEY).map(|s| s.trim()) {
        Some(ns) if !ns.is_empty() => ns,
        _ => "default",
    };
    let address = match instance.ip_addr.as_deref() {
        None | Some("") => return Err("no ipAddr".into()),
        Some(ip) if ip.parse::<IpAddr>().is_err() => {
            return Err(format!("ipAddr {ip:?} is not an IP address"));
        }
        Some(ip) => ip,
    };
    let enabled = |port: &Option<crate::api::PortInfo>, default: bool| match port {
        Some(p) if p.enabled.unwrap_or(default) => Some(p.number),
        _ => None,
    };
    let http = enabled(&instance.port, true);
    let https = enabled(&instance.secure_port, false);
    if http == Some(0) || https == Some(0) {
        return Err("an enabled port is 0".into());
    }
    let declared_port = match meta.get(PORT_KEY) {
        None => None,
        Some(v) => match v.trim().parse::<u16>() {
            Ok(n) if n != 0 => Some(n),
            _ => return Err(format!("metadata {PORT_KEY} {v:?} is not a port number")),
        },
    };
    let protocol = meta
        .get(PROTOCOL_KEY)
        .map_or(Protocol::Http, |p| Protocol::parse(p));

    let mut endpoint = Endpoint::new(address);
    endpoint.labels = meta
        .iter()
        .filter(|(k, _)| ![HOSTNAME_KEY, NAMESPACE_KEY, PORT_KEY].contains(&k.as_str()))
        .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
        .collect::<Labels>();
    endpoint.health = health(instance);
    endpoint.locality = locality(instance);
    let key = ServiceKey::new(namespace, hostname);
    Ok((
        key,
        Member {
            app,
            id,
            endpoint,
            http: http.map(|n| (n, protocol)),
            https,
            declared_port,
        },
    ))
}

/// Metadata `wayfinder.io/hostname` verbatim; else the first vip address plus the suffix; else
/// the application name plus the suffix; lower-cased.
fn hostname(app: &str, instance: &Instance, suffix: &str) -> Result<String, String> {
    let vip = instance
        .vip_address
        .as_deref()
        .and_then(|v| v.split(',').map(str::trim).find(|v| !v.is_empty()));
    let (host, from) = match (instance.metadata.get(HOSTNAME_KEY), vip) {
        (Some(host), _) => (host.trim().to_ascii_lowercase(), HOSTNAME_KEY),
        (None, Some(vip)) => (format!("{vip}{suffix}").to_ascii_lowercase(), "vipAddress"),
        (None, None) => (format!("{app}{suffix}").to_ascii_lowercase(), "app"),
    };
    if is_dns_name(&host) {
        Ok(host)
    } else {
        Err(format!(
            "hostname {host:?} (from {from}) is not a valid DNS name"
        ))
    }
}

/// `Healthy` only for status `UP` without an `OUT_OF_SERVICE` override.
fn health(instance: &Instance) -> Health {
    let up = instance.status.as_deref() == Some("UP");
    let out_of_service = instance.overridden_status.as_deref() == Some("OUT_OF_SERVICE");
    if up && !out_of_service {
        Health::Healthy
    } else {
        Health::Unhealthy
    }
}

/// For `Amazon` data centers: the availability zone, and the region it is in (the zone
/// without its last letter: `us-east-1c` is in `us-east-1`).
fn locality(instance: &Instance) -> Locality {
    let Some(dc) = &instance.data_center_info else {
        return Locality::default();
    };
    if dc.name.as_deref() != Some("Amazon") {
        return Locality::default();
    }
    let zone = dc
        .metadata
        .get("availability-zone")
        .map_or("", |z| z.trim());
    let region = zone.char_indices().last().map_or("", |(i, _)| &zone[..i]);
    Locality {
        region: region.into(),
        zone: zone.into(),
        subzone: "".into(),
    }
}

fn registration(key: &ServiceKey, members: Vec<Member<'_>>) -> Result<Registration, String> {
    let mut service = Service::new(key.hostname.clone(), key.namespace.clone());
    service.resolution = Resolution::ClientSideLb;
    let all_http = members.iter().all(|m| m.http.is_some());
    let all_https = members.iter().all(|m| m.https.is_some());
    if all_http {
        let declared = most_common(members.iter().filter_map(|m| m.declared_port));
        let used = most_common(members.iter().filter_map(|m| m.http.map(|(n, _)| n)));
        let protocol = most_common(members.iter().filter_map(|m| m.http.map(|(_, p)| p)));
        if let Some(number) = declared.or(used) {
            service = service.with_port("http", number, protocol.unwrap_or_default());
        }
    } else if members.iter().any(|m| m.http.is_some()) {
        tracing::debug!(service = %key, "port not enabled on every instance: no http port");
    }
    if all_https {
        if let Some(number) = most_common(members.iter().filter_map(|m| m.https)) {
            service = service.with_port("https", number, Protocol::Https);
        }
    } else if members.iter().any(|m| m.https.is_some()) {
        tracing::debug!(service = %key, "securePort not enabled on every instance: no https port");
    }
    let mut endpoints: Vec<(Endpoint, &str, &str)> = members
        .into_iter()
        .map(|m| {
            let mut ep = m.endpoint;
            if let (true, Some((n, _))) = (all_http, m.http) {
                ep = ep.with_port("http", n);
            }
            if let (true, Some(n)) = (all_https, m.https) {
                ep = ep.with_port("https", n);
            }
            (ep, m.app, m.id)
        })
        .collect();
    // Registration::normalized's order, so that indices in validation errors name instances.
    endpoints.sort_by(|(a, ..), (b, ..)| {
        (&a.address, &a.ports, &a.cluster_id).cmp(&(&b.address, &b.ports, &b.cluster_id))
    });
    let names: Vec<(&str, &str)> = endpoints.iter().map(|(_, a, i)| (*a, *i)).collect();
    let reg = Registration::new(service, endpoints.into_iter().map(|(e, ..)| e).collect());
    match reg.validate() {
        Ok(()) => Ok(reg.normalized()),
        Err(err) => {
            let culprit = err
                .field
                .strip_prefix("endpoints[")
                .and_then(|rest| rest.split(']').next())
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| names.get(i));
            Err(match culprit {
                Some((app, id)) => format!("{err} (application {app} instance {id}); not sent"),
                None => format!("{err}; not sent"),
            })
        }
    }
}

/// The value most items have; ties go to the lowest.
fn most_common<T: Ord>(items: impl Iterator<Item = T>) -> Option<T> {
    let mut counts = BTreeMap::<T, usize>::new();
    for item in items {
        *counts.entry(item).or_default() += 1;
    }
    let mut best: Option<(T, usize)> = None;
    for (item, n) in counts {
        if best.as_ref().is_none_or(|(_, m)| n > *m) {
            best = Some((item, n));
        }
    }
    best.map(|(item, _)| item)
}

/// DNS labels of letters, digits, `-` and `_` (the rule `Registration::validate` applies), at
/// most 253 characters.
pub(crate) fn is_dns_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests;
