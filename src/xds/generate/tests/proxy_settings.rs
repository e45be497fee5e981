//! What MeshConfig sets of the proxies themselves: the PCDS resource an agent is served (the
//! mesh's `defaultConfig` under its workload's ProxyConfig), and `protocolDetectionTimeout`
//! on the inbound listener's TLS inspector.

use std::time::Duration;

use prost::Message;
use wayfinder_config::ConfigSpec;
use wayfinder_config::proxy_config::DefaultConfig;

use super::mesh_tls::{get, proxy, snapshot};
use crate::xds::pb::listener::Listener;
use crate::xds::pb::mesh::ProxyConfig;
use crate::xds::{MeshSettings, TypeUrl};

fn proxy_config(yaml: &str) -> ConfigSpec {
    ConfigSpec::ProxyConfig(serde_saphyr::from_str(yaml).unwrap())
}

#[test]
fn an_agent_is_served_its_workload_s_proxy_config_over_the_mesh_default() {
    let mesh = MeshSettings {
        proxy_defaults: Some(DefaultConfig {
            concurrency: Some(2),
            proxy_metadata: [("ISTIO_META_TEAM".to_string(), "mesh".to_string())].into(),
            image: None,
        }),
        ..MeshSettings::default()
    };
    let served = |config: &[(&str, ConfigSpec)]| {
        let snap = snapshot(config).with_mesh(mesh.clone());
        let resources = snap.resources(&proxy(true), TypeUrl::ProxyConfig, &Default::default());
        let all: Vec<_> = resources.iter().collect();
        assert_eq!(all.len(), 1, "one ProxyConfig");
        ProxyConfig::decode(all[0].any().value.as_slice()).unwrap()
    };
    let plain = served(&[]);
    assert_eq!(plain.concurrency.map(|c| c.value), Some(2));
    assert_eq!(plain.proxy_metadata["ISTIO_META_TEAM"], "mesh");

    // The proxy's labels are `app: reviews`; a selector for another workload does not apply.
    let selected = served(&[
        (
            "reviews",
            proxy_config(
                "{selector: {matchLabels: {app: reviews}}, concurrency: 1, \
                 environmentVariables: {ISTIO_META_TEAM: reviews}, image: {imageType: debug}}",
            ),
        ),
        (
            "ratings",
            proxy_config("{selector: {matchLabels: {app: ratings}}, concurrency: 7}"),
        ),
    ]);
    assert_eq!(selected.concurrency.map(|c| c.value), Some(1));
    assert_eq!(selected.proxy_metadata["ISTIO_META_TEAM"], "reviews");
    assert_eq!(
        selected.image.map(|i| i.image_type).as_deref(),
        Some("debug")
    );
}

#[test]
fn protocol_detection_timeout_bounds_the_inbound_tls_inspector() {
    let inbound = |timeout: Option<Duration>| {
        let snap = snapshot(&[]).with_mesh(MeshSettings {
            protocol_detection_timeout: timeout,
            ..MeshSettings::default()
        });
        let l: Listener = get(&snap, &proxy(true), TypeUrl::Listener, "virtualInbound");
        (
            l.listener_filters_timeout.map(|d| (d.seconds, d.nanos)),
            l.continue_on_listener_filters_timeout,
        )
    };
    assert_eq!(inbound(None), (None, true), "Envoy's own 15 s");
    assert_eq!(
        inbound(Some(Duration::from_millis(1500))),
        (Some((1, 500_000_000)), true)
    );
    assert_eq!(
        inbound(Some(Duration::ZERO)),
        (Some((0, 0)), true),
        "for ever"
    );
}
