//! Who is asking: a proxy described by the `node` of its first xDS request.
//!
//! Node ids follow Istio's `TYPE~IP~ID~DOMAIN` form, e.g.
//! `sidecar~10.1.1.5~reviews-v1-abc.default~default.svc.cluster.local`, with `TYPE` one of
//! `sidecar` or `router`. An id without `~` (as gRPC clients and hand-written bootstraps often
//! use) is accepted as a sidecar with no IP of its own. Node metadata refines this as in Istio:
//! `NAMESPACE`, `INSTANCE_IPS`, `LABELS`, `CLUSTER_ID`, `GENERATOR`, `PROXY_CONFIG`
//! (`proxyListenPort`, `proxyInboundListenPort`), `NETWORK` and `AUTO_REGISTER_GROUP` (a VM
//! that registers itself: see `crate::autoregistration`), plus wayfinder's own
//! `WAYFINDER_LISTEN_ADDRESS` (the address the capture listeners bind, default `0.0.0.0`, for
//! proxies that run outside a network namespace of their own).
//!
//! A proxy is served as a proxyless gRPC client when its `user_agent_name` starts with `gRPC`
//! or its metadata says `GENERATOR: grpc`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

use crate::xds::pb::core::Node;
use crate::xds::pb::protobuf::{Struct, Value, value::Kind};

/// How a proxy is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyKind {
    /// An Envoy sidecar next to a workload.
    Sidecar,
    /// An Envoy gateway (Istio's `router` type).
    Router,
    /// A proxyless gRPC client.
    Grpc,
}

/// Where a sidecar's capture listeners bind. Part of the cache key of generated listeners.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ListenSettings {
    /// Address the capture listeners bind and per-port listeners are named after.
    pub address: Arc<str>,
    /// Port of `virtualOutbound` (Istio's `proxyListenPort`, default 15001).
    pub outbound_port: u16,
    /// Port of `virtualInbound` (Istio's `proxyInboundListenPort`, default 15006).
    pub inbound_port: u16,
}

impl Default for ListenSettings {
    fn default() -> Self {
        Self {
            address: "0.0.0.0".into(),
            outbound_port: 15001,
            inbound_port: 15006,
        }
    }
}

/// A connected proxy.
#[derive(Clone, Debug, Serialize)]
pub struct Proxy {
    /// The node id as sent.
    pub id: String,
    /// How it is served.
    pub kind: ProxyKind,
    /// Its own addresses; endpoints at these addresses are its inbound instances.
    pub ips: Vec<IpAddr>,
    /// Its namespace: it sees the services exported to this namespace.
    pub namespace: Arc<str>,
    /// Its DNS domain (`default.svc.cluster.local`): short hostnames are relative to it.
    pub dns_domain: Arc<str>,
    /// Its workload labels (metadata `LABELS`).
    pub labels: BTreeMap<String, String>,
    /// Its cluster (metadata `CLUSTER_ID`).
    pub cluster_id: String,
    /// `user_agent_name` (`envoy`, `gRPC C-core linux Python`, …).
    pub user_agent: String,
    /// Its version as the node gives it (`user_agent_build_version`, `1.40.0`, or
    /// `user_agent_version`); empty when it gives none.
    pub user_agent_version: String,
    /// Listener placement for sidecars.
    pub listen: ListenSettings,
    /// Metadata `AUTO_REGISTER_GROUP`: the WorkloadGroup (in the proxy's namespace) its
    /// connection registers a workload entry of.
    pub auto_register_group: Option<String>,
    /// Metadata `NETWORK`: the network its addresses belong to (empty: the default).
    pub network: String,
    /// The node's locality, `region/zone/subzone` (empty when it has none).
    pub locality: String,
    /// Metadata `SERVICE_ACCOUNT`: the service account it claims (on the secure port, the
    /// one of its certificate).
    pub service_account: Option<String>,
    /// The identity of its client certificate (secure port only), as a SPIFFE URI, and when
    /// that certificate expires (RFC 3339).
    pub certificate: Option<(String, String)>,
    /// The node metadata's string fields (`ISTIO_VERSION`, …), which an EnvoyFilter's
    /// `match.proxy` reads. Not on debug pages: they show the fields above.
    #[serde(skip)]
    pub metadata: BTreeMap<String, String>,
}

/// A node that claims to be someone its certificate does not name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the client certificate's identities {identities:?} do not match the node's namespace {namespace:?} and service account {}",
    service_account.as_deref().unwrap_or("(any)")
)]
pub struct IdentityError {
    /// The certificate's SPIFFE ids.
    pub identities: Vec<String>,
    /// The namespace the node claims.
    pub namespace: String,
    /// The service account it claims, if any.
    pub service_account: Option<String>,
}

/// A node that cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("node {id:?}: {message}")]
pub struct ProxyError {
    /// The node id.
    pub id: String,
    /// What is wrong with it.
    pub message: String,
}

impl Proxy {
    /// True when the proxy holds a mesh certificate: it connected over the secure port with
    /// its workload certificate, so its agent serves the SDS secrets `default` and `ROOTCA`
    /// on the bootstrap's `sds-grpc` cluster, which mesh mTLS needs.
    pub fn mesh_tls(&self) -> bool {
        self.certificate.is_some()
    }

    /// Reads a node. `domain` is the mesh domain (`--domain`, default `cluster.local`).
    pub fn from_node(node: &Node, domain: &str) -> Result<Self, ProxyError> {
        let fail = |message: String| {
            Err(ProxyError {
                id: node.id.clone(),
                message,
            })
        };
        let meta = Metadata(node.metadata.as_ref());
        let mut kind = ProxyKind::Sidecar;
        let mut ips = Vec::new();
        let mut id_namespace = None;
        let mut dns_domain = None;
        if node.id.contains('~') {
            let parts: Vec<&str> = node.id.split('~').collect();
            let [ty, ip, id, domain_part] = parts[..] else {
                return fail("an Istio node id has four parts, TYPE~IP~ID~DOMAIN".into());
            };
            kind = match ty {
                "sidecar" => ProxyKind::Sidecar,
                "router" => ProxyKind::Router,
                other => {
                    return fail(format!(
                        "unknown proxy type {other:?}; expected sidecar or router"
                    ));
                }
            };
            match ip.parse() {
                Ok(ip) => ips.push(ip),
                Err(_) => return fail(format!("{ip:?} is not an IP address")),
            }
            id_namespace = id.split_once('.').map(|(_, ns)| ns.to_string());
            if !domain_part.is_empty() {
                dns_domain = Some(domain_part.to_string());
            }
        } else if node.id.is_empty() {
            return fail("the node id is empty".into());
        }
        if let Some(list) = meta.string("INSTANCE_IPS") {
            let parsed: Result<Vec<IpAddr>, _> =
                list.split(',').map(|s| s.trim().parse()).collect();
            match parsed {
                Ok(list) => ips = list,
                Err(_) => {
                    return fail(format!(
                        "INSTANCE_IPS {list:?} is not a list of IP addresses"
                    ));
                }
            }
        }
        let namespace = meta
            .string("NAMESPACE")
            .map(str::to_string)
            .or_else(|| {
                dns_domain
                    .as_deref()
                    .and_then(|d| d.split('.').next())
                    .map(str::to_string)
            })
            .or(id_namespace)
            .unwrap_or_else(|| "default".to_string());
        let dns_domain = dns_domain.unwrap_or_else(|| format!("{namespace}.svc.{domain}"));
        if node.user_agent_name.starts_with("gRPC") || meta.string("GENERATOR") == Some("grpc") {
            kind = ProxyKind::Grpc;
        }
        let mut listen = ListenSettings::default();
        if let Some(addr) = meta.string("WAYFINDER_LISTEN_ADDRESS") {
            if addr.parse::<IpAddr>().is_err() {
                return fail(format!(
                    "WAYFINDER_LISTEN_ADDRESS {addr:?} is not an IP address"
                ));
            }
            listen.address = addr.into();
        }
        if let Some(cfg) = meta.structure("PROXY_CONFIG") {
            let cfg = Metadata(Some(cfg));
            if let Some(port) = cfg.port("proxyListenPort") {
                listen.outbound_port = port;
            }
            if let Some(port) = cfg.port("proxyInboundListenPort") {
                listen.inbound_port = port;
            }
        }
        Ok(Self {
            id: node.id.clone(),
            kind,
            ips,
            namespace: namespace.into(),
            dns_domain: dns_domain.into(),
            labels: meta.string_map("LABELS"),
            cluster_id: meta.string("CLUSTER_ID").unwrap_or_default().to_string(),
            user_agent: node.user_agent_name.clone(),
            user_agent_version: user_agent_version(node),
            listen,
            auto_register_group: meta
                .string("AUTO_REGISTER_GROUP")
                .filter(|g| !g.is_empty())
                .map(str::to_string),
            network: meta.string("NETWORK").unwrap_or_default().to_string(),
            locality: node
                .locality
                .as_ref()
                .map(|l| {
                    let parts = [l.region.as_str(), l.zone.as_str(), l.sub_zone.as_str()];
                    parts.join("/").trim_end_matches('/').to_string()
                })
                .unwrap_or_default(),
            service_account: meta
                .string("SERVICE_ACCOUNT")
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            certificate: None,
            metadata: meta.strings(),
        })
    }

    /// Binds the proxy to the identity of its verified client certificate: one of
    /// `identities` must be in its namespace and, when it claims a service account, be that
    /// service account (Istio's check). The proxy is then generated for that identity.
    pub fn bind_identity(
        &mut self,
        certificate: &crate::ca::PeerCertificate,
    ) -> Result<(), IdentityError> {
        let Some(id) = certificate.identities.iter().find(|id| {
            *id.namespace == *self.namespace
                && self
                    .service_account
                    .as_ref()
                    .is_none_or(|sa| *sa == id.service_account)
        }) else {
            return Err(IdentityError {
                identities: certificate
                    .identities
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                namespace: self.namespace.to_string(),
                service_account: self.service_account.clone(),
            });
        };
        self.service_account = Some(id.service_account.clone());
        self.certificate = Some((id.to_string(), certificate.expiry()));
        Ok(())
    }

    /// Its version for people: the node metadata's `ISTIO_VERSION` when it has one (what
    /// istioctl shows), else its user agent and version (`envoy/1.40.0`).
    pub fn version(&self) -> String {
        match self.metadata.get("ISTIO_VERSION") {
            Some(v) if !v.is_empty() => v.clone(),
            _ if self.user_agent_version.is_empty() => self.user_agent.clone(),
            _ => format!("{}/{}", self.user_agent, self.user_agent_version),
        }
    }

    /// True for Envoy, which always subscribes to listeners and clusters by wildcard even when
    /// its reconnect request lists names (see the xDS notes, "Reconnect rules").
    pub fn is_envoy(&self) -> bool {
        self.user_agent == "envoy"
    }
}

impl fmt::Display for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// The version a node gives, `MAJOR.MINOR.PATCH` from a build version.
fn user_agent_version(node: &Node) -> String {
    use crate::xds::pb::core::node::UserAgentVersionType;
    match &node.user_agent_version_type {
        Some(UserAgentVersionType::UserAgentVersion(v)) => v.clone(),
        Some(UserAgentVersionType::UserAgentBuildVersion(b)) => b
            .version
            .as_ref()
            .map(|v| format!("{}.{}.{}", v.major_number, v.minor_number, v.patch))
            .unwrap_or_default(),
        None => String::new(),
    }
}

/// Typed reads of node metadata.
struct Metadata<'a>(Option<&'a Struct>);

impl<'a> Metadata<'a> {
    fn kind(&self, key: &str) -> Option<&'a Kind> {
        self.0?.fields.get(key)?.kind.as_ref()
    }

    fn string(&self, key: &str) -> Option<&'a str> {
        match self.kind(key)? {
            Kind::StringValue(s) => Some(s),
            _ => None,
        }
    }

    /// Every field whose value is a string.
    fn strings(&self) -> BTreeMap<String, String> {
        let Some(s) = self.0 else {
            return BTreeMap::new();
        };
        s.fields
            .iter()
            .filter_map(|(k, v)| match &v.kind {
                Some(Kind::StringValue(s)) => Some((k.clone(), s.clone())),
                _ => None,
            })
            .collect()
    }

    fn structure(&self, key: &str) -> Option<&'a Struct> {
        match self.kind(key)? {
            Kind::StructValue(s) => Some(s),
            _ => None,
        }
    }

    /// A port given as a number or a numeric string.
    fn port(&self, key: &str) -> Option<u16> {
        match self.kind(key)? {
            Kind::NumberValue(n) if n.fract() == 0.0 && (0.0..=65535.0).contains(n) => {
                Some(*n as u16)
            }
            Kind::StringValue(s) => s.parse().ok(),
            _ => None,
        }
    }

    fn string_map(&self, key: &str) -> BTreeMap<String, String> {
        let Some(s) = self.structure(key) else {
            return BTreeMap::new();
        };
        s.fields
            .iter()
            .filter_map(|(k, v)| match &v.kind {
                Some(Kind::StringValue(v)) => Some((k.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Builds a metadata value from a string (tests and tools).
pub fn string_value(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, meta: &[(&str, Value)]) -> Node {
        let fields = meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        Node {
            id: id.into(),
            metadata: Some(Struct { fields }),
            ..Default::default()
        }
    }

    #[test]
    fn reads_istio_node_ids() {
        let p = Proxy::from_node(
            &node(
                "sidecar~10.1.1.5~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local",
                &[],
            ),
            "cluster.local",
        )
        .unwrap();
        assert_eq!(p.kind, ProxyKind::Sidecar);
        assert_eq!(p.ips, ["10.1.1.5".parse::<IpAddr>().unwrap()]);
        assert_eq!(&*p.namespace, "bookinfo");
        assert_eq!(&*p.dns_domain, "bookinfo.svc.cluster.local");
        assert_eq!(p.listen, ListenSettings::default());

        let r = Proxy::from_node(
            &node(
                "router~10.0.0.1~gw.istio-system~istio-system.svc.cluster.local",
                &[],
            ),
            "cluster.local",
        );
        assert_eq!(r.unwrap().kind, ProxyKind::Router);
    }

    #[test]
    fn metadata_refines_the_id() {
        let mut cfg = Struct::default();
        cfg.fields.insert(
            "proxyListenPort".into(),
            Value {
                kind: Some(Kind::NumberValue(0.0)),
            },
        );
        let n = node(
            "grpc-client-1",
            &[
                ("NAMESPACE", string_value("shop")),
                ("GENERATOR", string_value("grpc")),
                ("INSTANCE_IPS", string_value("127.0.0.1, ::1")),
                ("WAYFINDER_LISTEN_ADDRESS", string_value("127.0.0.1")),
                (
                    "PROXY_CONFIG",
                    Value {
                        kind: Some(Kind::StructValue(cfg)),
                    },
                ),
            ],
        );
        let p = Proxy::from_node(&n, "example.internal").unwrap();
        assert_eq!(p.kind, ProxyKind::Grpc);
        assert_eq!(&*p.namespace, "shop");
        assert_eq!(&*p.dns_domain, "shop.svc.example.internal");
        assert_eq!(p.ips.len(), 2);
        assert_eq!(p.listen.outbound_port, 0);
        assert_eq!(&*p.listen.address, "127.0.0.1");
    }

    #[test]
    fn refuses_broken_ids_with_a_reason() {
        for (id, reason) in [
            ("sidecar~nope~a.b~b.svc.cluster.local", "not an IP"),
            (
                "gateway~10.0.0.1~a.b~b.svc.cluster.local",
                "unknown proxy type",
            ),
            ("sidecar~10.0.0.1~a", "four parts"),
            ("", "empty"),
        ] {
            let err = Proxy::from_node(&node(id, &[]), "cluster.local").unwrap_err();
            assert!(err.to_string().contains(reason), "{id}: {err}");
        }
    }
}
