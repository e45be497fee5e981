//! VirtualService delegation in force: each root VirtualService (one with hosts whose HTTP
//! rules `delegate`) is replaced, in the snapshot's configuration, by the VirtualService its
//! delegates make of it (`wayfinder_config::delegate`), as istiod merges them before it
//! generates anything. A rule whose delegate is missing, is not a delegate (it has hosts), or
//! is not exported to the root's namespace is left out, with a warning on the root (shown
//! with it on `/debug/configz`) and in the log.

use std::collections::BTreeMap;
use std::sync::Arc;

use wayfinder_config::delegate::merge_http_routes;
use wayfinder_config::{ConfigKey, ConfigObject, ConfigSpec, Kind, VirtualService};

use super::rules::exported;

/// Replaces every root VirtualService of `objects` with its merged form.
pub(super) fn expand(objects: &mut BTreeMap<ConfigKey, Arc<ConfigObject>>) {
    let roots: Vec<ConfigKey> = objects
        .iter()
        .filter(|(key, object)| {
            key.kind == Kind::VirtualService
                && virtual_service(object).is_some_and(|vs| {
                    !vs.hosts.is_empty() && vs.http.iter().any(|r| r.delegate.is_some())
                })
        })
        .map(|(key, _)| key.clone())
        .collect();
    for key in roots {
        let merged = merge(&objects[&key], objects);
        objects.insert(key, Arc::new(merged));
    }
}

/// The root `object` with its delegating rules replaced by their delegates' merged rules.
fn merge(object: &ConfigObject, objects: &BTreeMap<ConfigKey, Arc<ConfigObject>>) -> ConfigObject {
    let mut out = object.clone();
    let Some(vs) = virtual_service(object) else {
        return out;
    };
    let root_ns = &object.meta.namespace;
    let mut rules = Vec::with_capacity(vs.http.len());
    let mut warnings: Vec<String> = object.meta.warnings.to_vec();
    for (i, rule) in vs.http.iter().enumerate() {
        let Some(d) = &rule.delegate else {
            rules.push(rule.clone());
            continue;
        };
        let namespace: Arc<str> = if d.namespace.is_empty() {
            root_ns.clone()
        } else {
            d.namespace.as_str().into()
        };
        let target = ConfigKey {
            kind: Kind::VirtualService,
            namespace: namespace.clone(),
            name: d.name.as_str().into(),
        };
        let delegate = objects.get(&target).map(|o| (o, virtual_service(o)));
        let problem = match delegate {
            None | Some((_, None)) => Some("not found"),
            Some((_, Some(dvs))) if !dvs.hosts.is_empty() => {
                Some("has hosts: it is a VirtualService of its own, not a delegate")
            }
            Some((o, Some(dvs))) if !exported(&dvs.export_to, &[], &o.meta.namespace, root_ns) => {
                Some("is not exported to the root's namespace")
            }
            Some((_, Some(dvs))) => {
                rules.extend(merge_http_routes(rule, &dvs.http, &namespace));
                None
            }
        };
        if let Some(problem) = problem {
            let warning = format!(
                "spec.http[{i}].delegate: VirtualService {namespace}/{} {problem}; the rule is \
                 left out",
                d.name
            );
            tracing::warn!(virtual_service = %object.key(), "{warning}");
            warnings.push(warning);
        }
    }
    if let ConfigSpec::VirtualService(merged) = &mut out.spec {
        merged.http = rules;
    }
    out.meta.warnings = warnings.into();
    out
}

fn virtual_service(object: &ConfigObject) -> Option<&VirtualService> {
    match &object.spec {
        ConfigSpec::VirtualService(vs) => Some(vs),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use wayfinder_config::ConfigMeta;

    use super::*;
    use crate::snapshot::TrafficConfig;

    fn vs(namespace: &str, name: &str, yaml: &str) -> (ConfigKey, Arc<ConfigObject>) {
        let object = ConfigObject {
            meta: ConfigMeta {
                name: name.into(),
                namespace: namespace.into(),
                ..Default::default()
            },
            spec: ConfigSpec::VirtualService(serde_saphyr::from_str(yaml).unwrap()),
        };
        (object.key(), Arc::new(object))
    }

    fn root_of(config: &TrafficConfig) -> (&ConfigObject, &VirtualService) {
        let object = config
            .objects
            .values()
            .find(|o| &*o.meta.name == "root")
            .unwrap();
        (object, virtual_service(object).unwrap())
    }

    const ROOT: &str = "hosts: [reviews]\nhttp:\n- match: [{uri: {prefix: /r}}]\n  \
                        delegate: {name: routes, namespace: team}\n- route: [{destination: {host: v1}}]\n";

    #[test]
    fn a_root_takes_its_delegate_s_rules_with_their_namespace_and_what_else_it_had() {
        let source = BTreeMap::from([
            vs("edge", "root", ROOT),
            vs(
                "team",
                "routes",
                "http:\n- match: [{uri: {prefix: /r/x}}]\n  route: [{destination: {host: x}}]\n",
            ),
        ]);
        let config = TrafficConfig::merge([&source]);
        let (object, root) = root_of(&config);
        let namespaces: Vec<_> = root
            .http
            .iter()
            .map(|r| r.delegate_namespace.as_deref())
            .collect();
        assert_eq!(namespaces, [Some("team"), None]);
        assert!(root.http.iter().all(|r| r.delegate.is_none()));
        assert!(
            object.meta.warnings.is_empty(),
            "{:?}",
            object.meta.warnings
        );
    }

    #[test]
    fn a_missing_unexported_or_hosted_delegate_leaves_its_rule_out_with_a_warning() {
        for (delegate, why) in [
            (None, "not found"),
            (
                Some("exportTo: ['.']\nhttp: [{route: [{destination: {host: x}}]}]\n"),
                "is not exported",
            ),
            (
                Some("hosts: [x]\nhttp: [{route: [{destination: {host: x}}]}]\n"),
                "has hosts",
            ),
        ] {
            let mut source = BTreeMap::from([vs("edge", "root", ROOT)]);
            if let Some(yaml) = delegate {
                source.extend([vs("team", "routes", yaml)]);
            }
            let config = TrafficConfig::merge([&source]);
            let (object, root) = root_of(&config);
            assert_eq!(root.http.len(), 1, "only the root's own rule: {why}");
            assert!(
                object.meta.warnings.iter().any(|w| w
                    .starts_with("spec.http[0].delegate: VirtualService team/routes")
                    && w.contains(why)),
                "{why}: {:?}",
                object.meta.warnings
            );
        }
    }
}
