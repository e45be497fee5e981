//! RequestAuthentication where proxies enforce it: the JWT filter of the policies that select
//! a sidecar, before its RBAC filters, as istiod generates it for its own example
//! (`policy_applier.go`: two rules, sorted by issuer, one with inline keys and one whose keys
//! the control plane fetched), and a gateway's with the route cache cleared.

use prost::Message;
use serde_json::{Value, json};
use wayfinder_config::ConfigSpec;

use super::mesh_tls::{get, proxy, snapshot};
use crate::xds::TypeUrl;
use crate::xds::json::any_to_json;
use crate::xds::pb::hcm::{HttpConnectionManager, http_filter};
use crate::xds::pb::listener::{Listener, filter};
use crate::xds::proxy::{Proxy, ProxyKind};

/// Istio's example key (its "jwks ok" validation case, cut short).
const INLINE: &str = r#"{"keys":[{"e":"AQAB","kid":"DHFbpoIUqrY8t2zpA2qXfCmr5VO5ZEr4RzHU_-envvQ","kty":"RSA","n":"xAE7eB6q"}]}"#;

/// Istio's example policy, selecting the reviews workload: a rule with inline keys and
/// space-delimited claims, and one whose keys come from a URI (never fetched here, so they
/// are the fallback), with every token location and output.
fn policy() -> ConfigSpec {
    let yaml = format!(
        "{{selector: {{matchLabels: {{app: reviews}}}}, jwtRules: [\
         {{issuer: testing@secure.istio.io, jwks: '{INLINE}', spaceDelimitedClaims: [roles]}}, \
         {{issuer: 'https://accounts.example.com', \
           jwksUri: 'https://accounts.example.com/.well-known/jwks.json', \
           audiences: [reviews.default.svc.cluster.local], \
           fromHeaders: [{{name: x-jwt-assertion, prefix: 'Bearer '}}], \
           fromParams: [my_token], fromCookies: [session], forwardOriginalToken: true, \
           outputPayloadToHeader: x-jwt-payload, \
           outputClaimToHeaders: [{{header: x-jwt-sub, claim: sub}}], timeout: 10s}}]}}"
    );
    ConfigSpec::RequestAuthentication(Box::new(serde_saphyr::from_str(&yaml).unwrap()))
}

fn deny_anonymous() -> ConfigSpec {
    ConfigSpec::AuthorizationPolicy(Box::new(
        serde_saphyr::from_str(
            "{action: DENY, rules: [{from: [{source: {notRequestPrincipals: ['*']}}]}]}",
        )
        .unwrap(),
    ))
}

/// The HTTP filters of the first HTTP chain of a listener, as JSON.
fn http_filters(listener: &Listener) -> Vec<Value> {
    let chain = listener
        .filter_chains
        .iter()
        .find(|c| {
            c.filters
                .iter()
                .any(|f| f.name == "envoy.filters.network.http_connection_manager")
        })
        .expect("an HTTP chain");
    let Some(filter::ConfigType::TypedConfig(any)) = &chain.filters[0].config_type else {
        panic!("no typed config");
    };
    let hcm = HttpConnectionManager::decode(any.value.as_slice()).unwrap();
    hcm.http_filters
        .iter()
        .map(|f| {
            let config = match &f.config_type {
                Some(http_filter::ConfigType::TypedConfig(any)) => any_to_json(any),
                _ => Value::Null,
            };
            json!({"name": f.name, "typed_config": config})
        })
        .collect()
}

#[test]
fn a_sidecar_verifies_tokens_as_istio_s_example_before_its_rbac_filters() {
    let snap = snapshot(&[("jwt", policy()), ("deny-anonymous", deny_anonymous())]);
    let fallback = snap
        .keys()
        .jwks("https://accounts.example.com", "x")
        .unwrap();
    let inbound: Listener = get(&snap, &proxy(true), TypeUrl::Listener, "virtualInbound");
    let filters = http_filters(&inbound);
    let names: Vec<&str> = filters
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "envoy.filters.http.jwt_authn",
            "envoy.filters.http.rbac",
            "envoy.filters.http.router"
        ]
    );
    let requirement = |name: &str| json!({"provider_name": name});
    let or_missing = |name: &str| json!({"requires_any": {"requirements": [requirement(name), {"allow_missing": {}}]}});
    // Istio's expected output, with proto field names (`policy_applier_test.go`, and the
    // spec example of RequestAuthentication with one fetched and one inline key set).
    let expected = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        "providers": {
            "origins-0": {
                "issuer": "https://accounts.example.com",
                "audiences": ["reviews.default.svc.cluster.local"],
                "local_jwks": {"inline_string": *fallback},
                "forward": true,
                "from_headers": [{"name": "x-jwt-assertion", "value_prefix": "Bearer "}],
                "from_params": ["my_token"],
                "from_cookies": ["session"],
                "forward_payload_header": "x-jwt-payload",
                "claim_to_headers": [{"header_name": "x-jwt-sub", "claim_name": "sub"}],
                "payload_in_metadata": "payload",
                "normalize_payload_in_metadata": {"space_delimited_claims": ["permission", "scope"]}
            },
            "origins-1": {
                "issuer": "testing@secure.istio.io",
                "local_jwks": {"inline_string": INLINE},
                "payload_in_metadata": "payload",
                "normalize_payload_in_metadata": {
                    "space_delimited_claims": ["permission", "roles", "scope"]
                }
            }
        },
        "rules": [{
            "match": {"prefix": "/"},
            "requires": {"requires_any": {"requirements": [
                requirement("origins-0"),
                requirement("origins-1"),
                {"requires_all": {"requirements": [or_missing("origins-0"), or_missing("origins-1")]}}
            ]}}
        }],
        "bypass_cors_preflight": true
    });
    assert_eq!(filters[0]["typed_config"], expected);
}

#[test]
fn a_gateway_clears_the_route_cache_and_other_workloads_get_no_jwt_filter() {
    let snap = snapshot(&[
        ("jwt", policy()),
        (
            "ingress",
            ConfigSpec::Gateway(
                serde_saphyr::from_str(
                    "{selector: {app: reviews}, servers: [{port: {number: 8080, name: http, \
                     protocol: HTTP}, hosts: ['*']}]}",
                )
                .unwrap(),
            ),
        ),
    ]);
    let gateway = Proxy {
        kind: ProxyKind::Router,
        ..proxy(true)
    };
    let listener: Listener = get(&snap, &gateway, TypeUrl::Listener, "0.0.0.0_8080");
    let filters = http_filters(&listener);
    assert_eq!(filters[0]["name"], "envoy.filters.http.jwt_authn");
    let providers = filters[0]["typed_config"]["providers"].as_object().unwrap();
    assert!(
        providers.values().all(|p| p["clear_route_cache"] == true),
        "{providers:?}"
    );
    // A sidecar the policy does not select: no JWT filter.
    let other = Proxy {
        labels: [("app".to_string(), "ratings".to_string())].into(),
        ..proxy(true)
    };
    let inbound: Listener = get(&snap, &other, TypeUrl::Listener, "virtualInbound");
    let names: Vec<Value> = http_filters(&inbound)
        .iter()
        .map(|f| f["name"].clone())
        .collect();
    assert_eq!(names, ["envoy.filters.http.router"]);
}

#[test]
fn private_key_material_left_in_inline_keys_never_reaches_a_proxy() {
    let with_private = INLINE.replace(r#""n":"xAE7eB6q""#, r#""n":"xAE7eB6q","d":"c2VjcmV0""#);
    let spec = ConfigSpec::RequestAuthentication(Box::new(
        serde_saphyr::from_str(&format!(
            "{{jwtRules: [{{issuer: i, jwks: '{with_private}'}}]}}"
        ))
        .unwrap(),
    ));
    let snap = snapshot(&[("jwt", spec)]);
    let inbound: Listener = get(&snap, &proxy(true), TypeUrl::Listener, "virtualInbound");
    let filters = http_filters(&inbound);
    let inline =
        filters[0]["typed_config"]["providers"]["origins-0"]["local_jwks"]["inline_string"]
            .as_str()
            .unwrap();
    let keys: Value = serde_json::from_str(inline).unwrap();
    assert!(keys["keys"][0].get("d").is_none(), "{inline}");
    assert_eq!(keys["keys"][0]["n"], "xAE7eB6q");
}
