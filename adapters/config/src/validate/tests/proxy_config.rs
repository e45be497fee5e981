//! ProxyConfig: Istio's sample, and each rule with its field.

use super::{object, validate};
use crate::ConfigSpec;

fn problems(yaml: &str) -> Vec<String> {
    let object = object(yaml, ConfigSpec::ProxyConfig);
    validate(&object).iter().map(ToString::to_string).collect()
}

#[test]
fn istio_s_samples_are_valid() {
    for sample in [
        "concurrency: 3\n",
        "selector: {matchLabels: {app: ratings}}\nconcurrency: 0\n\
         environmentVariables: {ISTIO_META_DNS_CAPTURE: \"true\"}\n",
    ] {
        assert_eq!(problems(sample), Vec::<String>::new(), "{sample}");
    }
}

#[test]
fn each_rule_names_its_field() {
    let cases = [
        (
            "concurrency: -1\n",
            "error: spec.concurrency: concurrency must be greater than or equal to 0",
        ),
        (
            "selector: {matchLabels: {'': x}}\n",
            "error: spec.selector.matchLabels[\"\"]: label keys cannot be empty",
        ),
        (
            "environmentVariables: {'A=B': x}\n",
            "error: spec.environmentVariables.A=B: is not an environment variable's name \
             (empty, or holding '=' or NUL)",
        ),
        (
            "image: {imageType: distroless}\n",
            "warning: spec.image: not acted on: wayfinder injects no containers, so it picks no \
             proxy image",
        ),
    ];
    for (yaml, expected) in cases {
        assert_eq!(problems(yaml), [expected], "{yaml}");
    }
}
