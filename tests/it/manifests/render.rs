//! The manifests as kubectl renders them (`kubectl kustomize`), and their objects.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The three things a user applies: the base and the two overlays, relative to the
/// repository root.
pub(crate) const KUSTOMIZATIONS: [&str; 3] = [
    "deploy/kubernetes",
    "deploy/kubernetes/overlays/single-cluster",
    "deploy/kubernetes/overlays/secondary",
];

/// The repository root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `kubectl kustomize DIR`: the YAML text. Panics with kubectl's message if it fails.
pub(crate) fn kustomize(kubectl: &Path, dir: &str) -> String {
    let out = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(root().join(dir))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The objects of rendered YAML.
pub(crate) fn objects(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The object `kind`/`name`. Panics if it is not among `objects`.
pub(crate) fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
}

/// The pod spec of a Deployment or PodTemplate.
pub(crate) fn pod_spec(object: &Value) -> &Value {
    match object["kind"].as_str() {
        Some("PodTemplate") => &object["template"]["spec"],
        _ => &object["spec"]["template"]["spec"],
    }
}

/// The container `name` of a pod spec.
pub(crate) fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["containers"]
        .as_array()
        .into_iter()
        .chain(pod["initContainers"].as_array())
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name} in {pod}"))
}

/// A container's command line after its command: `args` as strings.
pub(crate) fn args(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}
