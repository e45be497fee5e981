//! `wayfinder analyze` through the binary: one golden case per message code, and the exit
//! statuses of istioctl analyze.
//!
//! A case is a directory of `tests/it/analyze/`: `input/` (the files analysed), `args` (more
//! arguments, one a line, such as `--registries` and `Mock`), and `expected.txt`, what the
//! binary printed: its standard output, then its standard error and exit status under
//! `# stderr` and `# exit status`. The binary runs in the case's directory, so paths read
//! `input/x.yaml`. Re-bless with `WAYFINDER_BLESS=1 cargo test --test it analyze` and
//! review the diff.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::binary::path;

fn dir(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/analyze")
        .join(case)
}

/// The case's extra arguments.
fn args(case: &str) -> Vec<String> {
    match std::fs::read_to_string(dir(case).join("args")) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}

/// Runs `wayfinder COMMAND... input ARGS...` in the case's directory.
fn run(case: &str, command: &[&str]) -> Output {
    Command::new(path())
        .current_dir(dir(case))
        .args(command)
        .arg("input")
        .args(args(case))
        .output()
        .unwrap()
}

/// What a run printed and its status, as `expected.txt` holds it.
fn transcript(case: &str, out: &Output) -> String {
    let command = ["wayfinder analyze input".to_owned()]
        .into_iter()
        .chain(args(case))
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "# {command}\n{}# stderr\n{}# exit status {}\n",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.status.code().map_or("none".into(), |c| c.to_string()),
    )
}

/// Runs the case and compares with `expected.txt` (or writes it under `WAYFINDER_BLESS=1`).
fn case(case: &str) {
    let out = run(case, &["analyze"]);
    let got = transcript(case, &out);
    let file = dir(case).join("expected.txt");
    if std::env::var("WAYFINDER_BLESS").as_deref() == Ok("1") {
        std::fs::write(&file, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}; run with WAYFINDER_BLESS=1", file.display()));
    assert_eq!(
        got, want,
        "{case}: the output differs from expected.txt. If the change is intended, run with \
         WAYFINDER_BLESS=1 and review the diff."
    );
}

/// IST0101 for hosts: a destination no service is, a mirror's, a port the service lacks.
#[test]
fn ist0101_unknown_hosts_mirrors_and_ports() {
    case("ist0101_host");
}

/// IST0101 for a subset no DestinationRule of the host defines.
#[test]
fn ist0101_unknown_subset() {
    case("ist0101_subset");
}

/// IST0101 for a VirtualService's gateway that is no Gateway among the files.
#[test]
fn ist0101_unknown_gateway() {
    case("ist0101_gateway");
}

/// IST0101 for a Gateway selecting no workload, and a credential no Secret holds.
#[test]
fn ist0101_gateway_selector_and_credential() {
    case("ist0101_gateway_selector");
}

/// IST0101 for a Sidecar whose selector matches no workload of its namespace.
#[test]
fn ist0101_sidecar_without_workload() {
    case("ist0101_sidecar");
}

/// IST0106 for what validation refuses, IST0133 for what it warns about.
#[test]
fn ist0106_and_ist0133_validation() {
    case("ist0106_schema");
}

/// IST0109 for VirtualServices of the mesh gateway that define one host.
#[test]
fn ist0109_conflicting_virtual_services() {
    case("ist0109_conflict");
}

/// IST0113 for DestinationRules whose TLS the workloads' PeerAuthentication refuses.
#[test]
fn ist0113_mtls_policy_conflict() {
    case("ist0113_mtls");
}

/// IST0132 for a VirtualService bound to a Gateway that serves none of its hosts.
#[test]
fn ist0132_host_not_found_in_gateway() {
    case("ist0132_gateway_hosts");
}

/// IST0174 for a DestinationRule for an unknown host.
#[test]
fn ist0174_unknown_destination_rule_host() {
    case("ist0174_destination_rule_host");
}

/// Nothing to report: exit 0.
#[test]
fn analyze_clean_files_exit_zero() {
    case("clean");
}

/// Hosts of a File registry named as for `discovery` are known.
#[test]
fn analyze_knows_the_file_registry() {
    case("file_registry");
}

/// A file that does not parse: exit 65, as istioctl's `FileParseError`.
#[test]
fn analyze_unparsed_file_exits_65() {
    case("unparsed");
}

/// Warnings reach `--failure-threshold Warning`: exit 79; not the default threshold.
#[test]
fn analyze_failure_threshold() {
    case("failure_threshold");
    let out = Command::new(path())
        .current_dir(dir("failure_threshold"))
        .args(["analyze", "input", "--registries", "Mock"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let out = Command::new(path())
        .current_dir(dir("failure_threshold"))
        .args([
            "analyze",
            "input",
            "--registries",
            "Mock",
            "--output-threshold",
            "Error",
        ])
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "{out:?}");
}

/// `validate --analyze` is `analyze`.
#[test]
fn validate_with_analyze_is_analyze() {
    let analyze = run("ist0101_host", &["analyze"]);
    let validate = run("ist0101_host", &["validate", "--analyze"]);
    assert_eq!(analyze.stdout, validate.stdout);
    assert_eq!(analyze.status.code(), Some(79));
    assert_eq!(validate.status.code(), Some(79));
}

/// A live registry cannot be analysed offline; File needs its paths, as for `discovery`.
#[test]
fn analyze_refuses_registries_it_cannot_read() {
    let refused = |args: &[&str]| {
        let out = Command::new(path())
            .current_dir(dir("clean"))
            .args(["analyze", "input"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(&["--registries", "Consul"]);
    assert!(err.contains("analysis is offline"), "{err}");
    let err = refused(&["--registries", "File"]);
    assert!(err.contains("--file-registry"), "{err}");
    let err = refused(&["--registries", "File", "--file-registry", "/nonexistent"]);
    assert!(
        err.contains("/nonexistent") && err.contains("does not exist"),
        "{err}"
    );
}
