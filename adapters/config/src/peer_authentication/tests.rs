//! PeerAuthentication: reading Istio's YAML, and the effective mode of a workload under
//! Istio's precedence rules (the cases of istio/istio's `TestComposePeerAuthentication`).

use std::collections::BTreeMap;
use std::slice;
use std::sync::Arc;

use super::*;

const ROOT: &str = "istio-system";

/// A policy `namespace/name` from a YAML spec.
fn policy(namespace: &str, name: &str, spec: &str) -> (ConfigMeta, PeerAuthentication) {
    let meta = ConfigMeta {
        name: Arc::from(name),
        namespace: Arc::from(namespace),
        ..ConfigMeta::default()
    };
    let spec = serde_saphyr::from_str(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    (meta, spec)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The effective mTLS of a workload of `foo` labelled `app: finance`.
fn finance(policies: &[(ConfigMeta, PeerAuthentication)]) -> EffectiveMtls {
    let workload = labels(&[("app", "finance"), ("version", "v1")]);
    effective(policies.iter().map(|(m, p)| (m, p)), ROOT, "foo", &workload)
}

fn mode(mode: MtlsMode) -> EffectiveMtls {
    EffectiveMtls {
        mode,
        ports: BTreeMap::new(),
    }
}

#[test]
fn istio_s_samples_read_with_port_keys_as_integers_or_strings() {
    let yaml = "selector:\n  matchLabels: {app: finance}\nmtls: {mode: STRICT}\n\
                portLevelMtls:\n  8080: {mode: DISABLE}\n  \"9090\": {mode: UNSET}\n";
    let pa: PeerAuthentication = serde_saphyr::from_str(yaml).unwrap();
    assert_eq!(
        pa.selector.unwrap().match_labels,
        labels(&[("app", "finance")])
    );
    assert_eq!(
        pa.mtls,
        Some(PeerMtls {
            mode: MtlsMode::Strict
        })
    );
    let ports: Vec<(u32, MtlsMode)> = pa
        .port_level_mtls
        .iter()
        .map(|(port, m)| (*port, m.mode))
        .collect();
    assert_eq!(ports, [(8080, MtlsMode::Disable), (9090, MtlsMode::Unset)]);

    let empty: PeerAuthentication = serde_saphyr::from_str("mtls: {}\n").unwrap();
    assert_eq!(empty.mtls, Some(PeerMtls::default()));
    assert!(empty.selector.is_none() && empty.port_level_mtls.is_empty());
}

#[test]
fn a_bad_mode_or_port_key_says_what_is_wrong() {
    let cases = [
        (
            "mtls: {mode: STRCT}\n",
            "mode: \"STRCT\" is not an mTLS mode: UNSET, DISABLE, PERMISSIVE or STRICT",
        ),
        (
            "portLevelMtls: {http: {mode: STRICT}}\n",
            "portLevelMtls: \"http\" is not a port number (1 to 65535)",
        ),
        (
            "portLevelMtls: {-1: {mode: STRICT}}\n",
            "portLevelMtls: -1 is not a port number (1 to 65535)",
        ),
        (
            "portLevelMtls: {8080: {mode: STRICT}, \"8080\": {mode: DISABLE}}\n",
            "portLevelMtls: port 8080 is given twice",
        ),
    ];
    for (yaml, message) in cases {
        let err = serde_saphyr::from_str::<PeerAuthentication>(yaml).unwrap_err();
        assert!(err.to_string().contains(message), "{yaml}: {err}");
    }
}

#[test]
fn modes_serialize_as_istio_names_them() {
    let (_, pa) = policy(
        "foo",
        "p",
        "selector: {matchLabels: {app: a}}\nmtls: {mode: PERMISSIVE}\n\
         portLevelMtls: {80: {mode: STRICT}}\n",
    );
    let yaml = serde_saphyr::to_string(&pa).unwrap();
    let back: PeerAuthentication = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(back, pa, "{yaml}");
    assert!(
        yaml.contains("PERMISSIVE") && yaml.contains("STRICT"),
        "{yaml}"
    );
}

#[test]
fn nothing_is_permissive_and_the_most_specific_level_with_a_mode_decides() {
    assert_eq!(finance(&[]), mode(MtlsMode::Permissive));

    let mesh = policy(ROOT, "default", "mtls: {mode: STRICT}\n");
    assert_eq!(finance(slice::from_ref(&mesh)), mode(MtlsMode::Strict));

    let namespace = policy("foo", "default", "mtls: {mode: DISABLE}\n");
    let both = [mesh.clone(), namespace.clone()];
    assert_eq!(finance(&both), mode(MtlsMode::Disable));

    let workload = policy(
        "foo",
        "finance",
        "selector: {matchLabels: {app: finance}}\nmtls: {mode: PERMISSIVE}\n",
    );
    let all = [workload.clone(), namespace.clone(), mesh.clone()];
    assert_eq!(finance(&all), mode(MtlsMode::Permissive));

    // UNSET, or no mtls at all, inherits from the level above.
    let unset = policy("foo", "default", "mtls: {mode: UNSET}\n");
    assert_eq!(finance(&[mesh.clone(), unset]), mode(MtlsMode::Strict));
    let bare = policy(
        "foo",
        "finance",
        "selector: {matchLabels: {app: finance}}\n",
    );
    assert_eq!(finance(&[namespace, bare]), mode(MtlsMode::Disable));
    let mesh_unset = policy(ROOT, "default", "mtls: {mode: UNSET}\n");
    assert_eq!(finance(&[mesh_unset]), mode(MtlsMode::Permissive));
}

#[test]
fn only_policies_of_the_workload_s_namespace_and_the_root_namespace_count() {
    let other = policy("bar", "default", "mtls: {mode: STRICT}\n");
    let other_workload = policy(
        "bar",
        "finance",
        "selector: {matchLabels: {app: finance}}\nmtls: {mode: STRICT}\n",
    );
    let not_selected = policy(
        "foo",
        "reviews",
        "selector: {matchLabels: {app: reviews}}\nmtls: {mode: STRICT}\n",
    );
    let partly = policy(
        "foo",
        "v2",
        "selector: {matchLabels: {app: finance, version: v2}}\nmtls: {mode: STRICT}\n",
    );
    let policies = [other, other_workload, not_selected, partly];
    assert_eq!(finance(&policies), mode(MtlsMode::Permissive));
}

#[test]
fn a_root_namespace_policy_with_a_selector_is_ignored_and_one_with_no_labels_is_the_mesh_s() {
    let selecting = policy(
        ROOT,
        "finance",
        "selector: {matchLabels: {app: finance}}\nmtls: {mode: STRICT}\n",
    );
    assert_eq!(
        finance(slice::from_ref(&selecting)),
        mode(MtlsMode::Permissive)
    );
    let workload = labels(&[("app", "finance")]);
    let in_root = effective(
        [&selecting].into_iter().map(|(m, p)| (m, p)),
        ROOT,
        ROOT,
        &workload,
    );
    assert_eq!(in_root, mode(MtlsMode::Permissive));

    let no_labels = policy(ROOT, "default", "selector: {}\nmtls: {mode: STRICT}\n");
    assert_eq!(finance(slice::from_ref(&no_labels)), mode(MtlsMode::Strict));
    // In the root namespace, the mesh policy is the namespace's.
    let in_root = effective(
        [&no_labels].into_iter().map(|(m, p)| (m, p)),
        ROOT,
        ROOT,
        &workload,
    );
    assert_eq!(in_root, mode(MtlsMode::Strict));
}

#[test]
fn of_several_policies_of_one_level_the_first_by_name_wins() {
    let a = policy("foo", "a", "mtls: {mode: DISABLE}\n");
    let b = policy("foo", "b", "mtls: {mode: STRICT}\n");
    assert_eq!(finance(&[b.clone(), a.clone()]), mode(MtlsMode::Disable));
    assert_eq!(finance(&[a, b]), mode(MtlsMode::Disable));

    let selector = "selector: {matchLabels: {app: finance}}\n";
    let x = policy("foo", "x", &format!("{selector}mtls: {{mode: STRICT}}\n"));
    let y = policy("foo", "y", &format!("{selector}mtls: {{mode: DISABLE}}\n"));
    assert_eq!(finance(&[y, x]), mode(MtlsMode::Strict));
}

#[test]
fn ports_come_from_the_workload_policy_and_unset_ones_take_the_workload_s_mode() {
    let namespace = policy("foo", "default", "mtls: {mode: STRICT}\n");
    let workload = policy(
        "foo",
        "finance",
        "selector: {matchLabels: {app: finance}}\nmtls: {mode: UNSET}\n\
         portLevelMtls: {8080: {mode: DISABLE}, 9090: {mode: UNSET}, 70000: {mode: DISABLE}}\n",
    );
    let got = finance(&[namespace.clone(), workload]);
    assert_eq!(
        got,
        EffectiveMtls {
            mode: MtlsMode::Strict,
            ports: BTreeMap::from([(8080, MtlsMode::Disable), (9090, MtlsMode::Strict)]),
        }
    );
    assert_eq!(got.mode_for(8080), MtlsMode::Disable);
    assert_eq!(got.mode_for(9080), MtlsMode::Strict);

    // Ports of a namespace policy (which validation refuses) do not count.
    let with_ports = policy(
        "foo",
        "default",
        "mtls: {mode: STRICT}\nportLevelMtls: {8080: {mode: DISABLE}}\n",
    );
    assert_eq!(finance(&[with_ports]), mode(MtlsMode::Strict));
}
