//! DestinationRule: host, subsets and traffic policies; locality load balancing in `locality`.

mod locality;

use super::{assert_errors, assert_warnings, dr, validate};

/// Bookinfo's reviews subsets with least-request balancing and outlier detection.
const BOOKINFO: &str = r#"
host: reviews
trafficPolicy:
  loadBalancer:
    simple: LEAST_REQUEST
  connectionPool:
    tcp: {maxConnections: 100, connectTimeout: 30ms}
    http: {http1MaxPendingRequests: 10, maxRequestsPerConnection: 1}
  outlierDetection:
    consecutive5xxErrors: 7
    interval: 5m
    baseEjectionTime: 15m
    maxEjectionPercent: 50
subsets:
- name: v1
  labels: {version: v1}
- name: v2
  labels: {version: v2}
- name: v3
  labels: {version: v3}
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN}
"#;

#[test]
fn bookinfo_reviews_is_valid() {
    let problems = validate(&dr(BOOKINFO));
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Asserts the errors of a rule for host `r` with the given top-level traffic policy (paths
/// below `spec.trafficPolicy`).
#[track_caller]
fn assert_policy(cases: &[(&str, &[&str])]) {
    for (policy, expected) in cases {
        let yaml = format!("{{host: r, trafficPolicy: {policy}}}");
        let expected: Vec<String> = expected
            .iter()
            .map(|f| format!("spec.trafficPolicy{f}"))
            .collect();
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        assert_errors(dr, &[(yaml.as_str(), &expected)]);
    }
}

#[test]
fn host_and_subsets() {
    assert_errors(
        dr,
        &[
            ("{host: ''}", &["spec.host"]),
            ("{host: bad_host}", &["spec.host"]),
            (
                "{host: '*.example.com', exportTo: ['*', '.']}",
                &["spec.exportTo"],
            ),
            (
                "{host: r, subsets: [{name: v1}, {name: v1}, {name: v1}]}",
                &["spec.subsets[1].name", "spec.subsets[2].name"],
            ),
            (
                "{host: r, subsets: [{name: v_1}, {name: ''}]}",
                &["spec.subsets[0].name", "spec.subsets[1].name"],
            ),
            (
                "{host: r, subsets: [{name: v1, labels: {'': x, 'example.com/ok': 'bad value'}}]}",
                &[
                    "spec.subsets[0].labels[\"\"]",
                    "spec.subsets[0].labels[\"example.com/ok\"]",
                ],
            ),
            (
                "{host: r, subsets: [{name: v1, trafficPolicy: {loadBalancer: {}}}]}",
                &["spec.subsets[0].trafficPolicy.loadBalancer"],
            ),
        ],
    );
}

#[test]
fn port_level_settings() {
    assert_policy(&[
        ("{}", &[""]),
        (
            "{portLevelSettings: [{loadBalancer: {simple: RANDOM}}]}",
            &[".portLevelSettings[0].port"],
        ),
        (
            "{portLevelSettings: [{port: {number: 0}, tls: {mode: SIMPLE}}]}",
            &[".portLevelSettings[0].port.number"],
        ),
        (
            "{portLevelSettings: [{port: {number: 80}, tls: {mode: SIMPLE}}, {port: {number: 80}, tls: {mode: DISABLE}}]}",
            &[".portLevelSettings[1].port.number"],
        ),
        (
            "{portLevelSettings: [{port: {number: 80}}]}",
            &[".portLevelSettings[0]"],
        ),
        (
            "{portLevelSettings: [{port: {number: 80}, outlierDetection: {maxEjectionPercent: 101}}]}",
            &[".portLevelSettings[0].outlierDetection.maxEjectionPercent"],
        ),
    ]);
}

#[test]
fn load_balancer() {
    assert_policy(&[
        (
            "{loadBalancer: {simple: RANDOM, consistentHash: {useSourceIp: true}}}",
            &[".loadBalancer"],
        ),
        ("{loadBalancer: {}}", &[".loadBalancer"]),
        (
            "{loadBalancer: {consistentHash: {useSourceIp: false}}}",
            &[".loadBalancer.consistentHash"],
        ),
        (
            "{loadBalancer: {consistentHash: {httpHeaderName: x-user, useSourceIp: true}}}",
            &[".loadBalancer.consistentHash"],
        ),
        (
            "{loadBalancer: {consistentHash: {httpHeaderName: ''}}}",
            &[".loadBalancer.consistentHash.httpHeaderName"],
        ),
        (
            "{loadBalancer: {consistentHash: {httpCookie: {name: '', ttl: 10s}}}}",
            &[".loadBalancer.consistentHash.httpCookie.name"],
        ),
        (
            "{loadBalancer: {consistentHash: {useSourceIp: true, ringHash: {}, maglev: {}}}}",
            &[".loadBalancer.consistentHash"],
        ),
        (
            "{loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 100}}}}",
            &[".loadBalancer.consistentHash.maglev.tableSize"],
        ),
        (
            "{loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 65537}}}}",
            &[],
        ),
        (
            "{loadBalancer: {consistentHash: {httpQueryParameterName: u, minimumRingSize: 1024, ringHash: {minimumRingSize: 1024}}}}",
            &[".loadBalancer.consistentHash.minimumRingSize"],
        ),
    ]);
}

#[test]
fn connection_pool_and_outlier_detection() {
    assert_policy(&[
        ("{connectionPool: {}}", &[".connectionPool"]),
        (
            "{connectionPool: {tcp: {maxConnections: 0, connectTimeout: 0s, idleTimeout: 0s, tcpKeepalive: {probes: 0, time: 0s}}}}",
            &[
                ".connectionPool.tcp.maxConnections",
                ".connectionPool.tcp.tcpKeepalive.probes",
                ".connectionPool.tcp.connectTimeout",
                ".connectionPool.tcp.tcpKeepalive.time",
            ],
        ),
        (
            "{connectionPool: {http: {http2MaxRequests: 0, maxRetries: 0, idleTimeout: 0s}}}",
            &[
                ".connectionPool.http.http2MaxRequests",
                ".connectionPool.http.maxRetries",
                ".connectionPool.http.idleTimeout",
            ],
        ),
        (
            "{outlierDetection: {maxEjectionPercent: 101, minHealthPercent: 200, interval: 0s, baseEjectionTime: 0s}}",
            &[
                ".outlierDetection.maxEjectionPercent",
                ".outlierDetection.minHealthPercent",
                ".outlierDetection.interval",
                ".outlierDetection.baseEjectionTime",
            ],
        ),
        (
            "{outlierDetection: {consecutiveErrors: 5, consecutive5xxErrors: 5}}",
            &[".outlierDetection.consecutiveErrors"],
        ),
        (
            "{outlierDetection: {consecutiveLocalOriginFailures: 3}}",
            &[".outlierDetection.consecutiveLocalOriginFailures"],
        ),
        (
            "{outlierDetection: {consecutiveLocalOriginFailures: 3, splitExternalLocalOriginErrors: true}}",
            &[],
        ),
    ]);
}

#[test]
fn client_tls() {
    assert_policy(&[
        ("{tls: {mode: ISTIO_MUTUAL}}", &[]),
        (
            "{tls: {mode: ISTIO_MUTUAL, sni: r, subjectAltNames: [spiffe://td/ns/a/sa/r]}}",
            &[],
        ),
        (
            "{tls: {mode: ISTIO_MUTUAL, caCertificates: /ca.pem}}",
            &[".tls.mode"],
        ),
        (
            "{tls: {mode: MUTUAL}}",
            &[".tls.clientCertificate", ".tls.privateKey"],
        ),
        (
            "{tls: {mode: MUTUAL, clientCertificate: /c.pem, privateKey: /k.pem, caCertificates: /ca.pem, sni: r}}",
            &[],
        ),
        (
            "{tls: {mode: SIMPLE, credentialName: r-cert}}",
            &[".tls.credentialName"],
        ),
        (
            "{tls: {mode: SIMPLE, caCertificates: ' '}}",
            &[".tls.caCertificates"],
        ),
        (
            "{tls: {mode: SIMPLE, insecureSkipVerify: true, subjectAltNames: [r]}}",
            &[".tls.insecureSkipVerify"],
        ),
    ]);
    let problems = validate(&dr(
        "{host: r, trafficPolicy: {tls: {mode: ISTIO_MUTUAL, clientCertificate: /c.pem}}}",
    ));
    assert_eq!(
        problems[0].message,
        "ISTIO_MUTUAL uses the mesh's certificates: clientCertificate, privateKey, \
         caCertificates and credentialName cannot be given with it"
    );
}

#[test]
fn warmup_is_checked_as_istio_s_crd_checks_it() {
    assert_errors(
        dr,
        &[
            (
                "{host: r, trafficPolicy: {loadBalancer: {warmup: {duration: 300s, minimumPercent: 5.0, aggression: 2}}}}",
                &[],
            ),
            (
                "{host: r, trafficPolicy: {loadBalancer: {warmup: {duration: 300s, minimumPercent: 150.0}}}}",
                &["spec.trafficPolicy.loadBalancer.warmup.minimumPercent"],
            ),
            (
                "{host: r, trafficPolicy: {loadBalancer: {warmup: {minimumPercent: 5.0}}}}",
                &["spec.trafficPolicy.loadBalancer.warmup.duration"],
            ),
            (
                "{host: r, trafficPolicy: {loadBalancer: {warmup: {duration: 300s, aggression: -0.1}}}}",
                &["spec.trafficPolicy.loadBalancer.warmup.aggression"],
            ),
            (
                "{host: r, trafficPolicy: {loadBalancer: {warmup: {duration: 0s}}}}",
                &["spec.trafficPolicy.loadBalancer.warmup.duration"],
            ),
        ],
    );
}

#[test]
fn unsupported_and_deprecated_fields_warn() {
    let o = dr(r#"
host: reviews
workloadSelector: {labels: {app: productpage}}
trafficPolicy:
  tunnel: {protocol: CONNECT, targetHost: egress, targetPort: 8443}
  proxyProtocol: {version: V1}
  loadBalancer:
    simple: LEAST_CONN
    localityLbSetting: {enabled: true}
    warmupDurationSecs: 30s
    warmup: {duration: 30s}
  connectionPool:
    http: {h2UpgradePolicy: UPGRADE, useClientProtocol: true}
  outlierDetection: {consecutiveErrors: 5}
subsets:
- name: v1
  trafficPolicy:
    loadBalancer:
      consistentHash:
        httpCookie: {name: user, ttl: 0s, attributes: [{name: SameSite, value: Strict}]}
        minimumRingSize: 1024
"#);
    let lb = "spec.trafficPolicy.loadBalancer";
    let hash = "spec.subsets[0].trafficPolicy.loadBalancer.consistentHash";
    assert_warnings(
        &o,
        &[
            &format!("{lb}.simple"),
            // Both slow starts: `warmup` wins.
            &format!("{lb}.warmupDurationSecs"),
            "spec.trafficPolicy.connectionPool.http.h2UpgradePolicy",
            "spec.trafficPolicy.connectionPool.http.useClientProtocol",
            "spec.trafficPolicy.outlierDetection.consecutiveErrors",
            "spec.trafficPolicy.tunnel",
            "spec.trafficPolicy.proxyProtocol",
            &format!("{hash}.httpCookie.attributes"),
            &format!("{hash}.minimumRingSize"),
            "spec.workloadSelector",
        ],
    );
}
