use serde_json::json;

use super::*;
use crate::DEFAULT_TEMPLATE;

fn mapping() -> Mapping {
    Mapping {
        template: DEFAULT_TEMPLATE.into(),
        warning_is_healthy: true,
    }
}

fn entry(v: serde_json::Value) -> HealthEntry {
    serde_json::from_value(v).unwrap()
}

fn web(address: &str, port: u16, checks: &[&str]) -> HealthEntry {
    entry(json!({
        "Node": {"Node": "n1", "Address": "10.0.0.9", "Datacenter": "dc1"},
        "Service": {"ID": format!("web-{port}"), "Service": "web", "Address": address, "Port": port,
                    "Tags": ["version|v1", "canary=true", "plain"],
                    "Meta": {"protocol": "http", "team": "a"}},
        "Checks": checks.iter().map(|s| json!({"CheckID": "c", "Status": s})).collect::<Vec<_>>(),
    }))
}

#[test]
fn instances_follow_istios_mapping() {
    let (inst, errors) = mapping().instances(&[web("10.0.0.1", 8080, &["passing"])], None);
    assert!(errors.is_empty(), "{errors:?}");
    let i = &inst[0];
    assert_eq!(i.key.to_string(), "default/web.service.consul");
    assert_eq!(
        (&*i.port_name, i.protocol, i.service_port),
        ("http", Protocol::Http, 8080)
    );
    let e = &i.endpoint;
    assert_eq!(&*e.address, "10.0.0.1");
    assert_eq!(e.ports.get("http"), Some(&8080));
    assert_eq!(&*e.locality.region, "dc1");
    assert_eq!(&*e.cluster_id, "dc1");
    let labels: Vec<(&str, &str)> = e.labels.iter().map(|(k, v)| (&**k, &**v)).collect();
    assert_eq!(
        labels,
        [
            ("canary", "true"),
            ("protocol", "http"),
            ("team", "a"),
            ("version", "v1")
        ]
    );
}

#[test]
fn the_node_address_stands_in_for_an_empty_service_address() {
    let (inst, _) = mapping().instances(&[web("", 8080, &[])], None);
    assert_eq!(&*inst[0].endpoint.address, "10.0.0.9");
}

#[test]
fn health_is_the_worst_check_and_warning_is_configurable() {
    let cases = [
        (&["passing", "passing"][..], true, Health::Healthy),
        (&["passing", "warning"][..], true, Health::Healthy),
        (&["passing", "warning"][..], false, Health::Unhealthy),
        (&["warning", "critical"][..], true, Health::Unhealthy),
        (&["maintenance"][..], true, Health::Unhealthy),
    ];
    for (checks, warning_is_healthy, want) in cases {
        let m = Mapping {
            warning_is_healthy,
            ..mapping()
        };
        let (inst, _) = m.instances(&[web("10.0.0.1", 80, checks)], None);
        assert_eq!(
            inst[0].endpoint.health, want,
            "{checks:?} {warning_is_healthy}"
        );
    }
}

#[test]
fn weights_follow_health_and_a_zero_warning_weight_drains() {
    let mut e = web("10.0.0.1", 80, &["warning"]);
    e.service.weights = Some(Weights {
        passing: 10,
        warning: 0,
    });
    let (inst, _) = mapping().instances(std::slice::from_ref(&e), None);
    assert_eq!(inst[0].endpoint.health, Health::Unhealthy);
    e.checks[0].status = "passing".into();
    let (inst, _) = mapping().instances(&[e], None);
    assert_eq!(
        (inst[0].endpoint.health, inst[0].endpoint.weight),
        (Health::Healthy, 10)
    );
}

#[test]
fn meta_shares_a_hostname_namespace_and_port_with_other_registries() {
    let mut e = web("10.0.0.1", 31000, &[]);
    e.service.meta.insert(
        HOSTNAME_KEY.into(),
        "Reviews.Default.svc.cluster.local".into(),
    );
    e.service
        .meta
        .insert(NAMESPACE_KEY.into(), "default".into());
    e.service.meta.insert(PORT_KEY.into(), "9080".into());
    let (inst, _) = mapping().instances(&[e], None);
    let i = &inst[0];
    assert_eq!(
        i.key.to_string(),
        "default/reviews.default.svc.cluster.local"
    );
    assert_eq!(i.service_port, 9080);
    assert_eq!(i.endpoint.ports.get("http"), Some(&31000));
    assert!(
        i.endpoint
            .labels
            .keys()
            .all(|k| !k.starts_with("wayfinder.io/"))
    );
}

#[test]
fn templates_name_datacenters_and_namespaces() {
    let m = Mapping {
        template: "{service}.{namespace}.{datacenter}.consul".into(),
        ..mapping()
    };
    let (inst, _) = m.instances(&[web("10.0.0.1", 80, &[])], None);
    assert_eq!(&*inst[0].key.hostname, "web.default.dc1.consul");
}

#[test]
fn bad_instances_are_reported_and_skipped_and_mesh_proxies_ignored() {
    let bad = web("db.internal", 80, &[]);
    let mut proxy = web("10.0.0.2", 21000, &[]);
    proxy.service.kind = "connect-proxy".into();
    let good = web("10.0.0.3", 80, &[]);
    let (inst, errors) = mapping().instances(&[bad, proxy, good], None);
    assert_eq!(inst.len(), 1);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].contains("\"db.internal\" is not an IP address"),
        "{errors:?}"
    );
}

#[test]
fn a_registration_takes_the_port_most_instances_use() {
    let (a, _) = mapping().instances(
        &[
            web("10.0.0.1", 8080, &[]),
            web("10.0.0.2", 8080, &[]),
            web("10.0.0.3", 9090, &[]),
        ],
        None,
    );
    let key = a[0].key.clone();
    let reg = registration(&key, a.iter()).unwrap();
    assert_eq!(reg.service.ports, [Port::new("http", 8080, Protocol::Http)]);
    let ports: Vec<u16> = reg
        .endpoints
        .iter()
        .map(|e| e.port_for(&reg.service.ports[0]))
        .collect();
    assert_eq!(
        ports,
        [8080, 8080, 9090],
        "each endpoint keeps its own port"
    );
    assert!(reg.validate().is_ok());
    assert!(registration(&key, [].iter()).is_none());
}
