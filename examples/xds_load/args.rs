//! The command line (flags are listed in the example's top comment).

use std::time::Duration;

/// Which ADS variant the clients speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Sotw,
    Delta,
}

/// What the clients pretend to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Envoy-like: wildcard CDS and LDS, then the EDS and RDS names they reference.
    Sidecar,
    /// Proxyless gRPC-like: named listeners, then the routes, clusters and endpoints they name.
    Grpc,
}

#[derive(Clone, Debug)]
pub(crate) struct Args {
    pub(crate) services: usize,
    pub(crate) endpoints: usize,
    pub(crate) per_file: usize,
    pub(crate) clients: usize,
    pub(crate) protocol: Protocol,
    pub(crate) kind: Kind,
    pub(crate) grpc_targets: usize,
    /// Namespaces the clients are spread over (`load-K`; 1: all in `load`).
    pub(crate) namespaces: usize,
    /// Hosts each namespace's Sidecar lets its proxies reach (0: no Sidecar).
    pub(crate) sidecar_hosts: usize,
    pub(crate) changes: usize,
    /// Changes per second; `None`: one at a time, each after the previous converged.
    pub(crate) rate: Option<f64>,
    /// Connections per second; `None`: no limit.
    pub(crate) connect_rate: Option<f64>,
    pub(crate) extra_clients: usize,
    pub(crate) timeout: Duration,
    pub(crate) settle: Duration,
    /// How long after the last client left the server's RSS is read.
    pub(crate) leave_settle: Duration,
    pub(crate) binary: String,
    pub(crate) json: Option<String>,
    pub(crate) extra: Vec<String>,
    /// `--secure`: the clients connect to the secure port over mutual TLS.
    pub(crate) secure: bool,
}

impl Protocol {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Sotw => "sotw",
            Self::Delta => "delta",
        }
    }
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Sidecar => "sidecar",
            Self::Grpc => "grpc",
        }
    }
}

/// Parses `std::env::args()`; panics with the reason on a bad flag.
pub(crate) fn parse() -> Args {
    let mut a = Args {
        services: 1000,
        endpoints: 10,
        per_file: 100,
        clients: 100,
        protocol: Protocol::Sotw,
        kind: Kind::Sidecar,
        grpc_targets: 5,
        namespaces: 1,
        sidecar_hosts: 0,
        changes: 20,
        rate: None,
        connect_rate: Some(1000.0),
        extra_clients: usize::MAX,
        timeout: Duration::from_secs(60),
        settle: Duration::from_secs(2),
        leave_settle: Duration::from_secs(5),
        binary: "target/release/wayfinder".into(),
        json: None,
        extra: Vec::new(),
        secure: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--secure" {
            a.secure = true;
            continue;
        }
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let number = |v: String| -> f64 {
            v.parse()
                .unwrap_or_else(|_| panic!("{v:?} is not a number"))
        };
        match flag.as_str() {
            "--services" => a.services = number(value()) as usize,
            "--endpoints" => a.endpoints = number(value()) as usize,
            "--per-file" => a.per_file = number(value()) as usize,
            "--clients" => a.clients = number(value()) as usize,
            "--grpc-targets" => a.grpc_targets = number(value()) as usize,
            "--namespaces" => a.namespaces = number(value()) as usize,
            "--sidecar-hosts" => a.sidecar_hosts = number(value()) as usize,
            "--changes" => a.changes = number(value()) as usize,
            "--extra-clients" => a.extra_clients = number(value()) as usize,
            "--rate" => a.rate = Some(number(value())).filter(|r| *r > 0.0),
            "--connect-rate" => a.connect_rate = Some(number(value())).filter(|r| *r > 0.0),
            "--timeout" => a.timeout = Duration::from_secs_f64(number(value())),
            "--settle" => a.settle = Duration::from_secs_f64(number(value())),
            "--leave-settle" => a.leave_settle = Duration::from_secs_f64(number(value())),
            "--protocol" => {
                a.protocol = match value().as_str() {
                    "sotw" => Protocol::Sotw,
                    "delta" => Protocol::Delta,
                    other => panic!("--protocol is sotw or delta, not {other}"),
                }
            }
            "--kind" => {
                a.kind = match value().as_str() {
                    "sidecar" => Kind::Sidecar,
                    "grpc" => Kind::Grpc,
                    other => panic!("--kind is sidecar or grpc, not {other}"),
                }
            }
            "--binary" => a.binary = value(),
            "--json" => a.json = Some(value()),
            "--" => a.extra = it.by_ref().collect(),
            other => panic!("unknown flag {other} (see the top of examples/xds_load.rs)"),
        }
    }
    assert!(a.services > 0 && a.endpoints > 0 && a.clients > 0 && a.per_file > 0);
    assert!(a.grpc_targets > 0, "--grpc-targets must be at least 1");
    assert!(a.namespaces > 0, "--namespaces must be at least 1");
    if a.extra_clients == usize::MAX {
        a.extra_clients = (a.clients / 4).max(1);
    }
    a
}
