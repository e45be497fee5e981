//! Who the proxy is: its node id and metadata, from the agent's flags and environment, as
//! pilot-agent works them out.
//!
//! - `INSTANCE_IP`, `POD_NAME`, `POD_NAMESPACE` and `SERVICE_ACCOUNT` describe the workload.
//!   Without `INSTANCE_IP` the address is the one the system would use to reach the outside
//!   (no packet is sent), else `127.0.0.1`.
//! - The node id is `TYPE~IP~ID~DOMAIN`. `ID` and `DOMAIN` follow `--service-registry`:
//!   Kubernetes `POD_NAME.POD_NAMESPACE` and `POD_NAMESPACE.svc.cluster.local`; Consul
//!   `IP.service.consul` and `service.consul`; otherwise `IP.DOMAIN` and `--domain` (or
//!   `IP` alone). `--domain` replaces the default domain in every case.
//! - Every `ISTIO_META_NAME=value` becomes metadata `NAME: "value"`; every
//!   `ISTIO_METAJSON_NAME=json` becomes `NAME: json` (a value that is not JSON stops the agent,
//!   naming the variable). So a sidecar on a shared machine sets
//!   `ISTIO_META_WAYFINDER_LISTEN_ADDRESS`, and a VM `ISTIO_META_AUTO_REGISTER_GROUP`.
//! - `LABELS` is `ISTIO_METAJSON_LABELS` with the pod's downward-API labels file
//!   (`./etc/istio/pod/labels`, lines `key="value"`) over it: the file is the pod's own.
//! - `NAMESPACE`, `NAME`, `SERVICE_ACCOUNT` and `INSTANCE_IPS` come from the variables above
//!   unless an `ISTIO_META_` variable sets them.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::Path;

use serde_json::{Map, Value};

use super::args::{RegistryKind, Role};

/// The downward-API labels file, relative to the working directory as in pilot-agent (a
/// container's working directory is `/`).
pub const LABELS_FILE: &str = "./etc/istio/pod/labels";

/// A proxy's identity: what its bootstrap's `node` says.
#[derive(Clone, Debug, PartialEq)]
pub struct Identity {
    /// `TYPE~IP~ID~DOMAIN`.
    pub node_id: String,
    /// The workload's address (the node id's `IP`).
    pub ip: IpAddr,
    /// Node metadata.
    pub metadata: Map<String, Value>,
}

/// Why an identity cannot be made; the agent does not start.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// An `ISTIO_METAJSON_` variable that is not JSON.
    #[error("{variable} is not JSON: {error}")]
    Json {
        /// The variable.
        variable: String,
        /// The parser's complaint.
        error: serde_json::Error,
    },
    /// `INSTANCE_IP` that is not an IP address.
    #[error("INSTANCE_IP {0:?} is not an IP address")]
    InstanceIp(String),
    /// Labels that are not a map of strings.
    #[error("{source_name}: {reason}")]
    Labels {
        /// `ISTIO_METAJSON_LABELS`, or the labels file and line.
        source_name: String,
        /// What is wrong.
        reason: String,
    },
    /// Kubernetes without a pod.
    #[error(
        "--service-registry Kubernetes needs POD_NAME and POD_NAMESPACE (the pod's downward \
         API); set them, or choose another --service-registry"
    )]
    NoPod,
}

/// What the identity is made from, apart from the environment.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// Sidecar or router.
    pub role: Role,
    /// `--service-registry`.
    pub registry: RegistryKind,
    /// `--domain`.
    pub domain: Option<&'a str>,
    /// The labels file's contents and name, when it exists.
    pub labels_file: Option<(&'a str, &'a str)>,
}

/// Works out the identity from `inputs` and the environment `env`.
pub fn identity(
    inputs: &Inputs<'_>,
    env: &BTreeMap<String, String>,
) -> Result<Identity, IdentityError> {
    let var = |name: &str| env.get(name).map(String::as_str).filter(|v| !v.is_empty());
    let ip = match var("INSTANCE_IP") {
        Some(ip) => ip
            .parse()
            .map_err(|_| IdentityError::InstanceIp(ip.to_string()))?,
        None => outbound_address(),
    };
    let (id, domain) = match inputs.registry {
        RegistryKind::Kubernetes => {
            let (Some(pod), Some(namespace)) = (var("POD_NAME"), var("POD_NAMESPACE")) else {
                return Err(IdentityError::NoPod);
            };
            let domain = inputs
                .domain
                .map_or_else(|| format!("{namespace}.svc.cluster.local"), str::to_string);
            (format!("{pod}.{namespace}"), domain)
        }
        RegistryKind::Consul => {
            let domain = inputs.domain.unwrap_or("service.consul").to_string();
            (format!("{ip}.{domain}"), domain)
        }
        RegistryKind::Other => {
            let domain = inputs.domain.unwrap_or_default().to_string();
            let id = if domain.is_empty() {
                ip.to_string()
            } else {
                format!("{ip}.{domain}")
            };
            (id, domain)
        }
    };
    let node_id = format!("{}~{ip}~{id}~{domain}", inputs.role.node_type());

    let mut metadata = Map::new();
    for (name, value) in env {
        if let Some(key) = name.strip_prefix("ISTIO_METAJSON_") {
            let json = serde_json::from_str(value).map_err(|error| IdentityError::Json {
                variable: name.clone(),
                error,
            })?;
            metadata.insert(key.to_string(), json);
        } else if let Some(key) = name.strip_prefix("ISTIO_META_") {
            metadata.insert(key.to_string(), Value::String(value.clone()));
        }
    }
    let mut labels = match metadata.remove("LABELS") {
        None => Map::new(),
        Some(value) => string_map(value).map_err(|reason| IdentityError::Labels {
            source_name: "ISTIO_METAJSON_LABELS".to_string(),
            reason,
        })?,
    };
    if let Some((text, file)) = inputs.labels_file {
        for (k, v) in parse_labels_file(text, file)? {
            labels.insert(k, Value::String(v));
        }
    }
    if !labels.is_empty() {
        metadata.insert("LABELS".to_string(), Value::Object(labels));
    }
    let derived = [
        ("NAMESPACE", var("POD_NAMESPACE")),
        ("NAME", var("POD_NAME")),
        ("SERVICE_ACCOUNT", var("SERVICE_ACCOUNT")),
        ("INSTANCE_IPS", Some(&*ip.to_string())),
    ];
    for (key, value) in derived {
        if let Some(value) = value {
            metadata
                .entry(key)
                .or_insert_with(|| Value::String(value.to_string()));
        }
    }
    Ok(Identity {
        node_id,
        ip,
        metadata,
    })
}

/// Reads the labels file at `path` if it exists (its contents, for [`Inputs::labels_file`]).
pub fn read_labels_file(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A JSON object of strings, as labels are.
fn string_map(value: Value) -> Result<Map<String, Value>, String> {
    let Value::Object(map) = value else {
        return Err("labels must be a JSON object of strings".to_string());
    };
    if let Some((k, _)) = map.iter().find(|(_, v)| !v.is_string()) {
        return Err(format!("label {k:?} is not a string"));
    }
    Ok(map)
}

/// The downward API's labels file: one `key="value"` per line, the value quoted as Go quotes
/// it (the JSON escapes, for the values labels can hold).
fn parse_labels_file(text: &str, file: &str) -> Result<Vec<(String, String)>, IdentityError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |reason: &str| IdentityError::Labels {
            source_name: format!("{file}:{}", n + 1),
            reason: reason.to_string(),
        };
        let (key, quoted) = line
            .split_once('=')
            .ok_or_else(|| bad("expected key=\"value\""))?;
        let value: String =
            serde_json::from_str(quoted).map_err(|_| bad("the value is not a quoted string"))?;
        out.push((key.to_string(), value));
    }
    Ok(out)
}

/// The address this machine would reach the outside from: a UDP socket "connected" to a
/// public address (no packet is sent) reports it. `127.0.0.1` where there is no route.
fn outbound_address() -> IpAddr {
    UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|s| {
            s.connect((Ipv4Addr::new(192, 0, 2, 1), 9))?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_unspecified())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn inputs(registry: RegistryKind) -> Inputs<'static> {
        Inputs {
            role: Role::Sidecar,
            registry,
            domain: None,
            labels_file: None,
        }
    }

    #[test]
    fn kubernetes_pod_identity_follows_pilot_agent() {
        let id = identity(
            &inputs(RegistryKind::Kubernetes),
            &env(&[
                ("INSTANCE_IP", "10.1.1.5"),
                ("POD_NAME", "reviews-v1-abc"),
                ("POD_NAMESPACE", "bookinfo"),
                ("SERVICE_ACCOUNT", "reviews"),
                ("ISTIO_META_CLUSTER_ID", "east"),
                (
                    "ISTIO_METAJSON_PROXY_CONFIG",
                    r#"{"proxyListenPort": 15001}"#,
                ),
                (
                    "ISTIO_METAJSON_LABELS",
                    r#"{"app": "reviews", "version": "v0"}"#,
                ),
            ]),
        )
        .unwrap();
        assert_eq!(
            id.node_id,
            "sidecar~10.1.1.5~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local"
        );
        let m = Value::Object(id.metadata);
        assert_eq!(m["NAMESPACE"], "bookinfo");
        assert_eq!(m["NAME"], "reviews-v1-abc");
        assert_eq!(m["SERVICE_ACCOUNT"], "reviews");
        assert_eq!(m["INSTANCE_IPS"], "10.1.1.5");
        assert_eq!(m["CLUSTER_ID"], "east");
        assert_eq!(m["PROXY_CONFIG"]["proxyListenPort"], 15001);
        assert_eq!(m["LABELS"]["version"], "v0");
    }

    #[test]
    fn the_labels_file_overrides_the_environment_labels() {
        let file = "app=\"reviews\"\nversion=\"v1\"\nquote=\"a\\\"b\"\n";
        let id = identity(
            &Inputs {
                labels_file: Some((file, "etc/istio/pod/labels")),
                ..inputs(RegistryKind::Kubernetes)
            },
            &env(&[
                ("INSTANCE_IP", "10.1.1.5"),
                ("POD_NAME", "p"),
                ("POD_NAMESPACE", "ns"),
                ("ISTIO_METAJSON_LABELS", r#"{"version": "v0", "team": "a"}"#),
            ]),
        )
        .unwrap();
        let labels = &Value::Object(id.metadata)["LABELS"];
        assert_eq!(labels["version"], "v1");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["quote"], "a\"b");
    }

    #[test]
    fn consul_and_other_registries_use_their_domains() {
        let e = env(&[("INSTANCE_IP", "10.0.0.7")]);
        let consul = identity(&inputs(RegistryKind::Consul), &e).unwrap();
        assert_eq!(
            consul.node_id,
            "sidecar~10.0.0.7~10.0.0.7.service.consul~service.consul"
        );
        let vm = identity(
            &Inputs {
                role: Role::Router,
                domain: Some("vm.example"),
                ..inputs(RegistryKind::Other)
            },
            &e,
        )
        .unwrap();
        assert_eq!(vm.node_id, "router~10.0.0.7~10.0.0.7.vm.example~vm.example");
        let bare = identity(&inputs(RegistryKind::Other), &e).unwrap();
        assert_eq!(bare.node_id, "sidecar~10.0.0.7~10.0.0.7~");
    }

    #[test]
    fn bad_inputs_are_refused_with_their_source() {
        let k8s = inputs(RegistryKind::Kubernetes);
        let err = identity(&k8s, &env(&[("INSTANCE_IP", "10.0.0.1")])).unwrap_err();
        assert!(matches!(err, IdentityError::NoPod));
        let other = inputs(RegistryKind::Other);
        let err = identity(&other, &env(&[("ISTIO_METAJSON_X", "{nope")])).unwrap_err();
        assert!(
            err.to_string().starts_with("ISTIO_METAJSON_X is not JSON"),
            "{err}"
        );
        let err = identity(&other, &env(&[("INSTANCE_IP", "ten")])).unwrap_err();
        assert_eq!(err.to_string(), "INSTANCE_IP \"ten\" is not an IP address");
        let err = identity(&other, &env(&[("ISTIO_METAJSON_LABELS", r#"{"a": 1}"#)])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ISTIO_METAJSON_LABELS: label \"a\" is not a string"
        );
        let labels = Inputs {
            labels_file: Some(("a=\"1\"\nb=2\n", "labels")),
            ..inputs(RegistryKind::Other)
        };
        let err = identity(&labels, &env(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "labels:2: the value is not a quoted string"
        );
    }
}
