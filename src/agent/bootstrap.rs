//! Envoy's bootstrap: ADS to the control plane, admin on loopback, the node's identity.
//!
//! The generated bootstrap (see [`generate`]) has:
//! - `node` with the id, cluster and metadata of [`super::identity`];
//! - `admin` on `127.0.0.1` only, at `--proxy-admin-port`;
//! - ADS (`GRPC`, or `DELTA_GRPC` with `--xds-delta`) to `--discovery-address` through a
//!   static cluster `xds-grpc` (Istio's name) over HTTP/2: `STATIC` for an IP address,
//!   `STRICT_DNS` for a name;
//! - with `--control-plane-auth-policy MUTUAL_TLS` ([`Settings::sds_socket`]), Istio's
//!   `sds-grpc` cluster to the agent's SDS socket ([`super::sds`]), and `xds-grpc` over TLS:
//!   the workload certificate (`default`) from SDS, the peer validated against `ROOTCA` from
//!   SDS and its name against the discovery host (a DNS name or an IP address, as in the
//!   certificate), ALPN `h2`, and SNI for a DNS name. A renewed certificate reaches Envoy
//!   over SDS, without a restart;
//! - clusters and listeners from ADS, with no initial fetch timeout (Envoy waits for them);
//! - Envoy's stats with Istio's default inclusion (every stat; the status port serves them as
//!   `/stats/prometheus`).
//!
//! A `--custom-config-file` replaces it as it is, as in pilot-agent. A `--template-file` is
//! rendered instead of [`generate`]: see [`render_template`].

use std::net::IpAddr;
use std::path::Path;

use serde_json::{Value, json};

use super::identity::Identity;

/// What the bootstrap needs besides the identity.
#[derive(Clone, Debug)]
pub struct Settings<'a> {
    /// `--service-cluster`.
    pub cluster: &'a str,
    /// `--discovery-address`, `HOST:PORT`.
    pub discovery_address: &'a str,
    /// `--proxy-admin-port`.
    pub admin_port: u16,
    /// `--xds-delta`.
    pub delta: bool,
    /// The agent's SDS socket, when Envoy speaks xDS over mutual TLS with certificates from
    /// it (`--control-plane-auth-policy MUTUAL_TLS`).
    pub sds_socket: Option<&'a Path>,
}

/// A discovery address split into host and port.
fn split_address(address: &str) -> anyhow::Result<(&str, u16)> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| anyhow::anyhow!("--discovery-address {address:?} is not HOST:PORT"))?;
    let port = port
        .parse()
        .map_err(|_| anyhow::anyhow!("--discovery-address {address:?}: bad port {port:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        anyhow::bail!("--discovery-address {address:?} has no host");
    }
    Ok((host, port))
}

/// The generated bootstrap, as JSON text.
pub fn generate(identity: &Identity, settings: &Settings<'_>) -> anyhow::Result<String> {
    let (host, port) = split_address(settings.discovery_address)?;
    let cluster_type = if host.parse::<IpAddr>().is_ok() {
        "STATIC"
    } else {
        "STRICT_DNS"
    };
    let api_type = if settings.delta { "DELTA_GRPC" } else { "GRPC" };
    let mut xds = json!({
        "name": "xds-grpc",
        "type": cluster_type,
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "typed_extension_protocol_options": http2(),
        "load_assignment": {
            "cluster_name": "xds-grpc",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                "socket_address": {"address": host, "port_value": port},
            }}}]}],
        },
    });
    let mut clusters = Vec::new();
    if let Some(socket) = settings.sds_socket {
        xds["transport_socket"] = xds_tls(host);
        clusters.push(json!({
            "name": "sds-grpc",
            "type": "STATIC",
            "connect_timeout": "1s",
            "typed_extension_protocol_options": http2(),
            "load_assignment": {
                "cluster_name": "sds-grpc",
                "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                    "pipe": {"path": socket.display().to_string()},
                }}}]}],
            },
        }));
    }
    clusters.insert(0, xds);
    let bootstrap = json!({
        "node": {
            "id": identity.node_id,
            "cluster": settings.cluster,
            "metadata": Value::Object(identity.metadata.clone()),
        },
        "admin": {
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": settings.admin_port}},
        },
        "dynamic_resources": {
            "ads_config": {
                "api_type": api_type,
                "transport_api_version": "V3",
                "set_node_on_first_message_only": true,
                "grpc_services": [{"envoy_grpc": {"cluster_name": "xds-grpc"}}],
            },
            "cds_config": {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"},
            "lds_config": {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"},
        },
        "static_resources": {"clusters": clusters},
    });
    Ok(serde_json::to_string_pretty(&bootstrap)?)
}

/// HTTP/2 to an upstream, as gRPC needs.
fn http2() -> Value {
    json!({
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        },
    })
}

/// A secret from the agent's SDS server.
fn sds_secret(name: &str) -> Value {
    json!({
        "name": name,
        "sds_config": {
            "api_config_source": {
                "api_type": "GRPC",
                "transport_api_version": "V3",
                "set_node_on_first_message_only": true,
                "grpc_services": [{"envoy_grpc": {"cluster_name": "sds-grpc"}}],
            },
            "resource_api_version": "V3",
        },
    })
}

/// `xds-grpc`'s TLS: the workload certificate, and the control plane checked against the
/// mesh's root and `host`.
fn xds_tls(host: &str) -> Value {
    let san_type = if host.parse::<IpAddr>().is_ok() {
        "IP_ADDRESS"
    } else {
        "DNS"
    };
    let mut tls = json!({
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "common_tls_context": {
            "alpn_protocols": ["h2"],
            "tls_certificate_sds_secret_configs": [sds_secret("default")],
            "combined_validation_context": {
                "default_validation_context": {
                    "match_typed_subject_alt_names": [{"san_type": san_type, "matcher": {"exact": host}}],
                },
                "validation_context_sds_secret_config": sds_secret("ROOTCA"),
            },
        },
    });
    if san_type == "DNS" {
        tls["sni"] = host.into();
    }
    json!({"name": "envoy.transport_sockets.tls", "typed_config": tls})
}

/// The names a template may use, each written `{{ .name }}`, with what they stand for.
/// They are pilot-agent's template names where it has one:
/// - `nodeID`, `cluster`: the node id and `--service-cluster`;
/// - `meta_json_str`: the node metadata as a JSON object;
/// - `discovery_address`, `discovery_host`, `discovery_port`: `--discovery-address` and its
///   parts;
/// - `admin_port`: `--proxy-admin-port`;
/// - `xds_api_type`: `GRPC` or `DELTA_GRPC`.
///
/// Values are inserted as they are (`meta_json_str` is JSON already; the others are plain
/// text for a template to quote). Anything else between `{{` and `}}` is refused with its
/// line, as is a `{{` without `}}`: pilot-agent's templates are Go templates, and only this
/// subset of them can be rendered here.
pub fn render_template(
    text: &str,
    file: &str,
    identity: &Identity,
    settings: &Settings<'_>,
) -> anyhow::Result<String> {
    let (host, port) = split_address(settings.discovery_address)?;
    let value = |name: &str| -> Option<String> {
        Some(match name {
            "nodeID" => identity.node_id.clone(),
            "cluster" => settings.cluster.to_string(),
            "meta_json_str" => Value::Object(identity.metadata.clone()).to_string(),
            "discovery_address" => settings.discovery_address.to_string(),
            "discovery_host" => host.to_string(),
            "discovery_port" => port.to_string(),
            "admin_port" => settings.admin_port.to_string(),
            "xds_api_type" => (if settings.delta { "DELTA_GRPC" } else { "GRPC" }).to_string(),
            _ => return None,
        })
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let line = 1 + text[..text.len() - rest.len() + start]
            .matches('\n')
            .count();
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| anyhow::anyhow!("{file}:{line}: `{{{{` without `}}}}`"))?;
        let inner = after[..end].trim();
        let name = inner.strip_prefix('.').unwrap_or(inner);
        let v = value(name).ok_or_else(|| {
            anyhow::anyhow!(
                "{file}:{line}: `{{{{ {inner} }}}}` is not one of the template names \
                 (nodeID, cluster, meta_json_str, discovery_address, discovery_host, \
                 discovery_port, admin_port, xds_api_type)"
            )
        })?;
        out.push_str(&v);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;

    fn identity() -> Identity {
        let mut metadata = Map::new();
        metadata.insert("NAMESPACE".into(), "default".into());
        Identity {
            node_id: "sidecar~10.0.0.1~a.default~default.svc.cluster.local".into(),
            ip: "10.0.0.1".parse().unwrap(),
            metadata,
        }
    }

    fn settings(address: &str, delta: bool) -> Settings<'_> {
        Settings {
            cluster: "istio-proxy",
            discovery_address: address,
            admin_port: 15000,
            delta,
            sds_socket: None,
        }
    }

    #[test]
    fn generated_bootstrap_points_ads_at_the_discovery_address() {
        let b: Value = serde_json::from_str(
            &generate(&identity(), &settings("127.0.0.1:15010", false)).unwrap(),
        )
        .unwrap();
        assert_eq!(
            b["node"]["id"],
            "sidecar~10.0.0.1~a.default~default.svc.cluster.local"
        );
        assert_eq!(b["node"]["metadata"]["NAMESPACE"], "default");
        assert_eq!(
            b["admin"]["address"]["socket_address"]["address"],
            "127.0.0.1"
        );
        assert_eq!(b["dynamic_resources"]["ads_config"]["api_type"], "GRPC");
        let xds = &b["static_resources"]["clusters"][0];
        assert_eq!(xds["type"], "STATIC");
        let addr = &xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
            ["socket_address"];
        assert_eq!(addr["port_value"], 15010);

        let d: Value = serde_json::from_str(
            &generate(
                &identity(),
                &settings("istiod.istio-system.svc:15010", true),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            d["dynamic_resources"]["ads_config"]["api_type"],
            "DELTA_GRPC"
        );
        assert_eq!(d["static_resources"]["clusters"][0]["type"], "STRICT_DNS");
        assert!(generate(&identity(), &settings("nowhere", false)).is_err());
    }

    #[test]
    fn mutual_tls_gives_sds_and_an_xds_cluster_that_checks_the_discovery_host() {
        let socket = Path::new("/pod/var/run/secrets/workload-spiffe-uds/socket");
        for (address, san_type, sni) in [
            ("127.0.0.1:15012", "IP_ADDRESS", Value::Null),
            (
                "istiod.istio-system.svc:15012",
                "DNS",
                "istiod.istio-system.svc".into(),
            ),
        ] {
            let mut s = settings(address, false);
            s.sds_socket = Some(socket);
            let b: Value = serde_json::from_str(&generate(&identity(), &s).unwrap()).unwrap();
            let clusters = &b["static_resources"]["clusters"];
            assert_eq!(clusters[1]["name"], "sds-grpc");
            assert_eq!(
                clusters[1]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
                    ["pipe"]["path"],
                socket.display().to_string()
            );
            let tls = &clusters[0]["transport_socket"]["typed_config"];
            assert_eq!(tls["sni"], sni);
            let common = &tls["common_tls_context"];
            assert_eq!(
                common["tls_certificate_sds_secret_configs"][0]["name"],
                "default"
            );
            let validation = &common["combined_validation_context"];
            assert_eq!(
                validation["validation_context_sds_secret_config"]["name"],
                "ROOTCA"
            );
            let san = &validation["default_validation_context"]["match_typed_subject_alt_names"][0];
            assert_eq!(san["san_type"], san_type);
            assert_eq!(san["matcher"]["exact"], address.rsplit_once(':').unwrap().0);
        }
        let plain: Value = serde_json::from_str(
            &generate(&identity(), &settings("127.0.0.1:15010", false)).unwrap(),
        )
        .unwrap();
        assert_eq!(
            plain["static_resources"]["clusters"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert!(plain["static_resources"]["clusters"][0]["transport_socket"].is_null());
    }

    #[test]
    fn templates_render_known_names_and_refuse_others_with_their_line() {
        let s = settings("127.0.0.1:15010", false);
        let text = "{\"id\": \"{{ .nodeID }}\",\n \"meta\": {{.meta_json_str}}, \"p\": {{ .discovery_port }}}";
        let out = render_template(text, "t.json", &identity(), &s).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["meta"]["NAMESPACE"], "default");
        assert_eq!(v["p"], 15010);
        let err = render_template("{\n\n {{ .config.Foo }}", "t.json", &identity(), &s)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.json:3: `{{ .config.Foo }}` is not one of"),
            "{err}"
        );
        let err = render_template("x {{ .nodeID", "t.json", &identity(), &s)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "t.json:1: `{{` without `}}`");
    }
}
