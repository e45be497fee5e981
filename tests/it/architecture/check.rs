//! The checker behind `architecture`: which crates each workspace crate depends on (from
//! `cargo metadata`), and which modules and crates each module of the server crate names
//! (from its source, parsed with `syn`).
//!
//! A module's references are every path in its `use` trees, types and expressions that starts
//! at `crate`, `super`, `self` or another crate, with `super` and `self` resolved, so
//! `use crate::{aggregate, snapshot}` and `super::super::aggregate::Aggregate` both count as
//! naming `crate::aggregate`. Test-only code (`#[cfg(test)]` items and modules) is left out:
//! tests may build what they test from anywhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// One module of the server crate and what it names.
#[derive(Debug)]
pub(super) struct Module {
    /// `crate::xds::ads`.
    pub(super) path: String,
    /// Its file.
    pub(super) file: PathBuf,
    /// Absolute paths it names (`crate::aggregate::Aggregate`, `tonic::Status`).
    pub(super) names: BTreeSet<String>,
}

/// Every module reachable from `root` (`src/lib.rs`), skipping test-only ones.
pub(super) fn modules(root: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let text = std::fs::read_to_string(root).unwrap();
    let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    let dir = root.parent().unwrap().to_path_buf();
    walk(&file.items, "crate", root, &dir, &mut out);
    out
}

/// The module `path` made of `items`, read from `file`; its child modules' files are in `dir`.
fn walk(items: &[syn::Item], path: &str, file: &Path, dir: &Path, out: &mut Vec<Module>) {
    out.push(Module {
        path: path.to_string(),
        file: file.to_path_buf(),
        names: names(items, path),
    });
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        if is_test_only(&m.attrs) {
            continue;
        }
        let child = format!("{path}::{}", m.ident);
        let child_dir = dir.join(m.ident.to_string());
        match &m.content {
            Some((_, inline)) => walk(inline, &child, file, &child_dir, out),
            None => {
                let flat = dir.join(format!("{}.rs", m.ident));
                let nested = child_dir.join("mod.rs");
                let child_file = if flat.exists() { flat } else { nested };
                let text = std::fs::read_to_string(&child_file)
                    .unwrap_or_else(|e| panic!("{}: {e}", child_file.display()));
                let parsed = syn::parse_file(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", child_file.display()));
                walk(&parsed.items, &child, &child_file, &child_dir, out);
            }
        }
    }
}

/// The absolute paths `items` (of module `path`) name, outside test-only code and child
/// modules.
pub(super) fn names(items: &[syn::Item], path: &str) -> BTreeSet<String> {
    let mut collect = Collect {
        module: path.split("::").map(String::from).collect(),
        names: BTreeSet::new(),
    };
    for item in items {
        if matches!(item, syn::Item::Mod(_)) {
            continue;
        }
        collect.visit_item(item);
    }
    collect.names
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

struct Collect {
    /// The module's own path, `["crate", "xds", "ads"]`.
    module: Vec<String>,
    names: BTreeSet<String>,
}

impl Collect {
    /// Records `segments` if it starts somewhere outside the module's own scope.
    fn record(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        let absolute: Vec<String> = match first.as_str() {
            "crate" => segments.to_vec(),
            "self" | "super" => {
                let mut base = self.module.clone();
                let mut rest = segments;
                while let Some((head, tail)) = rest.split_first() {
                    match head.as_str() {
                        "self" => {}
                        "super" if base.len() > 1 => {
                            base.pop();
                        }
                        "super" => {}
                        _ => break,
                    }
                    rest = tail;
                }
                base.into_iter().chain(rest.iter().cloned()).collect()
            }
            // Perhaps another crate: the rules only ask about crates by name, so a local
            // path (`Self::new`, `TypeUrl::Listener`) recorded here never matches one.
            _ if segments.len() > 1 => segments.to_vec(),
            _ => return,
        };
        self.names.insert(absolute.join("::"));
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.record_use(prefix);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.record_use(prefix);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.record_use(prefix),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// A `use` path: `use tonic::Status` names the crate even with one segment after it, and
    /// `use foo;` of a crate names it alone.
    fn record_use(&mut self, segments: &[String]) {
        if segments.len() == 1 && !matches!(segments[0].as_str(), "crate" | "self" | "super") {
            self.names.insert(segments[0].clone());
        } else {
            self.record(segments);
        }
    }
}

impl<'ast> Visit<'ast> for Collect {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut prefix = Vec::new();
        if u.leading_colon.is_some() {
            prefix.push(String::new());
        }
        self.use_tree(&mut prefix, &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.record(&segments);
        syn::visit::visit_path(self, p);
    }
}

/// A workspace crate and the workspace crates it depends on, of any kind (normal, dev, build).
#[derive(Debug)]
pub(super) struct Package {
    pub(super) name: String,
    /// Its directory, relative to the workspace root (`adapters/file`).
    pub(super) dir: String,
    pub(super) depends_on: BTreeSet<String>,
}

/// The workspace's crates, from `cargo metadata --no-deps` run in `root`.
pub(super) fn packages(root: &Path) -> Vec<Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    packages_from(&meta, root)
}

/// The workspace's crates as `cargo metadata` (`meta`) lists them.
pub(super) fn packages_from(meta: &serde_json::Value, root: &Path) -> Vec<Package> {
    let members: BTreeSet<&str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().unwrap());
            let dir = manifest.parent().unwrap();
            let dir = dir.strip_prefix(root).unwrap_or(dir);
            Package {
                name: p["name"].as_str().unwrap().to_string(),
                dir: dir.to_string_lossy().into_owned(),
                depends_on: p["dependencies"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|d| d["name"].as_str())
                    .filter(|d| members.contains(d))
                    .map(String::from)
                    .collect(),
            }
        })
        .collect()
}
