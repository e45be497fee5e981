//! A MeshConfig as istiod's ConfigMap holds it: the fields acted on, those reported.

use super::*;

fn fields(parsed: &Parsed, fatal: bool) -> Vec<String> {
    parsed
        .problems
        .iter()
        .filter(|p| p.fatal == fatal)
        .map(|p| p.field.clone())
        .collect()
}

#[test]
fn the_fields_acted_on_are_read_and_the_others_reported() {
    let parsed = parse(
        r#"
rootNamespace: mesh-root
trustDomain: example.org
outboundTrafficPolicy: {mode: REGISTRY_ONLY}
localityLbSetting: {enabled: true, failover: [{from: us-east, to: us-west}]}
enableAutoMtls: false
connectTimeout: 3s
accessLogFile: /dev/stdout
defaultConfig:
  discoveryAddress: istiod.istio-system.svc:15012
  concurrency: 2
  proxyMetadata: {ISTIO_META_DNS_CAPTURE: "true"}
extensionProviders: [{name: otel}]
"#,
    )
    .unwrap();
    let c = &parsed.config;
    assert_eq!(c.root_namespace.as_deref(), Some("mesh-root"));
    assert_eq!(c.trust_domain.as_deref(), Some("example.org"));
    assert!(c.registry_only());
    assert_eq!(c.enable_auto_mtls, Some(false));
    assert_eq!(c.connect_timeout.map(|d| d.0.as_secs()), Some(3));
    assert_eq!(c.locality_lb_setting.as_ref().unwrap().failover.len(), 1);
    let proxies = c.default_config.as_ref().unwrap();
    assert_eq!(proxies.concurrency, Some(2));
    assert_eq!(proxies.proxy_metadata["ISTIO_META_DNS_CAPTURE"], "true");
    assert!(!parsed.refused(), "{:?}", parsed.problems);
    assert_eq!(
        fields(&parsed, false),
        [
            "accessLogFile",
            "defaultConfig.discoveryAddress",
            "extensionProviders"
        ]
    );
}

#[test]
fn a_wrong_value_acted_on_refuses_the_config() {
    for (text, field) in [
        (
            "outboundTrafficPolicy: {mode: BLOCK}",
            "outboundTrafficPolicy.mode",
        ),
        ("connectTimeout: 0s", "connectTimeout"),
        ("rootNamespace: ''", "rootNamespace"),
        (
            "defaultConfig: {concurrency: -2}",
            "defaultConfig.concurrency",
        ),
        (
            "localityLbSetting: {failover: [{from: a, to: a}]}",
            "localityLbSetting.failover[0]",
        ),
    ] {
        let parsed = parse(text).unwrap();
        assert!(parsed.refused(), "{text}");
        assert_eq!(fields(&parsed, true), [field], "{text}");
    }
    assert!(parse("connectTimeout: [1]").is_err());
    let empty = parse("").unwrap();
    assert_eq!(empty.config, MeshConfig::default());
}
