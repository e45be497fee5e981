//! The parts of Kubernetes objects the model needs, and nothing else.
//!
//! Every object a watch delivers is turned into one of these at once, so the cache never holds
//! managed fields, container specs, statuses or annotations nobody reads: a `Pod` of several
//! kilobytes becomes its labels, service account, node and IPs.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Labels, as Kubernetes gives them.
pub(crate) type KubeLabels = BTreeMap<String, String>;

/// Namespace and name.
pub(crate) type Name = (Arc<str>, Arc<str>);

/// The service-name label that ties an EndpointSlice to its Service.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service, as far as the model goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SvcObj {
    pub(crate) name: Arc<str>,
    pub(crate) namespace: Arc<str>,
    pub(crate) labels: KubeLabels,
    /// `networking.istio.io/exportTo` and the `alpha.istio.io/*-serviceaccounts` annotations.
    pub(crate) annotations: KubeLabels,
    /// `spec.type`: `ClusterIP` (also when unset), `NodePort`, `LoadBalancer`, `ExternalName`.
    pub(crate) kind: Arc<str>,
    /// `spec.clusterIPs` (or `spec.clusterIP`), without `None`.
    pub(crate) cluster_ips: Vec<String>,
    /// `clusterIP: None`.
    pub(crate) headless: bool,
    pub(crate) external_name: Option<String>,
    pub(crate) publish_not_ready: bool,
    pub(crate) ports: Vec<SvcPort>,
}

/// One port of a Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SvcPort {
    pub(crate) name: String,
    pub(crate) port: i32,
    /// `TCP`, `UDP` or `SCTP`.
    pub(crate) protocol: String,
    pub(crate) app_protocol: Option<String>,
    /// A numeric `targetPort`; a named one is resolved per pod by the EndpointSlices.
    pub(crate) target_port: Option<i32>,
}

/// An EndpointSlice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SliceObj {
    pub(crate) name: Arc<str>,
    pub(crate) namespace: Arc<str>,
    /// The `kubernetes.io/service-name` label: the Service it belongs to.
    pub(crate) service: Option<Arc<str>>,
    /// `IPv4`, `IPv6` or `FQDN`.
    pub(crate) address_type: String,
    /// Port name (empty for the unnamed port) to port number.
    pub(crate) ports: Vec<(String, i32)>,
    pub(crate) endpoints: Vec<EndpointObj>,
}

/// One endpoint of an EndpointSlice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EndpointObj {
    pub(crate) addresses: Vec<String>,
    /// `conditions.ready`; `None` means ready.
    pub(crate) ready: Option<bool>,
    pub(crate) serving: Option<bool>,
    pub(crate) terminating: Option<bool>,
    pub(crate) node: Option<Arc<str>>,
    pub(crate) zone: Option<String>,
    /// The pod named by `targetRef`, when it is a pod.
    pub(crate) pod: Option<Arc<str>>,
}

/// A Pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PodObj {
    pub(crate) labels: KubeLabels,
    pub(crate) service_account: Option<String>,
    pub(crate) node: Option<Arc<str>>,
}

/// A Node: only its locality labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeObj {
    pub(crate) region: Option<String>,
    pub(crate) zone: Option<String>,
    pub(crate) subzone: Option<String>,
}

/// A Namespace, cut to what the conversion reads: its network label.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NamespaceObj {
    /// `topology.istio.io/network`: the network of its pods that have none of their own.
    pub(crate) network: Option<Arc<str>>,
}

impl NamespaceObj {
    /// The namespace's name and its network label.
    pub(crate) fn from_namespace(ns: k8s_openapi::api::core::v1::Namespace) -> (Arc<str>, Self) {
        let meta = ns.metadata;
        let network = meta
            .labels
            .unwrap_or_default()
            .remove(crate::convert::NETWORK_LABEL)
            .map(Into::into);
        (arc(meta.name), Self { network })
    }
}

/// Annotations the conversion reads.
pub(crate) const EXPORT_TO: &str = "networking.istio.io/exportTo";
/// Service accounts given as SPIFFE ids (or any SAN).
pub(crate) const CANONICAL_SAS: &str = "alpha.istio.io/canonical-serviceaccounts";
/// Kubernetes service account names of the service's namespace.
pub(crate) const KUBERNETES_SAS: &str = "alpha.istio.io/kubernetes-serviceaccounts";

fn arc(s: Option<String>) -> Arc<str> {
    s.unwrap_or_default().into()
}

impl From<Service> for SvcObj {
    fn from(svc: Service) -> Self {
        let meta = svc.metadata;
        let spec = svc.spec.unwrap_or_default();
        let mut annotations = meta.annotations.unwrap_or_default();
        annotations.retain(|k, _| [EXPORT_TO, CANONICAL_SAS, KUBERNETES_SAS].contains(&k.as_str()));
        let headless = spec.cluster_ip.as_deref() == Some("None");
        let mut cluster_ips = spec.cluster_ips.unwrap_or_default();
        if cluster_ips.is_empty() {
            cluster_ips.extend(spec.cluster_ip);
        }
        cluster_ips.retain(|ip| !ip.is_empty() && ip != "None");
        let ports = spec.ports.unwrap_or_default().into_iter().map(|p| SvcPort {
            name: p.name.unwrap_or_default(),
            port: p.port,
            protocol: p.protocol.unwrap_or_else(|| "TCP".into()),
            app_protocol: p.app_protocol,
            target_port: match p.target_port {
                Some(IntOrString::Int(n)) => Some(n),
                _ => None,
            },
        });
        Self {
            name: arc(meta.name),
            namespace: arc(meta.namespace),
            labels: meta.labels.unwrap_or_default(),
            annotations,
            kind: spec.type_.unwrap_or_else(|| "ClusterIP".into()).into(),
            cluster_ips,
            headless,
            external_name: spec.external_name,
            publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false),
            ports: ports.collect(),
        }
    }
}

impl From<EndpointSlice> for SliceObj {
    fn from(slice: EndpointSlice) -> Self {
        let meta = slice.metadata;
        let service = meta
            .labels
            .and_then(|mut labels| labels.remove(SERVICE_NAME_LABEL))
            .map(Into::into);
        let ports = slice.ports.unwrap_or_default().into_iter();
        let endpoints = slice.endpoints.into_iter().map(|e| {
            let conditions = e.conditions.unwrap_or_default();
            let pod = e
                .target_ref
                .filter(|r| r.kind.as_deref() == Some("Pod"))
                .and_then(|r| r.name)
                .map(Into::into);
            EndpointObj {
                addresses: e.addresses,
                ready: conditions.ready,
                serving: conditions.serving,
                terminating: conditions.terminating,
                node: e.node_name.map(Into::into),
                zone: e.zone,
                pod,
            }
        });
        Self {
            name: arc(meta.name),
            namespace: arc(meta.namespace),
            service,
            address_type: slice.address_type,
            ports: ports
                .filter_map(|p| Some((p.name.unwrap_or_default(), p.port?)))
                .collect(),
            endpoints: endpoints.collect(),
        }
    }
}

impl PodObj {
    /// The pod's key and what the model needs of it.
    pub(crate) fn from_pod(pod: Pod) -> (Name, Self) {
        let meta = pod.metadata;
        let spec = pod.spec.unwrap_or_default();
        let key = (arc(meta.namespace), arc(meta.name));
        let service_account = spec
            .service_account_name
            .filter(|s| !s.is_empty())
            .or(Some("default".into()));
        let obj = Self {
            labels: meta.labels.unwrap_or_default(),
            service_account,
            node: spec.node_name.map(Into::into),
        };
        (key, obj)
    }
}

/// Node labels that give a locality.
pub(crate) const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// The zone label.
pub(crate) const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Istio's subzone label.
pub(crate) const SUBZONE_LABEL: &str = "topology.istio.io/subzone";

impl NodeObj {
    /// The node's name and its locality labels.
    pub(crate) fn from_node(node: Node) -> (Arc<str>, Self) {
        let meta = node.metadata;
        let mut labels = meta.labels.unwrap_or_default();
        let obj = Self {
            region: labels.remove(REGION_LABEL),
            zone: labels.remove(ZONE_LABEL),
            subzone: labels.remove(SUBZONE_LABEL),
        };
        (arc(meta.name), obj)
    }
}
