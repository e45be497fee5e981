//! Judging the fields a decoder skipped: a field Istio's CRDs define for the kind is accepted
//! with a warning (wayfinder does not act on it), any other field under `spec` (a typo) is an
//! error of its object alone. Fields outside `spec` (`metadata.uid`, `status`) are Kubernetes'
//! and accepted quietly.

use crate::validate::Problem;
use crate::{FieldPath, Step, istio_defines};

/// What wayfinder says of a field Istio defines and it does not act on; the same words as
/// validation's "not supported yet" warnings.
pub(crate) const IGNORED: &str = "not supported yet: wayfinder ignores this field";

/// The problems of the skipped fields of an object of `kind`: a warning per field Istio
/// defines, an error per field it does not. A field inside one already reported (or inside
/// a field `known` already warns about) is not reported again.
pub(crate) fn judge(kind: &str, skipped: &[FieldPath], known: &[Problem]) -> Vec<Problem> {
    let mut problems: Vec<Problem> = Vec::new();
    for path in skipped {
        if !matches!(path.0.first(), Some(Step::Key(first)) if first == "spec") {
            continue;
        }
        let field = path.to_string();
        if known
            .iter()
            .chain(&problems)
            .any(|p| within(&field, &p.field))
        {
            continue;
        }
        problems.push(match istio_defines(kind, path) {
            Some(false) => Problem::error(
                field,
                format!("unknown field: Istio's {kind} defines no such field"),
            ),
            Some(true) | None => Problem::warning(field, IGNORED),
        });
    }
    problems
}

/// Whether `field` is `outer` or a field inside it.
fn within(field: &str, outer: &str) -> bool {
    field
        .strip_prefix(outer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(steps: &[&str]) -> FieldPath {
        FieldPath(
            steps
                .iter()
                .map(|s| match s.parse() {
                    Ok(i) => Step::Index(i),
                    Err(_) => Step::Key(s.to_string()),
                })
                .collect(),
        )
    }

    #[test]
    fn istio_fields_warn_typos_fail_and_metadata_passes() {
        let skipped = [
            path(&["metadata", "uid"]),
            path(&["spec", "trafficPolicy", "retryBudget"]),
            path(&["spec", "trafficPolicy", "retryBudget", "percent"]),
            path(&["spec", "subsets", "0", "trafficPolicey"]),
        ];
        let problems = judge("DestinationRule", &skipped, &[]);
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                format!("warning: spec.trafficPolicy.retryBudget: {IGNORED}"),
                "error: spec.subsets[0].trafficPolicey: unknown field: Istio's DestinationRule \
                 defines no such field"
                    .to_string(),
            ]
        );
    }

    #[test]
    fn fields_validation_already_warns_about_are_not_repeated() {
        let known = [Problem::warning("spec.ingress", IGNORED)];
        let skipped = [path(&["spec", "ingress", "0"])];
        assert!(judge("Sidecar", &skipped, &known).is_empty());
        assert!(!within("spec.ingressX", "spec.ingress"));
    }
}
