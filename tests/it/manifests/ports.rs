//! The ports (and paths) of the rendered manifests against the flags, the flags read with
//! the binary's own definitions (`wayfinder::cli::Cli`).

use std::collections::BTreeSet;
use std::path::Path;

use clap::Parser;
use serde_json::Value;
use wayfinder::agent::args::{AgentCommand, ControlPlaneAuthPolicy};
use wayfinder::cli::{Cli, Command, Discovery};

use super::render::{args, container, find, pod_spec};

/// The control plane's ports, from the Deployment's args.
#[derive(Debug)]
pub(crate) struct ServerPorts {
    pub(crate) grpc: u16,
    pub(crate) secure: u16,
    pub(crate) http: u16,
    pub(crate) monitoring: u16,
}

/// The command line of a container whose command is `wayfinder`.
fn parse(container: &Value) -> Command {
    assert_eq!(
        container["command"][0], "/usr/local/bin/wayfinder",
        "{container}"
    );
    let line = std::iter::once("wayfinder".to_owned()).chain(args(container));
    match Cli::try_parse_from(line) {
        Ok(cli) => cli.command,
        Err(e) => panic!("container {}: its args are refused: {e}", container["name"]),
    }
}

fn discovery(command: Command) -> Discovery {
    match command {
        Command::Discovery(d) => d,
        other => panic!("expected `wayfinder discovery`, got {other:?}"),
    }
}

/// Container port numbers of `container`.
fn container_ports(container: &Value) -> BTreeSet<u16> {
    container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["containerPort"].as_u64().unwrap() as u16)
        .collect()
}

/// Target ports of the Service `name`.
fn target_ports(objects: &[Value], name: &str) -> BTreeSet<u16> {
    find(objects, "Service", name)["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["targetPort"].as_u64().unwrap() as u16)
        .collect()
}

/// Checks the control plane's Deployment and Services against its flags; returns its ports.
pub(crate) fn check_server(objects: &[Value]) -> ServerPorts {
    let pod = pod_spec(find(objects, "Deployment", "wayfinder"));
    let c = container(pod, "discovery");
    assert_eq!(c["image"], "wayfinder:dev", "the discovery image");
    let d = discovery(parse(c));
    let ports = ServerPorts {
        grpc: d.grpc_addr.expect("a plaintext ADS port").port(),
        secure: d.secure.secure_grpc_addr.expect("a secure port").port(),
        http: d.http_addr.port(),
        monitoring: d.monitoring_addr.port(),
    };
    // The (and Istio's) numbers.
    assert_eq!(
        (ports.grpc, ports.secure, ports.http, ports.monitoring),
        (15010, 15012, 8080, 15014)
    );
    let all = BTreeSet::from([ports.grpc, ports.secure, ports.http, ports.monitoring]);
    assert_eq!(
        container_ports(c),
        all,
        "the container's ports are the flags'"
    );
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/ready", "{probe}");
        assert_eq!(
            c[probe]["httpGet"]["port"], ports.http,
            "{probe} on the debug port"
        );
    }
    assert_eq!(
        target_ports(objects, "istiod"),
        BTreeSet::from([ports.grpc, ports.secure])
    );
    assert_eq!(
        target_ports(objects, "wayfinder-debug"),
        BTreeSet::from([ports.http])
    );
    assert_eq!(
        target_ports(objects, "wayfinder-monitoring"),
        BTreeSet::from([ports.monitoring])
    );
    assert!(
        d.kubernetes
            .config_source
            .contains(&wayfinder::cli::ConfigSourceKind::K8s),
        "the config source reads the cluster"
    );
    assert!(d.kubernetes.kubeconfig.is_empty(), "in-cluster credentials");
    mounted(c, &d.secure.cacerts_dir);
    writable(pod, c, &d.secure.ca_dir, "the CA's directory");
    ports
}

/// Checks an agent container (`wayfinder agent proxy …`): its image, the discovery address
/// (a Service of the manifests whose port leads to the server's port for its auth policy),
/// its readiness probe on the status port, and its files on volumes.
pub(crate) fn check_agent(objects: &[Value], pod: &Value, name: &str, server: &ServerPorts) {
    let c = container(pod, name);
    assert_eq!(c["image"], "wayfinder:dev-proxy", "{name}: the proxy image");
    let Command::Agent(agent) = parse(c) else {
        panic!("{name}: expected `wayfinder agent`")
    };
    let AgentCommand::Proxy(proxy) = agent.command else {
        panic!("{name}: expected `wayfinder agent proxy`")
    };
    let (host, port) = proxy.discovery_address.rsplit_once(':').unwrap();
    let port: u16 = port.parse().unwrap();
    let (service, namespace) = host
        .strip_suffix(".svc")
        .and_then(|h| h.split_once('.'))
        .unwrap_or_else(|| panic!("{name}: {host} is not NAME.NAMESPACE.svc"));
    let svc = find(objects, "Service", service);
    assert_eq!(svc["metadata"]["namespace"], namespace);
    let target = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == port)
        .unwrap_or_else(|| panic!("{name}: Service {service} has no port {port}"))["targetPort"]
        .as_u64()
        .unwrap() as u16;
    let expected = match proxy.identity.control_plane_auth_policy {
        ControlPlaneAuthPolicy::MutualTls => server.secure,
        ControlPlaneAuthPolicy::None => server.grpc,
    };
    assert_eq!(target, expected, "{name}: the discovery address's port");
    assert_eq!(
        c["readinessProbe"]["httpGet"]["port"], proxy.status_port,
        "{name}: ready on the status port"
    );
    assert!(container_ports(c).contains(&proxy.status_port));
    writable(pod, c, &proxy.config_path, "the bootstrap's directory");
    if proxy.identity.control_plane_auth_policy == ControlPlaneAuthPolicy::MutualTls {
        mounted(c, &proxy.identity.token_file);
        mounted(c, &proxy.identity.ca_root_cert);
        // The SDS socket's directory, which the agent makes and chmods 0700: under a
        // writable volume, and not a mount point itself (one it does not own).
        let workdir = Path::new(c["workingDir"].as_str().expect("a workingDir"));
        let socket = workdir.join(wayfinder::agent::sds::SOCKET);
        let dir = socket.parent().unwrap();
        writable(pod, c, dir, "the SDS socket's directory");
        let mount_point = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| Path::new(m["mountPath"].as_str().unwrap()) == dir);
        assert!(!mount_point, "{name}: {} is a mount point", dir.display());
    }
}

/// Checks that `path` lies on an `emptyDir` volume mounted into `container` of `pod`.
fn writable(pod: &Value, container: &Value, path: &Path, what: &str) {
    let volume = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| path.starts_with(m["mountPath"].as_str().unwrap()))
        .max_by_key(|m| m["mountPath"].as_str().unwrap().len())
        .and_then(|m| {
            pod["volumes"]
                .as_array()?
                .iter()
                .find(|v| v["name"] == m["name"])
        });
    assert!(
        volume.is_some_and(|v| v.get("emptyDir").is_some()),
        "{}: {what} {} is on no emptyDir",
        container["name"],
        path.display()
    );
}

/// Checks that `path` lies on a volume mounted into `container`.
fn mounted(container: &Value, path: &Path) {
    let on_a_volume = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|m| path.starts_with(m["mountPath"].as_str().unwrap()));
    assert!(
        on_a_volume,
        "{}: {} is on no volume",
        container["name"],
        path.display()
    );
}

/// Checks every Service: each target port is a container port of the pods it selects.
pub(crate) fn check_services(objects: &[Value]) {
    let pods: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|d| &d["spec"]["template"])
        .collect();
    for svc in objects.iter().filter(|o| o["kind"] == "Service") {
        let selector = svc["spec"]["selector"].as_object().unwrap();
        let selected: Vec<&&Value> = pods
            .iter()
            .filter(|t| {
                selector
                    .iter()
                    .all(|(k, v)| t["metadata"]["labels"][k] == *v)
            })
            .collect();
        assert!(
            !selected.is_empty(),
            "Service {} selects no pod",
            svc["metadata"]["name"]
        );
        for port in svc["spec"]["ports"].as_array().unwrap() {
            let target = port["targetPort"].as_u64().unwrap() as u16;
            for template in &selected {
                let served = template["spec"]["containers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| container_ports(c).contains(&target));
                assert!(
                    served,
                    "Service {}: no container port {target}",
                    svc["metadata"]["name"]
                );
            }
        }
    }
}
