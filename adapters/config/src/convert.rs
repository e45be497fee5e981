//! Mapping Istio objects to the registry model, one object at a time.
//!
//! A `ServiceEntry` becomes one registration per host, each carrying the entry's own endpoints
//! (inline `endpoints`, or the host itself for DNS resolution without endpoints). Endpoints
//! chosen by a `workloadSelector` span files, so they are added later, when the registry's
//! whole view is composed (`view`). A `WorkloadEntry` becomes one endpoint waiting to be
//! selected. Every registration is checked with [`Registration::validate`] here, so a broken
//! object is reported against its own file and line.
//!
//! As in Istio (`getTLSModeFromWorkloadEntry`), a workload entry (or inline endpoint) with a
//! `serviceAccount` and no `security.istio.io/tlsMode` label runs a sidecar that speaks mesh
//! mTLS: its endpoint gets the label `security.istio.io/tlsMode: istio`, which auto mTLS reads.
//!
//! Before mapping, an object meets the rules of Istio's CRDs (`checks`), which the API server
//! enforces for istiod, with their messages. A ServiceEntry's address may be a CIDR range (for
//! `NONE` and `STATIC` resolution): a `/32` or `/128` is one address, a wider one an address
//! range of the service. A WorkloadEntry (or inline endpoint) that names a `network` may have
//! no address: as in Istio it is an endpoint with an empty address
//! ([`Endpoint::network_only`]), which proxies on other networks reach through that network's
//! gateways and nothing reaches directly (the server's network-aware endpoints).

use std::net::IpAddr;
use std::sync::Arc;

use wayfinder_registry::{
    Endpoint, ExportTo, Labels, Locality, Port, Protocol, Registration, RegistryError, Resolution,
    Service, ValidationError,
};

use crate::documents::Origin;
use crate::istio::{
    LocationSpec, Object, PortSpec, ResolutionSpec, ServiceEntrySpec, WorkloadEntrySpec,
};
use crate::keep::ObjectId;

/// The label that says whether a workload speaks mesh mTLS (`istio`) or not (`disabled`).
pub const TLS_MODE_LABEL: &str = "security.istio.io/tlsMode";

/// A `ServiceEntry`, mapped and validated.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    /// Which object it is.
    pub(crate) id: ObjectId,
    /// Where it was read.
    pub(crate) origin: Origin,
    /// One registration per host, with the entry's own endpoints.
    pub(crate) registrations: Vec<Registration>,
    /// The `workloadSelector` labels, when the entry selects WorkloadEntries.
    pub(crate) selector: Option<Labels>,
}

/// A `WorkloadEntry`, mapped and validated: an endpoint for the entries that select it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Workload {
    /// Which object it is.
    pub(crate) id: ObjectId,
    /// Where it was read.
    pub(crate) origin: Origin,
    /// `WorkloadEntry namespace/name`, for log lines.
    pub(crate) name: String,
    /// Its namespace; only ServiceEntries of the same namespace select it.
    pub(crate) namespace: Arc<str>,
    /// The endpoint; its labels are the ones selectors match.
    pub(crate) endpoint: Endpoint,
}

/// Why an object (or a service composed of several) is refused: where, which object, which
/// field and why. Kept structured so that the offline check can print and sort it; the
/// registry's stream reports it as a [`RegistryError::Invalid`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ObjectError {
    /// Where the object was read.
    pub(crate) origin: Origin,
    /// `ServiceEntry namespace/name`, or `service host.example.com (namespace)` once composed.
    pub(crate) object: String,
    /// Path of the offending field, e.g. `spec.addresses[0]`.
    pub(crate) field: String,
    /// The rule it breaks.
    pub(crate) message: String,
}

impl From<ObjectError> for RegistryError {
    fn from(err: ObjectError) -> Self {
        RegistryError::Invalid {
            origin: err.origin.to_string(),
            detail: format!("{}: {}: {}", err.object, err.field, err.message),
        }
    }
}

/// Maps a `ServiceEntry`.
pub(crate) fn service_entry(
    origin: &Origin,
    object: &Object<ServiceEntrySpec>,
) -> Result<Entry, ObjectError> {
    let namespace = object.metadata.namespace();
    let name = format!("ServiceEntry {namespace}/{}", object.metadata.name);
    let fail = |field: &str, message: String| invalid(origin, &name, field, message);
    let spec = &object.spec;
    if object.metadata.name.is_empty() {
        return Err(fail("metadata.name", "must not be empty".into()));
    }
    if spec.hosts.is_empty() {
        return Err(fail("spec.hosts", "at least one host is required".into()));
    }
    checks::service_entry(spec).map_err(|(field, message)| fail(&field, message))?;
    let mut addresses = Vec::with_capacity(spec.addresses.len());
    let mut address_ranges = Vec::new();
    for (i, address) in spec.addresses.iter().enumerate() {
        match parse_address(address).map_err(|m| fail(&format!("spec.addresses[{i}]"), m))? {
            Address::One(ip) => addresses.push(ip),
            Address::Range(range) => address_ranges.push(range),
        }
    }
    let resolution = match spec.resolution {
        ResolutionSpec::Static => Resolution::ClientSideLb,
        ResolutionSpec::Dns => Resolution::Dns,
        ResolutionSpec::DnsRoundRobin => Resolution::DnsRoundRobin,
        ResolutionSpec::None => Resolution::Passthrough,
    };
    let template = Service {
        namespace: namespace.into(),
        ports: spec.ports.iter().map(port).collect(),
        addresses,
        address_ranges,
        resolution,
        labels: labels(object.metadata.labels.iter().flatten()),
        service_accounts: spec
            .subject_alt_names
            .iter()
            .map(|s| s.as_str().into())
            .collect(),
        mesh_external: spec.location == LocationSpec::MeshExternal,
        export_to: ExportTo(spec.export_to.iter().map(|s| s.as_str().into()).collect()),
        ..Service::default()
    };
    let inline: Vec<Endpoint> = spec.endpoints.iter().map(endpoint).collect();
    let dns = matches!(resolution, Resolution::Dns | Resolution::DnsRoundRobin);
    let mut registrations = Vec::with_capacity(spec.hosts.len());
    for (i, host) in spec.hosts.iter().enumerate() {
        let host_field = format!("spec.hosts[{i}]");
        let endpoints = if !inline.is_empty() || spec.workload_selector.is_some() || !dns {
            inline.clone()
        } else if host.starts_with('*') {
            return Err(fail(
                &host_field,
                format!("{host:?}: a wildcard host cannot be resolved by DNS without endpoints"),
            ));
        } else {
            // Istio resolves the host itself when a DNS entry lists no endpoints.
            vec![Endpoint::new(host.as_str())]
        };
        let service = Service {
            hostname: host.as_str().into(),
            ..template.clone()
        };
        let registration = Registration::new(service, endpoints);
        registration.validate().map_err(|err| {
            let field = spec_field(&err, &host_field, inline.is_empty());
            fail(&field, format!("{} (host {host})", err.message))
        })?;
        registrations.push(registration);
    }
    Ok(Entry {
        id: ObjectId::new("ServiceEntry", namespace, &object.metadata.name),
        origin: origin.clone(),
        registrations,
        selector: spec
            .workload_selector
            .as_ref()
            .map(|selector| labels(&selector.labels)),
    })
}

/// Maps a `WorkloadEntry`.
pub(crate) fn workload_entry(
    origin: &Origin,
    object: &Object<WorkloadEntrySpec>,
) -> Result<Workload, ObjectError> {
    let namespace = object.metadata.namespace();
    let name = format!("WorkloadEntry {namespace}/{}", object.metadata.name);
    let fail = |field: &str, message: &str| invalid(origin, &name, field, message.into());
    if object.metadata.name.is_empty() {
        return Err(fail("metadata.name", "must not be empty"));
    }
    checks::workload_entry(&object.spec).map_err(|(field, message)| fail(&field, &message))?;
    let mut endpoint = endpoint(&object.spec);
    // Istio's health condition, which auto-registration sets from the proxy's reports.
    if object.condition_false("Healthy") {
        endpoint.health = wayfinder_registry::Health::Unhealthy;
    }
    Ok(Workload {
        id: ObjectId::new("WorkloadEntry", namespace, &object.metadata.name),
        origin: origin.clone(),
        name,
        namespace: namespace.into(),
        endpoint,
    })
}

/// The protocol of a port: `protocol` when set, else Istio's name-prefix convention
/// (`http-web` is HTTP, `grpc` is gRPC), else TCP.
fn protocol(port: &PortSpec) -> Protocol {
    if let Some(protocol) = port.protocol.as_deref().filter(|p| !p.is_empty()) {
        return Protocol::parse(protocol);
    }
    let name = port.name.to_ascii_lowercase();
    if name == "grpc-web" || name.starts_with("grpc-web-") {
        return Protocol::GrpcWeb;
    }
    match Protocol::parse(name.split('-').next().unwrap_or_default()) {
        Protocol::Unsupported => Protocol::Tcp,
        protocol => protocol,
    }
}

/// A port `checks` found in range.
fn port(spec: &PortSpec) -> Port {
    Port {
        name: spec.name.as_str().into(),
        number: u16::try_from(spec.number).unwrap_or_default(),
        protocol: protocol(spec),
        target_port: spec.target_port.and_then(|t| u16::try_from(t).ok()),
    }
}

/// An endpoint from a WorkloadEntry spec (standalone or inline in a ServiceEntry).
fn endpoint(spec: &WorkloadEntrySpec) -> Endpoint {
    let mut endpoint = Endpoint::new(spec.address.as_str());
    endpoint.ports = spec
        .ports
        .iter()
        .filter_map(|(name, number)| Some((name.as_str().into(), u16::try_from(*number).ok()?)))
        .collect();
    endpoint.labels = labels(&spec.labels);
    if spec
        .service_account
        .as_deref()
        .is_some_and(|sa| !sa.is_empty())
    {
        endpoint
            .labels
            .entry(TLS_MODE_LABEL.into())
            .or_insert_with(|| "istio".into());
    }
    endpoint.locality = Locality::parse(&spec.locality);
    endpoint.weight = spec.weight.filter(|w| *w > 0).unwrap_or(1);
    endpoint.network = spec.network.as_str().into();
    endpoint.service_account = spec
        .service_account
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(Into::into);
    endpoint
}

fn labels<'a>(map: impl IntoIterator<Item = (&'a String, &'a String)>) -> Labels {
    map.into_iter()
        .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
        .collect()
}

/// A ServiceEntry address: one IP, or a range of them.
enum Address {
    One(IpAddr),
    Range(ipnet::IpNet),
}

/// An IP address, or a CIDR range (host bits are dropped, as Go's `ParseCIDR` does); a range of
/// one address is that address.
fn parse_address(address: &str) -> Result<Address, String> {
    if !address.contains('/') {
        return address
            .parse::<IpAddr>()
            .map(Address::One)
            .map_err(|_| format!("{address:?} is not an IP address"));
    }
    let range = address
        .parse::<ipnet::IpNet>()
        .map_err(|_| format!("{address:?} is not a CIDR range"))?
        .trunc();
    Ok(if range.prefix_len() == range.max_prefix_len() {
        Address::One(range.addr())
    } else {
        Address::Range(range)
    })
}

/// The spec field a validation error is about, in the terms of the ServiceEntry.
fn spec_field(err: &ValidationError, host_field: &str, dns_host_endpoint: bool) -> String {
    let field = err.field.as_str();
    if field == "hostname" || (dns_host_endpoint && field.starts_with("endpoints")) {
        host_field.to_string()
    } else if field == "namespace" {
        "metadata.namespace".to_string()
    } else {
        format!("spec.{field}")
    }
}

fn invalid(origin: &Origin, object: &str, field: &str, message: String) -> ObjectError {
    ObjectError {
        origin: origin.clone(),
        object: object.into(),
        field: field.into(),
        message,
    }
}

mod checks;

#[cfg(test)]
mod tests;
