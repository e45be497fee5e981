//! DestinationRule: locality load balancing (`loadBalancer.localityLbSetting`).

use super::super::{assert_warnings, dr, validate};
use super::assert_policy;

/// Asserts the errors of each locality setting, in a policy with outlier detection; paths are
/// below `localityLbSetting`.
#[track_caller]
fn assert_setting(cases: &[(&str, &[&str])]) {
    for (setting, expected) in cases {
        let policy =
            format!("{{loadBalancer: {{localityLbSetting: {setting}}}, outlierDetection: {{}}}}");
        let expected: Vec<String> = expected
            .iter()
            .map(|f| format!(".loadBalancer.localityLbSetting{f}"))
            .collect();
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        assert_policy(&[(policy.as_str(), &expected)]);
    }
}

/// Istio's `TestValidateLocalityLbSetting` and `TestValidateLocalities`
/// (`pkg/config/validation/agent/validation_test.go`), through whole rules.
#[test]
fn is_checked_as_istio_checks_it() {
    assert_setting(&[
        ("{enabled: false}", &[]),
        (
            "{distribute: [{from: a/b/c, to: {a/b/c: 80, a/b1: 20}}]}",
            &[],
        ),
        // Weights: out of range, or not summing to 100.
        (
            "{distribute: [{from: a/b/c, to: {a/b/c: 80, a/b1: 25}}]}",
            &[".distribute[0].to"],
        ),
        (
            "{distribute: [{from: a/b/c, to: {a/b/c: 80, a/b1: 15}}]}",
            &[".distribute[0].to"],
        ),
        (
            "{distribute: [{from: a/b/c, to: {a/b/c: 0, a/b1: 100}}]}",
            &[".distribute[0].to.a/b/c"],
        ),
        ("{distribute: [{from: a, to: {}}]}", &[".distribute[0].to"]),
        // Both distribute and failover.
        (
            "{distribute: [{from: a/b/c, to: {a/b/c: 80, a/b1: 20}}], failover: [{from: region1, to: region2}]}",
            &[""],
        ),
        // Failover between regions: different ones, without zones or wildcards.
        (
            "{failover: [{from: us-east, to: eu-west}, {from: us-west, to: eu-east}]}",
            &[],
        ),
        (
            "{failover: [{from: region1, to: region1}]}",
            &[".failover[0]"],
        ),
        ("{failover: [{from: '*', to: region2}]}", &[".failover[0]"]),
        ("{failover: [{from: region1, to: '*'}]}", &[".failover[0]"]),
        (
            "{failover: [{from: region1/zone1, to: region2}]}",
            &[".failover[0]"],
        ),
        (
            "{failover: [{from: r1, to: r2}, {from: r2, to: r2/zone1}]}",
            &[".failover[1]"],
        ),
        // Topology labels beside failover; other labels are fine.
        (
            "{failover: [{from: region1, to: region2}], failoverPriority: [topology.kubernetes.io/region]}",
            &[".failoverPriority[0]"],
        ),
        (
            "{failover: [{from: region1, to: region2}], failoverPriority: [version, topology.istio.io/subzone]}",
            &[".failoverPriority[1]"],
        ),
        (
            "{failover: [{from: region1, to: region2}], failoverPriority: [version]}",
            &[],
        ),
        (
            "{failoverPriority: [topology.istio.io/network, topology.kubernetes.io/region]}",
            &[],
        ),
        // Localities: one wildcard, last; no empty part; no overlap with an earlier one.
        (
            "{distribute: [{from: '*/zone/*', to: {a: 100}}]}",
            &[".distribute[0].from"],
        ),
        (
            "{distribute: [{from: '*/zone', to: {a: 100}}]}",
            &[".distribute[0].from"],
        ),
        (
            "{distribute: [{from: a//c, to: {a: 100}}]}",
            &[".distribute[0].from"],
        ),
        (
            "{distribute: [{from: '*', to: {a: 100}}, {from: a/b/c, to: {a: 100}}]}",
            &[".distribute[1].from"],
        ),
        (
            "{distribute: [{from: a, to: {a: 100}}, {from: a/b/c, to: {a: 100}}]}",
            &[".distribute[1].from"],
        ),
        (
            "{distribute: [{from: 'a/*', to: {a: 100}}, {from: a/b/c, to: {a: 100}}]}",
            &[".distribute[1].from"],
        ),
        (
            "{distribute: [{from: a/b, to: {a: 100}}, {from: a/b/c, to: {a: 100}}]}",
            &[".distribute[1].from"],
        ),
        (
            "{distribute: [{from: 'a/b/*', to: {a: 100}}, {from: a/b/c, to: {a: 100}}]}",
            &[".distribute[1].from"],
        ),
        (
            "{distribute: [{from: a/b/c, to: {a: 100}}, {from: a/b/c, to: {a: 100}}]}",
            &[".distribute[1].from"],
        ),
        // As in Istio, a wildcard after the localities it covers is not an overlap.
        (
            "{distribute: [{from: a/b/c, to: {a: 100}}, {from: '*', to: {a: 100}}]}",
            &[],
        ),
        (
            "{distribute: [{from: 'a1/*', to: {a: 100}}, {from: 'a2/*', to: {a: 100}}, \
             {from: a3/b3/c3, to: {a: 100}}, {from: a4/b4, to: {a: 100}}, \
             {from: 'a5/b5/*', to: {a: 100}}]}",
            &[],
        ),
        // Destinations are sorted, so a wildcard comes before what it covers.
        (
            "{distribute: [{from: a, to: {a/b/c: 50, 'a/*': 50}}]}",
            &[".distribute[0].to.a/b/c"],
        ),
        (
            "{distribute: [{from: a, to: {'*': 50, b: 50}}]}",
            &[".distribute[0].to.b"],
        ),
    ]);
}

#[test]
fn messages_are_istio_s() {
    let cases = [
        (
            "{distribute: [{from: a, to: {b: 100}}], failover: [{from: r1, to: r2}]}",
            vec!["can not simultaneously specify 'distribute' and 'failover'"],
        ),
        (
            "{failover: [{from: r1, to: r2}], failoverPriority: [topology.kubernetes.io/zone]}",
            vec![
                "can not simultaneously set 'failover' and topology label 'topology.kubernetes.io/zone' in 'failover_priority'",
            ],
        ),
        (
            "{distribute: [{from: a, to: {b: 90}}]}",
            vec!["total locality weight 90 != 100"],
        ),
        (
            "{distribute: [{from: a, to: {b: 101}}]}",
            vec!["locality weight must be in range [1, 100]"],
        ),
        (
            "{distribute: [{from: a, to: {b: 100}}, {from: '*/b', to: {b: 100}}]}",
            vec!["locality */b wildcard '*' number can not exceed 1 and must be in the end"],
        ),
        (
            "{distribute: [{from: a, to: {b: 100}}, {from: a/b, to: {b: 100}}]}",
            vec!["locality a/b overlap with previous specified ones"],
        ),
        (
            "{distribute: [{from: a/, to: {b: 100}}]}",
            vec!["locality a/ must not contain empty region/zone/subzone info"],
        ),
        (
            "{failover: [{from: '*/z', to: '*/z'}]}",
            vec![
                "locality lb failover settings must specify different regions",
                "locality lb failover only specify region",
                "locality lb failover region should not contain '*' wildcard",
            ],
        ),
    ];
    for (setting, expected) in cases {
        let yaml = format!(
            "{{host: r, trafficPolicy: {{outlierDetection: {{}}, loadBalancer: {{localityLbSetting: {setting}}}}}}}"
        );
        let messages: Vec<String> = validate(&dr(&yaml))
            .into_iter()
            .map(|p| p.message)
            .collect();
        assert_eq!(messages, expected, "for {setting}");
    }
}

/// Failover needs outlier detection in the same policy: the top-level one, a port's or a
/// subset's, as Istio checks each policy on its own.
#[test]
fn failover_without_outlier_detection_warns() {
    let failover = "localityLbSetting: {failover: [{from: r1, to: r2}]}";
    let priority = "localityLbSetting: {failoverPriority: [version]}";
    let l = "loadBalancer.localityLbSetting";
    for (yaml, expected) in [
        (
            format!("{{host: r, trafficPolicy: {{loadBalancer: {{{failover}}}}}}}"),
            vec![format!("spec.trafficPolicy.{l}")],
        ),
        (
            format!("{{host: r, trafficPolicy: {{loadBalancer: {{{priority}}}}}}}"),
            vec![format!("spec.trafficPolicy.{l}")],
        ),
        (
            format!(
                "{{host: r, trafficPolicy: {{loadBalancer: {{{failover}}}, outlierDetection: {{}}}}}}"
            ),
            vec![],
        ),
        (
            format!(
                "{{host: r, trafficPolicy: {{outlierDetection: {{}}, portLevelSettings: [{{port: {{number: 80}}, loadBalancer: {{{failover}}}}}]}}}}"
            ),
            vec![format!("spec.trafficPolicy.portLevelSettings[0].{l}")],
        ),
        (
            format!(
                "{{host: r, trafficPolicy: {{outlierDetection: {{}}}}, subsets: [{{name: v1, trafficPolicy: {{loadBalancer: {{{priority}}}}}}}]}}"
            ),
            vec![format!("spec.subsets[0].trafficPolicy.{l}")],
        ),
        (
            format!(
                "{{host: r, subsets: [{{name: v1, trafficPolicy: {{loadBalancer: {{{priority}}}, outlierDetection: {{}}}}}}]}}"
            ),
            vec![],
        ),
    ] {
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        assert_warnings(&dr(&yaml), &expected);
    }
    let problems = validate(&dr(&format!(
        "{{host: r, trafficPolicy: {{loadBalancer: {{{failover}}}}}}}"
    )));
    assert_eq!(
        problems[0].message,
        "outlier detection policy must be provided for failover"
    );
}
