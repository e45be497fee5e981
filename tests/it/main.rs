//! Black-box tests of wayfinder, in one binary because each test binary links the large
//! Envoy types crate.
//!
//! - `ads_sotw`, `ads_delta`: every state-of-the-world and incremental (delta) rule, with raw
//!   ADS clients against an in-process server fed by a memory registry.
//! - `consistency`: `xds::consistency` over Istio's Bookinfo samples, for a sidecar, a
//!   gateway and a proxyless gRPC client.
//! - `architecture`: the dependency rules between crates and between the server's modules,
//!   checked on the code (`cargo metadata`, and the source parsed with `syn`).
//! - `golden`: generated configuration per generator, compared with readable JSON files under
//!   `tests/it/golden/` (re-bless with `WAYFINDER_BLESS=1`).
//! - `cli`: the binary's commands, flags, debug pages and refusals (in a build without a
//!   registry's cargo feature, that asking for it is refused naming the feature).
//! - `dashboard`: Istio's control-plane dashboard against `/metrics`: every metric it queries
//!   is served from the start, but those listed with the reason the control plane cannot;
//!   and wayfinder's own, `deploy/grafana/wayfinder.json`: every metric it queries is served.
//! - `debug_access`: the debug pages from a non-loopback address (a network namespace of
//!   the test's own), with and without `--debug-token-file`'s token; istiod's names for
//!   them (`/debug/adsz`, `/debug/instancesz`, …).
//! - `config`: traffic configuration from `--config-dir`, bad objects, `wayfinder validate`.
//! - `analyze`: `wayfinder analyze`, one golden case per message code under
//!   `tests/it/analyze/` (re-bless with `WAYFINDER_BLESS=1`), and istioctl's exit statuses.
//! - `envoy`, `grpc`: real Envoy 1.40, Python grpcio and Node grpc-js-xds clients against the
//!   binary (they need `scripts/install-test-tools`; see `tools`).
//! - `grpc_routing`: a VirtualService's weighted split and header match between
//!   DestinationRule subsets, through the real Python and Node gRPC clients.
//! - `gateway`: real Envoy 1.40 as an ingress gateway (Gateway and VirtualServices from
//!   `--config-dir`) in front of HTTP backends on loopback: splits, matches, faults, retries,
//!   route moves without loss, cluster changes without warming.
//! - `limits`: the new-stream rate limit and the maximum connection age, with raw clients
//!   (the push throttle's test is with the stalled delta client in `ads_delta`).
//! - `envoy_filter`: EnvoyFilter Lua filters on both sides of two sidecars under the agent
//!   (real Envoy 1.40), a change without a restart, a failing patch reported.
//! - `multi_network`: two networks under the agent (real Envoy 1.40), a workload on the other
//!   network reached only through its east-west gateway, in mesh mTLS.
//! - `proxy_config`: MeshConfig's `defaultConfig` and a ProxyConfig object reach two agents
//!   (real Envoy 1.40) over PCDS: each Envoy runs with its workload's concurrency and metadata.
//! - `sidecar_ingress`: a Sidecar ingress listener with `captureMode: NONE` and `tls` under the
//!   agent (real Envoy 1.40): its own listener terminates TLS in front of a plain workload.
//! - `upstream_tls`: real Envoy 1.40 originating TLS for a DestinationRule to a TLS server
//!   with a certificate from a CA made in the test: verified by default.
//! - `memory`: many full-mesh sidecars connect and leave; the server's RSS comes back
//!   (jemalloc builds only: glibc's malloc keeps it, as measured).
//! - `proxy_status`: `wayfinder proxy-status` against real Envoy 1.40 under the agent:
//!   `SYNCED`, `STALE (Ns)` while Envoy is stopped, a NACK's text, an unreachable replica,
//!   one proxy compared type by type.
//! - `push_budget`: clients that stop reading hold at most the push budget, are closed after
//!   `--push-send-timeout`, and a reading client still gets its configuration.
//! - `logging`: client text in text and JSON logs, istiod's `--log_output_level` and
//!   `--log_as_json`, a closed standard error.
//! - `ui`: `/ui` in headless Chromium (Playwright): the demo's registries, services, a
//!   proxy, a refused object and the push chart, then a registry turning degraded, checked
//!   on screenshots taken in the run.
//! - `bad_input`: malformed files and failing registries against the binary.
//! - `hardening`: hostile clients with a raw HTTP/2 client: refused requests with their
//!   status and log line, RSS within the request budget under many streams and connections,
//!   idle sockets closed, a lowered descriptor limit.
//! - `watched_files`: FIFOs, devices, oversized and unreadable files in watched directories
//!   against the binary (one of them runs it as `nobody`, for whom permissions count).
//! - `vm_registries`: Consul and Eureka (in-process fakes) through the binary: real grpcio
//!   traffic, a hostname shared with the File registry, outages and recovery.
//! - `image`: `scripts/image` builds both images (buildah); the control-plane image's root
//!   filesystem (`buildah run --isolation chroot`) serves the demo mesh as uid 1337, and the
//!   proxy image's agent runs its Envoy 1.40 as a gateway that gets the demo mesh from it (in
//!   a network namespace, as a pod). Default-features builds only:
//!   the images hold the default release binary, so the `--no-default-features` run would
//!   only build them again.
//! - `kubernetes`: the Kubernetes registry and config source against the in-process API
//!   server: EDS-only scaling, port changes, a hybrid Kubernetes + Consul mesh under grpcio
//!   and Envoy, a 60 s outage with an expired resourceVersion, invalid objects from the API.
//! - `manifests`: the Kubernetes manifests of `deploy/kubernetes`, rendered by kubectl: RBAC
//!   exactly the API calls of the code (scanned, and recorded by the in-process API server
//!   while the binary runs), a planted missing verb caught, ports against the flags, and
//!   `kubectl apply --dry-run=client`.
//!
//! `vm_registries`, `kubernetes` and `manifests` run the binary against their registries, so they are
//! compiled only with those registries' cargo features (`consul`, `eureka`, `kubernetes`,
//! all default); a build without them (`--no-default-features`) runs every other module.

// A failed unwrap in a test is a test failure with its message and backtrace: what we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ads_delta;
mod ads_sotw;
mod agent;
mod analyze;
mod architecture;
mod authorization;
mod autoregistration;
mod bad_input;
mod bookinfo;
mod capture;
mod cli;
mod config;
mod consistency;
mod dashboard;
mod debug_access;
mod envoy;
mod envoy_filter;
mod gateway;
mod golden;
mod grpc;
mod grpc_routing;
mod hardening;
#[cfg(all(
    feature = "jemalloc",
    feature = "kubernetes",
    feature = "consul",
    feature = "eureka"
))]
mod image;
#[cfg(feature = "kubernetes")]
mod kubernetes;
mod limits;
mod locality;
mod logging;
#[cfg(feature = "kubernetes")]
mod manifests;
mod memory;
mod mesh_config;
mod mesh_identity;
mod multi_network;
mod proxy_config;
mod proxy_status;
mod push_budget;
mod secure;
mod sidecar_ingress;
mod support;
mod tools;
mod ui;
mod upstream_tls;
#[cfg(all(feature = "consul", feature = "eureka"))]
mod vm_registries;
mod watched_files;
mod workload_mtls;
