//! Snapshot build and xDS generation at 1,000 services × 10 endpoints.
//!
//! `cargo bench --bench generate` runs it; figures are recorded in BENCHMARKS.md. CI only
//! builds it (`cargo bench --no-run`): timings on shared 2-core machines are for people to
//! read, not for tests to assert.

// The inputs are built here and valid by construction; a panic would be a bench bug.
#![allow(clippy::expect_used)]

use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;

use divan::Bencher;
use wayfinder::aggregate::{snapshot_from, snapshot_with_config};
use wayfinder::snapshot::Snapshot;
use wayfinder::xds::ads::{DeltaState, SotwRequest, SotwResponse, StreamState};
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::pb::discovery::{DeltaDiscoveryRequest, DiscoveryRequest};
use wayfinder::xds::{Proxy, TypeUrl, XdsSnapshot};
use wayfinder_config::{
    ConfigMeta, ConfigObject, ConfigSpec, LabelSelector, MtlsMode, PeerAuthentication, PeerMtls,
};
use wayfinder_registry::{Endpoint, Locality, Protocol, Registration, RegistryId, Service};

fn main() {
    divan::main();
}

const SERVICES: usize = 1_000;
const ENDPOINTS: usize = 10;

/// `SERVICES` HTTP services with a VIP, each with `ENDPOINTS` endpoints over three zones.
fn mesh() -> Vec<(RegistryId, Vec<Registration>)> {
    mesh_with(0)
}

/// The mesh, with `extra` more endpoints on the first service.
fn mesh_with(extra: usize) -> Vec<(RegistryId, Vec<Registration>)> {
    let registrations = (0..SERVICES)
        .map(|i| {
            let mut svc = Service::new(
                format!("svc-{i}.ns-{}.svc.cluster.local", i % 10),
                format!("ns-{}", i % 10),
            )
            .with_port("http", 8080, Protocol::Http)
            .with_port("grpc", 9090, Protocol::Grpc);
            svc.addresses = vec![[10, 96, (i / 250) as u8, (i % 250) as u8].into()];
            let count = ENDPOINTS + if i == 0 { extra } else { 0 };
            let endpoints = (0..count)
                .map(|j| {
                    let mut ep = Endpoint::new(format!("10.{}.{}.{}", i / 250, i % 250, j + 1))
                        .with_label("version", "v1");
                    ep.locality = Locality::parse(&format!("us-east1/zone-{}", j % 3));
                    ep
                })
                .collect();
            Registration::new(svc, endpoints)
        })
        .collect();
    vec![(RegistryId::new("Mock"), registrations)]
}

fn sidecar() -> Proxy {
    let node = Node {
        id: "sidecar~10.0.0.1~app.ns-0~ns-0.svc.cluster.local".into(),
        ..Default::default()
    };
    Proxy::from_node(&node, "cluster.local").expect("a valid node")
}

/// Every resource of every type for one sidecar, encoded; returns how many.
fn generate(model: Arc<Snapshot>, proxy: &Proxy) -> usize {
    let snap = XdsSnapshot::new(model, "cluster.local");
    let none = BTreeSet::new();
    TypeUrl::PUSH_ORDER
        .iter()
        .map(|t| snap.resources(proxy, *t, &none).len())
        .sum()
}

/// Merging and validating the registries' state into a snapshot.
#[divan::bench(sample_count = 20)]
fn snapshot_build(bencher: Bencher) {
    bencher
        .with_inputs(mesh)
        .bench_values(|sources| black_box(snapshot_from(sources).expect("valid")));
}

/// Generating and encoding everything one sidecar receives, from a built snapshot.
#[divan::bench(sample_count = 20)]
fn full_generation(bencher: Bencher) {
    let model = Arc::new(snapshot_from(mesh()).expect("valid"));
    let proxy = sidecar();
    bencher.bench(|| black_box(generate(model.clone(), &proxy)));
}

/// The mesh as mesh mTLS serves it: every endpoint beside a sidecar (labelled
/// `security.istio.io/tlsMode: istio`, with a service account), every namespace `STRICT` with
/// a workload policy that turns one port `PERMISSIVE` (so each endpoint's mode is looked up
/// among the policies), and the sidecar holding a mesh certificate: auto-mTLS clusters,
/// endpoint metadata and inbound chains per mode (compare with `full_generation`).
#[divan::bench(sample_count = 20)]
fn full_generation_mesh_tls(bencher: Bencher) {
    let mut sources = mesh();
    for registration in &mut sources[0].1 {
        let mut endpoints = registration.endpoints.to_vec();
        for ep in &mut endpoints {
            ep.labels
                .insert("security.istio.io/tlsMode".into(), "istio".into());
            ep.service_account = Some("app".into());
        }
        registration.endpoints = endpoints.into();
    }
    let policies = (0..10).flat_map(|ns| {
        let strict = PeerAuthentication {
            mtls: Some(PeerMtls {
                mode: MtlsMode::Strict,
            }),
            ..Default::default()
        };
        let port = PeerAuthentication {
            selector: Some(LabelSelector {
                match_labels: [("version".to_string(), "v1".to_string())].into(),
            }),
            port_level_mtls: [(
                8080,
                PeerMtls {
                    mode: MtlsMode::Permissive,
                },
            )]
            .into(),
            ..Default::default()
        };
        [("default", strict), ("v1", port)].map(|(name, pa)| ConfigObject {
            meta: ConfigMeta {
                name: name.into(),
                namespace: format!("ns-{ns}").into(),
                ..Default::default()
            },
            spec: ConfigSpec::PeerAuthentication(pa),
        })
    });
    let model = snapshot_with_config(sources, policies.collect()).expect("valid");
    let model = Arc::new(model);
    let proxy = Proxy {
        certificate: Some((
            "spiffe://cluster.local/ns/ns-0/sa/app".into(),
            "2030-01-01T00:00:00Z".into(),
        )),
        ..sidecar()
    };
    bencher.bench(|| black_box(generate(model.clone(), &proxy)));
}

/// The mesh with locality load balancing on every service (a DestinationRule per namespace
/// with outlier detection, so Istio's default locality setting applies), and a sidecar in
/// `us-east1/zone-0`: its endpoints are made for its place (compare with `full_generation`).
fn locality_model() -> Snapshot {
    let rules = (0..10).map(|ns| ConfigObject {
        meta: ConfigMeta {
            name: "outliers".into(),
            namespace: format!("ns-{ns}").into(),
            ..Default::default()
        },
        spec: ConfigSpec::DestinationRule(Box::new(
            serde_saphyr::from_str(&format!(
                "{{host: '*.ns-{ns}.svc.cluster.local', trafficPolicy: \
                 {{outlierDetection: {{consecutive5xxErrors: 5}}}}}}"
            ))
            .expect("a DestinationRule"),
        )),
    });
    snapshot_with_config(mesh(), rules.collect()).expect("valid")
}

fn sidecar_in_a_zone() -> Proxy {
    Proxy {
        locality: "us-east1/zone-0".into(),
        ..sidecar()
    }
}

#[divan::bench(sample_count = 20)]
fn full_generation_locality(bencher: Bencher) {
    let model = Arc::new(locality_model());
    let proxy = sidecar_in_a_zone();
    bencher.bench(|| black_box(generate(model.clone(), &proxy)));
}

/// One endpoint change with locality load balancing everywhere: only the changed service's
/// assignment is made again for the sidecar's place (compare with
/// `endpoint_change_generation`).
#[divan::bench(sample_count = 20)]
fn endpoint_change_generation_locality(bencher: Bencher) {
    endpoint_change_after(bencher, locality_model(), sidecar_in_a_zone());
}

/// Every resource `proxy` gets after one endpoint change of `model`, the configuration kept,
/// from the snapshot that first served it all.
fn endpoint_change_after(bencher: Bencher, model: Snapshot, proxy: Proxy) {
    let first = XdsSnapshot::new(Arc::new(model), "cluster.local");
    let none = BTreeSet::new();
    for t in TypeUrl::PUSH_ORDER {
        first.resources(&proxy, t, &none);
    }
    let changed = endpoint_change(first.model());
    let model = Arc::new(Snapshot::new(
        changed.version,
        changed.services.clone(),
        Vec::new(),
        Vec::new(),
        first.model().config.clone(),
    ));
    bencher.bench(|| {
        let next = XdsSnapshot::next(model.clone(), "cluster.local", &first);
        TypeUrl::PUSH_ORDER
            .iter()
            .map(|t| black_box(next.resources(&proxy, *t, &none).len()))
            .sum::<usize>()
    });
}

/// The mesh with two EnvoyFilters in the root namespace, for every sidecar: a Lua filter before
/// the router of every outbound HTTP connection manager, and a MERGE into one service's
/// cluster (compare with `full_generation`: every listener is decoded, patched and encoded
/// again; of the clusters, only the matching one is decoded).
fn envoy_filter_model() -> Snapshot {
    let filter = |name: &str, yaml: &str| ConfigObject {
        meta: ConfigMeta {
            name: name.into(),
            namespace: "istio-system".into(),
            ..Default::default()
        },
        spec: ConfigSpec::EnvoyFilter(Box::new(serde_saphyr::from_str(yaml).expect("a filter"))),
    };
    let lua = "configPatches:\n- applyTo: HTTP_FILTER\n  match:\n    context: SIDECAR_OUTBOUND\n    \
               listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, \
               subFilter: {name: envoy.filters.http.router}}}}\n  patch:\n    operation: INSERT_BEFORE\n    \
               value:\n      name: envoy.filters.http.lua\n      typed_config:\n        \
               '@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n        \
               default_source_code: {inline_string: 'function envoy_on_response(h) end'}\n";
    let cluster = "configPatches:\n- applyTo: CLUSTER\n  match:\n    \
                   cluster: {service: svc-0.ns-0.svc.cluster.local}\n  patch:\n    \
                   operation: MERGE\n    value: {connect_timeout: 2s}\n";
    let filters = vec![filter("lua", lua), filter("timeout", cluster)];
    snapshot_with_config(mesh(), filters).expect("valid")
}

#[divan::bench(sample_count = 20)]
fn full_generation_envoy_filter(bencher: Bencher) {
    let model = Arc::new(envoy_filter_model());
    assert_eq!(model.config.objects.len(), 2, "both filters are valid");
    let proxy = sidecar();
    bencher.bench(|| black_box(generate(model.clone(), &proxy)));
}

/// One endpoint change with those EnvoyFilters: the patched listeners and clusters are made
/// again for the new snapshot (compare with `endpoint_change_generation`).
#[divan::bench(sample_count = 20)]
fn endpoint_change_generation_envoy_filter(bencher: Bencher) {
    endpoint_change_after(bencher, envoy_filter_model(), sidecar());
}

/// Both: what a registry change costs before the first sidecar's push can go out.
#[divan::bench(sample_count = 20)]
fn build_and_generate(bencher: Bencher) {
    let proxy = sidecar();
    bencher.with_inputs(mesh).bench_values(|sources| {
        let model = Arc::new(snapshot_from(sources).expect("valid"));
        black_box(generate(model, &proxy))
    });
}

/// A second sidecar of the same namespace, served from the shared caches.
#[divan::bench(sample_count = 20)]
fn second_sidecar(bencher: Bencher) {
    let model = Arc::new(snapshot_from(mesh()).expect("valid"));
    let snap = XdsSnapshot::new(model, "cluster.local");
    let none = BTreeSet::new();
    let proxy = sidecar();
    for t in TypeUrl::PUSH_ORDER {
        snap.resources(&proxy, t, &none);
    }
    bencher.bench(|| {
        TypeUrl::PUSH_ORDER
            .iter()
            .map(|t| black_box(snap.resources(&proxy, *t, &none).len()))
            .sum::<usize>()
    });
}

/// The model after `before` in which only the first service's endpoints changed (one more),
/// sharing every other service and the configuration, as the aggregate builds it.
fn endpoint_change(before: &Snapshot) -> Snapshot {
    let changed = snapshot_from(mesh_with(1)).expect("valid");
    let mut services = before.services.clone();
    let (key, svc) = changed
        .services
        .iter()
        .find(|(k, _)| k.hostname.starts_with("svc-0."))
        .expect("svc-0");
    services.insert(key.clone(), svc.clone());
    Snapshot::new(
        before.version + 1,
        services,
        Vec::new(),
        Vec::new(),
        before.config.clone(),
    )
}

/// One endpoint change: the next snapshot reuses the previous one's work, so only the changed
/// service's resources are generated again (compare with `full_generation`).
#[divan::bench(sample_count = 20)]
fn endpoint_change_generation(bencher: Bencher) {
    let first = XdsSnapshot::new(
        Arc::new(snapshot_from(mesh()).expect("valid")),
        "cluster.local",
    );
    let proxy = sidecar();
    let none = BTreeSet::new();
    for t in TypeUrl::PUSH_ORDER {
        first.resources(&proxy, t, &none);
    }
    let model = Arc::new(endpoint_change(first.model()));
    bencher.bench(|| {
        let next = XdsSnapshot::next(model.clone(), "cluster.local", &first);
        TypeUrl::PUSH_ORDER
            .iter()
            .map(|t| black_box(next.resources(&proxy, *t, &none).len()))
            .sum::<usize>()
    });
}

/// A sidecar's requests for every type, state of the world: wildcard clusters and listeners,
/// every cluster's endpoints and every listener's routes by name.
fn sotw_requests(snap: &XdsSnapshot, proxy: &Proxy) -> Vec<DiscoveryRequest> {
    let none = BTreeSet::new();
    let node = Node {
        id: proxy.id.to_string(),
        ..Default::default()
    };
    let names = |t: TypeUrl| -> Vec<String> {
        snap.resources(proxy, t, &none)
            .iter()
            .map(|r| r.name.to_string())
            .collect()
    };
    TypeUrl::PUSH_ORDER
        .iter()
        .map(|t| DiscoveryRequest {
            type_url: t.as_str().into(),
            node: Some(node.clone()),
            resource_names: match t {
                TypeUrl::Endpoint | TypeUrl::Route => names(*t),
                _ => Vec::new(),
            },
            ..Default::default()
        })
        .collect()
}

/// What one stream spends on a snapshot with one endpoint change, once the snapshot's
/// resources exist (another stream generated them): the per-client cost of a push.
#[divan::bench(sample_count = 50)]
fn endpoint_change_push_per_stream_sotw(bencher: Bencher) {
    let first = XdsSnapshot::new(
        Arc::new(snapshot_from(mesh()).expect("valid")),
        "cluster.local",
    );
    let proxy = Arc::new(sidecar());
    let requests: Vec<SotwRequest> = sotw_requests(&first, &proxy)
        .into_iter()
        .map(SotwRequest::from)
        .collect();
    let next = XdsSnapshot::next(
        Arc::new(endpoint_change(first.model())),
        "cluster.local",
        &first,
    );
    let mut warm = StreamState::new(proxy.clone(), "bench".into());
    for r in &requests {
        warm.on_request(r, &first).expect("valid");
    }
    warm.on_snapshot(&next);
    bencher
        .with_inputs(|| {
            let mut state = StreamState::new(proxy.clone(), "bench".into());
            for r in &requests {
                state.on_request(r, &first).expect("valid");
            }
            state
        })
        .bench_local_values(|mut state| black_box(state.on_snapshot(&next)));
}

/// The same for a delta stream.
#[divan::bench(sample_count = 50)]
fn endpoint_change_push_per_stream_delta(bencher: Bencher) {
    let first = XdsSnapshot::new(
        Arc::new(snapshot_from(mesh()).expect("valid")),
        "cluster.local",
    );
    let proxy = Arc::new(sidecar());
    let requests: Vec<DeltaDiscoveryRequest> = sotw_requests(&first, &proxy)
        .into_iter()
        .map(|r| DeltaDiscoveryRequest {
            type_url: r.type_url,
            node: r.node,
            resource_names_subscribe: r.resource_names,
            ..Default::default()
        })
        .collect();
    let next = XdsSnapshot::next(
        Arc::new(endpoint_change(first.model())),
        "cluster.local",
        &first,
    );
    let mut warm = DeltaState::new(proxy.clone(), "bench".into());
    for r in &requests {
        warm.on_request(r, &first).expect("valid");
    }
    warm.on_snapshot(&next);
    bencher
        .with_inputs(|| {
            let mut state = DeltaState::new(proxy.clone(), "bench".into());
            for r in &requests {
                state.on_request(r, &first).expect("valid");
            }
            state
        })
        .bench_local_values(|mut state| black_box(state.on_snapshot(&next)));
}

/// Encoding a response of every cluster (about 2,000), as the server does for each sidecar
/// that receives the cluster set: the response's own fields, with each resource's shared
/// bytes referenced rather than copied.
#[divan::bench(sample_count = 20)]
fn encode_cluster_response(bencher: Bencher) {
    let snap = XdsSnapshot::new(
        Arc::new(snapshot_from(mesh()).expect("valid")),
        "cluster.local",
    );
    let proxy = sidecar();
    let clusters = snap.resources(&proxy, TypeUrl::Cluster, &BTreeSet::new());
    bencher.bench(|| {
        let response = SotwResponse {
            version_info: "0123456789abcdef".into(),
            resources: clusters.iter().cloned().collect::<Vec<_>>().into(),
            type_url: TypeUrl::Cluster,
            nonce: "1".into(),
            identifier: "bench".into(),
        };
        black_box(response.encode().len())
    });
}
