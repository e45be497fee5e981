//! `RequestAuthentication` (`security.istio.io`, `v1` and `v1beta1`): the JSON Web Tokens a
//! workload accepts, with Istio's field names.
//!
//! The types mirror istio/api's `security/v1beta1/request_authentication.proto` and `jwt.proto`.
//! A policy selects workloads (`selector`; `targetRefs` are for Gateway API gateways and
//! waypoints) and lists JWT rules: an issuer, the keys that sign its tokens (`jwksUri`, fetched
//! by the control plane, or `jwks` inline), where the token is (`fromHeaders`, `fromParams`,
//! `fromCookies`; `Authorization: Bearer` by default) and what to pass on. A request with an
//! invalid token is refused; a request without one is let through, for AuthorizationPolicy's
//! `requestPrincipals` to decide.

use serde::{Deserialize, Serialize};

use crate::authorization_policy::PolicyTargetReference;
use crate::common::{Duration, LabelSelector};

/// A `RequestAuthentication` spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestAuthentication {
    /// The workloads of the policy's namespace it applies to; none: every workload of the
    /// namespace, or of the mesh in the root namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The resource the policy is attached to, instead of a selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ref: Option<PolicyTargetReference>,
    /// The resources the policy is attached to, instead of a selector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_refs: Vec<PolicyTargetReference>,
    /// The token issuers accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jwt_rules: Vec<JwtRule>,
}

/// One issuer's tokens (Istio's `JWTRule`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JwtRule {
    /// The token's `iss`; empty: any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub issuer: String,
    /// The `aud` values accepted; none: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    /// Where the issuer's keys are (`https://…/jwks.json`); with neither this nor `jwks`, the
    /// issuer's OpenID discovery document says.
    #[serde(default, alias = "jwks_uri", skip_serializing_if = "String::is_empty")]
    pub jwks_uri: String,
    /// The issuer's keys, inline (a JWKS document).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jwks: String,
    /// Headers the token may be in, with a prefix before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_headers: Vec<JwtHeader>,
    /// Query parameters the token may be in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_params: Vec<String>,
    /// Cookies the token may be in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_cookies: Vec<String>,
    /// A header the verified token's payload (base64url) is passed to the workload in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_payload_to_header: String,
    /// Keep the token in the request (it is removed from its header by default).
    #[serde(default)]
    pub forward_original_token: bool,
    /// Claims copied to headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_claim_to_headers: Vec<ClaimToHeader>,
    /// How long a fetch of `jwksUri` may take; 5 s by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Claims whose space-separated values are matched one by one (besides `scope` and
    /// `permission`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub space_delimited_claims: Vec<String>,
}

/// A header a token may be in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwtHeader {
    /// The header's name.
    #[serde(default)]
    pub name: String,
    /// What comes before the token in it (`Bearer `).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
}

/// A claim copied to a request header.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimToHeader {
    /// The header.
    #[serde(default)]
    pub header: String,
    /// The claim.
    #[serde(default)]
    pub claim: String,
}
