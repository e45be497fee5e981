//! `xds::consistency` over real configuration: what each kind of proxy is served names only
//! what it receives. The golden meshes have their own check in `golden`; debug builds run the
//! check before every listeners response, so every real-client test runs it too.

use std::collections::BTreeSet;
use std::sync::Arc;

use wayfinder::aggregate::snapshot_with_config;
use wayfinder::xds::consistency::examine;
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::pb::protobuf::{Struct, Value as PbValue, value::Kind};
use wayfinder::xds::proxy::{Proxy, string_value};
use wayfinder::xds::{TypeUrl, XdsSnapshot};
use wayfinder_config::{ConfigEvent, Feed};
use wayfinder_registry::{Event, RegistryId};

use crate::bookinfo::{SAMPLES, sample};

/// Every sample, applied as `--config-dir` would apply it (the product's readers, the File
/// registry's and the config source's models) over the demo bookinfo mesh with every
/// DestinationRule and the gateway, serves each kind of proxy a configuration that names only
/// what it receives (`xds::consistency`): a sidecar without and with a mesh certificate, the
/// ingress gateway and a proxyless gRPC client. Samples that define the same objects are alternatives, so each is checked alone.
///
/// One sample routes to a destination the mesh does not have: certmanager-gateway.yaml sends
/// the gateway's ACME challenges to `cert-manager-resolver.istio-system:8089`, a service of a
/// cert-manager installation. Istio serves that route as written (Envoy answers 503 until the
/// service exists), and so does wayfinder; the check reports it as the configuration's
/// unknown destination, not as an inconsistency.
#[test]
fn every_sample_serves_every_proxy_a_consistent_configuration() {
    let node = |id: &str, meta: Vec<(&str, PbValue)>| {
        let fields = meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let node = Node {
            id: id.into(),
            metadata: Some(Struct { fields }),
            ..Default::default()
        };
        Proxy::from_node(&node, "cluster.local").unwrap()
    };
    // The ingress gateway bookinfo-gateway.yaml selects (`istio: ingressgateway`).
    let gateway_labels = PbValue {
        kind: Some(Kind::StructValue(Struct {
            fields: [("istio".to_string(), string_value("ingressgateway"))].into(),
        })),
    };
    let sidecar = || {
        node(
            "sidecar~10.10.0.1~productpage-v1-1.default~default.svc.cluster.local",
            Vec::new(),
        )
    };
    // The same sidecar holding a mesh certificate (on the secure port): mesh mTLS clusters
    // and inbound chains.
    let meshed = Proxy {
        certificate: Some((
            "spiffe://cluster.local/ns/default/sa/bookinfo-productpage".into(),
            "2030-01-01T00:00:00Z".into(),
        )),
        ..sidecar()
    };
    let proxies = [
        sidecar(),
        meshed,
        node(
            "router~10.0.0.1~ingress-1.istio-system~istio-system.svc.cluster.local",
            vec![("LABELS", gateway_labels)],
        ),
        node(
            "grpc-client-1",
            vec![
                ("GENERATOR", string_value("grpc")),
                ("NAMESPACE", string_value("default")),
            ],
        ),
    ];
    let mut checked = 0;
    for (name, _) in SAMPLES.iter() {
        let mut entries = Feed::entries();
        let mut config = Feed::config();
        for file in ["destination-rule-all.yaml", "bookinfo-gateway.yaml", name] {
            let bytes = sample(file);
            entries.apply(file, Some(bytes.as_bytes()));
            config.apply(file, Some(bytes.as_bytes()));
        }
        let Some(Ok(Event::Reset(registered))) = entries.commit().into_iter().next() else {
            panic!("{name}: the File registry's first item is a Reset");
        };
        let Some(Ok(ConfigEvent::Reset(objects))) = config.commit().into_iter().next() else {
            panic!("{name}: the config source's first item is a Reset");
        };
        let objects = objects.iter().map(|o| (**o).clone()).collect();
        let mesh = vec![
            (
                RegistryId::new("Mock"),
                wayfinder_memory::demo::bookinfo_services("cluster.local"),
            ),
            (RegistryId::new("File"), registered),
        ];
        let model = snapshot_with_config(mesh, objects)
            .unwrap_or_else(|e| panic!("{name}: a valid snapshot: {e}"));
        let snap = XdsSnapshot::new(Arc::new(model), "cluster.local");
        let none = BTreeSet::new();
        let gateway_listeners = snap.resources(&proxies[2], TypeUrl::Listener, &none);
        assert!(!gateway_listeners.is_empty(), "{name}: the gateway listens");
        for p in &proxies {
            let found = examine(&snap, p);
            assert!(found.problems.is_empty(), "{name}, {}: {found:#?}", p.id);
            let expected: &[&str] = match (*name, p.id.starts_with("router")) {
                ("certmanager-gateway.yaml", true) => {
                    &["outbound|8089||cert-manager-resolver.istio-system.svc.cluster.local"]
                }
                _ => &[],
            };
            let unknown: Vec<&String> = found.unknown_destinations.iter().collect();
            assert_eq!(
                unknown.len(),
                expected.len(),
                "{name}, {}: {unknown:#?}",
                p.id
            );
            for (line, cluster) in unknown.iter().zip(expected) {
                assert!(line.contains(cluster), "{line}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, SAMPLES.len() * proxies.len(), "every sample");
}
