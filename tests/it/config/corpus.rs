//! Istio's own configuration, through `wayfinder validate` (the real binary), as Istio's tests
//! use it (`tests/it/istio/corpus/`, copied from the shared corpus; bookinfo's samples are
//! `bookinfo::every_sample_validates`):
//!
//! - `other/` (samples: egress ServiceEntries, gateways, TCP routing, websockets, east-west
//!   exposure, the rate-limit EnvoyFilter) and `dataset/` (one valid object of each networking
//!   kind and version, Istio's validation dataset): every file passes on its own.
//! - `crdtest/*-valid.yaml`: every document passes on its own. Istio's CRD test applies each
//!   document alone, and these files give one name to several variants, which together would
//!   be duplicates of one object.
//! - `crdtest/*-invalid.yaml`: every document, its `_err` key removed, is refused on its own,
//!   for the reason `_err` gives: a Kubernetes-style `PATH: Required value` or `PATH: Invalid
//!   value` must name the path, and that it is required (or a missing field) for the first;
//!   `Duplicate value` must say duplicate; any other text must appear in the error as Istio's
//!   CRD words it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::binary::path;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/istio/corpus")
}

/// `wayfinder validate FILE`: its exit code and what it printed.
fn validate(file: &Path) -> (Option<i32>, String) {
    let out = Command::new(path())
        .arg("validate")
        .arg(file)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The documents of a multi-document YAML file, comment-only ones left out.
fn documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(doc) = docs.last_mut() {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    docs.into_iter()
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .collect()
}

/// A document's `_err` value (unquoted), and the document without it.
fn split_err(doc: &str) -> (Option<String>, String) {
    let mut err = None;
    let mut rest = String::new();
    for line in doc.lines() {
        match line.strip_prefix("_err:") {
            Some(value) => {
                let value = value.trim();
                let unquoted = value
                    .strip_prefix('\'')
                    .and_then(|v| v.strip_suffix('\''))
                    .or_else(|| value.strip_prefix('"').and_then(|v| v.strip_suffix('"')))
                    .unwrap_or(value);
                err = Some(unquoted.to_string());
            }
            None => {
                rest.push_str(line);
                rest.push('\n');
            }
        }
    }
    (err, rest)
}

/// Whether `output` refuses for the reason `err` gives (see the module docs).
fn refused_for(err: &str, output: &str) -> bool {
    let lower = output.to_ascii_lowercase();
    let kubernetes_style = err
        .strip_suffix(": Required value")
        .map(|path| (path, ["required", "missing field"]))
        .or_else(|| {
            err.strip_suffix(": Invalid value")
                .map(|path| (path, [""; 2]))
        });
    match kubernetes_style {
        Some((path, words)) => {
            lower.contains(&path.to_ascii_lowercase()) && words.iter().any(|w| lower.contains(w))
        }
        None if err == "Duplicate value" => lower.contains("duplicate"),
        None => lower.contains(&err.to_ascii_lowercase()),
    }
}

fn files(dir: &str, suffix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(corpus().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no {dir}/*{suffix}");
    found
}

#[test]
fn every_valid_file_of_istio_s_samples_and_dataset_validates() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in files("other", ".yaml")
        .into_iter()
        .chain(files("dataset", ".yaml"))
    {
        let (code, output) = validate(&file);
        checked += 1;
        if code != Some(0) || !output.contains(" 0 errors") {
            failures.push(format!("{}: exit {code:?}\n{output}", file.display()));
        }
    }
    assert_eq!(checked, 34);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_document_of_istio_s_valid_crd_tests_validates_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in files("crdtest", "-valid.yaml") {
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, doc) in documents(&text).into_iter().enumerate() {
            let one = dir.path().join(format!("doc-{checked}.yaml"));
            std::fs::write(&one, &doc).unwrap();
            checked += 1;
            let (code, output) = validate(&one);
            if code != Some(0) || !output.contains(" 0 errors") {
                failures.push(format!(
                    "{} document {}: exit {code:?}\n{output}",
                    file.display(),
                    i + 1
                ));
            }
        }
    }
    assert_eq!(checked, 14);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_document_of_istio_s_invalid_crd_tests_is_refused_for_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in files("crdtest", "-invalid.yaml") {
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, doc) in documents(&text).into_iter().enumerate() {
            let (err, doc) = split_err(&doc);
            let err =
                err.unwrap_or_else(|| panic!("{} document {}: no _err", file.display(), i + 1));
            let one = dir.path().join(format!("doc-{checked}.yaml"));
            std::fs::write(&one, &doc).unwrap();
            checked += 1;
            let (code, output) = validate(&one);
            if code != Some(1) || !refused_for(&err, &output) {
                failures.push(format!(
                    "{} document {} (_err: {err}): exit {code:?}\n{output}",
                    file.display(),
                    i + 1
                ));
            }
        }
    }
    assert_eq!(checked, 22);
    assert!(
        failures.is_empty(),
        "{} of {checked} not refused for their reason:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_reason_check_tells_reasons_apart() {
    let out = "error: x.yaml: document 1 (line 1): ServiceEntry default/a: spec.hosts: at least \
               one host is required";
    assert!(refused_for("spec.hosts: Required value", out));
    assert!(!refused_for("spec.ports: Required value", out));
    assert!(!refused_for("port must be between 1-65535", out));
    assert!(refused_for(
        "Duplicate value",
        "spec.ports[1].name: duplicate port name"
    ));
    let (err, rest) = split_err("_err: 'spec: Required value'\nkind: X\n");
    assert_eq!(err.as_deref(), Some("spec: Required value"));
    assert_eq!(rest, "kind: X\n");
}
