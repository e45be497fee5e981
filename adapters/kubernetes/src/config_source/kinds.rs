//! The Istio kinds read from the API, and where the API serves them: built by hand, since
//! discovery would cost requests and tell nothing new (a kind not served is found by its 404).

use kube::api::{Api, ApiResource, DynamicObject};

use super::Target;

/// The API group of Istio's networking objects.
const NETWORKING: &str = "networking.istio.io";

/// The API group of Istio's security policies (`PeerAuthentication` and the refused ones).
const SECURITY: &str = "security.istio.io";

/// The versions tried, in order: the first one served is watched. `v1` since Istio 1.22
/// (for both groups), `v1beta1` before.
const VERSIONS: &[&str] = &["v1", "v1beta1"];

/// The one version Istio serves `EnvoyFilter` in.
const ALPHA: &[&str] = &["v1alpha3"];

/// The one version Istio serves `ProxyConfig` in.
const BETA: &[&str] = &["v1beta1"];

/// One kind of Istio object, as the API names it.
#[derive(Debug)]
pub(super) struct ApiKind {
    /// `networking.istio.io`.
    pub(super) group: &'static str,
    /// `VirtualService`.
    pub(super) kind: &'static str,
    /// `virtualservices`: the resource in API paths.
    pub(super) plural: &'static str,
    /// The versions tried, in order.
    pub(super) versions: &'static [&'static str],
}

/// The kinds of the config source: the networking kinds and the security policies, read alike.
pub(super) const CONFIG: [ApiKind; 10] = [
    ApiKind::new(NETWORKING, "VirtualService", "virtualservices"),
    ApiKind::new(NETWORKING, "DestinationRule", "destinationrules"),
    ApiKind::new(NETWORKING, "Gateway", "gateways"),
    ApiKind::new(NETWORKING, "Sidecar", "sidecars"),
    ApiKind::new(NETWORKING, "WorkloadGroup", "workloadgroups"),
    ApiKind {
        versions: ALPHA,
        ..ApiKind::new(NETWORKING, "EnvoyFilter", "envoyfilters")
    },
    ApiKind {
        versions: BETA,
        ..ApiKind::new(NETWORKING, "ProxyConfig", "proxyconfigs")
    },
    ApiKind::new(SECURITY, "AuthorizationPolicy", "authorizationpolicies"),
    ApiKind::new(SECURITY, "PeerAuthentication", "peerauthentications"),
    ApiKind::new(SECURITY, "RequestAuthentication", "requestauthentications"),
];

/// The kinds of the registry.
pub(super) const ENTRIES: [ApiKind; 2] = [
    ApiKind::new(NETWORKING, "ServiceEntry", "serviceentries"),
    ApiKind::new(NETWORKING, "WorkloadEntry", "workloadentries"),
];

impl ApiKind {
    const fn new(group: &'static str, kind: &'static str, plural: &'static str) -> Self {
        Self {
            group,
            kind,
            plural,
            versions: VERSIONS,
        }
    }

    /// The kind in `version`, for a dynamic [`Api`].
    pub(super) fn resource(&self, version: &str) -> ApiResource {
        ApiResource {
            group: self.group.into(),
            version: version.into(),
            api_version: self.api_version(version),
            kind: self.kind.into(),
            plural: self.plural.into(),
        }
    }

    /// The objects of this kind in `version` that `cluster` watches (one namespace, or all).
    pub(super) fn api(&self, cluster: &Target, version: &str) -> Api<DynamicObject> {
        let resource = self.resource(version);
        match &cluster.namespace {
            Some(namespace) => Api::namespaced_with(cluster.client.clone(), namespace, &resource),
            None => Api::all_with(cluster.client.clone(), &resource),
        }
    }

    /// What a watch of this kind is called in messages: `networking.istio.io/v1
    /// virtualservices`.
    pub(super) fn watched(&self, version: &str) -> String {
        format!("{} {}", self.api_version(version), self.plural)
    }

    /// `networking.istio.io/<version>`.
    pub(super) fn api_version(&self, version: &str) -> String {
        format!("{}/{version}", self.group)
    }

    /// The API path of one object: `/apis/networking.istio.io/v1/namespaces/default/
    /// virtualservices/reviews`.
    pub(super) fn path(&self, version: &str, namespace: &str, name: &str) -> String {
        format!(
            "/apis/{}/namespaces/{namespace}/{}/{name}",
            self.api_version(version),
            self.plural
        )
    }
}
