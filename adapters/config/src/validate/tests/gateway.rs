//! Gateway: servers, ports, hosts and TLS.

use super::{assert_errors, assert_warnings, gw, validate};

#[test]
fn bookinfo_gateway_is_valid() {
    let o = gw(r#"
selector: {istio: ingressgateway}
servers:
- port: {number: 80, name: http, protocol: HTTP}
  hosts: ["*"]
"#);
    let problems = validate(&o);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn tls_servers_may_share_a_port() {
    let o = gw(r#"
servers:
- port: {number: 80, name: http, protocol: http}
  hosts: ["*/*.example.com"]
  tls: {httpsRedirect: true}
- port: {number: 443, name: https, protocol: HTTPS}
  hosts: [./www.example.com]
  tls: {mode: SIMPLE, serverCertificate: /etc/certs/www.pem, privateKey: /etc/certs/www.key}
- port: {number: 443, name: tls, protocol: TLS}
  hosts: [db.example.com]
  tls: {mode: PASSTHROUGH}
- port: {number: 8443, name: mtls, protocol: HTTPS}
  hosts: [api.example.com]
  tls:
    mode: MUTUAL
    serverCertificate: /c.pem
    privateKey: /k.pem
    caCertificates: /ca.pem
    minProtocolVersion: TLSV1_2
    maxProtocolVersion: TLSV1_3
"#);
    let problems = validate(&o);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Asserts the errors of a Gateway with one server (paths below `spec.servers[0]`).
#[track_caller]
fn assert_server(cases: &[(&str, &[&str])]) {
    for (server, expected) in cases {
        let yaml = format!("{{servers: [{server}]}}");
        let expected: Vec<String> = expected
            .iter()
            .map(|f| format!("spec.servers[0]{f}"))
            .collect();
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        assert_errors(gw, &[(yaml.as_str(), &expected)]);
    }
}

const HTTP: &str = "port: {number: 80, protocol: HTTP}";
const HTTPS: &str = "port: {number: 443, protocol: HTTPS}, hosts: [a.example.com]";

#[test]
fn ports_and_hosts() {
    assert_server(&[
        (
            "{port: {number: 0, protocol: UDP, targetPort: 8080}, hosts: ['*']}",
            &[".port.number", ".port.protocol", ".port.targetPort"],
        ),
        (&format!("{{{HTTP}}}"), &[".hosts"]),
        (
            &format!(
                "{{{HTTP}, hosts: [bad_ns/a.example.com, reviews, 'ns/*foo.example.com', ns/]}}"
            ),
            &[".hosts[0]", ".hosts[1]", ".hosts[2]", ".hosts[3]"],
        ),
        (
            &format!("{{{HTTP}, hosts: ['~/a.example.com']}}"),
            &[".hosts[0]"],
        ),
        (
            &format!("{{{HTTP}, hosts: [10.0.0.1, './*'], bind: 0.0.0.0}}"),
            &[],
        ),
        (
            &format!("{{{HTTP}, hosts: ['*'], bind: localhost}}"),
            &[".bind"],
        ),
    ]);
    assert_errors(
        gw,
        &[
            ("{servers: []}", &["spec.servers"]),
            (
                "{servers: [{port: {number: 80, name: web, protocol: HTTP}, hosts: ['*']}, \
              {port: {number: 80, name: web, protocol: TCP}, hosts: ['*']}]}",
                &["spec.servers[1].port.name", "spec.servers[1].port.protocol"],
            ),
        ],
    );
}

#[test]
fn tls_settings() {
    assert_server(&[
        (&format!("{{{HTTPS}}}"), &[".tls"]),
        (
            &format!("{{{HTTPS}, tls: {{mode: SIMPLE}}}}"),
            &[".tls.serverCertificate", ".tls.privateKey"],
        ),
        // Credentials: a Secret's name, the only source of the certificate.
        (
            &format!("{{{HTTPS}, tls: {{mode: SIMPLE, credentialName: www-cert}}}}"),
            &[],
        ),
        (
            &format!("{{{HTTPS}, tls: {{mode: MUTUAL, credentialName: kubernetes://www-cert}}}}"),
            &[],
        ),
        (
            &format!("{{{HTTPS}, tls: {{mode: OPTIONAL_MUTUAL, credentialNames: [rsa, ecdsa]}}}}"),
            &[],
        ),
        (
            &format!("{{{HTTPS}, tls: {{mode: SIMPLE, credentialNames: [a, b, c]}}}}"),
            &[".tls.credentialNames"],
        ),
        (
            &format!(
                "{{{HTTPS}, tls: {{mode: SIMPLE, credentialName: a, serverCertificate: /c, privateKey: /k}}}}"
            ),
            &[".tls"],
        ),
        (
            &format!("{{{HTTPS}, tls: {{mode: SIMPLE, credentialName: a, credentialNames: [b]}}}}"),
            &[".tls"],
        ),
        (
            &format!(
                "{{{HTTPS}, tls: {{mode: SIMPLE, credentialNames: [sds://x, kubernetes://a/b/c]}}}}"
            ),
            &[".tls.credentialNames[0]", ".tls.credentialNames[1]"],
        ),
        (
            &format!("{{{HTTPS}, tls: {{mode: ISTIO_MUTUAL, credentialNames: [a]}}}}"),
            &[".tls"],
        ),
        (
            &format!("{{{HTTPS}, tls: {{mode: MUTUAL, serverCertificate: /c, privateKey: /k}}}}"),
            &[".tls.caCertificates"],
        ),
        (
            &format!(
                "{{{HTTPS}, tls: {{mode: SIMPLE, serverCertificate: /c, privateKey: /k, caCrl: /crl}}}}"
            ),
            &[".tls.caCrl"],
        ),
        (
            &format!("{{{HTTPS}, tls: {{mode: AUTO_PASSTHROUGH}}}}"),
            &[],
        ),
        (&format!("{{{HTTPS}, tls: {{mode: ISTIO_MUTUAL}}}}"), &[]),
        (
            &format!("{{{HTTPS}, tls: {{mode: ISTIO_MUTUAL, serverCertificate: /c}}}}"),
            &[".tls"],
        ),
        (
            &format!(
                "{{{HTTPS}, tls: {{minProtocolVersion: TLSV1_3, maxProtocolVersion: TLSV1_2}}}}"
            ),
            &[".tls.minProtocolVersion"],
        ),
        (
            &format!("{{{HTTPS}, tls: {{maxProtocolVersion: SSLV3}}}}"),
            &[".tls.maxProtocolVersion"],
        ),
        (
            &format!("{{{HTTP}, hosts: ['*'], tls: {{mode: PASSTHROUGH}}}}"),
            &[".tls"],
        ),
        (
            &format!(
                "{{{HTTP}, hosts: ['*'], tls: {{httpsRedirect: true, serverCertificate: /c}}}}"
            ),
            &[".tls"],
        ),
        (
            "{port: {number: 5432, protocol: TCP}, hosts: ['*'], tls: {mode: SIMPLE, serverCertificate: /c, privateKey: /k}}",
            &[".tls"],
        ),
    ]);
}

#[test]
fn unsupported_and_misplaced_fields_warn() {
    let o = gw(r#"
servers:
- port: {number: 443, name: https, protocol: HTTPS}
  hosts: [a.example.com]
  defaultEndpoint: 127.0.0.1:8080
  tls:
    httpsRedirect: true
    mode: SIMPLE
    serverCertificate: /c.pem
    privateKey: /k.pem
    tlsCertificates: [{serverCertificate: /d.pem, privateKey: /e.pem}]
- port: {number: 8443, name: tls, protocol: TLS}
  hosts: [b.example.com]
  tls: {mode: PASSTHROUGH, serverCertificate: /c.pem}
- port: {number: 9443, name: creds, protocol: HTTPS}
  hosts: [c.example.com]
  tls: {mode: MUTUAL, credentialName: c-cert, caCertificates: /ca.pem, caCrl: /crl.pem}
"#);
    assert_warnings(
        &o,
        &[
            "spec.servers[0].defaultEndpoint",
            "spec.servers[0].tls.httpsRedirect",
            "spec.servers[0].tls.tlsCertificates",
            "spec.servers[1].tls",
            "spec.servers[2].tls.caCertificates",
            "spec.servers[2].tls.caCrl",
        ],
    );
}
