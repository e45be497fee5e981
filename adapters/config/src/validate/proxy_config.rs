//! `ProxyConfig`, as Istio's `ValidateProxyConfig` checks it: selector labels as every
//! selector's, and a `concurrency` of at least 0. Beyond Istio: an environment variable whose
//! name no process could be given (empty, or holding `=` or NUL) is refused, and `image` is
//! accepted with a warning, since wayfinder picks no image.

use super::Problems;
use super::names::check_labels;
use crate::ProxyConfig;

pub(super) fn check(pc: &ProxyConfig, p: &mut Problems) {
    if let Some(selector) = &pc.selector {
        check_labels(p, "spec.selector.matchLabels", &selector.match_labels);
    }
    if pc.concurrency.is_some_and(|c| c < 0) {
        p.error(
            "spec.concurrency",
            "concurrency must be greater than or equal to 0",
        );
    }
    for name in pc.environment_variables.keys() {
        if name.is_empty() || name.contains(['=', '\0']) {
            p.error(
                super::key_path("spec.environmentVariables", name),
                "is not an environment variable's name (empty, or holding '=' or NUL)",
            );
        }
    }
    if pc.image.is_some() {
        p.warn(
            "spec.image",
            "not acted on: wayfinder injects no containers, so it picks no proxy image",
        );
    }
}
