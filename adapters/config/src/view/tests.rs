//! Composition tests: selectors across files, merging a repeated host, and diffs.

use std::path::Path;

use wayfinder_registry::Protocol;

use super::*;
use crate::services::load_whole as load;

/// Files in precedence order: `(configured path index, file name, text)`.
fn files(list: &[(usize, &str, &str)]) -> BTreeMap<FileKey, FileContents> {
    list.iter()
        .map(|(index, name, text)| {
            let path = Path::new("/cfg").join(name);
            let contents = load(&path, text.as_bytes()).unwrap();
            ((*index, path), contents)
        })
        .collect()
}

fn view_of(list: &[(usize, &str, &str)]) -> View {
    let (view, errors) = compose(&files(list));
    assert_eq!(errors, vec![]);
    view
}

fn addresses(view: &View, namespace: &str, host: &str) -> Vec<String> {
    let reg = &view[&ServiceKey::new(namespace, host)];
    reg.endpoints
        .iter()
        .map(|e| e.address.to_string())
        .collect()
}

const SELECTING: &str = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: shop}
spec:
  hosts: [vms.shop.internal]
  ports: [{number: 80, name: http}]
  resolution: STATIC
  workloadSelector:
    labels: {app: vms}
";

fn workload(name: &str, namespace: &str, address: &str, labels: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  address: {address}\n  labels: {labels}\n"
    )
}

#[test]
fn selectors_pick_workload_entries_of_the_same_namespace_across_files() {
    let same_file = format!(
        "{SELECTING}---\n{}",
        workload("a", "shop", "10.0.0.1", "{app: vms, version: v1}")
    );
    let other_file = [
        workload("b", "shop", "10.0.0.2", "{app: vms}"),
        workload("c", "shop", "10.0.0.3", "{app: other}"),
        workload("d", "elsewhere", "10.0.0.4", "{app: vms}"),
        workload("e", "shop", "vm.example.com", "{app: vms}"),
    ]
    .join("---\n");
    let view = view_of(&[(0, "a.yaml", &same_file), (0, "b.yaml", &other_file)]);
    // `e` has a DNS name, which a STATIC service cannot use: it is left out.
    assert_eq!(
        addresses(&view, "shop", "vms.shop.internal"),
        vec!["10.0.0.1", "10.0.0.2"]
    );
    let reg = &view[&ServiceKey::new("shop", "vms.shop.internal")];
    assert_eq!(
        reg.endpoints[0].labels.get("version").map(|v| &**v),
        Some("v1")
    );

    // Without the workloads' file, the service has no endpoints.
    let view = view_of(&[(0, "a.yaml", SELECTING)]);
    assert_eq!(
        addresses(&view, "shop", "vms.shop.internal"),
        Vec::<String>::new()
    );
}

fn entry(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}}}\nspec:\n  hosts: [shared.example.com]\n{extra}"
    )
}

#[test]
fn a_repeated_host_is_merged_with_the_first_entry_winning() {
    let first = entry(
        "first",
        "  resolution: STATIC\n  location: MESH_INTERNAL\n  ports: [{number: 80, name: http}, {number: 443, name: https}]\n  endpoints: [{address: 10.0.0.1}]\n",
    );
    let second = entry(
        "second",
        "  resolution: DNS\n  ports: [{number: 80, name: web, protocol: HTTP2}, {number: 8080, name: alt}, {number: 9090, name: https}]\n  endpoints: [{address: 10.0.0.2}, {address: 10.0.0.1}]\n",
    );
    // Precedence is the configured path first, then the file name: `z.yaml` under path 0
    // beats `a.yaml` under path 1.
    let view = view_of(&[(1, "a.yaml", &second), (0, "z.yaml", &first)]);
    assert_eq!(view.len(), 1);
    let reg = &view[&ServiceKey::new("default", "shared.example.com")];
    assert_eq!(reg.service.resolution, Resolution::ClientSideLb);
    assert!(!reg.service.mesh_external);
    let ports: Vec<(&str, u16, Protocol)> = reg
        .service
        .ports
        .iter()
        .map(|p| (&*p.name, p.number, p.protocol))
        .collect();
    // 80 conflicts by number and 9090 by name with the first entry's ports: the first wins.
    assert_eq!(
        ports,
        vec![
            ("http", 80, Protocol::Http),
            ("https", 443, Protocol::Https),
            ("alt", 8080, Protocol::Tcp)
        ]
    );
    assert_eq!(
        addresses(&view, "default", "shared.example.com"),
        vec!["10.0.0.1", "10.0.0.2"]
    );

    // Document order decides within a file.
    let both = format!("{second}---\n{first}");
    let view = view_of(&[(0, "both.yaml", &both)]);
    let reg = &view[&ServiceKey::new("default", "shared.example.com")];
    assert_eq!(reg.service.resolution, Resolution::Dns);
}

#[test]
fn the_same_host_in_two_namespaces_is_two_services() {
    let a = entry("a", "");
    let b = a.replace("{name: a}", "{name: b, namespace: other}");
    let view = view_of(&[(0, "a.yaml", &a), (0, "b.yaml", &b)]);
    assert_eq!(view.len(), 2);
}

#[test]
fn diff_reports_only_what_changed() {
    let one = |host: &str, ip: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {host}}}\nspec:\n  hosts: [{host}.example.com]\n  resolution: STATIC\n  endpoints: [{{address: {ip}}}]\n"
        )
    };
    let old = view_of(&[
        (0, "a.yaml", &one("a", "10.0.0.1")),
        (0, "b.yaml", &one("b", "10.0.0.2")),
    ]);
    let new = view_of(&[
        (0, "a.yaml", &one("a", "10.0.0.9")),
        (0, "c.yaml", &one("c", "10.0.0.3")),
    ]);
    let Some(Event::Batch { removes, upserts }) = diff(&old, &new) else {
        panic!("several changes are one batch: {:?}", diff(&old, &new));
    };
    let upserted: Vec<String> = upserts.iter().map(|r| r.key().to_string()).collect();
    let removed: Vec<String> = removes.iter().map(|k| k.to_string()).collect();
    assert_eq!(upserted, ["default/a.example.com", "default/c.example.com"]);
    assert_eq!(removed, ["default/b.example.com"]);
    assert_eq!(diff(&new, &new), None);
    // One change alone is the plain event.
    let fewer = view_of(&[(0, "a.yaml", &one("a", "10.0.0.9"))]);
    assert_eq!(
        diff(&new, &fewer),
        Some(Event::Remove(ServiceKey::new("default", "c.example.com")))
    );
}
