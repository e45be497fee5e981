//! RBAC rules as the authorizer reads them, and the check of a set of calls against them.

use std::collections::BTreeSet;

use serde_json::Value;
use wayfinder_kubernetes::fake::Call;

/// One `PolicyRule` of a (Cluster)Role.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub(crate) groups: Vec<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) verbs: Vec<String>,
}

impl Rule {
    /// Whether the rule allows `call` (`*` matches anything, as in RBAC).
    fn allows(&self, call: &Call) -> bool {
        let has = |list: &[String], value: &str| list.iter().any(|v| v == "*" || v == value);
        has(&self.groups, &call.group)
            && has(&self.resources, &call.resource)
            && has(&self.verbs, &call.verb)
    }

    /// Every call the rule grants, spelled out (a `*` is kept as it is: it grants more than
    /// any set of calls can use, so it is always reported).
    fn grants(&self) -> impl Iterator<Item = Call> + '_ {
        self.groups.iter().flat_map(move |group| {
            self.resources.iter().flat_map(move |resource| {
                self.verbs.iter().map(move |verb| Call {
                    verb: verb.clone(),
                    group: group.clone(),
                    resource: resource.clone(),
                })
            })
        })
    }
}

/// The rules of the object `kind`/`name` among `objects`. Panics if it is not there.
pub(crate) fn rules(objects: &[Value], kind: &str, name: &str) -> Vec<Rule> {
    let role = objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"));
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| Rule {
            groups: strings(&r["apiGroups"]),
            resources: strings(&r["resources"]),
            verbs: strings(&r["verbs"]),
        })
        .collect()
}

/// What the rules and the calls disagree on.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Calls no rule allows: the code would be refused them.
    pub(crate) missing: BTreeSet<Call>,
    /// Grants no call uses: more than the code needs.
    pub(crate) unused: BTreeSet<Call>,
}

/// Checks `calls` against `rules`, both ways.
pub(crate) fn check(rules: &[Rule], calls: &BTreeSet<Call>) -> Verdict {
    Verdict {
        missing: calls
            .iter()
            .filter(|c| !rules.iter().any(|r| r.allows(c)))
            .cloned()
            .collect(),
        unused: rules
            .iter()
            .flat_map(Rule::grants)
            .filter(|g| !calls.contains(g))
            .collect(),
    }
}
