//! AuthorizationPolicy: Istio's own test policies and validation cases, each rule with its
//! field, and the warning about HTTP-only fields on TCP ports.

use std::path::Path;
use std::sync::Arc;

use super::{assert_errors, assert_warnings, errors, object, validate, warnings};
use crate::authorization_policy::AuthorizationPolicy;
use crate::{ConfigMeta, ConfigObject, ConfigSpec};

fn ap(yaml: &str) -> ConfigObject {
    object(yaml, |ap| ConfigSpec::AuthorizationPolicy(Box::new(ap)))
}

/// The problems of a spec, printed (`error: FIELD: MESSAGE`).
fn printed(yaml: &str) -> Vec<String> {
    validate(&ap(yaml))
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// Asserts that the spec has no problem at all.
#[track_caller]
fn assert_clean(yaml: &str) {
    let problems = validate(&ap(yaml));
    assert!(problems.is_empty(), "{yaml}: {problems:#?}");
}

#[derive(serde::Deserialize)]
struct Doc {
    metadata: Meta,
    spec: AuthorizationPolicy,
}

#[derive(serde::Deserialize)]
struct Meta {
    name: String,
    namespace: String,
}

/// Every policy of Istio's builder test inputs (`tests/it/istio/authz/{http,tcp}/*-in.yaml`),
/// with its file name.
fn istio_inputs() -> Vec<(String, ConfigObject)> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/it/istio/authz");
    let mut inputs = Vec::new();
    for dir in ["http", "tcp"] {
        let mut files: Vec<_> = std::fs::read_dir(corpus.join(dir))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.to_string_lossy().ends_with("-in.yaml"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let docs: Vec<Doc> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for doc in docs {
                let object = ConfigObject {
                    meta: ConfigMeta {
                        name: Arc::from(doc.metadata.name),
                        namespace: Arc::from(doc.metadata.namespace),
                        ..ConfigMeta::default()
                    },
                    spec: ConfigSpec::AuthorizationPolicy(Box::new(doc.spec)),
                };
                inputs.push((
                    format!("{dir}/{}", file.file_name().unwrap().to_string_lossy()),
                    object,
                ));
            }
        }
    }
    inputs
}

#[test]
fn istio_s_builder_inputs_have_no_errors() {
    let inputs = istio_inputs();
    assert!(inputs.len() >= 20, "found only {} policies", inputs.len());
    for (file, object) in &inputs {
        assert_eq!(
            errors(object),
            Vec::<String>::new(),
            "{file}: {:#?}",
            validate(object)
        );
    }
}

#[test]
fn istio_s_builder_inputs_warn_only_about_http_fields_on_tcp_ports() {
    let warned: Vec<(String, Vec<String>)> = istio_inputs()
        .iter()
        .map(|(file, object)| (format!("{file}:{}", object.meta.name), warnings(object)))
        .filter(|(_, warnings)| !warnings.is_empty())
        .collect();
    let rule = |i: usize| format!("spec.rules[{i}]");
    let mut expected: Vec<(String, Vec<String>)> = [
        ("http/allow-full-rule-in.yaml:httpbin-1", vec![1]),
        ("http/allow-path-in.yaml:httpbin-1", vec![0]),
        ("http/dry-run-allow-and-deny-in.yaml:httpbin-1", vec![0]),
        ("http/dry-run-allow-and-deny-in.yaml:httpbin-2", vec![0]),
        ("http/dry-run-allow-in.yaml:httpbin-1", vec![0]),
        ("http/dry-run-mix-in.yaml:httpbin-1", vec![0]),
        ("http/dry-run-mix-in.yaml:httpbin-2", vec![0]),
        ("http/multiple-policies-in.yaml:httpbin-1", vec![0]),
        ("http/multiple-policies-in.yaml:httpbin-2", vec![0]),
        ("http/multiple-policies-in.yaml:httpbin-3", vec![0]),
        ("http/multiple-policies-in.yaml:httpbin-6", vec![0]),
        ("http/multiple-policies-in.yaml:httpbin-9", vec![0]),
        ("http/single-policy-in.yaml:httpbin", vec![0, 1]),
        (
            "tcp/allow-both-http-tcp-in.yaml:httpbin-deny",
            vec![0, 1, 2],
        ),
        ("tcp/allow-only-http-in.yaml:httpbin-deny", vec![0, 1]),
        ("tcp/audit-both-http-tcp-in.yaml:httpbin-audit", vec![0]),
        // Rules 7 (namespaces and ports) and 9 (when destination.port) have no HTTP field.
        (
            "tcp/deny-both-http-tcp-in.yaml:httpbin-deny",
            vec![0, 1, 2, 3, 4, 5, 6, 8, 10],
        ),
    ]
    .into_iter()
    .map(|(name, rules)| (name.to_string(), rules.into_iter().map(rule).collect()))
    .collect();
    expected.sort();
    let mut warned = warned;
    warned.sort();
    assert_eq!(warned, expected);
}

#[test]
fn istio_s_valid_cases_are_valid() {
    // Istio's "good" (it warns about its methods on TCP ports).
    let good = ap("selector: {matchLabels: {app: httpbin, version: v1}}\n\
                   rules:\n\
                   - from: [{source: {principals: [sa1]}}, {source: {principals: [sa2]}}]\n  \
                     to: [{operation: {methods: [GET]}}, {operation: {methods: [POST]}}]\n  \
                     when:\n  \
                     - {key: source.ip, values: [1.2.3.4, 5.6.7.0/24]}\n  \
                     - {key: 'request.headers[:authority]', values: [v1, v2]}\n");
    assert_warnings(&good, &["spec.rules[0]"]);
    let cases = [
        // "good serviceAccounts".
        "selector: {matchLabels: {app: httpbin}}\n\
         rules:\n\
         - from: [{source: {serviceAccounts: [ns1/sa1, ns2/sa2]}}, {source: {principals: [sa2]}}]\n",
        // "allow-rules-nil", and a mesh-wide ALLOW without rules (denies everything).
        "{}",
        "selector: {matchLabels: {app: httpbin}}\n",
        "action: AUDIT\n",
        "action: DENY\nrules: [{}]\n",
        "rules:\n\
         - from: [{source: {ipBlocks: ['2001:db8::/32', '::1', 10.0.0.5/24, 0.0.0.0/0]}}]\n  \
           to: [{operation: {ports: ['0', '65535', '080']}}]\n  \
           when:\n  \
           - {key: source.trustDomain, values: [cluster.local, '*.local', 'td-*']}\n  \
           - {key: source.serviceAccount, notValues: [default/bad, bad]}\n  \
           - {key: connection.sni, values: ['*.example.com']}\n  \
           - {key: 'experimental.envoy.filters.network.mysql_proxy[db.table]', values: ['[update]']}\n",
    ];
    for yaml in cases {
        assert_clean(yaml);
    }
}

#[test]
fn selector_and_targets() {
    assert_errors(
        ap,
        &[
            (
                "selector: {matchLabels: {app: a}}\n\
                 targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n",
                &["spec"],
            ),
            (
                "selector: {matchLabels: {app: a}}\n\
                 targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: gw}\n\
                 targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n",
                &["spec"],
            ),
            (
                "selector: {matchLabels: {'': a, app: 'v*', 'x*': b}}\n",
                &[
                    "spec.selector.matchLabels[\"\"]",
                    "spec.selector.matchLabels.app",
                    "spec.selector.matchLabels.x*",
                ],
            ),
            (
                "targetRef: {group: gateway.networking.k8s.io, kind: Gateway, namespace: other}\n",
                &["spec.targetRef.name", "spec.targetRef.namespace"],
            ),
            (
                "targetRefs:\n\
                 - {group: networking.istio.io, kind: Gateway, name: gw}\n\
                 - {kind: Pod, name: p}\n\
                 - {group: apps, kind: Service, name: s}\n\
                 - {kind: ServiceEntry, name: se}\n",
                &[
                    "spec.targetRefs[0].group",
                    "spec.targetRefs[1].kind",
                    "spec.targetRefs[2].group",
                    "spec.targetRefs[3].group",
                ],
            ),
        ],
    );
    assert_eq!(
        printed(
            "selector: {matchLabels: {app: a}}\n\
             targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n"
        ),
        [
            "error: spec: sets selector and targetRefs: set only one of selector, targetRef and \
          targetRefs",
            "warning: spec.targetRefs: attaches the policy to Kubernetes Gateway API gateways \
             and waypoints, which wayfinder does not serve: it applies to no sidecar or gateway \
             here (use a selector)"
        ]
    );
    // Istio's valid targets ("target-ref-good", "target-refs-good", "target-refs-good-service")
    // have no error, and that warning only.
    for yaml in [
        "targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: gw}\nrules: [{}]\n",
        "targetRefs:\n\
         - {kind: Service, name: reviews}\n\
         - {group: core, kind: Service, name: ratings}\n\
         - {group: networking.istio.io, kind: ServiceEntry, name: external}\n\
         - {group: gateway.networking.k8s.io, kind: GatewayClass, name: istio}\n",
    ] {
        let problems = printed(yaml);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("warning: spec.targetRef"),
            "{problems:?}"
        );
    }
    assert_eq!(
        printed("targetRef: {group: networking.istio.io, kind: Gateway, name: gw}\n")[0],
        "error: spec.targetRef.group: \"networking.istio.io\" is not the group of a \
          targetable Gateway: expected gateway.networking.k8s.io"
    );
    assert_warnings(
        &ap("selector: {matchLabels: {}}\n"),
        &["spec.selector.matchLabels"],
    );
    assert_warnings(
        &ap("selector: {}\nrules: [{}]\n"),
        &["spec.selector.matchLabels"],
    );
}

#[test]
fn custom_is_refused_with_istio_s_checks() {
    let custom = printed("action: CUSTOM\nprovider: {name: ext-authz}\nrules: [{}]\n");
    assert_eq!(
        custom,
        [
            "error: spec.action: CUSTOM needs an external authorizer (a MeshConfig extension \
          provider), which wayfinder does not configure yet; the policy is refused rather \
          than ignored, so that what it would deny is not silently allowed"
        ]
    );
    assert_errors(
        ap,
        &[
            (
                "action: CUSTOM\nprovider: {name: x}\n",
                &["spec.action", "spec.rules"],
            ),
            (
                "action: CUSTOM\nprovider: {name: x}\nrules: []\n",
                &["spec.action", "spec.rules"],
            ),
            (
                "action: CUSTOM\nrules: [{}]\n",
                &["spec.action", "spec.provider.name"],
            ),
            (
                "action: CUSTOM\nprovider: {name: ''}\nrules: [{}]\n",
                &["spec.action", "spec.provider.name"],
            ),
            (
                "action: CUSTOM\nprovider: {name: x}\n\
                 rules:\n\
                 - from:\n  \
                   - source: {principals: [a], namespaces: [b], ipBlocks: [1.2.3.4], remoteIpBlocks: [1.2.3.4]}\n  \
                   - source: {requestPrincipals: ['*'], trustDomains: [td], notServiceAccounts: [sa]}\n  \
                   to: [{operation: {paths: [/admin]}}]\n  \
                   when:\n  \
                   - {key: source.principal, values: [a]}\n  \
                   - {key: 'request.auth.claims[iss]', values: [a]}\n  \
                   - {key: 'request.headers[x]', values: [a]}\n  \
                   - {key: source.ip, values: [1.2.3.4]}\n",
                &[
                    "spec.action",
                    "spec.rules[0].from[0].source.principals",
                    "spec.rules[0].from[0].source.namespaces",
                    "spec.rules[0].from[1].source.requestPrincipals",
                    "spec.rules[0].from[1].source.notServiceAccounts",
                    "spec.rules[0].from[1].source.trustDomains",
                    "spec.rules[0].when[0].key",
                    "spec.rules[0].when[1].key",
                ],
            ),
            // Istio's "provider-wrong-action".
            ("provider: {name: x}\nrules: [{}]\n", &["spec.provider"]),
        ],
    );
    // No TCP warning on a CUSTOM policy: it is refused anyway.
    assert_eq!(
        warnings(&ap(
            "action: CUSTOM\nprovider: {name: x}\nrules: [{to: [{operation: {paths: [/a]}}]}]\n"
        )),
        Vec::<String>::new()
    );
}

#[test]
fn deny_needs_rules() {
    assert_errors(
        ap,
        &[
            ("action: DENY\n", &["spec.rules"]),
            ("action: DENY\nrules: []\n", &["spec.rules"]),
            ("action: DENY\nrules: [{}]\n", &[]),
            ("action: ALLOW\nrules: []\n", &[]),
            ("action: AUDIT\n", &[]),
        ],
    );
    assert_eq!(
        printed("action: DENY\n"),
        [
            "error: spec.rules: DENY without rules never matches: add an empty rule {} to deny \
          every request"
        ]
    );
}

#[test]
fn rules_sources_and_operations_are_not_empty() {
    assert_errors(
        ap,
        &[
            ("rules: [{}, null, {}]\n", &["spec.rules[1]"]),
            (
                "rules: [{from: [{}, {source: {}}, {source: {namespaces: [a]}}]}]\n",
                &[
                    "spec.rules[0].from[0].source",
                    "spec.rules[0].from[1].source",
                ],
            ),
            (
                "rules: [{to: [{operation: {ports: ['80']}}, {}, {operation: {}}]}]\n",
                &[
                    "spec.rules[0].to[1].operation",
                    "spec.rules[0].to[2].operation",
                ],
            ),
            // Istio's "serviceAccounts and namespaces", and with principals.
            (
                "rules: [{from: [{source: {serviceAccounts: [ns1/sa1], namespaces: [ns]}}]}]\n",
                &["spec.rules[0].from[0].source.serviceAccounts"],
            ),
            (
                "rules: [{from: [{source: {notServiceAccounts: [sa1], notPrincipals: [p]}}]}]\n",
                &["spec.rules[0].from[0].source.notServiceAccounts"],
            ),
        ],
    );
    // Trust domains and addresses go with service accounts.
    assert_clean(
        "rules: [{from: [{source: {serviceAccounts: [sa], trustDomains: [td], ipBlocks: [1.2.3.4]}}]}]\n",
    );
}

#[test]
fn empty_values_are_errors_at_their_index() {
    let fields = [
        "principals",
        "notPrincipals",
        "requestPrincipals",
        "notRequestPrincipals",
        "namespaces",
        "notNamespaces",
        "serviceAccounts",
        "notServiceAccounts",
        "trustDomains",
        "notTrustDomains",
        "ipBlocks",
        "notIpBlocks",
        "remoteIpBlocks",
        "notRemoteIpBlocks",
    ];
    for field in fields {
        let value = if field.ends_with("pBlocks") {
            "10.0.0.1"
        } else {
            "a"
        };
        let yaml = format!("rules: [{{from: [{{source: {{{field}: [{value}, '']}}}}]}}]\n");
        let o = ap(&yaml);
        assert_eq!(
            errors(&o),
            [format!("spec.rules[0].from[0].source.{field}[1]")],
            "{yaml}"
        );
        let problems = validate(&o);
        let error = problems.iter().find(|p| p.fatal).unwrap();
        assert_eq!(error.message, "is empty");
    }
    for field in [
        "hosts",
        "notHosts",
        "ports",
        "notPorts",
        "methods",
        "notMethods",
        "paths",
        "notPaths",
    ] {
        let yaml = format!("rules: [{{to: [{{operation: {{{field}: ['', '']}}}}]}}]\n");
        let path = format!("spec.rules[0].to[0].operation.{field}");
        assert_eq!(
            errors(&ap(&yaml)),
            [format!("{path}[0]"), format!("{path}[1]")],
            "{yaml}"
        );
    }
    assert_errors(
        ap,
        &[(
            "rules: [{when: [{key: source.namespace, values: [a, ''], notValues: ['']}]}]\n",
            &[
                "spec.rules[0].when[0].values[1]",
                "spec.rules[0].when[0].notValues[0]",
            ],
        )],
    );
}

#[test]
fn addresses_and_ports() {
    assert_errors(
        ap,
        &[
            // Istio's "invalid ip and port in ipBlocks" and "... remoteIpBlocks".
            (
                "rules:\n\
                 - from: [{source: {ipBlocks: [1.2.3.4, ip1], notIpBlocks: [5.6.7.8, ip2]}}]\n  \
                   to: [{operation: {ports: ['80', port1], notPorts: ['90', port2]}}]\n",
                &[
                    "spec.rules[0].from[0].source.ipBlocks[1]",
                    "spec.rules[0].from[0].source.notIpBlocks[1]",
                    "spec.rules[0].to[0].operation.ports[1]",
                    "spec.rules[0].to[0].operation.notPorts[1]",
                ],
            ),
            (
                "rules: [{from: [{source: {remoteIpBlocks: [1.2.3.4, ip1], notRemoteIpBlocks: [ip2]}}]}]\n",
                &[
                    "spec.rules[0].from[0].source.remoteIpBlocks[1]",
                    "spec.rules[0].from[0].source.notRemoteIpBlocks[0]",
                ],
            ),
            (
                "rules: [{from: [{source: {ipBlocks: [10.0.0.0/33, '2001:db8::/129', 10.0.0.0/, \
                 10.0.0.0/+8, 10.0.0.0/08, 10.0.0.01, 'fe80::1%eth0', 1.2.3.4/8/8, \
                 '::/128', 10.0.0.0/0]}}]}]\n",
                &[
                    "spec.rules[0].from[0].source.ipBlocks[0]",
                    "spec.rules[0].from[0].source.ipBlocks[1]",
                    "spec.rules[0].from[0].source.ipBlocks[2]",
                    "spec.rules[0].from[0].source.ipBlocks[3]",
                    "spec.rules[0].from[0].source.ipBlocks[4]",
                    "spec.rules[0].from[0].source.ipBlocks[5]",
                    "spec.rules[0].from[0].source.ipBlocks[6]",
                    "spec.rules[0].from[0].source.ipBlocks[7]",
                ],
            ),
            (
                "rules: [{to: [{operation: {ports: ['65536', '-1', '+80', ' 80', '8080', '0']}}]}]\n",
                &[
                    "spec.rules[0].to[0].operation.ports[0]",
                    "spec.rules[0].to[0].operation.ports[1]",
                    "spec.rules[0].to[0].operation.ports[2]",
                    "spec.rules[0].to[0].operation.ports[3]",
                ],
            ),
        ],
    );
    assert_eq!(
        printed("rules: [{to: [{operation: {ports: ['65536']}}]}]\n"),
        [
            "error: spec.rules[0].to[0].operation.ports[0]: \"65536\" is not a port: expected a \
          number from 0 to 65535"
        ]
    );
    assert_eq!(
        printed("rules: [{from: [{source: {ipBlocks: [10.0.0.0/33]}}]}]\n"),
        [
            "error: spec.rules[0].from[0].source.ipBlocks[0]: \"10.0.0.0/33\" is not a CIDR \
          range: the prefix length must be a number from 0 to 32"
        ]
    );
}

#[test]
fn service_accounts_and_trust_domains() {
    let many: Vec<String> = (0..17).map(|i| format!("sa{i}")).collect();
    let long = "a".repeat(321);
    assert_errors(
        ap,
        &[
            (
                "rules: [{from: [{source: {serviceAccounts: ['*', ns/*, a/b/c, /sa, ns/, ns/sa, sa]}}]}]\n",
                &[
                    "spec.rules[0].from[0].source.serviceAccounts[0]",
                    "spec.rules[0].from[0].source.serviceAccounts[1]",
                    "spec.rules[0].from[0].source.serviceAccounts[2]",
                    "spec.rules[0].from[0].source.serviceAccounts[3]",
                    "spec.rules[0].from[0].source.serviceAccounts[4]",
                ],
            ),
            (
                &format!(
                    "rules: [{{from: [{{source: {{notServiceAccounts: [{}]}}}}]}}]\n",
                    many.join(", ")
                ),
                &["spec.rules[0].from[0].source.notServiceAccounts"],
            ),
            (
                &format!("rules: [{{from: [{{source: {{serviceAccounts: [{long}]}}}}]}}]\n"),
                &["spec.rules[0].from[0].source.serviceAccounts[0]"],
            ),
            (
                "rules: [{from: [{source: {trustDomains: ['*', '*.td', 'td*', a*b, '**', td/x], \
                 notTrustDomains: ['*a*']}}]}]\n",
                &[
                    "spec.rules[0].from[0].source.trustDomains[3]",
                    "spec.rules[0].from[0].source.trustDomains[4]",
                    "spec.rules[0].from[0].source.trustDomains[5]",
                    "spec.rules[0].from[0].source.notTrustDomains[0]",
                ],
            ),
        ],
    );
}

#[test]
fn path_templates() {
    assert_warnings(
        &ap(
            "rules: [{to: [{operation: {paths: ['/a/{*}/b', '/{**}', '/a/{**}/b', '*/suffix', \
         '/prefix/*', '/a/{*}/{*}/{**}', '/x@y/{*}', '/']}}]}]\n",
        ),
        &["spec.rules[0]"],
    );
    assert_errors(
        ap,
        &[(
            "rules: [{to: [{operation: {notPaths: ['/{**}/{*}', '/{**}/a/{**}', '/a{*}', \
             '/a/{x}', '/{*}/a*b', '/{*}//a', '/a/b}']}}]}]\n",
            &[
                "spec.rules[0].to[0].operation.notPaths[0]",
                "spec.rules[0].to[0].operation.notPaths[1]",
                "spec.rules[0].to[0].operation.notPaths[2]",
                "spec.rules[0].to[0].operation.notPaths[3]",
                "spec.rules[0].to[0].operation.notPaths[4]",
                "spec.rules[0].to[0].operation.notPaths[5]",
                "spec.rules[0].to[0].operation.notPaths[6]",
            ],
        )],
    );
    assert_eq!(
        printed("rules: [{to: [{operation: {paths: ['/{**}/{*}']}}]}]\n")[1],
        "error: spec.rules[0].to[0].operation.paths[0]: \"/{**}/{*}\": {**} must be the last \
         operator of a path template"
    );
}

#[test]
fn when_keys_are_the_builder_s() {
    let good = [
        "request.headers[X-header]",
        "request.headers[:authority]",
        "source.ip",
        "remote.ip",
        "source.namespace",
        "source.principal",
        "source.serviceAccount",
        "source.trustDomain",
        "request.auth.principal",
        "request.auth.audiences",
        "request.auth.presenter",
        "request.auth.claims[iss]",
        "request.auth.claims[nested1][nested2]",
        "request.auth.claims[a.b]",
        "request.auth.claims[a[b]",
        "destination.ip",
        "destination.port",
        "connection.sni",
        "experimental.envoy.filters.a.b[c]",
    ];
    for key in good {
        let value = match key {
            "source.ip" | "remote.ip" | "destination.ip" => "10.0.0.0/8",
            "destination.port" => "'80'",
            _ => "a",
        };
        assert_eq!(
            errors(&ap(&format!(
                "action: AUDIT\nrules: [{{when: [{{key: '{key}', values: [{value}]}}]}}]\n"
            ))),
            Vec::<String>::new(),
            "{key}"
        );
    }
    let bad = [
        "key1",
        "request.headers",
        "request.headers[]",
        "request.headersX[a]",
        "request.headers.x",
        "request.auth.claims",
        "request.auth.claims[]",
        "request.auth.claims[][a]",
        "request.auth.claims[a]b",
        "request.auth.foo",
        "experimental.envoy.filters.a.b",
        "experimental.envoy.filters.a[]",
        "experimental.envoy.filters.[c]",
        "destination.namespace",
        "destination.labels[version]",
        "destination.name",
        "destination.user",
        "source.IP",
    ];
    for key in bad {
        assert_eq!(
            errors(&ap(&format!(
                "rules: [{{when: [{{key: '{key}', values: [a]}}]}}]\n"
            ))),
            ["spec.rules[0].when[0].key"],
            "{key}"
        );
    }
    let unknown = printed("rules: [{when: [{key: key1, values: [a]}]}]\n");
    assert!(
        unknown[0].starts_with(
            "error: spec.rules[0].when[0].key: unknown attribute \"key1\": the known keys are \
             request.headers[NAME], source.ip,"
        ),
        "{unknown:?}"
    );
    assert!(unknown[0].contains("experimental.envoy.filters.NAME[KEY]"));
}

#[test]
fn when_conditions_need_values_checked_by_key() {
    assert_errors(
        ap,
        &[
            // Istio's "condition-key-missing" (and "-empty") and "condition-value-missing".
            (
                "rules: [{when: [{values: [v1, v2]}]}]\n",
                &["spec.rules[0].when[0].key"],
            ),
            (
                "rules: [{when: [{key: '', values: [v1]}]}]\n",
                &["spec.rules[0].when[0].key"],
            ),
            (
                "rules: [{when: [{key: source.principal}]}]\n",
                &["spec.rules[0].when[0]"],
            ),
            (
                "rules: [{when: [{key: source.principal, values: [], notValues: []}]}]\n",
                &["spec.rules[0].when[0]"],
            ),
            // "condition-value-invalid" and "condition-notValue-invalid".
            (
                "rules: [{when: [{key: source.ip, values: [a.b.c.d]}, \
                 {key: remote.ip, notValues: [1.2.3.4, a.b.c.d]}, \
                 {key: destination.ip, values: ['::1/129']}]}]\n",
                &[
                    "spec.rules[0].when[0].values[0]",
                    "spec.rules[0].when[1].notValues[1]",
                    "spec.rules[0].when[2].values[0]",
                ],
            ),
            (
                "rules: [{when: [{key: destination.port, values: ['80', http], notValues: ['70000']}]}]\n",
                &[
                    "spec.rules[0].when[0].values[1]",
                    "spec.rules[0].when[0].notValues[0]",
                ],
            ),
            (
                "rules: [{when: [{key: source.serviceAccount, values: [ns/sa, 'ns/*', a/b/c]}]}]\n",
                &[
                    "spec.rules[0].when[0].values[1]",
                    "spec.rules[0].when[0].values[2]",
                ],
            ),
            (
                "rules: [{when: [{key: source.trustDomain, values: ['a*b', 'td/x']}]}]\n",
                // Istio checks only the wildcard here, not the '/' of source.trustDomains.
                &["spec.rules[0].when[0].values[0]"],
            ),
            // Values of other keys are anything but empty.
            (
                "rules: [{when: [{key: source.principal, values: ['a*b*c', '/x/']}, \
                 {key: connection.sni, values: ['***']}]}]\n",
                &[],
            ),
        ],
    );
    assert_eq!(
        printed("rules: [{when: [{key: source.principal}]}]\n"),
        ["error: spec.rules[0].when[0]: needs values or notValues (or both)"]
    );
}

#[test]
fn http_only_fields_warn_about_tcp_ports() {
    let allow = printed(
        "rules:\n\
         - from: [{source: {namespaces: [ns], requestPrincipals: [iss/sub]}}]\n  \
           to: [{operation: {methods: [GET], ports: ['80']}}, {operation: {notPaths: [/a]}}]\n  \
           when: [{key: 'request.headers[x-user]', values: [a]}, {key: 'request.auth.claims[iss]', values: [b]}]\n",
    );
    assert_eq!(
        allow,
        [
            "warning: spec.rules[0]: on TCP ports this rule is left out (it uses HTTP-only \
          fields: requestPrincipals, methods, notPaths, request.headers[x-user], \
          request.auth.claims[iss]), so it allows no TCP connection"
        ]
    );
    // DENY: Istio's "L7DenyWithFrom", "L7DenyWithTo", "L7DenyWithFromAndTo" deny every TCP
    // connection; "L7DenyWithFromAndToWithPort" only those to the port.
    let every = "so the rule matches more: here every connection, so it denies all TCP traffic \
                 to the workloads it applies to; add to.operation.ports to keep it to HTTP ports";
    let cases = [
        (
            "rules: [{from: [{source: {requestPrincipals: [example.com/sub-1]}}]}]\n",
            format!("on TCP ports the HTTP-only fields (requestPrincipals) are left out, {every}"),
        ),
        (
            "rules: [{to: [{operation: {methods: [GET, DELETE]}}]}]\n",
            format!("on TCP ports the HTTP-only fields (methods) are left out, {every}"),
        ),
        (
            "rules: [{from: [{source: {principals: [temp]}}], to: [{operation: {methods: [GET]}}]}]\n",
            "on TCP ports the HTTP-only fields (methods) are left out, so the rule matches more"
                .to_string(),
        ),
        (
            "rules: [{to: [{operation: {ports: ['8080'], methods: [GET]}}]}]\n",
            "on TCP ports the HTTP-only fields (methods) are left out, so the rule matches more"
                .to_string(),
        ),
        (
            "rules: [{to: [{operation: {hosts: [a]}}, {operation: {notPorts: ['80']}}]}]\n",
            format!("on TCP ports the HTTP-only fields (hosts) are left out, {every}"),
        ),
        (
            "rules: [{when: [{key: 'request.headers[x]', values: [a]}, \
             {key: destination.ip, values: [10.0.0.1]}]}]\n",
            "on TCP ports the HTTP-only fields (request.headers[x]) are left out, so the rule \
             matches more"
                .to_string(),
        ),
        (
            "rules: [{from: [{source: {notRequestPrincipals: [a]}}], \
             when: [{key: source.namespace, values: [a]}]}]\n",
            "on TCP ports the HTTP-only fields (notRequestPrincipals) are left out, so the \
             rule matches more"
                .to_string(),
        ),
    ];
    for (rule, message) in cases {
        let o = ap(&format!("action: DENY\n{rule}"));
        assert_warnings(&o, &["spec.rules[0]"]);
        assert_eq!(validate(&o)[0].message, message, "{rule}");
    }
    let audit = ap("action: AUDIT\nrules: [{to: [{operation: {paths: [/a]}}]}]\n");
    assert_warnings(&audit, &["spec.rules[0]"]);
    assert_eq!(
        validate(&audit)[0].message,
        "on TCP ports the HTTP-only fields (paths) are left out, so the rule matches more: \
         here every connection, so all TCP traffic is audited"
    );
    // Fields that work on TCP: no warning (Istio warned about a DENY on trust domains only).
    for action in ["ALLOW", "DENY", "AUDIT"] {
        let rules = "rules:\n\
                     - from: [{source: {trustDomains: [td]}}]\n\
                     - from: [{source: {namespaces: [a], ipBlocks: [1.2.3.4]}}]\n  \
                       to: [{operation: {ports: ['80']}}]\n  \
                       when: [{key: connection.sni, values: [a]}, {key: source.principal, values: [b]}]\n\
                     - {}\n";
        assert_clean(&format!("action: {action}\n{rules}"));
    }
    // One warning per rule, each at its rule.
    assert_warnings(
        &ap("rules: [{to: [{operation: {methods: [GET]}}]}, {}, \
             {from: [{source: {requestPrincipals: ['*']}}, {source: {requestPrincipals: [a]}}]}]\n"),
        &["spec.rules[0]", "spec.rules[2]"],
    );
}

#[test]
fn problems_come_in_field_order() {
    let o = ap("selector: {matchLabels: {}}\n\
                action: DENY\n\
                provider: {name: x}\n\
                rules:\n\
                - from: [{source: {}}]\n  \
                  to: [{operation: {methods: [GET], ports: [x]}}]\n  \
                  when: [{key: nope, values: [a]}]\n");
    let all: Vec<(String, bool)> = validate(&o)
        .into_iter()
        .map(|p| (p.field, p.fatal))
        .collect();
    let expected = [
        ("spec.selector.matchLabels", false),
        ("spec.provider", true),
        ("spec.rules[0]", false),
        ("spec.rules[0].from[0].source", true),
        ("spec.rules[0].to[0].operation.ports[0]", true),
        ("spec.rules[0].when[0].key", true),
    ];
    let expected: Vec<(String, bool)> = expected
        .iter()
        .map(|(f, fatal)| (f.to_string(), *fatal))
        .collect();
    assert_eq!(all, expected);
}
