//! The Kubernetes API calls in the code, read from the source with `syn`: every file of
//! `adapters/kubernetes/src` and `src/` but the fake API server, its fixtures and tests.
//!
//! In each file the scan finds
//! - **kinds**: the type argument of `Api<T>` / `Api::<T>` / `api::<T>` (use aliases
//!   resolved, mapped by [`TYPES`]; an unknown type fails the scan), an `ApiResource { group:
//!   "…", plural: "…", .. }` literal, and the `ApiKind::new(GROUP, "Kind", "plural")` rows of
//!   the config source's table (`GROUP` a `const` of the file);
//! - **verbs**: kube's `Api` methods (`list`, `get_opt`, `create`, `patch`, `patch_status`,
//!   `delete`, …) called on an API handle (a variable `api`, a `.api(…)` call, `api::<T>(…)`,
//!   `Api::…(…)`), and kube's `watcher(…)`, which lists then watches.
//!
//! A file's calls are its verbs on its kinds. A file whose verbs act on handles made
//! elsewhere (it names no kind, and calls a `.api(…)` method) acts on the kinds of the files
//! that define `fn api` and call no verb themselves: `config_source/watch.rs` on the table of
//! `config_source/kinds.rs`. Verbs with no kind to act on, or a raw `Client::request`, fail
//! the scan: it could not say what they touch.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::{self, Visit};
use wayfinder_kubernetes::fake::Call;

/// The k8s-openapi types an `Api<T>` may name: (type, group, resource). A type not here fails
/// the scan, so that a new kind is added here, and its rule to the ClusterRole.
pub(crate) const TYPES: &[(&str, &str, &str)] = &[
    ("Service", "", "services"),
    ("Pod", "", "pods"),
    ("Node", "", "nodes"),
    ("Namespace", "", "namespaces"),
    ("Secret", "", "secrets"),
    ("Event", "", "events"),
    ("ConfigMap", "", "configmaps"),
    ("Endpoints", "", "endpoints"),
    ("EndpointSlice", "discovery.k8s.io", "endpointslices"),
    ("TokenReview", "authentication.k8s.io", "tokenreviews"),
    (
        "SubjectAccessReview",
        "authorization.k8s.io",
        "subjectaccessreviews",
    ),
    ("Lease", "coordination.k8s.io", "leases"),
];

/// kube's `Api` methods: (method, verb, subresource).
const VERBS: &[(&str, &str, &str)] = &[
    ("list", "list", ""),
    ("list_metadata", "list", ""),
    ("watch", "watch", ""),
    ("watch_metadata", "watch", ""),
    ("get", "get", ""),
    ("get_opt", "get", ""),
    ("get_metadata", "get", ""),
    ("get_status", "get", "status"),
    ("create", "create", ""),
    ("replace", "update", ""),
    ("replace_status", "update", "status"),
    ("patch", "patch", ""),
    ("patch_metadata", "patch", ""),
    ("patch_status", "patch", "status"),
    ("delete", "delete", ""),
    ("delete_collection", "deletecollection", ""),
];

/// What one file holds.
#[derive(Debug, Default)]
struct FileScan {
    /// (group, resource).
    kinds: BTreeSet<(String, String)>,
    /// (verb, subresource).
    verbs: BTreeSet<(String, String)>,
    /// Calls a `.api(…)` method.
    calls_api_method: bool,
    /// Defines `fn api`.
    defines_api: bool,
    /// Names the `kube` crate: its raw requests are refused.
    kube: bool,
    aliases: BTreeMap<String, String>,
    consts: BTreeMap<String, String>,
    problems: Vec<String>,
}

/// The calls the code makes, by file (relative to the repository root); `Err` lists what the
/// scan could not attribute.
pub(crate) fn scan(root: &Path) -> Result<BTreeMap<PathBuf, BTreeSet<Call>>, Vec<String>> {
    let mut files = Vec::new();
    for dir in ["adapters/kubernetes/src", "src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut scans = BTreeMap::new();
    let mut problems = Vec::new();
    for path in files {
        let rel = path.strip_prefix(root).unwrap().to_path_buf();
        let name = rel.to_string_lossy();
        let skip = ["/fake", "fixtures.rs", "_tests.rs", "/tests.rs", "/tests/"];
        if skip.iter().any(|s| name.contains(s)) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut scan = FileScan {
            kube: text.contains("kube::"),
            ..FileScan::default()
        };
        prepass(&file, &mut scan);
        scan.visit_file(&file);
        problems.extend(scan.problems.iter().map(|p| format!("{name}: {p}")));
        scans.insert(rel, scan);
    }
    // Kinds of the files that make handles for others.
    let provided: BTreeSet<(String, String)> = scans
        .values()
        .filter(|s| s.defines_api && s.verbs.is_empty())
        .flat_map(|s| s.kinds.iter().cloned())
        .collect();
    let mut calls = BTreeMap::new();
    for (path, scan) in &scans {
        let kinds = match (scan.kinds.is_empty(), scan.calls_api_method) {
            (false, _) => &scan.kinds,
            (true, true) => &provided,
            (true, false) if scan.verbs.is_empty() => continue,
            (true, false) => {
                problems.push(format!(
                    "{}: verbs {:?} on no kind the scan can name",
                    path.display(),
                    scan.verbs
                ));
                continue;
            }
        };
        if scan.verbs.is_empty() {
            continue;
        }
        let mut set = BTreeSet::new();
        for (group, resource) in kinds {
            for (verb, sub) in &scan.verbs {
                let resource = match sub.as_str() {
                    "" => resource.clone(),
                    sub => format!("{resource}/{sub}"),
                };
                set.insert(call(verb, group, &resource));
            }
        }
        calls.insert(path.clone(), set);
    }
    if problems.is_empty() {
        Ok(calls)
    } else {
        Err(problems)
    }
}

/// A [`Call`].
pub(crate) fn call(verb: &str, group: &str, resource: &str) -> Call {
    Call {
        verb: verb.to_owned(),
        group: group.to_owned(),
        resource: resource.to_owned(),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
}

/// Use aliases and string constants of the file.
fn prepass(file: &syn::File, scan: &mut FileScan) {
    fn uses(tree: &syn::UseTree, aliases: &mut BTreeMap<String, String>) {
        match tree {
            syn::UseTree::Path(p) => uses(&p.tree, aliases),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| uses(t, aliases)),
            syn::UseTree::Rename(r) => {
                aliases.insert(r.rename.to_string(), r.ident.to_string());
            }
            _ => {}
        }
    }
    for item in &file.items {
        match item {
            syn::Item::Use(u) => uses(&u.tree, &mut scan.aliases),
            syn::Item::Const(c) => {
                if let Some(s) = lit_str(&c.expr) {
                    scan.consts.insert(c.ident.to_string(), s);
                }
            }
            _ => {}
        }
    }
}

fn lit_str(expr: &syn::Expr) -> Option<String> {
    match expr {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Some(s.value()),
        // `"…".into()`
        syn::Expr::MethodCall(m) if m.method == "into" => lit_str(&m.receiver),
        syn::Expr::Reference(r) => lit_str(&r.expr),
        _ => None,
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
            || a.path().is_ident("test")
    })
}

/// A path's segments as text: `kube::Api::namespaced` is `["kube", "Api", "namespaced"]`.
fn segments(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

/// Whether `expr` is an API handle: `api`, `self.api` (a field named `api`), `….api(…)`,
/// `api::<T>(…)`, `Api::…(…)`, or one of these `.clone()`d.
fn api_like(expr: &syn::Expr) -> bool {
    match expr {
        syn::Expr::Path(p) => p.path.is_ident("api"),
        syn::Expr::Field(f) => matches!(&f.member, syn::Member::Named(n) if n == "api"),
        syn::Expr::MethodCall(m) if m.method == "api" => true,
        syn::Expr::MethodCall(m) if m.method == "clone" => api_like(&m.receiver),
        syn::Expr::Call(c) => match &*c.func {
            syn::Expr::Path(p) => {
                let segments = segments(&p.path);
                segments.last().is_some_and(|s| s == "api") || segments.iter().any(|s| s == "Api")
            }
            _ => false,
        },
        syn::Expr::Paren(p) => api_like(&p.expr),
        _ => false,
    }
}

impl<'ast> Visit<'ast> for FileScan {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.defines_api |= f.sig.ident == "api";
        visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.defines_api |= f.sig.ident == "api";
        visit::visit_impl_item_fn(self, f);
    }

    fn visit_path_segment(&mut self, segment: &'ast syn::PathSegment) {
        if (segment.ident == "Api" || segment.ident == "api")
            && let syn::PathArguments::AngleBracketed(args) = &segment.arguments
        {
            for arg in &args.args {
                let syn::GenericArgument::Type(syn::Type::Path(t)) = arg else {
                    continue;
                };
                let Some(last) = t.path.segments.last() else {
                    continue;
                };
                let name = last.ident.to_string();
                let name = self.aliases.get(&name).cloned().unwrap_or(name);
                if name == "K" || name == "DynamicObject" {
                    continue;
                }
                match TYPES.iter().find(|(t, _, _)| *t == name) {
                    Some((_, group, resource)) => {
                        self.kinds.insert(((*group).into(), (*resource).into()));
                    }
                    None => self.problems.push(format!(
                        "Api<{name}>: a kind the scan does not know; add it to TYPES"
                    )),
                }
            }
        }
        visit::visit_path_segment(self, segment);
    }

    fn visit_expr_struct(&mut self, s: &'ast syn::ExprStruct) {
        if s.path
            .segments
            .last()
            .is_some_and(|l| l.ident == "ApiResource")
        {
            let field = |name: &str| {
                s.fields.iter().find_map(|f| match &f.member {
                    syn::Member::Named(n) if n == name => lit_str(&f.expr),
                    _ => None,
                })
            };
            if let (Some(group), Some(plural)) = (field("group"), field("plural")) {
                self.kinds.insert((group, plural));
            }
        }
        visit::visit_expr_struct(self, s);
    }

    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if let syn::Expr::Path(p) = &*c.func {
            let segments = segments(&p.path);
            if segments.ends_with(&["ApiKind".into(), "new".into()]) {
                let args: Vec<&syn::Expr> = c.args.iter().collect();
                let group = match args.first() {
                    Some(syn::Expr::Path(g)) => g
                        .path
                        .get_ident()
                        .and_then(|i| self.consts.get(&i.to_string()).cloned()),
                    Some(e) => lit_str(e),
                    None => None,
                };
                match (group, args.get(2).and_then(|e| lit_str(e))) {
                    (Some(group), Some(plural)) => {
                        self.kinds.insert((group, plural));
                    }
                    _ => self
                        .problems
                        .push("ApiKind::new with arguments the scan cannot read".into()),
                }
            }
            if segments.last().is_some_and(|s| s == "watcher") {
                self.verbs.insert(("list".into(), String::new()));
                self.verbs.insert(("watch".into(), String::new()));
            }
        }
        visit::visit_expr_call(self, c);
    }

    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        let method = m.method.to_string();
        if method == "api" {
            self.calls_api_method = true;
        }
        let raw = [
            "request",
            "request_text",
            "request_stream",
            "request_events",
            "request_status",
        ];
        if self.kube && raw.contains(&method.as_str()) {
            self.problems.push(format!(
                ".{method}(…): a raw request, whose kind and verb the scan cannot read"
            ));
        }
        if api_like(&m.receiver)
            && let Some((_, verb, sub)) = VERBS.iter().find(|(name, _, _)| *name == method)
        {
            self.verbs.insert(((*verb).into(), (*sub).into()));
        }
        visit::visit_expr_method_call(self, m);
    }
}
