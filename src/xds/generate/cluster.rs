//! Clusters for Envoy proxies: one per service port, plus Istio's catch-all clusters.

use std::sync::Arc;

use wayfinder_config::{ClientTlsMode, DestinationRule, Subset};
use wayfinder_registry::{Port, Protocol, Resolution};

use super::MeshSettings;
use super::endpoint;
use super::locality::{self, Localized};
use super::mesh_tls;
use super::network;
use super::policy::{HttpOptions, Policy};
use super::proto::{ads, any, u32_value};
use crate::snapshot::{MergedService, TrafficConfig};
use crate::xds::names;
use crate::xds::pb::cluster::{
    CircuitBreakers, Cluster, circuit_breakers::Thresholds, cluster::ClusterDiscoveryType,
    cluster::DiscoveryType, cluster::DnsLookupFamily, cluster::EdsClusterConfig, cluster::LbPolicy,
    cluster::TransportSocketMatch,
};
use crate::xds::pb::core::{TransportSocket, UpstreamHttpProtocolOptions};
use crate::xds::pb::endpoint::ClusterLoadAssignment;
use crate::xds::pb::protobuf::{Struct, Value, value};
use crate::xds::pb::upstream_http::{HttpProtocolOptions, http_protocol_options};
use crate::xds::resource::{Resource, ResourceSet, insert};

/// Istio's default `MeshConfig.connectTimeout`.
/// The key Envoy looks up upstream HTTP options under.
const HTTP_PROTOCOL_OPTIONS: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

/// True for the protocols a sidecar proxies (everything but UDP).
pub(super) fn is_proxied(protocol: Protocol) -> bool {
    protocol != Protocol::Udp
}

/// `BlackHoleCluster`, `PassthroughCluster` and `InboundPassthroughCluster`.
pub(super) fn catch_all(connect_timeout: std::time::Duration) -> ResourceSet {
    let timeout = Some(super::policy::duration(connect_timeout));
    let mut set = ResourceSet::new();
    let blackhole = Cluster {
        name: names::BLACKHOLE_CLUSTER.into(),
        cluster_discovery_type: discovery(DiscoveryType::Static),
        connect_timeout: timeout,
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: names::BLACKHOLE_CLUSTER.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    insert(
        &mut set,
        Resource::encode(names::BLACKHOLE_CLUSTER, &blackhole),
    );
    for name in [
        names::PASSTHROUGH_CLUSTER,
        names::INBOUND_PASSTHROUGH_CLUSTER,
    ] {
        let passthrough = Cluster {
            name: name.into(),
            cluster_discovery_type: discovery(DiscoveryType::OriginalDst),
            lb_policy: LbPolicy::ClusterProvided as i32,
            connect_timeout: timeout,
            circuit_breakers: Some(unlimited()),
            ..Default::default()
        };
        insert(&mut set, Resource::encode(name, &passthrough));
    }
    set
}

/// What a service's clusters depend on besides the service and its rule.
#[derive(Clone, Copy)]
pub(super) struct Upstreams<'a> {
    /// The server's settings: the system trust store, the trust domain, the root namespace.
    pub(super) mesh: &'a MeshSettings,
    /// The proxy holds a mesh certificate, so its clusters may use mesh mTLS.
    pub(super) mesh_tls: bool,
    /// The configuration in force, for the destinations' PeerAuthentication.
    pub(super) config: &'a TrafficConfig,
}

/// The clusters of one service port: `outbound|<port>||<host>` and, for each subset of the
/// DestinationRule that applies, `outbound|<port>|<subset>|<host>`, each with its load
/// assignment when it is an EDS cluster.
///
/// The cluster type follows the service's resolution as in Istio: client-side → EDS, DNS →
/// STRICT_DNS, DNS round robin → LOGICAL_DNS (one endpoint: Envoy allows no more), passthrough
/// → ORIGINAL_DST (also for a `PASSTHROUGH` load balancer). Without a rule, load balancing is
/// LEAST_REQUEST (Istio's default since 1.14) and circuit breakers are unlimited (Envoy's
/// default of 3 retries caused 503s in pod churn); HTTP/2 and gRPC ports talk HTTP/2 upstream.
/// A subset's endpoints are those whose labels include the subset's labels. Client TLS
/// verifies against the system's trust store when the rule gives no CA (see `upstream_tls`).
/// Mesh mTLS (see [`mesh_tls`]) for a proxy that holds a mesh certificate: `ISTIO_MUTUAL`,
/// or, when no rule gives TLS settings, auto mTLS: TLS to the endpoints labelled
/// `security.istio.io/tlsMode: istio`, plaintext to the others (not for services outside the
/// mesh and passthrough clusters, as in Istio).
pub(super) fn outbound(
    svc: &MergedService,
    port: &Port,
    rule: Option<&DestinationRule>,
    up: Upstreams<'_>,
) -> Vec<(Resource, Option<Assignment>)> {
    let subsets = rule.map(|r| r.subsets.as_slice()).unwrap_or_default();
    std::iter::once(None)
        .chain(subsets.iter().map(Some))
        .map(|subset| one(svc, port, rule, subset, up))
        .collect()
}

/// A cluster's load assignment: one for every proxy, or one shaped per proxy place by
/// locality load balancing (see `locality`).
pub(super) enum Assignment {
    /// Encoded once, shared by every proxy.
    Shared(Resource),
    /// Made per proxy place (boxed: it carries the assignment it starts from).
    Localized(Box<Localized>),
}

fn one(
    svc: &MergedService,
    port: &Port,
    rule: Option<&DestinationRule>,
    subset: Option<&Subset>,
    up: Upstreams<'_>,
) -> (Resource, Option<Assignment>) {
    let subset_name = subset.map_or("", |s| s.name.as_str());
    let name = names::outbound_cluster(port.number, subset_name, &svc.service.hostname);
    let labels = subset.map(|s| &s.labels);
    let mut cluster = Cluster {
        name: name.clone(),
        connect_timeout: Some(super::policy::duration(up.mesh.connect_timeout)),
        lb_policy: LbPolicy::LeastRequest as i32,
        circuit_breakers: Some(unlimited()),
        ..Default::default()
    };
    let policy = Policy::new(rule, port.number, subset);
    let mut http = HttpOptions {
        http2: port.protocol.is_http2(),
        ..HttpOptions::default()
    };
    policy.apply(
        &mut cluster,
        &mut http,
        &svc.service.hostname,
        &up.mesh.system_ca,
    );
    let tls = policy.tls();
    let original_dst = policy.passthrough() || svc.service.resolution == Resolution::Passthrough;
    let sni = || match tls {
        Some(tls) if !tls.sni.is_empty() => tls.sni.clone(),
        _ => mesh_tls::sni(port.number, subset_name, &svc.service.hostname),
    };
    let identities = || match tls {
        Some(tls) if !tls.subject_alt_names.is_empty() => tls
            .subject_alt_names
            .iter()
            .map(|s| s.as_str().into())
            .collect(),
        _ => identities(svc, &up.mesh.trust_domain),
    };
    match tls.map(|t| t.mode.unwrap_or(ClientTlsMode::Disable)) {
        Some(ClientTlsMode::IstioMutual) if up.mesh_tls => {
            cluster.transport_socket = Some(mesh_tls::upstream(&sni(), &identities(), http.http2));
        }
        Some(ClientTlsMode::IstioMutual) => {
            cluster.transport_socket = Some(mesh_tls::upstream_without_identity(&sni()));
        }
        // As Istio: not to services outside the mesh, nor through an ORIGINAL_DST cluster,
        // whose destinations are not known to have a sidecar.
        None if up.mesh_tls && up.mesh.auto_mtls && !svc.service.mesh_external && !original_dst => {
            let socket = mesh_tls::upstream(&sni(), &identities(), http.http2);
            cluster.transport_socket_matches = auto_mtls(socket);
        }
        _ => {}
    }
    let peers = endpoint::Peers {
        config: up.config,
        root_namespace: &up.mesh.root_namespace,
    };
    if let Some(options) = http_options(http) {
        cluster
            .typed_extension_protocol_options
            .insert(HTTP_PROTOCOL_OPTIONS.into(), any(&options));
    }
    let mut cla = None;
    match svc.service.resolution {
        _ if policy.passthrough() => {
            cluster.cluster_discovery_type = discovery(DiscoveryType::OriginalDst);
            cluster.lb_policy = LbPolicy::ClusterProvided as i32;
            // The original destination is the only choice: no slow start or hashing config.
            cluster.lb_config = None;
        }
        Resolution::ClientSideLb => {
            cluster.cluster_discovery_type = discovery(DiscoveryType::Eds);
            cluster.eds_cluster_config = Some(EdsClusterConfig {
                eds_config: ads(),
                service_name: name.clone(),
            });
            // Endpoints on a network with gateways make the assignment depend on the
            // proxy's network, as locality load balancing makes it depend on its place; only
            // such an assignment carries the endpoints known by their network alone.
            let networks = network::view(&up.mesh.networks, svc, port.number);
            let (assignment, members) = endpoint::grouped(
                &name,
                svc,
                port.number,
                endpoint::Include::All(peers),
                labels,
                networks.is_some(),
            );
            let plan = locality::plan(
                policy.locality().or(up.mesh.locality_lb.as_ref()),
                policy.has_outlier_detection(),
            );
            cla = Some(match (plan, networks) {
                (None, None) => Assignment::Shared(Resource::encode(name.as_str(), &assignment)),
                (plan, networks) => {
                    if let Some(plan) = &plan {
                        plan.apply_to_cluster(&mut cluster.common_lb_config);
                    }
                    let plan = plan.unwrap_or_else(locality::Plan::none);
                    let mut localized = Localized::new(assignment, &members, plan);
                    if let Some(view) = networks {
                        localized = localized.with_network(view);
                    }
                    Assignment::Localized(Box::new(localized))
                }
            });
        }
        Resolution::Dns | Resolution::DnsRoundRobin => {
            let mut assignment = endpoint::load_assignment(
                &name,
                svc,
                port.number,
                endpoint::Include::All(peers),
                labels,
            );
            // LOGICAL_DNS takes exactly one host; with none, Envoy would reject the cluster.
            let logical = svc.service.resolution == Resolution::DnsRoundRobin
                && !assignment.endpoints.is_empty();
            if logical {
                endpoint::keep_first(&mut assignment);
            }
            let kind = if logical {
                DiscoveryType::LogicalDns
            } else {
                DiscoveryType::StrictDns
            };
            cluster.cluster_discovery_type = discovery(kind);
            cluster.dns_lookup_family = DnsLookupFamily::V4Preferred as i32;
            cluster.load_assignment = Some(assignment);
        }
        Resolution::Passthrough => {
            cluster.cluster_discovery_type = discovery(DiscoveryType::OriginalDst);
            cluster.lb_policy = LbPolicy::ClusterProvided as i32;
            cluster.lb_config = None;
        }
    }
    (Resource::encode(name, &cluster), cla)
}

/// The SNI-DNAT clusters of one service port for a gateway's `AUTO_PASSTHROUGH` servers, as
/// Istio's gateways have them: `outbound_.PORT_.SUBSET_.HOST` for the port and each subset,
/// with the endpoints of `outbound|PORT|SUBSET|HOST` (the same EDS assignment) and the rule's
/// policy but no TLS of their own: the client's mTLS passes through to the workload. Only
/// for services whose endpoints come over EDS (the others have no assignment to share).
pub(super) fn sni_dnat(
    svc: &MergedService,
    port: &Port,
    rule: Option<&DestinationRule>,
    mesh: &MeshSettings,
) -> Vec<Resource> {
    if svc.service.resolution != Resolution::ClientSideLb {
        return Vec::new();
    }
    let subsets = rule.map(|r| r.subsets.as_slice()).unwrap_or_default();
    let host = &svc.service.hostname;
    std::iter::once(None)
        .chain(subsets.iter().map(Some))
        .filter_map(|subset| {
            let subset_name = subset.map_or("", |s| s.name.as_str());
            let policy = Policy::new(rule, port.number, subset).without_tls();
            if policy.passthrough() {
                return None;
            }
            let name = mesh_tls::sni(port.number, subset_name, host);
            let mut cluster = Cluster {
                name: name.clone(),
                connect_timeout: Some(super::policy::duration(mesh.connect_timeout)),
                lb_policy: LbPolicy::LeastRequest as i32,
                circuit_breakers: Some(unlimited()),
                cluster_discovery_type: discovery(DiscoveryType::Eds),
                eds_cluster_config: Some(EdsClusterConfig {
                    eds_config: ads(),
                    service_name: names::outbound_cluster(port.number, subset_name, host),
                }),
                ..Default::default()
            };
            // Connection-level settings only: what passes is TLS, not HTTP.
            policy.apply(
                &mut cluster,
                &mut HttpOptions::default(),
                host,
                &mesh.system_ca,
            );
            Some(Resource::encode(name, &cluster))
        })
        .collect()
}

/// The identities a mesh destination's certificate may name: the service's accounts as its
/// registry gives them (SPIFFE URIs, or a ServiceEntry's `subjectAltNames`), and each
/// endpoint's service account as `spiffe://TRUST_DOMAIN/ns/NS/sa/SA`. Sorted, no repeats.
fn identities(svc: &MergedService, trust_domain: &str) -> Vec<Arc<str>> {
    let namespace = &svc.service.namespace;
    let mut all: Vec<Arc<str>> = svc.service.service_accounts.clone();
    all.extend(svc.endpoints.iter().filter_map(|view| {
        let sa = view.endpoint.service_account.as_deref()?;
        Some(format!("spiffe://{trust_domain}/ns/{namespace}/sa/{sa}").into())
    }));
    all.sort();
    all.dedup();
    all
}

/// Istio's auto mTLS: `socket` towards endpoints whose metadata says
/// `envoy.transport_socket_match: {tlsMode: istio}` (see `endpoint::load_assignment`),
/// plaintext towards the others.
fn auto_mtls(socket: TransportSocket) -> Vec<TransportSocketMatch> {
    let istio = Struct {
        fields: [(
            mesh_tls::TLS_MODE_KEY.to_string(),
            Value {
                kind: Some(value::Kind::StringValue(mesh_tls::TLS_MODE_ISTIO.into())),
            },
        )]
        .into(),
    };
    vec![
        TransportSocketMatch {
            name: "tlsMode-istio".into(),
            r#match: Some(istio),
            transport_socket: Some(socket),
        },
        TransportSocketMatch {
            name: "tlsMode-disabled".into(),
            r#match: Some(Struct::default()),
            transport_socket: Some(mesh_tls::raw_buffer()),
        },
    ]
}

/// The upstream HTTP options entry, when there is anything to say: HTTP/2 for HTTP/2 and gRPC
/// ports, the connection pool's common HTTP settings, and SNI and its check from each
/// request's `Host` (TLS to a wildcard destination).
fn http_options(http: HttpOptions) -> Option<HttpProtocolOptions> {
    use http_protocol_options::explicit_http_config::ProtocolConfig;
    if !http.http2 && http.common.is_none() && !http.auto_sni {
        return None;
    }
    let protocol = if http.http2 {
        ProtocolConfig::Http2ProtocolOptions(crate::xds::pb::core::Http2ProtocolOptions {
            max_concurrent_streams: http.max_concurrent_streams.and_then(u32_value),
            ..Default::default()
        })
    } else {
        ProtocolConfig::HttpProtocolOptions(Default::default())
    };
    let auto = http.auto_sni.then(|| UpstreamHttpProtocolOptions {
        auto_sni: true,
        auto_san_validation: http.auto_san_validation,
        ..Default::default()
    });
    Some(HttpProtocolOptions {
        common_http_protocol_options: http.common,
        upstream_http_protocol_options: auto,
        upstream_protocol_options: Some(
            http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(
                http_protocol_options::ExplicitHttpConfig {
                    protocol_config: Some(protocol),
                },
            ),
        ),
        ..Default::default()
    })
}

pub(super) fn discovery(kind: DiscoveryType) -> Option<ClusterDiscoveryType> {
    Some(ClusterDiscoveryType::Type(kind as i32))
}

/// An inbound cluster shaped by its Sidecar's connection pool (see `inbound/pool.rs`), as
/// Istio applies it to the server side: Istio's default circuit breakers with the pool's
/// limits, its connect timeout and keepalive, and for an HTTP port its HTTP options.
pub(super) fn shape_by_pool(
    cluster: &mut Cluster,
    pool: &wayfinder_config::ConnectionPoolSettings,
    protocol: Protocol,
) {
    cluster.circuit_breakers = Some(unlimited());
    let mut http = HttpOptions {
        http2: protocol.is_http2(),
        ..HttpOptions::default()
    };
    super::policy::apply_pool(cluster, pool, &mut http);
    if protocol.is_http()
        && let Some(options) = http_options(http)
    {
        cluster
            .typed_extension_protocol_options
            .insert(HTTP_PROTOCOL_OPTIONS.into(), any(&options));
    }
}

/// Istio's default circuit breakers: every limit at its maximum, with remaining capacity
/// tracked in stats.
fn unlimited() -> CircuitBreakers {
    let max = u32_value(u32::MAX);
    CircuitBreakers {
        thresholds: vec![Thresholds {
            max_connections: max,
            max_pending_requests: max,
            max_requests: max,
            max_retries: max,
            track_remaining: true,
            ..Default::default()
        }],
        ..Default::default()
    }
}
