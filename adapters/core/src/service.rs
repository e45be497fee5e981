//! Services: what a registry says exists under a hostname.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

/// Labels of a service or an endpoint (`app: reviews`, `version: v1`). Ordered so that equal
/// label sets compare and hash equal whatever order a registry reported them in.
pub type Labels = BTreeMap<Arc<str>, Arc<str>>;

/// What identifies a service across registries: its namespace and hostname.
///
/// Two registries that report the same key describe the same service, and the aggregate merges
/// them (see the aggregate's merge rule). Displayed as `namespace/hostname`, as Istio's
/// `Service.Key()` is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ServiceKey {
    /// Namespace of the service (`default` when a registry has no namespaces).
    pub namespace: Arc<str>,
    /// Fully qualified hostname, e.g. `reviews.default.svc.cluster.local`.
    pub hostname: Arc<str>,
}

impl ServiceKey {
    /// Builds a key from a namespace and a hostname.
    pub fn new(namespace: impl Into<Arc<str>>, hostname: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
            hostname: hostname.into(),
        }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.hostname)
    }
}

/// A service as one registry reports it.
///
/// Registries fill what they know; the rest keeps its [`Default`]. The aggregate merges the
/// services several registries report under one [`ServiceKey`] and remembers which registries
/// contributed, so a service does not carry its registry itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Service {
    /// Fully qualified hostname (`reviews.default.svc.cluster.local`, `*.example.com`).
    pub hostname: Arc<str>,
    /// Namespace; `default` for registries without namespaces.
    pub namespace: Arc<str>,
    /// Ports the service listens on; unique by number and by name.
    pub ports: Vec<Port>,
    /// Virtual IPs clients may dial (a Kubernetes cluster IP, a ServiceEntry's addresses).
    pub addresses: Vec<IpAddr>,
    /// Ranges of addresses clients may dial (a ServiceEntry's CIDR addresses; a `/32` or
    /// `/128` is one of `addresses` instead): TCP traffic to any of them is the service's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub address_ranges: Vec<ipnet::IpNet>,
    /// How clients find the endpoints.
    pub resolution: Resolution,
    /// Labels of the service itself.
    pub labels: Labels,
    /// Service accounts the service's workloads run as (used for SAN checks).
    pub service_accounts: Vec<Arc<str>>,
    /// True for services outside the mesh (a ServiceEntry with `location: MESH_EXTERNAL`).
    pub mesh_external: bool,
    /// Namespaces that may see this service.
    pub export_to: ExportTo,
}

impl Service {
    /// A service with this hostname and namespace and everything else default.
    pub fn new(hostname: impl Into<Arc<str>>, namespace: impl Into<Arc<str>>) -> Self {
        Self {
            hostname: hostname.into(),
            namespace: namespace.into(),
            ..Self::default()
        }
    }

    /// The key under which registries and the aggregate know this service.
    pub fn key(&self) -> ServiceKey {
        ServiceKey {
            namespace: self.namespace.clone(),
            hostname: self.hostname.clone(),
        }
    }

    /// Adds a port (builder style).
    pub fn with_port(mut self, name: &str, number: u16, protocol: Protocol) -> Self {
        self.ports.push(Port::new(name, number, protocol));
        self
    }

    /// The port with this name, if any.
    pub fn port_named(&self, name: &str) -> Option<&Port> {
        self.ports.iter().find(|p| &*p.name == name)
    }
}

/// One port of a service.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Port {
    /// Port name; endpoints refer to service ports by this name.
    pub name: Arc<str>,
    /// Port number clients dial.
    pub number: u16,
    /// Application protocol.
    pub protocol: Protocol,
    /// Port the workloads listen on when an endpoint does not say (ServiceEntry `targetPort`,
    /// Kubernetes numeric `targetPort`); `None` means the same as `number`.
    pub target_port: Option<u16>,
}

impl Port {
    /// A port without a separate target port.
    pub fn new(name: &str, number: u16, protocol: Protocol) -> Self {
        Self {
            name: name.into(),
            number,
            protocol,
            target_port: None,
        }
    }
}

/// Application protocol of a port, with Istio's names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Protocol {
    /// HTTP/1.1.
    #[serde(rename = "HTTP")]
    Http,
    /// HTTP/2 in cleartext.
    #[serde(rename = "HTTP2")]
    Http2,
    /// gRPC.
    #[serde(rename = "GRPC")]
    Grpc,
    /// gRPC-Web.
    #[serde(rename = "GRPC-Web")]
    GrpcWeb,
    /// HTTPS, opaque to the proxy.
    #[serde(rename = "HTTPS")]
    Https,
    /// Plain TCP; the default when a registry does not say.
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    /// TLS, routed by SNI.
    #[serde(rename = "TLS")]
    Tls,
    /// UDP (not proxied).
    #[serde(rename = "UDP")]
    Udp,
    /// MongoDB.
    #[serde(rename = "Mongo")]
    Mongo,
    /// Redis.
    #[serde(rename = "Redis")]
    Redis,
    /// MySQL.
    #[serde(rename = "MySQL")]
    Mysql,
    /// A name Istio does not know; treated as TCP.
    #[serde(rename = "UnsupportedProtocol")]
    Unsupported,
}

impl Protocol {
    /// Parses a protocol name the way Istio does: case-insensitive, unknown names give
    /// [`Protocol::Unsupported`].
    pub fn parse(name: &str) -> Self {
        match name.to_ascii_lowercase().as_str() {
            "http" => Self::Http,
            "http2" => Self::Http2,
            "grpc" => Self::Grpc,
            "grpc-web" => Self::GrpcWeb,
            "https" => Self::Https,
            "tcp" => Self::Tcp,
            "tls" => Self::Tls,
            "udp" => Self::Udp,
            "mongo" => Self::Mongo,
            "redis" => Self::Redis,
            "mysql" => Self::Mysql,
            _ => Self::Unsupported,
        }
    }

    /// True for protocols an HTTP connection manager serves (HTTP, HTTP/2, gRPC, gRPC-Web).
    pub fn is_http(self) -> bool {
        matches!(self, Self::Http | Self::Http2 | Self::Grpc | Self::GrpcWeb)
    }

    /// True for protocols that need HTTP/2 to the upstream (HTTP/2, gRPC).
    pub fn is_http2(self) -> bool {
        matches!(self, Self::Http2 | Self::Grpc)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Http => "HTTP",
            Self::Http2 => "HTTP2",
            Self::Grpc => "GRPC",
            Self::GrpcWeb => "GRPC-Web",
            Self::Https => "HTTPS",
            Self::Tcp => "TCP",
            Self::Tls => "TLS",
            Self::Udp => "UDP",
            Self::Mongo => "Mongo",
            Self::Redis => "Redis",
            Self::Mysql => "MySQL",
            Self::Unsupported => "UnsupportedProtocol",
        })
    }
}

/// How a client finds a service's endpoints (Istio's `Resolution`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub enum Resolution {
    /// The control plane sends the endpoints (EDS) and the client balances across them.
    #[default]
    #[serde(rename = "ClientSideLB")]
    ClientSideLb,
    /// Endpoint addresses are DNS names the proxy resolves, using every address (STRICT_DNS).
    #[serde(rename = "DNSLB")]
    Dns,
    /// Endpoint addresses are DNS names; the proxy uses one address at a time (LOGICAL_DNS).
    #[serde(rename = "DNSRoundRobinLB")]
    DnsRoundRobin,
    /// The proxy forwards to the address the client dialed (ORIGINAL_DST).
    #[serde(rename = "Passthrough")]
    Passthrough,
}

/// Which namespaces may see a service (Istio's `exportTo`).
///
/// Entries are namespace names or Istio's `.` (the service's own namespace), `*` (every
/// namespace) and `~` (none). An empty list means `*`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct ExportTo(pub Vec<Arc<str>>);

impl ExportTo {
    /// True when a proxy in `namespace` may see a service of `service_namespace`.
    pub fn visible_from(&self, service_namespace: &str, namespace: &str) -> bool {
        if self.0.is_empty() {
            return true;
        }
        self.0.iter().any(|entry| match &**entry {
            "*" => true,
            "." => service_namespace == namespace,
            "~" => false,
            other => other == namespace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_parse_case_insensitively_and_round_trip() {
        for p in [
            Protocol::Http,
            Protocol::Http2,
            Protocol::Grpc,
            Protocol::GrpcWeb,
            Protocol::Tcp,
        ] {
            assert_eq!(Protocol::parse(&p.to_string()), p);
            assert_eq!(Protocol::parse(&p.to_string().to_lowercase()), p);
        }
        assert_eq!(Protocol::parse("thrift"), Protocol::Unsupported);
    }

    #[test]
    fn export_to_follows_istio_semantics() {
        let public = ExportTo::default();
        assert!(public.visible_from("a", "b"));
        let private = ExportTo(vec![".".into()]);
        assert!(private.visible_from("a", "a"));
        assert!(!private.visible_from("a", "b"));
        let none = ExportTo(vec!["~".into()]);
        assert!(!none.visible_from("a", "a"));
        let listed = ExportTo(vec!["b".into(), "c".into()]);
        assert!(listed.visible_from("a", "c"));
        assert!(!listed.visible_from("a", "a"));
    }
}
