//! VirtualService-level rules: hosts, gateways, exportTo, TLS and TCP rules, weights.

use super::{assert_errors, assert_warnings, validate, vs};

/// Bookinfo's reviews routing: jason sees v2, everyone else v1 or v3.
const BOOKINFO: &str = r#"
hosts: [reviews]
http:
- match:
  - headers:
      end-user:
        exact: jason
  route:
  - destination:
      host: reviews
      subset: v2
- route:
  - destination:
      host: reviews
      subset: v1
    weight: 50
  - destination:
      host: reviews
      subset: v3
    weight: 50
"#;

#[test]
fn bookinfo_reviews_is_valid() {
    let problems = validate(&vs(BOOKINFO));
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn hosts_and_gateways() {
    let route = "http: [{route: [{destination: {host: reviews}}]}]";
    let cases: Vec<(String, &[&str])> = vec![
        // Without hosts: a delegate, with HTTP rules only and no gateways.
        (format!("{{hosts: [], {route}}}"), &[]),
        (
            format!("{{hosts: [], gateways: [gw], {route}}}"),
            &["spec.gateways"],
        ),
        (
            "{hosts: [], tcp: [{route: [{destination: {host: db}}]}]}".to_string(),
            &["spec.tcp"],
        ),
        (
            "{hosts: [], http: [{delegate: {name: deeper}}]}".to_string(),
            &["spec.http[0].delegate"],
        ),
        (
            format!("{{hosts: [rev_iews], {route}}}"),
            &["spec.hosts[0]"],
        ),
        (
            format!("{{hosts: [reviews, reviews], {route}}}"),
            &["spec.hosts[1]"],
        ),
        (
            format!("{{hosts: ['*.example.com', api.example.com], {route}}}"),
            &["spec.hosts[1]"],
        ),
        (format!("{{hosts: ['*'], {route}}}"), &["spec.hosts[0]"]),
        (
            format!("{{hosts: ['*'], gateways: [mesh, gw], {route}}}"),
            &["spec.hosts[0]"],
        ),
        (
            format!("{{hosts: ['*'], gateways: [istio-system/gw], {route}}}"),
            &[],
        ),
        (
            format!("{{hosts: ['*-api.example.com', 10.0.0.1], {route}}}"),
            &[],
        ),
        (
            format!("{{hosts: [a], gateways: [Bad_Name, ns/, mesh], {route}}}"),
            &["spec.gateways[0]", "spec.gateways[1]"],
        ),
        (
            format!("{{hosts: [a], exportTo: ['.', default], {route}}}"),
            &["spec.exportTo[1]"],
        ),
        (
            format!("{{hosts: [a], exportTo: ['*', other], {route}}}"),
            &["spec.exportTo"],
        ),
        ("{hosts: [reviews]}".to_string(), &["spec"]),
    ];
    for (yaml, expected) in &cases {
        assert_errors(vs, &[(yaml.as_str(), expected)]);
    }
}

#[test]
fn tls_rules_need_sni_hosts_within_the_hosts() {
    let dest = "route: [{destination: {host: a.example.com}}]";
    let cases: Vec<(String, &[&str])> = vec![
        (format!("{{hosts: ['*.example.com'], tls: [{{match: [{{sniHosts: [a.example.com]}}], {dest}}}]}}"), &[]),
        (format!("{{hosts: [a.example.com], tls: [{{{dest}}}]}}"), &["spec.tls[0].match"]),
        (format!("{{hosts: [a.example.com], tls: [{{match: [{{port: 443}}], {dest}}}]}}"), &["spec.tls[0].match[0].sniHosts"]),
        (format!("{{hosts: [a.example.com], tls: [{{match: [{{sniHosts: [b.example.com]}}], {dest}}}]}}"), &["spec.tls[0].match[0].sniHosts[0]"]),
        (format!("{{hosts: [a.example.com], tls: [{{match: [{{sniHosts: ['*.example.com']}}], {dest}}}]}}"), &["spec.tls[0].match[0].sniHosts[0]"]),
        ("{hosts: [a.example.com], tls: [{match: [{sniHosts: [a.example.com]}]}]}".into(), &["spec.tls[0].route"]),
        (
            "{hosts: [a.example.com], tls: [{match: [{sniHosts: [a.example.com], destinationSubnets: [10.0.0.0/33]}], \
             route: [{destination: {host: a}}, {destination: {host: b}}]}]}".into(),
            &["spec.tls[0].match[0].destinationSubnets[0]", "spec.tls[0].route"],
        ),
    ];
    for (yaml, expected) in &cases {
        assert_errors(vs, &[(yaml.as_str(), expected)]);
    }
}

#[test]
fn tcp_rules_need_valid_destinations_and_weights() {
    assert_errors(
        vs,
        &[
            (
                "{hosts: [db], tcp: [{route: [{destination: {host: db, port: {number: 5432}}}]}]}",
                &[],
            ),
            (
                "{hosts: [db], tcp: [{match: [{destinationSubnets: [nope], port: 70000}], route: [{destination: {host: db}}]}]}",
                &[
                    "spec.tcp[0].match[0].destinationSubnets[0]",
                    "spec.tcp[0].match[0].port",
                ],
            ),
            (
                "{hosts: [db], tcp: [{route: [{destination: {host: db}, weight: -1}, {destination: {host: db2}, weight: 101}]}]}",
                &[
                    "spec.tcp[0].route[0].weight",
                    "spec.tcp[0].route[1].weight",
                    "spec.tcp[0].route",
                ],
            ),
            (
                "{hosts: [db], tcp: [{match: [{port: 5432}]}]}",
                &["spec.tcp[0].route"],
            ),
            (
                "{hosts: [db], tcp: [{route: [{destination: {host: '*'}}]}]}",
                &["spec.tcp[0].route[0].destination.host"],
            ),
        ],
    );
}

#[test]
fn weights_not_adding_up_to_100_are_split_in_proportion() {
    let o = vs(
        "{hosts: [r], http: [{route: [{destination: {host: a}, weight: 30}, {destination: {host: b}, weight: 60}]}]}",
    );
    assert_warnings(&o, &["spec.http[0].route"]);
    let o = vs("{hosts: [r], http: [{route: [{destination: {host: a}, weight: 30}]}]}");
    assert_warnings(&o, &["spec.http[0].route[0].weight"]);
    let o = vs(
        "{hosts: [r], http: [{route: [{destination: {host: a}, weight: 100}, {destination: {host: b}}]}]}",
    );
    assert_warnings(&o, &[]);
}

#[test]
fn unsupported_and_deprecated_fields_warn() {
    let o = vs(r#"
hosts: [reviews]
gateways: [gw.istio-system]
http:
- match:
  - sourceLabels: {app: productpage}
    sourceNamespace: bookinfo
    statPrefix: reviews
  route:
  - destination: {host: reviews}
  retries: {attempts: 2, backoff: 25ms, retryIgnorePreviousHosts: true}
  mirror: {host: reviews-shadow}
  mirrorPercent: 10
  corsPolicy: {allowOrigin: [example.com]}
  fault: {delay: {fixedDelay: 1s, percent: 5}}
- route: [{destination: {host: reviews}}]
  mirrors: [{destination: {host: shadow}}]
tcp:
- match: [{sourceLabels: {app: db-client}}]
  route: [{destination: {host: db}}]
"#);
    assert_warnings(
        &o,
        &[
            "spec.gateways[0]",
            "spec.http[0].match[0].sourceLabels",
            "spec.http[0].match[0].sourceNamespace",
            "spec.http[0].match[0].statPrefix",
            "spec.http[0].retries.backoff",
            "spec.http[0].retries.retryIgnorePreviousHosts",
            "spec.http[0].fault.delay.percent",
            "spec.http[0].mirrorPercent",
            "spec.http[0].corsPolicy.allowOrigin",
            "spec.http[1].mirrors",
            "spec.tcp[0].match[0].sourceLabels",
        ],
    );
}
