//! `RequestAuthentication`, as Istio's `ValidateRequestAuthentication` checks it
//! (`pkg/config/validation/validation.go`: `validateJwtRule`, `warnPrivateJwksKeys`, and
//! `ParseJwksURI` of `pkg/config/security/security.go`), with the rules of its CRD schema
//! that the Kubernetes API server enforces:
//!
//! - what the policy applies to, as AuthorizationPolicy's (`super::attachment`): at most one of
//!   `selector`, `targetRef` and `targetRefs`, selector labels, targets, and the warning that
//!   targets attach it to nothing wayfinder serves;
//! - at most 4096 JWT rules, each with: an issuer or a `jwksUri`, not both `jwks` and
//!   `jwksUri`; no empty audience; a `jwksUri` of at most 2048 characters that is an `http` or
//!   `https` URL (a numeric port); `jwks` a JWKS document, a key with private material being a
//!   warning; no empty `fromHeaders` name, `fromParams` or `fromCookies` entry;
//!   `outputClaimToHeaders` with a claim and a header of `[-_A-Za-z0-9]`; a `timeout` of whole
//!   milliseconds, at least 1ms; at most 64 `spaceDelimitedClaims`, none empty.
//!
//! Where wayfinder differs from Istio:
//!
//! - A `jwksUri` (or an issuer whose discovery document is used) with scheme `http` gets a
//!   warning: keys fetched over plain HTTP can be replaced by anyone on the path.
//! - A rule with neither `jwksUri` nor `jwks` finds its keys by OpenID discovery
//!   (`ISSUER/.well-known/openid-configuration`), so its issuer must be an `http(s)` URL; Istio
//!   accepts any issuer there and fails when fetching.
//! - A URL is checked as what the control plane can fetch (the `url` crate's WHATWG parsing,
//!   as reqwest, which fetches it, reads it), where Istio takes whatever Go's lenient
//!   `url.Parse` takes: a host, and a port, if given, from 1 to 65535.
//! - `jwks` is read as Envoy reads it, where Istio reads it with the jwx library: a JSON object
//!   with a `"keys"` array (jwx also takes a bare key, and no keys, which Envoy refuses, and
//!   with them the listener), each key an object whose `kty` is `RSA`, `EC` or `OKP` with the
//!   members RFC 7518 requires as strings (`n` and `e`; `crv`, `x` and `y`; `crv` and `x`).
//!   Key material is not decoded. Every bad key is reported, not the first only.
//! - A symmetric key (`kty: oct`, HS256) is refused: its `k` is the secret tokens are signed
//!   with, which would be in every proxy's configuration and on debug pages. Istio accepts it.
//! - A key with private material (`d`, `p`, `q`, `dp`, `dq`, `qi`) is warned about as in
//!   Istio, and also because a configuration object shows it to everyone who can read the
//!   object; proxies get the public part only.
//! - Each problem is reported at its own field (`spec.jwtRules[0].fromHeaders[1].name`), where
//!   Istio reports a rule's problems without saying where, and `outputClaimToHeaders` with both
//!   fields empty gets both errors.
//! - An `issuer` written as `""` reads as absent, so the CRD's "at least 1 character" cannot
//!   fire; the rule still needs an issuer or a `jwksUri`.
//! - The `istio.io/dry-run` annotation is metadata, not spec, and is not checked here.

use super::attachment::check_attachment;
use super::{Problems, check_duration};
use crate::RequestAuthentication;
use crate::request_authentication::JwtRule;

/// The CRD's limits: JWT rules, `spaceDelimitedClaims` of a rule, characters of a `jwksUri`.
const MAX_JWT_RULES: usize = 4096;
const MAX_SPACE_DELIMITED_CLAIMS: usize = 64;
const MAX_JWKS_URI_CHARS: usize = 2048;

/// The warning on keys, or a discovery document, fetched with scheme `http`.
const PLAIN_HTTP: &str =
    "keys fetched over plain HTTP can be replaced by anyone on the path; use https";

pub(super) fn check(ra: &RequestAuthentication, p: &mut Problems) {
    check_attachment(
        p,
        ra.selector.as_ref(),
        ra.target_ref.as_ref(),
        &ra.target_refs,
    );
    if ra.jwt_rules.len() > MAX_JWT_RULES {
        p.error(
            "spec.jwtRules",
            format!("has {} rules: at most {MAX_JWT_RULES}", ra.jwt_rules.len()),
        );
    }
    for (i, rule) in ra.jwt_rules.iter().enumerate() {
        check_rule(rule, &format!("spec.jwtRules[{i}]"), p);
    }
}

fn check_rule(rule: &JwtRule, path: &str, p: &mut Problems) {
    if rule.issuer.is_empty() && rule.jwks_uri.is_empty() {
        p.error(
            path,
            "needs an issuer or a jwksUri (or both): the issuer names whose tokens the rule \
             accepts",
        );
    }
    if !rule.jwks_uri.is_empty() && !rule.jwks.is_empty() {
        p.error(
            path,
            "only one of jwks or jwksUri can be set: the keys inline, or where to fetch them",
        );
    }
    if !rule.issuer.is_empty() && rule.jwks_uri.is_empty() && rule.jwks.is_empty() {
        check_discovery(&rule.issuer, &format!("{path}.issuer"), p);
    }
    for (j, audience) in rule.audiences.iter().enumerate() {
        if audience.is_empty() {
            p.error(format!("{path}.audiences[{j}]"), "is empty");
        }
    }
    if !rule.jwks_uri.is_empty() {
        check_jwks_uri(&rule.jwks_uri, &format!("{path}.jwksUri"), p);
    }
    if !rule.jwks.is_empty() {
        check_jwks(&rule.jwks, &format!("{path}.jwks"), p);
    }
    for (j, header) in rule.from_headers.iter().enumerate() {
        if header.name.is_empty() {
            p.error(format!("{path}.fromHeaders[{j}].name"), "is required");
        }
    }
    for (field, values) in [
        ("fromParams", &rule.from_params),
        ("fromCookies", &rule.from_cookies),
    ] {
        for (j, value) in values.iter().enumerate() {
            if value.is_empty() {
                p.error(format!("{path}.{field}[{j}]"), "is empty");
            }
        }
    }
    for (j, output) in rule.output_claim_to_headers.iter().enumerate() {
        let path = format!("{path}.outputClaimToHeaders[{j}]");
        if output.header.is_empty() {
            p.error(format!("{path}.header"), "is required");
        } else if !is_strict_header_name(&output.header) {
            p.error(
                format!("{path}.header"),
                format!(
                    "{:?} is not a header name here: letters, digits, '-' and '_' only",
                    output.header
                ),
            );
        }
        if output.claim.is_empty() {
            p.error(format!("{path}.claim"), "is required");
        }
    }
    if let Some(timeout) = &rule.timeout {
        let field = format!("{path}.timeout");
        check_duration(p, &field, timeout);
        let whole = timeout.0.subsec_nanos() % 1_000_000 == 0;
        if !whole && timeout.0 >= std::time::Duration::from_millis(1) {
            p.error(
                field,
                format!("{timeout} is not a whole number of milliseconds"),
            );
        }
    }
    let claims = &rule.space_delimited_claims;
    if claims.len() > MAX_SPACE_DELIMITED_CLAIMS {
        p.error(
            format!("{path}.spaceDelimitedClaims"),
            format!(
                "has {} claims: at most {MAX_SPACE_DELIMITED_CLAIMS}",
                claims.len()
            ),
        );
    }
    for (j, claim) in claims.iter().enumerate() {
        if claim.is_empty() {
            p.error(format!("{path}.spaceDelimitedClaims[{j}]"), "is empty");
        }
    }
}

/// Istio's `ValidateStrictHTTPHeaderName`: `^[-_A-Za-z0-9]+$`.
fn is_strict_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `jwksUri`: at most 2048 characters, an `http(s)` URL; `http` is a warning.
fn check_jwks_uri(uri: &str, field: &str, p: &mut Problems) {
    let chars = uri.chars().count();
    if chars > MAX_JWKS_URI_CHARS {
        p.error(
            field,
            format!("is {chars} characters long: at most {MAX_JWKS_URI_CHARS}"),
        );
    }
    match http_url(uri) {
        Ok(Scheme::Https) => {}
        Ok(Scheme::Http) => p.warn(field, PLAIN_HTTP),
        Err(why) => p.error(field, format!("{uri:?} is not an http or https URL: {why}")),
    }
}

/// The issuer of a rule with neither `jwksUri` nor `jwks`, whose OpenID discovery document
/// names the keys.
fn check_discovery(issuer: &str, field: &str, p: &mut Problems) {
    match http_url(issuer) {
        Ok(Scheme::Https) => {}
        Ok(Scheme::Http) => p.warn(field, PLAIN_HTTP),
        Err(why) => p.error(
            field,
            format!(
                "{issuer:?} is not an http or https URL ({why}): with neither jwksUri nor \
                 jwks, the issuer must be an https URL, whose OpenID discovery document names \
                 the keys"
            ),
        ),
    }
}

/// The scheme of an [`http_url`].
enum Scheme {
    Http,
    Https,
}

/// Checks that `url` is an absolute `http` or `https` URL the control plane can fetch (the
/// `url` crate's WHATWG parsing, as reqwest, which fetches it, reads it): a host, and a port,
/// if given, from 1 to 65535. Says why not.
fn http_url(url: &str) -> Result<Scheme, String> {
    let parsed = url::Url::parse(url).map_err(|e| e.to_string())?;
    let scheme = match parsed.scheme() {
        "https" => Scheme::Https,
        "http" => Scheme::Http,
        other => {
            return Err(format!(
                "scheme {other:?} is not supported: expected https or http"
            ));
        }
    };
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("it has no host".into());
    }
    if parsed.port() == Some(0) {
        return Err("port 0 is not a port".into());
    }
    Ok(scheme)
}

/// The members RFC 7518 (and RFC 8037 for `OKP`) requires of a public key of each type, as
/// Envoy reads them.
const KEY_TYPES: [(&str, &[&str]); 3] = [
    ("RSA", &["n", "e"]),
    ("EC", &["crv", "x", "y"]),
    ("OKP", &["crv", "x"]),
];

/// The members that hold private key material (RSA's CRT parameters, and `d` of every type).
const PRIVATE_MEMBERS: [&str; 6] = ["d", "p", "q", "dp", "dq", "qi"];

/// `jwks`: a JWKS document (see the module's docs); private key material is a warning, a
/// symmetric key an error.
fn check_jwks(jwks: &str, field: &str, p: &mut Problems) {
    const SHAPE: &str = "a JWKS document is a JSON object with a \"keys\" array: \
                         {\"keys\": [{\"kty\": \"RSA\", ...}]}";
    let document: serde_json::Value = match serde_json::from_str(jwks) {
        Ok(document) => document,
        Err(e) => {
            p.error(field, format!("is not JSON ({e}): {SHAPE}"));
            return;
        }
    };
    if !document.is_object() {
        p.error(field, format!("is not a JSON object: {SHAPE}"));
        return;
    }
    let keys = match document.get("keys") {
        Some(serde_json::Value::Array(keys)) => keys,
        None => {
            p.error(
                field,
                format!("has no \"keys\" member: {SHAPE}, even for a single key"),
            );
            return;
        }
        Some(_) => {
            p.error(
                field,
                format!("its \"keys\" member is not an array: {SHAPE}"),
            );
            return;
        }
    };
    if keys.is_empty() {
        p.error(
            field,
            "has no keys: Envoy refuses a key set without a key it can use, and with it the \
             listener",
        );
    }
    for (i, key) in keys.iter().enumerate() {
        if key["kty"] == "oct" {
            p.error(
                field,
                format!(
                    "jwks key at index {i} is a symmetric key (kty oct): it is a secret, which \
                     wayfinder does not put in every proxy's configuration and debug pages; \
                     sign tokens with an asymmetric key (RS256, ES256, EdDSA)"
                ),
            );
            continue;
        }
        if let Err(why) = check_key(key) {
            p.error(field, format!("jwks key at index {i} {why}"));
            continue;
        }
        if PRIVATE_MEMBERS.iter().any(|m| key.get(m).is_some()) {
            p.warn(
                field,
                format!(
                    "jwks key at index {i} contains private key material; only public keys \
                     are used for verification (wayfinder sends proxies the public part only). \
                     A private key in a configuration object is exposed to everyone who can \
                     read the object: remove it, and replace it where tokens are signed"
                ),
            );
        }
    }
}

/// Why a key of a JWKS is not one Envoy can use, if it is not.
fn check_key(key: &serde_json::Value) -> Result<(), String> {
    if !key.is_object() {
        return Err("is not a JSON object".into());
    }
    let Some(kty) = key["kty"].as_str() else {
        return Err("has no \"kty\" string (RSA, EC or OKP)".into());
    };
    let Some((_, required)) = KEY_TYPES.iter().find(|(name, _)| *name == kty) else {
        return Err(format!("has \"kty\" {kty:?}: expected RSA, EC or OKP"));
    };
    let missing: Vec<&str> = required
        .iter()
        .filter(|m| !key[**m].is_string())
        .copied()
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "(kty {kty}) lacks the string member(s) {}",
            missing.join(", ")
        ))
    }
}
