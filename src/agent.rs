//! The agent: pilot-agent's counterpart, run beside every Envoy (`wayfinder agent`).
//!
//! - [`proxy`] (`wayfinder agent proxy sidecar|router`) works out the proxy's identity from
//!   its environment ([`identity`]), writes Envoy's bootstrap ([`bootstrap`]), starts Envoy,
//!   hot-restarts it when its certificates or configuration change, restarts it when it
//!   crashes and drains it on shutdown ([`supervisor`]), and answers the kubelet's probes on
//!   its status port ([`status`]).
//! - With `--control-plane-auth-policy MUTUAL_TLS` it obtains the workload's certificate
//!   from the CA and renews it ([`certificates`]), serves it to Envoy over SDS ([`sds`]), and
//!   Envoy speaks xDS to the secure port over mutual TLS with it.
//! - Before it starts Envoy it asks the control plane for the workload's ProxyConfig
//!   ([`proxy_config`]) and starts Envoy with it.
//! - [`capture`] (`wayfinder agent capture`) redirects a network namespace's TCP traffic to
//!   the sidecar, as Istio's `istio-iptables` does.
//!
//! The agent shares no state with the server: it reaches the control plane only over xDS
//! (through the Envoy it runs, as any proxy does, and on streams of its own for its
//! ProxyConfig and a VM's health), and the CA over its gRPC API, as istio-agent
//! does (`tests/it/architecture.rs` checks that it names none of the server's modules; it
//! names the CA's messages and certificate reader, [`crate::ca`]'s API types).

pub mod args;
pub mod bootstrap;
pub mod capture;
pub mod certificates;
pub mod health;
pub mod identity;
pub mod probe;
pub mod proxy_config;
pub mod sds;
pub mod status;
pub mod supervisor;
pub mod watch;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use args::{ControlPlaneAuthPolicy, ProxyArgs, RegistryKind, Role};

/// Runs `wayfinder agent proxy` until `stop` resolves, then drains and stops Envoy. Errors
/// when the identity, bootstrap or probes cannot be made (before Envoy starts) and when Envoy
/// fails too often ([`supervisor::MAX_RESTARTS`]).
pub async fn proxy(args: ProxyArgs, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let labels_path = Path::new(identity::LABELS_FILE);
    let labels = identity::read_labels_file(labels_path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", labels_path.display()))?;
    let labels_name = labels_path.display().to_string();
    let inputs = identity::Inputs {
        role: args.role,
        registry: args.service_registry,
        domain: args.domain.as_deref(),
        labels_file: labels.as_deref().map(|text| (text, labels_name.as_str())),
    };
    let identity = identity::identity(&inputs, &env)?;
    let probers = status::probers(env.get("ISTIO_KUBE_APP_PROBERS").map(String::as_str))?;
    // Checked before anything starts; read again below, with the served environment.
    health::readiness_probe(env.get("PROXY_CONFIG").map(String::as_str))?;
    std::fs::create_dir_all(&args.config_path)
        .map_err(|e| anyhow::anyhow!("--config-path {}: {e}", args.config_path.display()))?;
    let shutdown = CancellationToken::new();
    let _stop_tasks = shutdown.clone().drop_guard();
    let ca = match args.identity.control_plane_auth_policy {
        ControlPlaneAuthPolicy::None => None,
        ControlPlaneAuthPolicy::MutualTls => {
            let ids = &args.identity;
            let client = certificates::CaClient {
                address: ids
                    .ca_address
                    .clone()
                    .unwrap_or_else(|| args.discovery_address.clone()),
                root_cert: ids.ca_root_cert.clone(),
                token_file: ids
                    .bootstrap_token_file
                    .clone()
                    .unwrap_or_else(|| ids.token_file.clone()),
                ttl: ids.secret_ttl,
            };
            Some((client, sds::socket_path()?))
        }
    };
    let sds_socket = ca.as_ref().map(|(_, socket)| socket.clone());
    let hot_restart = match supervisor::hot_restart_available(&args.binary_path).await {
        Ok(()) => true,
        Err(why) => {
            tracing::warn!(reason = %why, "Envoy cannot hot-restart here: every restart will be cold");
            false
        }
    };
    tracing::info!(node = %identity.node_id, discovery = %args.discovery_address, "starting the proxy");

    let (admin_tx, admin_rx) = tokio::sync::watch::channel(None);
    status::serve(args.status_port, admin_rx, probers, shutdown.clone()).await?;
    // Envoy starts with its certificate: the first one is obtained before, for as long as it
    // takes, or until the agent is stopped.
    let mut stop = std::pin::pin!(stop);
    let mut _sds_socket = None;
    let control_plane = match ca {
        None => certificates::ControlPlane::Plain,
        Some((client, socket)) => {
            let first = tokio::select! {
                first = certificates::first(&client) => first,
                () = &mut stop => return Ok(()),
            };
            let (tx, rx) = tokio::sync::watch::channel(Arc::new(first));
            _sds_socket = Some(sds::serve(&socket, rx.clone(), shutdown.clone())?);
            tokio::spawn(certificates::renew(client, tx));
            certificates::ControlPlane::Mutual {
                root_cert: args.identity.ca_root_cert.clone(),
                workload: rx,
            }
        }
    };
    // The settings the control plane holds for this workload (ProxyConfig), under the
    // agent's own.
    let node = health::node(&identity.node_id, &args.service_cluster, &identity.metadata);
    let served = tokio::select! {
        served = proxy_config::fetch(node, &args.discovery_address, &control_plane, args.proxy_config_wait) => served,
        () = &mut stop => return Ok(()),
    };
    let (env, concurrency, identity) = match served {
        Ok(Some(served)) => {
            let (env, concurrency) = proxy_config::apply(&served, env, args.concurrency);
            let identity = identity::identity(&inputs, &env)?;
            tracing::info!(concurrency = ?concurrency, variables = served.proxy_metadata.len(), "the control plane's ProxyConfig applied");
            (env, concurrency, identity)
        }
        Ok(None) => {
            if !args.proxy_config_wait.is_zero() {
                tracing::warn!(discovery = %args.discovery_address, wait = ?args.proxy_config_wait, "the control plane sent no ProxyConfig in time: starting Envoy with the agent's own settings");
            }
            (env, args.concurrency, identity)
        }
        Err(e) => {
            tracing::warn!(discovery = %args.discovery_address, error = %e, "could not read the control plane's ProxyConfig: starting Envoy with the agent's own settings");
            (env, args.concurrency, identity)
        }
    };
    let readiness = health::readiness_probe(env.get("PROXY_CONFIG").map(String::as_str))?;
    let source = watch::Source {
        identity: identity.clone(),
        cluster: args.service_cluster.clone(),
        discovery_address: args.discovery_address.clone(),
        admin_port: args.proxy_admin_port,
        delta: args.xds_delta,
        custom: args.custom_config_file.clone(),
        template: args.template_file.clone(),
        certificates: watch::certificate_files(&args.certs_dir, args.role == Role::Router),
        sds_socket,
    };
    let initial = source.desired()?;
    let (desired_tx, desired_rx) = tokio::sync::watch::channel(initial);
    tokio::spawn(watch::follow(source, desired_tx, shutdown.clone()));
    let launcher = supervisor::Launcher {
        binary: args.binary_path.clone(),
        dir: args.config_path.clone(),
        drain: args.drain_duration,
        parent_shutdown: args.parent_shutdown_duration,
        cluster: args.service_cluster.clone(),
        node_id: identity.node_id.clone(),
        log_level: args.proxy_log_level.clone(),
        concurrency,
        hot_restart,
    };
    // A VM that registers itself reports its workload's health (see `health`).
    if let Some(probe) = readiness.filter(|_| identity.metadata.contains_key("AUTO_REGISTER_GROUP"))
    {
        let node = health::node(&identity.node_id, &args.service_cluster, &identity.metadata);
        tokio::spawn(health::report(
            probe,
            node,
            args.discovery_address.clone(),
            control_plane,
        ));
    }
    supervisor::run(launcher, desired_rx, admin_tx, stop).await?;
    Ok(())
}
