//! `AuthorizationPolicy` (`security.istio.io`, `v1` and `v1beta1`): which requests and
//! connections a workload accepts, with Istio's field names.
//!
//! The types mirror istio/api's `security/v1beta1/authorization.proto`. A policy selects
//! workloads (`selector`, or `targetRefs` for gateways), has an action (`ALLOW` by default,
//! `DENY`, `AUDIT`, or `CUSTOM` for an external authorizer) and rules; a rule matches when any
//! of its `from` sources, any of its `to` operations and all of its `when` conditions match.
//! Each field has a `not…` form that excludes. How the server turns them into Envoy's RBAC
//! filters is the generator's business (`wayfinder::xds`), which follows Istio's builder.

use serde::{Deserialize, Serialize};

use crate::common::LabelSelector;

/// An `AuthorizationPolicy` spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationPolicy {
    /// The workloads of the policy's namespace it applies to; none: every workload of the
    /// namespace, or of the mesh in the root namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The resource the policy is attached to (a Gateway), instead of a selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ref: Option<PolicyTargetReference>,
    /// The resources the policy is attached to, instead of a selector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_refs: Vec<PolicyTargetReference>,
    /// The rules; none (or an empty list) matches nothing. A `null` entry is kept as `None`:
    /// Istio skips it, keeping the other rules' positions (which name them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<Option<Rule>>>,
    /// What a match does.
    #[serde(default)]
    pub action: Action,
    /// The external authorizer of a `CUSTOM` policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
}

/// What a policy's match does.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Action {
    /// Allow matching requests; when any ALLOW policy applies, deny the others.
    #[default]
    Allow,
    /// Deny matching requests.
    Deny,
    /// Log matching requests (an RBAC filter with action `LOG`).
    Audit,
    /// Ask an external authorizer (`provider`).
    Custom,
}

impl Action {
    /// Istio's name.
    pub fn name(self) -> &'static str {
        match self {
            Action::Allow => "ALLOW",
            Action::Deny => "DENY",
            Action::Audit => "AUDIT",
            Action::Custom => "CUSTOM",
        }
    }
}

/// A `CUSTOM` policy's external authorizer, by its name in MeshConfig's extension providers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provider {
    /// The provider's name.
    #[serde(default)]
    pub name: String,
}

/// A resource a policy is attached to (Kubernetes Gateway API style).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTargetReference {
    /// The resource's API group.
    #[serde(default)]
    pub group: String,
    /// The resource's kind (`Gateway`, `Service`, ...).
    #[serde(default)]
    pub kind: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its namespace; the policy's when empty.
    #[serde(default)]
    pub namespace: String,
}

/// A rule: any `from`, any `to`, every `when`; a missing list matches everything.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Who is asking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<From>,
    /// What is asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<To>,
    /// Further conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<Condition>,
}

/// A `from` entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct From {
    /// The source; none matches every source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
}

/// A `to` entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct To {
    /// The operation; none matches every operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
}

/// Who is asking: every field given must match (any of its values, none of its `not` values).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// Peer identities (`TRUST_DOMAIN/ns/NS/sa/SA`, with `*` at either end), from mTLS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub principals: Vec<String>,
    /// Excluded peer identities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_principals: Vec<String>,
    /// JWT identities (`ISS/SUB`), from RequestAuthentication.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request_principals: Vec<String>,
    /// Excluded JWT identities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_request_principals: Vec<String>,
    /// Peer namespaces, from mTLS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Excluded peer namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_namespaces: Vec<String>,
    /// Peer service accounts (`NS/SA`, or `SA` in the policy's namespace), from mTLS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<String>,
    /// Excluded peer service accounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_service_accounts: Vec<String>,
    /// Peer trust domains, from mTLS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trust_domains: Vec<String>,
    /// Excluded peer trust domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_trust_domains: Vec<String>,
    /// Addresses or CIDR ranges of the connection's peer.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::go_yaml::strings"
    )]
    pub ip_blocks: Vec<String>,
    /// Excluded peer addresses.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::go_yaml::strings"
    )]
    pub not_ip_blocks: Vec<String>,
    /// Addresses or CIDR ranges of the original client (`X-Forwarded-For`, PROXY protocol).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::go_yaml::strings"
    )]
    pub remote_ip_blocks: Vec<String>,
    /// Excluded original client addresses.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::go_yaml::strings"
    )]
    pub not_remote_ip_blocks: Vec<String>,
}

/// What is asked for: every field given must match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// Request hosts (`:authority`), case-insensitive, `*` at either end. HTTP only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Excluded hosts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_hosts: Vec<String>,
    /// Destination ports, as strings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<String>,
    /// Excluded ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_ports: Vec<String>,
    /// Request methods. HTTP only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Excluded methods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_methods: Vec<String>,
    /// Request paths, `*` at either end, or templates with `{*}` and `{**}`. HTTP only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Excluded paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_paths: Vec<String>,
}

/// A `when` condition: the attribute `key` has one of `values` and none of `not_values`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The attribute (`request.headers[NAME]`, `source.ip`, `request.auth.claims[iss]`, ...).
    #[serde(default)]
    pub key: String,
    /// Values that match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Values that do not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_values: Vec<String>,
}
