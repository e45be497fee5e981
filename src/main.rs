//! The `wayfinder` binary: parses the command line and runs a subcommand.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use wayfinder::aggregate::{Debounce, Settings};
#[cfg(feature = "consul")]
use wayfinder::cli::ConsulArgs;
use wayfinder::cli::{
    AgentArgs, AgentCommand, Cli, Command, ConfigSourceKind, DebugClient, Discovery, LogArgs,
    RequestArgs, ValidateArgs,
};
use wayfinder::debug::DebugToken;
use wayfinder::{registries, server};

/// jemalloc, chosen by measurement (BENCHMARKS.md, "Allocators"): it gives memory back to the
/// system when clients leave or configuration shrinks, where glibc's malloc kept what 500
/// sidecars or a removed 75,000-object file had used. Build without default features for the
/// system allocator (to profile with heaptrack; that leaves out the Kubernetes, Consul and
/// Eureka registries too, unless their features are given), or with `mimalloc` to compare.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// mimalloc, for the comparison only (see the jemalloc allocator above).
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    // reqwest is built without a default TLS provider (it would be aws-lc, a long C build);
    // every HTTP client in the process uses ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Err(e) = wayfinder::cli::refuse_unsupported(std::env::args_os()) {
        // As clap refuses an unknown flag: on standard error, with its exit code.
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Discovery(args) => discovery(args).await,
        Command::Version => {
            println!("wayfinder {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::Request(args) => request(args).await,
        Command::ProxyStatus(args) => {
            return ExitCode::from(wayfinder::cli::proxy_status::run(&args).await);
        }
        Command::Validate(args) => return validate(&args),
        Command::Analyze(args) => {
            return ExitCode::from(wayfinder::analyze::run(&args.paths, &args.analysis));
        }
        Command::Agent(AgentArgs {
            command: AgentCommand::Proxy(args),
        }) => agent_proxy(args).await,
        Command::Agent(AgentArgs {
            command: AgentCommand::Capture(args),
        }) => wayfinder::agent::capture::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn discovery(mut args: Discovery) -> anyhow::Result<()> {
    init_logging(&args.log)?;
    server::raise_descriptor_limit();
    let config = registries::Config {
        kinds: args.registries.clone(),
        file_paths: args.file_registry.clone(),
        config_dirs: args.config_dir.clone(),
        max_file_bytes: args.max_file_bytes,
        domain: args.domain.clone(),
        #[cfg(feature = "consul")]
        consul: consul_config(&args.consul, args.client_limits.max_registry_answer_bytes),
        #[cfg(feature = "eureka")]
        eureka: wayfinder_eureka::Config {
            url: args.eureka.eureka_url.clone(),
            interval: args.eureka.eureka_interval,
            suffix: args.eureka.eureka_suffix.clone(),
            max_answer_bytes: args.client_limits.max_registry_answer_bytes,
            ..wayfinder_eureka::Config::default()
        },
        kubernetes: kubernetes_config(&args)?,
    };
    let registries::Built {
        registries,
        config_sources,
        auto_registration,
        token_reviewer,
        secret_stores,
        election,
    } = registries::build(&config).await?;
    let settings = Settings {
        debounce: Debounce {
            after: args.debounce_after,
            max: args.debounce_max,
            leading: args.debounce_leading,
        },
        sync_timeout: args.sync_timeout,
    };
    let limits = args.limits();
    let debug_token = args
        .debug_token_file
        .as_deref()
        .map(DebugToken::from_file)
        .transpose()
        .context("--debug-token-file")?;
    // MeshConfig first: the CA signs for its trust domain.
    let networks = match &args.networks_config {
        Some(path) => wayfinder::mesh_config::load_networks(path)
            .map_err(|e| anyhow::anyhow!("--networksConfig {e}"))?,
        None => Default::default(),
    };
    let flags = wayfinder::xds::MeshSettings {
        system_ca: args.system_ca_file.as_str().into(),
        trust_domain: args.secure.trust_domain.as_str().into(),
        root_namespace: args.root_namespace.as_str().into(),
        networks: std::sync::Arc::new(networks),
        ..Default::default()
    };
    let (mesh, status) = match &args.mesh_config {
        Some(path) => wayfinder::mesh_config::load(path, &flags)
            .map_err(|e| anyhow::anyhow!("--meshConfig {e}"))?,
        None => (flags.clone(), Default::default()),
    };
    let files = wayfinder::mesh_config::Files {
        mesh: args.mesh_config.clone(),
        networks: args.networks_config.clone(),
    };
    let mesh_config =
        (files.mesh.is_some() || files.networks.is_some()).then_some(server::MeshConfigFile {
            files,
            flags,
            status,
        });
    args.secure.trust_domain = mesh.trust_domain.to_string();
    let secure = args.secure.load(token_reviewer)?;
    let stop = shutdown_signal();
    let running = server::start(server::Config {
        registries,
        config_sources,
        settings,
        domain: args.domain,
        grpc_addr: args.grpc_addr,
        secure,
        http_addr: args.http_addr,
        monitoring_addr: args.monitoring_addr,
        ready_requires_healthy: args.ready_requires_healthy,
        mesh,
        mesh_config,
        jwks: wayfinder::jwks::Settings {
            refresh: args.jwks_refresh_interval,
            max_bytes: usize::try_from(args.max_jwks_bytes).unwrap_or(usize::MAX),
            ..Default::default()
        },
        limits,
        http_header_read_timeout: args.client_limits.http_header_read_timeout,
        debug_token,
        auto_registration: auto_registration.map(|b| (b, args.workload_entry_grace_period)),
        secret_stores,
        election,
    })
    .await?;
    let token = running.shutdown_token();
    tokio::spawn(async move {
        stop.await;
        tracing::info!("shutting down");
        token.cancel();
    });
    running.wait().await;
    Ok(())
}

/// `wayfinder agent proxy`: runs Envoy until SIGTERM or SIGINT, then drains it.
async fn agent_proxy(args: wayfinder::agent::ProxyArgs) -> anyhow::Result<()> {
    init_logging(&args.log)?;
    wayfinder::agent::proxy(args, shutdown_signal()).await
}

#[cfg(feature = "kubernetes")]
fn kubernetes_config(args: &Discovery) -> Result<registries::Kubernetes, registries::BuildError> {
    Ok(registries::Kubernetes {
        clusters: args.kubernetes.clusters(),
        settings: wayfinder_kubernetes::Config {
            domain: args.domain.clone(),
            namespace: args.kubernetes.app_namespace.clone(),
            grace_period: args.kubernetes.cluster_grace_period,
        },
        config_source: args
            .kubernetes
            .config_source
            .contains(&ConfigSourceKind::K8s),
        token_audiences: args.secure.token_audiences.clone(),
    })
}

/// A build without Kubernetes: refuses its flags that were given on purpose, and says whether
/// the config source is asked for, which `registries::build` refuses.
#[cfg(not(feature = "kubernetes"))]
fn kubernetes_config(args: &Discovery) -> Result<registries::Kubernetes, registries::BuildError> {
    if let Some(flag) = args.kubernetes.needing_the_adapter() {
        return Err(registries::BuildError::NotCompiled {
            what: format!("the Kubernetes flag {flag}"),
            feature: registries::Feature::Kubernetes,
        });
    }
    Ok(registries::Kubernetes {
        config_source: args
            .kubernetes
            .config_source
            .contains(&ConfigSourceKind::K8s),
    })
}

#[cfg(feature = "consul")]
fn consul_config(args: &ConsulArgs, max_answer_bytes: usize) -> wayfinder_consul::Config {
    wayfinder_consul::Config {
        addr: args.consul_addr.clone(),
        interval: args.consul_interval,
        wait: args.consul_wait,
        datacenters: args.consul_datacenters.clone(),
        token: args.consul_token.clone(),
        tls: wayfinder_consul::Tls {
            ca_file: args.consul_ca_file.clone(),
            cert_file: args.consul_cert_file.clone(),
            key_file: args.consul_key_file.clone(),
        },
        hostname_template: args.consul_hostname_template.clone(),
        warning_is_healthy: !args.consul_warning_unhealthy,
        liveness_interval: args.consul_liveness_interval,
        max_answer_bytes,
        ..wayfinder_consul::Config::default()
    }
}

/// Listens for SIGTERM and SIGINT from the call on, so that one arriving while the server
/// starts stops it gracefully rather than by the default action; resolves on the first.
fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::terminate())
            .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)))
            .ok()
    };
    async move {
        #[cfg(unix)]
        if let Some((mut term, mut int)) = signals {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Installs the logger; see [`wayfinder::logging`] for the level syntax and why neither
/// format lets a client forge a line.
fn init_logging(log: &LogArgs) -> anyhow::Result<()> {
    wayfinder::logging::init(log)?;
    Ok(())
}

/// `wayfinder request`: the page, pretty-printed when it is JSON.
async fn request(args: RequestArgs) -> anyhow::Result<()> {
    let client = DebugClient::new(args.token_file.as_deref())?;
    let body = client.get(&args.addr, &args.path).await?;
    let pretty = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(body);
    println!("{}", pretty.trim_end());
    Ok(())
}

/// `wayfinder validate`: prints every problem with its place; exit 1 when any is an error.
/// With `--analyze`, `wayfinder analyze` instead.
fn validate(args: &ValidateArgs) -> ExitCode {
    if args.analyze {
        return ExitCode::from(wayfinder::analyze::run(&args.paths, &args.analysis));
    }
    let report = wayfinder_file::check(&args.paths);
    println!("{report}");
    if report.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
