//! The dependency rules of ARCHITECTURE.md, checked on the code as it is: a forbidden
//! dependency fails the suite.
//!
//! Between crates (from `cargo metadata`):
//! - adapters never depend on each other or on the server crate;
//! - the contract (`wayfinder-registry`) depends on no other crate of the workspace;
//! - the configuration crate (`wayfinder-config`) depends on the contract alone.
//!
//! Between the server crate's modules (from their source, see `check`):
//! - the snapshot never names xDS, tonic or Envoy types;
//! - xDS never names the aggregate or an adapter;
//! - ingestion (the aggregate and the model's metrics) never names xDS;
//! - the debug pages read the snapshot and never name the aggregate;
//! - only `xds::pb` names `envoy_types`.
//!
//! Paths inside macro invocations (`tokio::select!`, `format!`) are not parsed; the rules hold
//! for everything else. `checker_catches_planted_violations` shows the checker catching one
//! violation of each kind.

mod check;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use check::{Module, Package, modules, names, packages, packages_from};

/// Library crates every adapter may use: the contract and the configuration types.
const SHARED: [&str; 2] = ["wayfinder-registry", "wayfinder-config"];

/// Adapter crates the server's modules must not name from xDS.
const ADAPTERS: [&str; 5] = [
    "wayfinder_memory",
    "wayfinder_file",
    "wayfinder_consul",
    "wayfinder_eureka",
    "wayfinder_kubernetes",
];

/// A module rule: modules under `from` must not name anything under `forbidden`.
struct Rule {
    from: &'static str,
    /// Modules under `from` the rule does not apply to.
    except: &'static str,
    forbidden: Vec<&'static str>,
    /// Names under `forbidden` that are allowed all the same.
    allowed: &'static [&'static str],
    why: &'static str,
}

fn module_rules() -> Vec<Rule> {
    let mut xds_forbidden = vec!["crate::aggregate", "crate::registries"];
    xds_forbidden.extend(ADAPTERS);
    vec![
        Rule {
            from: "crate::snapshot",
            forbidden: vec![
                "crate::xds",
                "crate::server",
                "crate::debug",
                "tonic",
                "envoy_types",
            ],
            why: "the snapshot never depends on xDS, tonic or Envoy types",
            except: "",
            allowed: &[],
        },
        Rule {
            from: "crate::xds",
            forbidden: xds_forbidden,
            why: "xDS reads the snapshot and never depends on the aggregate or an adapter",
            except: "",
            allowed: &[],
        },
        Rule {
            from: "crate::aggregate",
            forbidden: vec!["crate::xds", "crate::server", "tonic", "envoy_types"],
            why: "ingestion never compiles against xDS types",
            except: "",
            allowed: &[],
        },
        Rule {
            from: "crate::metrics",
            forbidden: vec!["crate::xds", "tonic", "envoy_types"],
            why: "the model's metrics never name xDS types",
            except: "",
            allowed: &[],
        },
        Rule {
            from: "crate::debug",
            forbidden: vec!["crate::aggregate"],
            why: "the debug pages take the snapshot reader, never the aggregate",
            except: "",
            allowed: &[],
        },
        Rule {
            from: "crate::ca",
            forbidden: vec![
                "crate::aggregate",
                "crate::snapshot",
                "crate::xds",
                "crate::server",
                "crate::registries",
                "envoy_types",
            ],
            why: "the mesh CA signs for identities and knows nothing of the model or xDS",
            except: "",
            allowed: &[],
        },
        Rule {
            from: "crate::agent",
            forbidden: vec![
                "crate::aggregate",
                "crate::snapshot",
                "crate::xds",
                "crate::server",
                "crate::debug",
                "crate::registries",
                "crate::metrics",
                "wayfinder_memory",
                "wayfinder_consul",
                "wayfinder_eureka",
                "wayfinder_kubernetes",
            ],
            why: "the agent shares no state with the server: it reaches it only over xDS, \
                  through Envoy and its own ProxyConfig and health streams (it may use the xDS \
                  messages and the \
                  File adapter's file watcher)",
            except: "",
            allowed: &["crate::xds::pb"],
        },
        Rule {
            from: "crate",
            except: "crate::xds::pb",
            forbidden: vec!["envoy_types"],
            why: "only xds::pb names envoy_types",
            allowed: &[],
        },
    ]
}

/// Is `name` `prefix` or below it (`crate::xds` covers `crate::xds::ads`, not `crate::xdsx`)?
fn under(name: &str, prefix: &str) -> bool {
    name == prefix
        || name
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with("::"))
}

/// Every module-rule violation in `modules`, one line each.
fn module_violations(modules: &[Module]) -> Vec<String> {
    let mut out = Vec::new();
    for rule in module_rules() {
        let applies = |m: &&Module| {
            under(&m.path, rule.from) && (rule.except.is_empty() || !under(&m.path, rule.except))
        };
        for m in modules.iter().filter(applies) {
            for name in &m.names {
                if rule.allowed.iter().any(|a| under(name, a)) {
                    continue;
                }
                if let Some(f) = rule.forbidden.iter().find(|f| under(name, f)) {
                    out.push(format!(
                        "{} ({}) names {name}, under {f}: {}",
                        m.path,
                        m.file.display(),
                        rule.why
                    ));
                }
            }
        }
    }
    out
}

/// Every crate-rule violation in `packages`, one line each.
fn crate_violations(packages: &[Package]) -> Vec<String> {
    let mut out = Vec::new();
    let adapter = |p: &Package| p.dir.starts_with("adapters/") && !SHARED.contains(&&*p.name);
    let adapters: BTreeSet<&str> = packages
        .iter()
        .filter(|p| adapter(p))
        .map(|p| &*p.name)
        .collect();
    for p in packages {
        for d in &p.depends_on {
            let bad = if adapter(p) {
                (adapters.contains(&**d) || d == "wayfinder")
                    .then_some("adapters never depend on each other or on the server crate")
            } else if p.name == "wayfinder-registry" {
                Some("the contract depends on no other crate of the workspace")
            } else if p.name == "wayfinder-config" {
                (d != "wayfinder-registry")
                    .then_some("the configuration crate depends on the contract alone")
            } else {
                None
            };
            if let Some(why) = bad {
                out.push(format!("{} depends on {d}: {why}", p.name));
            }
        }
    }
    out
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn crates_depend_only_as_the_architecture_allows() {
    let packages = packages(&root());
    let names: BTreeSet<&str> = packages.iter().map(|p| &*p.name).collect();
    assert!(
        names.contains("wayfinder-registry") && names.contains("wayfinder-memory"),
        "the workspace's crates: {names:?}"
    );
    let violations = crate_violations(&packages);
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn modules_depend_only_as_the_architecture_allows() {
    let modules = modules(&root().join("src/lib.rs"));
    // The checker saw the modules the rules are about, and what they name.
    let find = |path: &str| {
        modules
            .iter()
            .find(|m| m.path == path)
            .unwrap_or_else(|| panic!("module {path} not found"))
    };
    assert!(
        find("crate::xds::ads")
            .names
            .contains("crate::snapshot::SnapshotReader")
    );
    assert!(
        find("crate::aggregate::runner")
            .names
            .contains("crate::snapshot::Publisher")
    );
    assert!(
        !modules.iter().any(|m| m.path == "crate::xds::fixtures"),
        "test-only modules are left out"
    );
    let violations = module_violations(&modules);
    assert!(violations.is_empty(), "{violations:#?}");
}

/// One violation of each kind, planted in source text and package lists the checker is given
/// as it would read them.
#[test]
fn checker_catches_planted_violations() {
    let planted = |path: &str, source: &str| Module {
        path: path.into(),
        file: Path::new("planted.rs").into(),
        names: names(&syn::parse_file(source).unwrap().items, path),
    };
    let modules = [
        // A grouped import and a renamed one.
        planted(
            "crate::xds::ads",
            "use crate::{snapshot::Snapshot, aggregate::Aggregate as A};",
        ),
        // A relative path in an expression, two levels up.
        planted(
            "crate::xds::generate",
            "fn f() { super::super::aggregate::snapshot_from(); }",
        ),
        // An adapter's crate from xDS, and tonic from the snapshot.
        planted("crate::xds::proxy", "use wayfinder_file::Feed;"),
        planted("crate::snapshot::config", "fn f(s: tonic::Status) {}"),
        // xDS types from the aggregate, through `self`.
        planted("crate::aggregate", "use self::super::xds::TypeUrl;"),
        // The server's model from the agent.
        planted(
            "crate::agent::status",
            "use crate::snapshot::SnapshotReader;",
        ),
        // Envoy's types outside `xds::pb`; inside it they are allowed.
        planted("crate::debug", "fn f(_: envoy_types::pb::Any) {}"),
        planted(
            "crate::xds::pb",
            "pub use envoy_types::pb::envoy::config::*;",
        ),
        // Allowed: test-only code, and a name that only looks alike.
        planted(
            "crate::xds::ads",
            "#[cfg(test)] mod tests { use crate::aggregate::snapshot_from; }\n\
             #[cfg(test)] fn t() { crate::aggregate::snapshot_from(); }\n\
             use crate::aggregates_like::X;",
        ),
    ];
    let found = module_violations(&modules);
    // In the order of the rules: the snapshot's, xDS's, the aggregate's, the agent's, Envoy's
    // types'.
    let expect = [
        "crate::snapshot::config (planted.rs) names tonic::Status",
        "crate::xds::ads (planted.rs) names crate::aggregate::Aggregate",
        "crate::xds::generate (planted.rs) names crate::aggregate::snapshot_from",
        "crate::xds::proxy (planted.rs) names wayfinder_file::Feed",
        "crate::aggregate (planted.rs) names crate::xds::TypeUrl",
        "crate::agent::status (planted.rs) names crate::snapshot::SnapshotReader",
        "crate::debug (planted.rs) names envoy_types::pb::Any",
    ];
    assert_eq!(found.len(), expect.len(), "{found:#?}");
    for (line, e) in found.iter().zip(expect) {
        assert!(line.starts_with(e), "{line} should start with {e}");
    }

    let root = Path::new("/w");
    let package = |name: &str, dir: &str, deps: &[&str]| {
        serde_json::json!({
            "name": name,
            "manifest_path": format!("/w/{dir}/Cargo.toml"),
            "dependencies": deps.iter().map(|d| serde_json::json!({"name": d})).collect::<Vec<_>>(),
        })
    };
    let meta = serde_json::json!({"packages": [
        package("wayfinder", ".", &["wayfinder-file", "wayfinder-registry", "tokio"]),
        package("wayfinder-registry", "adapters/core", &["serde"]),
        package("wayfinder-config", "adapters/config", &["wayfinder-registry"]),
        package("wayfinder-file", "adapters/file", &["wayfinder-config", "wayfinder-registry"]),
        // Planted: an adapter on another adapter, and the contract on the configuration.
        package("wayfinder-kubernetes", "adapters/kubernetes", &["wayfinder-file"]),
        package("wayfinder-memory", "adapters/memory", &["wayfinder"]),
    ]});
    let found = crate_violations(&packages_from(&meta, root));
    assert_eq!(
        found,
        [
            "wayfinder-kubernetes depends on wayfinder-file: adapters never depend on each other \
             or on the server crate",
            "wayfinder-memory depends on wayfinder: adapters never depend on each other or on \
             the server crate",
        ],
    );
    let meta = serde_json::json!({"packages": [
        package("wayfinder-registry", "adapters/core", &["wayfinder-config"]),
        package("wayfinder-config", "adapters/config", &["wayfinder-registry", "wayfinder-file"]),
        package("wayfinder-file", "adapters/file", &[]),
    ]});
    let found = crate_violations(&packages_from(&meta, root));
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("wayfinder-registry depends on wayfinder-config"));
    assert!(found[1].starts_with("wayfinder-config depends on wayfinder-file"));
}
