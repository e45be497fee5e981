//! RequestAuthentication: Istio's own validation cases and CRD test documents, each rule with
//! its field, and wayfinder's additions (plain HTTP, OpenID discovery, JWKS as Envoy reads it).

use super::{assert_errors, assert_warnings, errors, object, validate, warnings};
use crate::request_authentication::RequestAuthentication;
use crate::{ConfigObject, ConfigSpec};

fn ra(yaml: &str) -> ConfigObject {
    object(yaml, |ra| ConfigSpec::RequestAuthentication(Box::new(ra)))
}

/// A spec of one JWT rule with `fields` (flow YAML, without braces).
fn rule(fields: &str) -> String {
    format!("jwtRules: [{{{fields}}}]\n")
}

/// The problems of a spec, printed (`error: FIELD: MESSAGE`).
fn printed(yaml: &str) -> Vec<String> {
    validate(&ra(yaml))
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// Asserts that the spec has no problem at all.
#[track_caller]
fn assert_clean(yaml: &str) {
    let problems = validate(&ra(yaml));
    assert!(problems.is_empty(), "{yaml}: {problems:#?}");
}

/// A JWKS document of the keys given (JSON objects).
fn jwks(keys: &[&str]) -> String {
    format!("{{\"keys\": [{}]}}", keys.join(", "))
}

/// A rule with inline keys `jwks` (JSON, quoted for YAML).
fn jwks_rule(jwks: &str) -> String {
    rule(&format!(
        "issuer: foo.com, jwks: '{}'",
        jwks.replace('\'', "''")
    ))
}

/// The modulus of the RSA key of Istio's "jwks ok" case.
const ISTIO_N: &str = concat!(
    "xAE7eB6qugXyCAG3yhh7pkDkT65pHymX-P7KfIupjf59vsdo91bSP9C8H07pSAGQO1MV_xFj9VswgsCg4R6otmg5",
    "PV2He95lZdHtOcU5DXIg_pbhLdKXbi66GlVeK6ABZOUW3WYtnNHD-91gVuoeJT_DwtGGcp4ignkgXfkiEm4sw-4s",
    "fb4qdt5oLbyVpmW6x9cfa7vs2WTfURiCrBoUqgBo_-4WTiULmmHSGZHOjzwa8WtrtOQGsAFjIbno85jp6MnGGGZP",
    "YZbDAa_b3y5u-YpW7ypZrvD8BgtKVjgtQgZhLAGezMt0ua3DRrWnKqTZ0BJ_EyxOGuHJrLsn00fnMQ",
);

fn rsa_key(extra: &str) -> String {
    format!(
        "{{\"e\": \"AQAB\", \"kid\": \"DHFbpoIUqrY8t2zpA2qXfCmr5VO5ZEr4RzHU_-envvQ\", \
         \"kty\": \"RSA\", \"n\": \"{ISTIO_N}\"{extra}}}"
    )
}

const PRIVATE_KEY: &str = "contains private key material; only public keys are used for \
                           verification (wayfinder sends proxies the public part only). A \
                           private key in a configuration object is exposed to everyone who \
                           can read the object: remove it, and replace it where tokens are \
                           signed";

#[test]
fn istio_s_valid_cases_are_valid() {
    let rsa = jwks(&[&rsa_key("")]);
    let cases = [
        // "empty spec", "empty spec with non default name".
        "{}".to_string(),
        // "default name with non empty selector".
        "selector: {matchLabels: {app: httpbin}}\n".to_string(),
        // "empty issuer and set jwksUri".
        rule("issuer: '', jwksUri: 'https://foo.com/cert'"),
        // "empty value" (a label value may be empty).
        format!(
            "selector: {{matchLabels: {{app: httpbin, version: ''}}}}\n{}",
            rule("issuer: foo.com, jwksUri: 'https://foo.com/cert'")
        ),
        // "good".
        rule(
            "issuer: foo.com, jwksUri: 'https://foo.com', fromHeaders: [{name: x-foo, prefix: 'Bearer '}]",
        ),
        // "jwks ok".
        format!(
            "jwtRules: [{{issuer: foo.com, jwks: '{rsa}', fromHeaders: [{{name: x-foo, prefix: 'Bearer '}}]}}]\n"
        ),
    ];
    for yaml in &cases {
        assert_clean(yaml);
    }
    // "another empty spec": a selector without labels, valid with a warning.
    assert_warnings(&ra("selector: {}\n"), &["spec.selector.matchLabels"]);
    // "good targetRef": valid, with wayfinder's warning that it attaches to nothing served.
    assert_warnings(
        &ra(&format!(
            "targetRef: {{group: gateway.networking.k8s.io, kind: Gateway, name: foo}}\n{}",
            rule("issuer: foo.com, jwksUri: 'https://foo.com/cert'")
        )),
        &["spec.targetRef"],
    );
    // "jwks with private RSA key warns": valid, with the warning at the keys.
    let private = ra(&jwks_rule(&jwks(&[&rsa_key(
        ", \"d\": \"jJVKLOMXjlSnICzfP\"",
    )])));
    assert_warnings(&private, &["spec.jwtRules[0].jwks"]);
    assert_eq!(
        validate(&private)[0].message,
        format!("jwks key at index 0 {PRIVATE_KEY}")
    );
}

#[test]
fn istio_s_crd_valid_document_is_valid() {
    // `reqauth-valid.yaml` (without `presence`, a newer field this type does not read yet): its
    // only problem is wayfinder's warning on targetRefs.
    let full = ra("targetRefs: [{group: '', kind: Service, name: foo}]\n\
                   jwtRules:\n\
                   - issuer: example.com\n  \
                     jwksUri: https://example.com/.well-known/jwks.json\n  \
                     forwardOriginalToken: true\n  \
                     fromCookies: [foo]\n  \
                     fromHeaders: [{name: foo, prefix: baz}]\n  \
                     outputClaimToHeaders: [{claim: abc, header: def}]\n  \
                     timeout: 5s\n  \
                     outputPayloadToHeader: header\n  \
                     spaceDelimitedClaims: [custom_scope, provider.login.scope]\n");
    assert_warnings(&full, &["spec.targetRefs"]);
}

#[test]
fn istio_s_invalid_cases() {
    let with_uri = |fields: &str| {
        rule(&format!(
            "issuer: foo.com, jwksUri: 'https://foo.com', {fields}"
        ))
    };
    let target = |fields: &str| {
        format!(
            "targetRef: {{{fields}}}\n{}",
            rule("issuer: foo.com, jwksUri: 'https://foo.com/cert'")
        )
    };
    assert_errors(
        ra,
        &[
            // "empty jwt rule", "empty issuer and jwksUri".
            ("jwtRules: [{}]\n", &["spec.jwtRules[0]"]),
            (&rule("issuer: ''"), &["spec.jwtRules[0]"]),
            // "bad JwksUri - no protocol", "bad JwksUri - invalid port".
            (
                &rule("issuer: foo.com, jwksUri: foo.com"),
                &["spec.jwtRules[0].jwksUri"],
            ),
            (
                &rule("issuer: foo.com, jwksUri: 'https://foo.com:not-a-number'"),
                &["spec.jwtRules[0].jwksUri"],
            ),
            // "bad workload selector - empty key".
            (
                &format!(
                    "selector: {{matchLabels: {{app: httpbin, '': v1}}}}\n{}",
                    rule("issuer: foo.com, jwksUri: 'https://foo.com/cert'")
                ),
                &["spec.selector.matchLabels[\"\"]"],
            ),
            // "bad targetRef - empty name", "- non-empty namespace", "- wrong group",
            // "- wrong kind".
            (
                &target("group: gateway.networking.k8s.io, kind: Gateway"),
                &["spec.targetRef.name"],
            ),
            (
                &target(
                    "group: gateway.networking.k8s.io, kind: Gateway, name: foo, namespace: bar",
                ),
                &["spec.targetRef.namespace"],
            ),
            (
                &target("group: wrong-group, kind: Gateway, name: foo"),
                &["spec.targetRef.group"],
            ),
            (
                &target("group: gateway.networking.k8s.io, kind: wrong-kind, name: foo"),
                &["spec.targetRef.kind"],
            ),
            // "targetRef and selector cannot both be set".
            (
                &format!(
                    "selector: {{matchLabels: {{app: httpbin}}}}\n{}",
                    target("group: gateway.networking.k8s.io, kind: Gateway, name: foo")
                ),
                &["spec"],
            ),
            // "bad header location", "bad param location", "bad cookie location".
            (
                &with_uri("fromHeaders: [{name: '', prefix: 'Bearer '}]"),
                &["spec.jwtRules[0].fromHeaders[0].name"],
            ),
            (
                &with_uri("fromParams: ['']"),
                &["spec.jwtRules[0].fromParams[0]"],
            ),
            (
                &with_uri("fromCookies: ['', foo]"),
                &["spec.jwtRules[0].fromCookies[0]"],
            ),
            // "jwks error".
            (
                &rule(
                    "issuer: foo.com, jwks: foo, fromHeaders: [{name: x-foo, prefix: 'Bearer '}]",
                ),
                &["spec.jwtRules[0].jwks"],
            ),
            // "null outputClaimToHeader" (an empty one), "null claim value ...", "null header
            // value ...", "invalid header value ...".
            (
                &with_uri("outputClaimToHeaders: [{}]"),
                &[
                    "spec.jwtRules[0].outputClaimToHeaders[0].header",
                    "spec.jwtRules[0].outputClaimToHeaders[0].claim",
                ],
            ),
            (
                &with_uri("outputClaimToHeaders: [{header: x-jwt-claim, claim: ''}]"),
                &["spec.jwtRules[0].outputClaimToHeaders[0].claim"],
            ),
            (
                &with_uri("outputClaimToHeaders: [{header: '', claim: sub}]"),
                &["spec.jwtRules[0].outputClaimToHeaders[0].header"],
            ),
            (
                &with_uri("outputClaimToHeaders: [{header: 'abc%123', claim: sub}]"),
                &["spec.jwtRules[0].outputClaimToHeaders[0].header"],
            ),
        ],
    );
    assert_eq!(
        printed("jwtRules: [{}]\n"),
        [
            "error: spec.jwtRules[0]: needs an issuer or a jwksUri (or both): the issuer names \
             whose tokens the rule accepts"
        ]
    );
    assert_eq!(
        printed(&with_uri(
            "outputClaimToHeaders: [{header: 'abc%123', claim: sub}]"
        )),
        [
            "error: spec.jwtRules[0].outputClaimToHeaders[0].header: \"abc%123\" is not a \
             header name here: letters, digits, '-' and '_' only"
        ]
    );
    // Istio's check of jwks is its parser's, so inline keys alone still need an issuer.
    assert_errors(
        ra,
        &[(
            &format!("jwtRules: [{{jwks: '{}'}}]\n", jwks(&[&rsa_key("")])),
            &["spec.jwtRules[0]"],
        )],
    );
}

#[test]
fn istio_s_crd_invalid_documents() {
    // `reqauth-invalid.yaml`. Its rules name the issuer `example` without keys, which
    // wayfinder also refuses (OpenID discovery needs a URL): that error comes first.
    let issuer = "spec.jwtRules[0].issuer";
    assert_errors(
        ra,
        &[
            // multi-refs, ref-and-selector.
            (
                "targetRefs: [{group: '', kind: Service, name: foo, namespace: bar}]\n\
                 targetRef: {group: '', kind: Service, name: foo, namespace: bar}\n",
                &[
                    "spec",
                    "spec.targetRef.namespace",
                    "spec.targetRefs[0].namespace",
                ],
            ),
            (
                "selector: {matchLabels: {a: b}}\ntargetRef: {group: '', kind: Service, name: foo}\n",
                &["spec"],
            ),
            // bad-target-name, bad-target-namespace, bad-target-group, bad-target-kind.
            (
                "targetRef: {group: '', kind: Service}\n",
                &["spec.targetRef.name"],
            ),
            (
                "targetRef: {group: '', kind: Service, name: foo, namespace: bar}\n",
                &["spec.targetRef.namespace"],
            ),
            (
                "targetRef: {group: __, kind: Service, name: foo, namespace: bar}\n",
                &["spec.targetRef.namespace", "spec.targetRef.group"],
            ),
            (
                "targetRef: {group: '', kind: Serv_ice, name: foo, namespace: bar}\n",
                &["spec.targetRef.namespace", "spec.targetRef.kind"],
            ),
            // empty-aud.
            (
                &rule("issuer: example, audiences: ['']"),
                &[issuer, "spec.jwtRules[0].audiences[0]"],
            ),
            // invalid-jwks: `hTPp\` and a backspace.
            (
                &rule(r#"issuer: example, jwksUri: "hTPp\\\blah""#),
                &["spec.jwtRules[0].jwksUri"],
            ),
            // invalid-from-headers-no-name, invalid-from-headers-empty-name.
            (
                &rule("issuer: example, fromHeaders: [{prefix: baz}]"),
                &[issuer, "spec.jwtRules[0].fromHeaders[0].name"],
            ),
            (
                &rule("issuer: example, fromHeaders: [{name: '', prefix: baz}]"),
                &[issuer, "spec.jwtRules[0].fromHeaders[0].name"],
            ),
            // invalid-from-params, invalid-from-cookies.
            (
                &rule("issuer: example, fromParams: ['']"),
                &[issuer, "spec.jwtRules[0].fromParams[0]"],
            ),
            (
                &rule("issuer: example, fromCookies: ['']"),
                &[issuer, "spec.jwtRules[0].fromCookies[0]"],
            ),
            // invalid-claim-to-header-claim-empty, -header-empty, -bad-header.
            (
                &rule("issuer: example, outputClaimToHeaders: [{claim: '', header: h}]"),
                &[issuer, "spec.jwtRules[0].outputClaimToHeaders[0].claim"],
            ),
            (
                &rule("issuer: example, outputClaimToHeaders: [{claim: x, header: ''}]"),
                &[issuer, "spec.jwtRules[0].outputClaimToHeaders[0].header"],
            ),
            (
                &rule("issuer: example, outputClaimToHeaders: [{claim: x, header: ':authority'}]"),
                &[issuer, "spec.jwtRules[0].outputClaimToHeaders[0].header"],
            ),
            // invalid-space-delimited-claims.
            (
                &rule("issuer: example, spaceDelimitedClaims: ['']"),
                &[issuer, "spec.jwtRules[0].spaceDelimitedClaims[0]"],
            ),
        ],
    );
    // no-issuer (a null rule), invalid-claim-to-header-unset (a null entry) and bad-timeout
    // fail as the document is read, before validation.
    for yaml in [
        "jwtRules: [~]\n",
        "jwtRules:\n-\n",
        "jwtRules: [{issuer: example, outputClaimToHeaders: [~]}]\n",
        "jwtRules: [{issuer: example, fromHeaders: [~]}]\n",
        "jwtRules: [{issuer: example, timeout: apple}]\n",
        // Both spellings of jwksUri (the CRD's "only one of jwks or jwksUri").
        "jwtRules: [{issuer: example, jwksUri: 'https://a', jwks_uri: 'https://b'}]\n",
    ] {
        assert!(
            serde_saphyr::from_str::<RequestAuthentication>(yaml).is_err(),
            "{yaml}"
        );
    }
}

#[test]
fn jwks_and_jwks_uri_exclude_each_other() {
    let both = rule(&format!(
        "issuer: 'https://example.com', jwksUri: 'https://example.com/jwks', jwks: '{}'",
        jwks(&[&rsa_key("")])
    ));
    assert_eq!(
        printed(&both),
        [
            "error: spec.jwtRules[0]: only one of jwks or jwksUri can be set: the keys inline, \
             or where to fetch them"
        ]
    );
    // The snake_case spelling is the same field.
    assert_errors(
        ra,
        &[(
            &rule(&format!(
                "issuer: foo.com, jwks_uri: 'https://example.com/jwks', jwks: '{}'",
                jwks(&[&rsa_key("")])
            )),
            &["spec.jwtRules[0]"],
        )],
    );
}

#[test]
fn jwks_uris_are_http_urls() {
    let good = [
        "https://example.com/.well-known/jwks.json",
        "HTTPS://Example.COM/keys",
        "https://example.com:8443/keys?version=2#frag",
        "https://example.com:/keys",
        "https://user:pass@keys.example.com/jwks",
        "https://10.0.0.1/jwks",
        "https://[2001:db8::1]:443/jwks",
        "https://[::1]/jwks",
        "https://keycloak/realms/a%20b/protocol/openid-connect/certs",
        "https://example.com.",
        "https://example.com",
    ];
    for uri in good {
        assert_clean(&rule(&format!("issuer: foo.com, jwksUri: '{uri}'")));
    }
    // What the control plane's HTTP client (the `url` crate) cannot fetch, with its reason.
    let bad = [
        ("foo.com", "relative URL without a base"),
        ("/jwks.json", "relative URL without a base"),
        (
            "ftp://example.com/jwks",
            "scheme \"ftp\" is not supported: expected https or http",
        ),
        (
            "localhost:8080/jwks",
            "scheme \"localhost\" is not supported: expected https or http",
        ),
        ("https://", "empty host"),
        ("https://:443/jwks", "empty host"),
        ("https://foo.com:not-a-number", "invalid port number"),
        ("https://foo.com:65536/jwks", "invalid port number"),
        ("https://foo.com:0/jwks", "port 0 is not a port"),
        (
            "https://exa mple.com/jwks",
            "invalid international domain name",
        ),
        ("https://1.2.3.400/jwks", "invalid IPv4 address"),
        ("https://[2001:db8::1/jwks", "invalid IPv6 address"),
        ("https://[2001:db8::zz]/jwks", "invalid IPv6 address"),
        ("https://2001:db8::1/jwks", "invalid port number"),
    ];
    for (uri, why) in bad {
        let o = ra(&rule(&format!("issuer: foo.com, jwksUri: \"{uri}\"")));
        assert_eq!(errors(&o), ["spec.jwtRules[0].jwksUri"], "{uri}");
        assert_eq!(
            validate(&o)[0].message,
            format!("{uri:?} is not an http or https URL: {why}"),
            "{uri}"
        );
    }
}

#[test]
fn jwks_uris_over_plain_http_are_warned_about() {
    let o = ra(&rule(
        "issuer: foo.com, jwksUri: 'http://keys.example.com/jwks'",
    ));
    assert_warnings(&o, &["spec.jwtRules[0].jwksUri"]);
    assert_eq!(
        validate(&o)[0].to_string(),
        "warning: spec.jwtRules[0].jwksUri: keys fetched over plain HTTP can be replaced by \
         anyone on the path; use https"
    );
    assert_warnings(
        &ra(&rule(
            "issuer: foo.com, jwksUri: 'HTTP://keycloak.auth:8080/certs'",
        )),
        &["spec.jwtRules[0].jwksUri"],
    );
}

#[test]
fn jwks_uris_are_at_most_2048_characters() {
    let path = |n: usize| "a".repeat(n - "https://example.com/".len());
    assert_clean(&rule(&format!(
        "issuer: foo.com, jwksUri: 'https://example.com/{}'",
        path(2048)
    )));
    let long = printed(&rule(&format!(
        "issuer: foo.com, jwksUri: 'https://example.com/{}'",
        path(2049)
    )));
    assert_eq!(
        long,
        ["error: spec.jwtRules[0].jwksUri: is 2049 characters long: at most 2048"]
    );
    // Characters, not bytes.
    assert_clean(&rule(&format!(
        "issuer: foo.com, jwksUri: 'https://example.com/{}'",
        "é".repeat(2048 - "https://example.com/".len())
    )));
}

#[test]
fn without_keys_the_issuer_is_discovered() {
    // OpenID discovery: the issuer is a URL.
    assert_clean(&rule("issuer: 'https://accounts.google.com'"));
    assert_clean(&rule(
        "issuer: 'https://login.example.com/realms/a/', audiences: [api]",
    ));
    let plain = ra(&rule("issuer: 'http://keycloak.auth:8080/realms/a'"));
    assert_warnings(&plain, &["spec.jwtRules[0].issuer"]);
    assert_eq!(
        validate(&plain)[0].message,
        "keys fetched over plain HTTP can be replaced by anyone on the path; use https"
    );
    assert_eq!(
        printed(&rule("issuer: foo.com")),
        [
            "error: spec.jwtRules[0].issuer: \"foo.com\" is not an http or https URL (relative \
             URL without a base): with neither jwksUri nor jwks, the issuer must be an https \
             URL, whose OpenID discovery document names the keys"
        ]
    );
    assert_errors(
        ra,
        &[
            (
                &rule("issuer: 'ftp://example.com'"),
                &["spec.jwtRules[0].issuer"],
            ),
            (
                &rule("issuer: 'https://example.com:0'"),
                &["spec.jwtRules[0].issuer"],
            ),
            (
                &rule("issuer: 'urn:example:issuer'"),
                &["spec.jwtRules[0].issuer"],
            ),
            // With keys, the issuer is only compared with tokens' `iss`: anything goes.
            (
                &rule("issuer: 'urn:example:issuer', jwksUri: 'https://example.com/jwks'"),
                &[],
            ),
            (
                &jwks_rule(&jwks(&[&rsa_key("")])).replace("foo.com", "'urn:example:issuer'"),
                &[],
            ),
        ],
    );
}

#[test]
fn inline_jwks_is_a_key_set_envoy_reads() {
    let shape = "a JWKS document is a JSON object with a \"keys\" array: \
                 {\"keys\": [{\"kty\": \"RSA\", ...}]}";
    let cases: Vec<(String, String)> = vec![
        (
            "[{\"kty\": \"RSA\"}]".into(),
            format!("is not a JSON object: {shape}"),
        ),
        ("\"keys\"".into(), format!("is not a JSON object: {shape}")),
        (
            rsa_key(""),
            format!("has no \"keys\" member: {shape}, even for a single key"),
        ),
        (
            "{\"keys\": {\"kty\": \"RSA\"}}".into(),
            format!("its \"keys\" member is not an array: {shape}"),
        ),
        (
            "{\"keys\": []}".into(),
            "has no keys: Envoy refuses a key set without a key it can use, and with it the \
             listener"
                .into(),
        ),
        (
            jwks(&["\"key\""]),
            "jwks key at index 0 is not a JSON object".into(),
        ),
        (
            jwks(&["{\"n\": \"x\", \"e\": \"AQAB\"}"]),
            "jwks key at index 0 has no \"kty\" string (RSA, EC or OKP)".into(),
        ),
        (
            jwks(&["{\"kty\": 1}"]),
            "jwks key at index 0 has no \"kty\" string (RSA, EC or OKP)".into(),
        ),
        (
            jwks(&["{\"kty\": \"rsa\", \"n\": \"x\", \"e\": \"AQAB\"}"]),
            "jwks key at index 0 has \"kty\" \"rsa\": expected RSA, EC or OKP".into(),
        ),
        (
            jwks(&["{\"kty\": \"RSA\", \"n\": 1}"]),
            "jwks key at index 0 (kty RSA) lacks the string member(s) n, e".into(),
        ),
        (
            jwks(&["{\"kty\": \"EC\", \"crv\": \"P-256\", \"x\": \"a\"}"]),
            "jwks key at index 0 (kty EC) lacks the string member(s) y".into(),
        ),
        (
            jwks(&["{\"kty\": \"OKP\", \"x\": \"a\"}"]),
            "jwks key at index 0 (kty OKP) lacks the string member(s) crv".into(),
        ),
    ];
    for (document, message) in &cases {
        let o = ra(&jwks_rule(document));
        assert_eq!(errors(&o), ["spec.jwtRules[0].jwks"], "{document}");
        assert_eq!(&validate(&o)[0].message, message, "{document}");
    }
    // Every bad key is reported, each with its index; a symmetric key is refused.
    let o = ra(&jwks_rule(&jwks(&[
        &rsa_key(""),
        "{\"kty\": \"oct\", \"k\": \"c2VjcmV0\"}",
        "{\"kty\": \"RSA\", \"n\": \"x\", \"e\": \"AQAB\"}",
        "[]",
    ])));
    let messages: Vec<String> = validate(&o).into_iter().map(|p| p.message).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages[0].starts_with("jwks key at index 1 is a symmetric key (kty oct): it is a secret"),
        "{messages:?}"
    );
    assert_eq!(messages[1], "jwks key at index 3 is not a JSON object");
    // Keys of each type, with members of their own.
    let good = jwks(&[
        &rsa_key(
            ", \"use\": \"sig\", \"alg\": \"RS256\", \"x5c\": [\"MIIB\"], \"ext\": {\"a\": [1, -2.5e+3, true, null]}",
        ),
        "{\"kty\": \"EC\", \"crv\": \"P-256\", \"x\": \"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU\", \"y\": \"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0\"}",
        "{\"kty\": \"OKP\", \"crv\": \"Ed25519\", \"x\": \"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}",
    ]);
    assert_clean(&jwks_rule(&good));
    // Strict JSON (serde_json): what is not is said so.
    for document in [
        "foo",
        "{keys: []}",
        "{\"keys\": [],}",
        "{\"keys\": [{\"kty\": \"RSA\"}]",
        "{\"keys\": []} {}",
        "{\"keys\": [01]}",
        "{\"keys\": [NaN]}",
        "{'keys': []}",
        "   ",
    ] {
        let o = ra(&jwks_rule(document));
        assert_eq!(errors(&o), ["spec.jwtRules[0].jwks"], "{document:?}");
        assert!(
            validate(&o)[0].message.starts_with("is not JSON ("),
            "{document:?}: {:?}",
            validate(&o)
        );
    }
    // Deep nesting is refused, not a stack overflow.
    let deep = format!(
        "{{\"keys\": [], \"x\": {}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let o = ra(&jwks_rule(&deep));
    assert_eq!(errors(&o), ["spec.jwtRules[0].jwks"]);
    assert!(validate(&o)[0].message.contains("recursion limit"));
}

#[test]
fn private_key_material_is_warned_about_per_key() {
    for member in ["d", "p", "q", "dp", "dq", "qi"] {
        let o = ra(&jwks_rule(&jwks(&[&rsa_key(&format!(
            ", \"{member}\": \"AQAB\""
        ))])));
        assert_warnings(&o, &["spec.jwtRules[0].jwks"]);
    }
    // `d` of an EC or OKP key, and the public keys beside them.
    let o = ra(&jwks_rule(&jwks(&[
        &rsa_key(""),
        "{\"kty\": \"EC\", \"crv\": \"P-256\", \"x\": \"a\", \"y\": \"b\", \"d\": \"c\"}",
        "{\"kty\": \"OKP\", \"crv\": \"Ed25519\", \"x\": \"a\"}",
        "{\"kty\": \"OKP\", \"crv\": \"Ed25519\", \"x\": \"a\", \"d\": \"b\"}",
    ])));
    assert_warnings(&o, &["spec.jwtRules[0].jwks", "spec.jwtRules[0].jwks"]);
    let messages: Vec<String> = validate(&o).into_iter().map(|p| p.message).collect();
    assert_eq!(
        messages,
        [1, 3].map(|i| format!("jwks key at index {i} {PRIVATE_KEY}"))
    );
}

#[test]
fn audiences_and_token_locations_are_not_empty() {
    let base = "issuer: 'https://example.com'";
    assert_errors(
        ra,
        &[
            (
                &rule(&format!("{base}, audiences: [a, '', b, '']")),
                &[
                    "spec.jwtRules[0].audiences[1]",
                    "spec.jwtRules[0].audiences[3]",
                ],
            ),
            (
                &rule(&format!(
                    "{base}, fromHeaders: [{{name: authorization, prefix: 'Bearer '}}, {{prefix: x}}, {{name: ''}}]"
                )),
                &[
                    "spec.jwtRules[0].fromHeaders[1].name",
                    "spec.jwtRules[0].fromHeaders[2].name",
                ],
            ),
            (
                &rule(&format!(
                    "{base}, fromParams: [token, ''], fromCookies: [session, '', '']"
                )),
                &[
                    "spec.jwtRules[0].fromParams[1]",
                    "spec.jwtRules[0].fromCookies[1]",
                    "spec.jwtRules[0].fromCookies[2]",
                ],
            ),
            // A prefix may be anything, empty included.
            (
                &rule(&format!(
                    "{base}, fromHeaders: [{{name: x-jwt, prefix: ''}}]"
                )),
                &[],
            ),
        ],
    );
    assert_eq!(
        printed(&rule(&format!("{base}, fromHeaders: [{{prefix: x}}]"))),
        ["error: spec.jwtRules[0].fromHeaders[0].name: is required"]
    );
    assert_eq!(
        printed(&rule(&format!("{base}, audiences: ['']"))),
        ["error: spec.jwtRules[0].audiences[0]: is empty"]
    );
}

#[test]
fn claims_go_to_strict_header_names() {
    let base = "issuer: 'https://example.com'";
    assert_clean(&rule(&format!(
        "{base}, outputClaimToHeaders: [{{header: X-Jwt_Sub-1, claim: sub}}, \
         {{header: x-group, claim: nested.key.group}}]"
    )));
    for header in [":authority", "x jwt", "x.jwt", "x/jwt", "é"] {
        assert_eq!(
            errors(&ra(&rule(&format!(
                "{base}, outputClaimToHeaders: [{{header: '{header}', claim: sub}}]"
            )))),
            ["spec.jwtRules[0].outputClaimToHeaders[0].header"],
            "{header}"
        );
    }
    assert_eq!(
        printed(&rule(&format!(
            "{base}, outputClaimToHeaders: [{{claim: sub}}, {{header: x}}]"
        ))),
        [
            "error: spec.jwtRules[0].outputClaimToHeaders[0].header: is required",
            "error: spec.jwtRules[0].outputClaimToHeaders[1].claim: is required",
        ]
    );
}

#[test]
fn timeouts_are_whole_milliseconds() {
    let base = "issuer: 'https://example.com'";
    for good in ["1ms", "5s", "1.5s", "1m30s", "250ms", "1000us"] {
        assert_clean(&rule(&format!("{base}, timeout: {good}")));
    }
    for (bad, message) in [
        ("0s", "0s is too short: at least 1ms"),
        ("0", "0s is too short: at least 1ms"),
        ("500us", "0.5ms is too short: at least 1ms"),
        ("1.5ms", "1.5ms is not a whole number of milliseconds"),
        ("1001us", "1.001ms is not a whole number of milliseconds"),
        (
            "2s1ns",
            "2000.000001ms is not a whole number of milliseconds",
        ),
    ] {
        let o = ra(&rule(&format!("{base}, timeout: {bad}")));
        assert_eq!(errors(&o), ["spec.jwtRules[0].timeout"], "{bad}");
        assert_eq!(validate(&o)[0].message, message, "{bad}");
    }
}

#[test]
fn space_delimited_claims_are_at_most_64_and_not_empty() {
    let claims = |n: usize| {
        (0..n)
            .map(|i| format!("c{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let base = "issuer: 'https://example.com'";
    assert_clean(&rule(&format!(
        "{base}, spaceDelimitedClaims: [{}]",
        claims(64)
    )));
    assert_eq!(
        printed(&rule(&format!(
            "{base}, spaceDelimitedClaims: [{}, '']",
            claims(64)
        ))),
        [
            "error: spec.jwtRules[0].spaceDelimitedClaims: has 65 claims: at most 64",
            "error: spec.jwtRules[0].spaceDelimitedClaims[64]: is empty",
        ]
    );
}

#[test]
fn at_most_4096_rules() {
    let one = "{issuer: 'https://example.com'}";
    let rules = |n: usize| format!("jwtRules: [{}]\n", vec![one; n].join(", "));
    assert_clean(&rules(4096));
    assert_eq!(
        printed(&rules(4097)),
        ["error: spec.jwtRules: has 4097 rules: at most 4096"]
    );
}

#[test]
fn selector_and_targets_are_authorization_policy_s() {
    assert_errors(
        ra,
        &[
            (
                "selector: {matchLabels: {'': a, app: 'v*'}}\n",
                &[
                    "spec.selector.matchLabels[\"\"]",
                    "spec.selector.matchLabels.app",
                ],
            ),
            (
                "targetRefs:\n\
                 - {group: networking.istio.io, kind: Gateway, name: gw}\n\
                 - {kind: Pod, name: p}\n\
                 - {kind: ServiceEntry, name: se}\n",
                &[
                    "spec.targetRefs[0].group",
                    "spec.targetRefs[1].kind",
                    "spec.targetRefs[2].group",
                ],
            ),
        ],
    );
    let targeted = printed("targetRefs: [{kind: Service, name: reviews}]\n");
    assert_eq!(
        targeted,
        [
            "warning: spec.targetRefs: attaches the policy to Kubernetes Gateway API gateways \
             and waypoints, which wayfinder does not serve: it applies to no sidecar or gateway \
             here (use a selector)"
        ]
    );
    assert_eq!(
        warnings(&ra(
            "targetRef: {group: gateway.networking.k8s.io, kind: GatewayClass, name: istio}\n"
        )),
        ["spec.targetRef"]
    );
}

#[test]
fn problems_come_in_field_order() {
    let o = ra("selector: {matchLabels: {}}\n\
                jwtRules:\n\
                - issuer: foo.com\n  \
                  audiences: ['']\n  \
                  fromHeaders: [{name: ''}]\n  \
                  fromParams: ['']\n  \
                  fromCookies: ['']\n  \
                  outputClaimToHeaders: [{header: 'a b', claim: ''}]\n  \
                  timeout: 0s\n  \
                  spaceDelimitedClaims: ['']\n\
                - jwksUri: 'http://example.com/jwks'\n  \
                  jwks: '{\"keys\": [{\"kty\": \"oct\", \"k\": \"a\"}]}'\n");
    let all: Vec<(String, bool)> = validate(&o)
        .into_iter()
        .map(|p| (p.field, p.fatal))
        .collect();
    let expected = [
        ("spec.selector.matchLabels", false),
        ("spec.jwtRules[0].issuer", true),
        ("spec.jwtRules[0].audiences[0]", true),
        ("spec.jwtRules[0].fromHeaders[0].name", true),
        ("spec.jwtRules[0].fromParams[0]", true),
        ("spec.jwtRules[0].fromCookies[0]", true),
        ("spec.jwtRules[0].outputClaimToHeaders[0].header", true),
        ("spec.jwtRules[0].outputClaimToHeaders[0].claim", true),
        ("spec.jwtRules[0].timeout", true),
        ("spec.jwtRules[0].spaceDelimitedClaims[0]", true),
        ("spec.jwtRules[1]", true),
        ("spec.jwtRules[1].jwksUri", false),
        // A symmetric key.
        ("spec.jwtRules[1].jwks", true),
    ];
    let expected: Vec<(String, bool)> = expected
        .iter()
        .map(|(f, fatal)| (f.to_string(), *fatal))
        .collect();
    assert_eq!(all, expected);
}
