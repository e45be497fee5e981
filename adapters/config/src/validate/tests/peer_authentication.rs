//! PeerAuthentication: Istio's samples, and each rule with its field.

use super::{assert_errors, assert_warnings, object, validate};
use crate::{ConfigObject, ConfigSpec};

fn pa(yaml: &str) -> ConfigObject {
    object(yaml, ConfigSpec::PeerAuthentication)
}

#[test]
fn istio_s_samples_are_valid() {
    let samples = [
        "mtls: {mode: STRICT}\n",
        "mtls: {mode: PERMISSIVE}\n",
        "selector: {matchLabels: {app: finance}}\nmtls: {mode: STRICT}\n",
        "selector: {matchLabels: {app: finance}}\nmtls: {mode: STRICT}\n\
         portLevelMtls: {8080: {mode: DISABLE}}\n",
        "selector: {matchLabels: {app: finance}}\nmtls: {mode: UNSET}\n\
         portLevelMtls: {\"8080\": {mode: DISABLE}}\n",
        "{}",
    ];
    for yaml in samples {
        let problems = validate(&pa(yaml));
        assert!(problems.is_empty(), "{yaml}: {problems:#?}");
    }
}

#[test]
fn ports_need_a_selector_with_labels_and_must_be_ports() {
    assert_errors(
        pa,
        &[
            (
                "mtls: {mode: STRICT}\nportLevelMtls: {8080: {mode: DISABLE}}\n",
                &["spec.portLevelMtls"],
            ),
            (
                "selector: {}\nportLevelMtls: {8080: {mode: DISABLE}}\n",
                &["spec.portLevelMtls"],
            ),
            (
                "selector: {matchLabels: {app: a}}\n\
                 portLevelMtls: {0: {mode: DISABLE}, 80: {}, 65536: {mode: STRICT}}\n",
                &["spec.portLevelMtls.0", "spec.portLevelMtls.65536"],
            ),
            (
                "selector: {matchLabels: {'bad key!': a, app: 'v*'}}\n",
                &[
                    "spec.selector.matchLabels.app",
                    "spec.selector.matchLabels[\"bad key!\"]",
                ],
            ),
        ],
    );
    let problems = validate(&pa("portLevelMtls: {8080: {mode: DISABLE}}\n"));
    assert_eq!(
        problems[0].to_string(),
        "error: spec.portLevelMtls: requires a selector with labels: a mesh or namespace \
         policy cannot have per-port modes"
    );
}

#[test]
fn a_selector_without_labels_is_a_warning() {
    assert_warnings(
        &pa("selector: {matchLabels: {}}\nmtls: {mode: STRICT}\n"),
        &["spec.selector.matchLabels"],
    );
}
