//! Mapping tests: Eureka JSON (with its quirks) in, registrations out.

use super::*;
use crate::api::parse_applications;

const BASE: &str = "http://eureka/eureka";

/// A full document of `apps`: `(name, [instance JSON])`.
fn doc(apps: &[(&str, &[&str])]) -> Mirror {
    let apps: Vec<String> = apps
        .iter()
        .map(|(name, instances)| {
            format!(
                r#"{{"name":"{name}","instance":[{}]}}"#,
                instances.join(",")
            )
        })
        .collect();
    let body = format!(
        r#"{{"applications":{{"versions__delta":"1","apps__hashcode":"","application":[{}]}}}}"#,
        apps.join(",")
    );
    Mirror::full(parse_applications(body.as_bytes()).unwrap())
}

/// A realistic instance as a Eureka server sends it.
fn instance(id: &str, ip: &str, port: u16, extra: &str) -> String {
    format!(
        r#"{{"instanceId":"{id}","hostName":"{ip}","app":"PAYMENT","ipAddr":"{ip}","status":"UP",
        "overriddenStatus":"UNKNOWN","port":{{"$":{port},"@enabled":"true"}},
        "securePort":{{"$":443,"@enabled":"false"}},"countryId":1,
        "dataCenterInfo":{{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"}},
        "leaseInfo":{{"renewalIntervalInSecs":30,"durationInSecs":90}},
        "metadata":{{"@class":"java.util.Collections$EmptyMap"}},
        "vipAddress":"payment","secureVipAddress":"payment",
        "lastUpdatedTimestamp":"1700000000000","lastDirtyTimestamp":"1700000000000"{extra}}}"#
    )
}

/// Replaces an instance's (empty) metadata.
fn with_meta(instance: String, meta: &str) -> String {
    instance.replace(r#"{"@class":"java.util.Collections$EmptyMap"}"#, meta)
}

fn only(converted: &Converted) -> &Registration {
    assert!(converted.problems.is_empty(), "{:?}", converted.problems);
    assert_eq!(
        converted.registrations.len(),
        1,
        "{:?}",
        converted.registrations
    );
    converted.registrations.values().next().unwrap()
}

#[test]
fn maps_a_plain_application() {
    let mirror = doc(&[(
        "PAYMENT",
        &[
            &instance("p1", "10.0.0.2", 8080, ""),
            &instance("p2", "10.0.0.1", 8080, ""),
        ],
    )]);
    let got = convert(&mirror, BASE, ".eureka");
    let mut svc = Service::new("payment.eureka", "default").with_port("http", 8080, Protocol::Http);
    svc.resolution = Resolution::ClientSideLb;
    let want = Registration::new(
        svc,
        vec![
            Endpoint::new("10.0.0.1").with_port("http", 8080),
            Endpoint::new("10.0.0.2").with_port("http", 8080),
        ],
    );
    assert_eq!(only(&got), &want);
}

#[test]
fn parses_quirky_encodings() {
    // One-element arrays as objects, string port, bool @enabled, no instanceId, `class` marker.
    let body =
        br#"{"applications":{"versions__delta":"3","application":{"name":"PAYMENT","instance":{
        "hostName":"p1.local","app":"PAYMENT","ipAddr":"10.0.0.1","status":"UP",
        "port":{"$":"8080","@enabled":true},"securePort":{"$":"8443","@enabled":"true"},
        "metadata":{"class":"java.util.Collections$EmptyMap"},"vipAddress":" Pay-Svc , other"}}}}"#;
    let mirror = Mirror::full(parse_applications(body).unwrap());
    assert!(
        mirror
            .instances
            .contains_key(&("PAYMENT".into(), "p1.local".into()))
    );
    let got = convert(&mirror, BASE, ".eureka");
    let reg = only(&got);
    assert_eq!(
        &*reg.service.hostname, "pay-svc.eureka",
        "first vip, lower-cased"
    );
    let ports: Vec<_> = reg
        .service
        .ports
        .iter()
        .map(|p| (&*p.name, p.number, p.protocol))
        .collect();
    assert_eq!(
        ports,
        [
            ("http", 8080, Protocol::Http),
            ("https", 8443, Protocol::Https)
        ]
    );
    let ep = &reg.endpoints[0];
    assert!(ep.labels.is_empty(), "{:?}", ep.labels);
    assert_eq!(ep.ports.get("https"), Some(&8443));
}

#[test]
fn shared_hostname_namespace_and_port_come_from_metadata() {
    let meta = r#"{"wayfinder.io/hostname":"Pay.Example.COM","wayfinder.io/namespace":"shop",
        "wayfinder.io/port":"80","protocol":"grpc","version":"v2"}"#;
    let a = with_meta(instance("a1", "10.0.0.1", 9000, ""), meta);
    let b = with_meta(instance("b1", "10.0.0.2", 9001, ""), meta);
    let got = convert(
        &doc(&[("PAYMENT", &[&a]), ("BILLING", &[&b])]),
        BASE,
        ".eureka",
    );
    let reg = only(&got);
    assert_eq!(reg.key(), ServiceKey::new("shop", "pay.example.com"));
    assert_eq!(
        reg.service.ports,
        [wayfinder_registry::Port::new("http", 80, Protocol::Grpc)]
    );
    let eps: Vec<_> = reg
        .endpoints
        .iter()
        .map(|e| (&*e.address, e.ports.get("http").copied()))
        .collect();
    assert_eq!(eps, [("10.0.0.1", Some(9000)), ("10.0.0.2", Some(9001))]);
    let labels: Vec<_> = reg.endpoints[0].labels.keys().map(|k| &**k).collect();
    assert_eq!(labels, ["protocol", "version"]);
}

#[test]
fn service_port_is_the_most_used_and_needs_every_instance() {
    let got = convert(
        &doc(&[(
            "PAYMENT",
            &[
                &instance("1", "10.0.0.1", 8081, ""),
                &instance("2", "10.0.0.2", 8080, ""),
                &instance("3", "10.0.0.3", 8081, ""),
                &instance("4", "10.0.0.4", 8080, ""),
            ],
        )]),
        BASE,
        ".eureka",
    );
    assert_eq!(
        only(&got).service.ports[0].number,
        8080,
        "ties go to the lowest"
    );

    let disabled = instance("2", "10.0.0.2", 8080, "").replace(
        r#""$":8080,"@enabled":"true""#,
        r#""$":8080,"@enabled":"false""#,
    );
    let got = convert(
        &doc(&[(
            "PAYMENT",
            &[&instance("1", "10.0.0.1", 8080, ""), &disabled],
        )]),
        BASE,
        ".eureka",
    );
    let reg = only(&got);
    assert!(reg.service.ports.is_empty());
    assert!(reg.endpoints.iter().all(|e| e.ports.is_empty()));
}

#[test]
fn amazon_locality_and_health() {
    let amazon = instance("1", "10.0.0.1", 8080, "").replace(
        r#"{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"}"#,
        r#"{"@class":"com.netflix.appinfo.AmazonInfo","name":"Amazon","metadata":{"availability-zone":"us-east-1c","instance-id":"i-1"}}"#,
    );
    let down =
        instance("2", "10.0.0.2", 8080, "").replace(r#""status":"UP""#, r#""status":"DOWN""#);
    let starting =
        instance("3", "10.0.0.3", 8080, "").replace(r#""status":"UP""#, r#""status":"STARTING""#);
    let out = instance("4", "10.0.0.4", 8080, "").replace(
        r#""overriddenStatus":"UNKNOWN""#,
        r#""overriddenStatus":"OUT_OF_SERVICE""#,
    );
    let got = convert(
        &doc(&[("PAYMENT", &[&amazon, &down, &starting, &out])]),
        BASE,
        ".eureka",
    );
    let reg = only(&got);
    let eps: Vec<_> = reg
        .endpoints
        .iter()
        .map(|e| (&*e.address, e.health, e.locality.to_string()))
        .collect();
    assert_eq!(
        eps,
        [
            (
                "10.0.0.1",
                Health::Healthy,
                "us-east-1/us-east-1c/".to_string()
            ),
            ("10.0.0.2", Health::Unhealthy, "//".into()),
            ("10.0.0.3", Health::Unhealthy, "//".into()),
            ("10.0.0.4", Health::Unhealthy, "//".into()),
        ]
    );
}

#[test]
fn bad_instances_are_skipped_with_an_error_naming_them() {
    let bad_host = instance("bad", "10.0.0.9", 8080, "")
        .replace(r#""vipAddress":"payment""#, r#""vipAddress":"pay ment""#);
    let no_ip = instance("noip", "x", 8080, "").replace(r#""ipAddr":"x","#, "");
    let got = convert(
        &doc(&[(
            "PAYMENT",
            &[&instance("ok", "10.0.0.1", 8080, ""), &bad_host, &no_ip],
        )]),
        BASE,
        ".eureka",
    );
    assert_eq!(got.registrations.len(), 1);
    let reg = got.registrations.values().next().unwrap();
    assert_eq!(reg.endpoints.len(), 1);
    let details: Vec<String> = got.problems.iter().map(ToString::to_string).collect();
    assert_eq!(details.len(), 2, "{details:?}");
    assert!(
        details[0].contains("/apps/PAYMENT/bad")
            && details[0].contains("instance bad")
            && details[0].contains("\"pay ment.eureka\" (from vipAddress) is not a valid DNS name"),
        "{details:?}"
    );
    assert!(
        details[1].contains("instance noip: no ipAddr"),
        "{details:?}"
    );
}

#[test]
fn a_registration_that_fails_validation_is_refused() {
    // Port and secure port both 8080: duplicate port numbers.
    let clash = instance("1", "10.0.0.1", 8080, "").replace(
        r#""$":443,"@enabled":"false""#,
        r#""$":8080,"@enabled":"true""#,
    );
    let got = convert(&doc(&[("PAYMENT", &[&clash])]), BASE, ".eureka");
    assert!(got.registrations.is_empty());
    assert!(
        got.refused
            .contains(&ServiceKey::new("default", "payment.eureka"))
    );
    assert!(
        matches!(&got.problems[..], [RegistryError::Invalid { detail, .. }] if detail.contains("duplicate port"))
    );
}

#[test]
fn app_name_is_the_last_resort_hostname() {
    let no_vip = instance("1", "10.0.0.1", 8080, "").replace(r#""vipAddress":"payment","#, "");
    let got = convert(&doc(&[("PAYMENT", &[&no_vip])]), BASE, ".svc.example");
    assert_eq!(&*only(&got).service.hostname, "payment.svc.example");
}

#[test]
fn dns_names() {
    assert!(is_dns_name("a.b-c.d_e"));
    for bad in ["", "a..b", "-a.b", "a b", "a.", &"x".repeat(64)] {
        assert!(!is_dns_name(bad), "{bad:?}");
    }
}
