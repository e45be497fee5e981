//! The offline check over temporary directories: what `wayfinder validate PATH...` prints.

// Helpers here are test code too (see clippy.toml): a panic is a failure with a backtrace.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;

use wayfinder_config::check::{Location, Report, ReportLine, Severity};

const VS: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews}\nspec:\n  hosts: [reviews]\n  http: [{route: [{destination: {host: reviews}}]}]\n";

const SE: &str = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: payments}\nspec:\n  hosts: [payments.example.com]\n  ports: [{number: 443, name: https, protocol: TLS}]\n  resolution: DNS\n";

/// (severity, file name, document, line) of each problem.
fn summary(report: &Report) -> Vec<(Severity, String, usize, u64)> {
    report
        .problems
        .iter()
        .map(|p| match &p.origin {
            Location::Document(origin) => {
                let name = origin
                    .path
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                (p.severity, name, origin.document, origin.line)
            }
            Location::Path(path) => (p.severity, path.display().to_string(), 0, 0),
        })
        .collect()
}

fn line<'a>(report: &'a Report, name: &str) -> &'a ReportLine {
    report
        .problems
        .iter()
        .find(|p| p.origin.to_string().contains(name))
        .unwrap_or_else(|| panic!("no problem in {name}: {report}"))
}

#[test]
fn every_kind_of_problem_is_listed_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
    write("a-good.yaml", &format!("{VS}---\n{SE}"));
    write(
        "b-syntax.yaml",
        &format!("{VS}---\napiVersion: networking.istio.io/v1\nkind: [unclosed\n"),
    );
    write(
        "c-service-entry.yaml",
        &format!(
            "{SE}---\n{}",
            SE.replace("{name: payments}", "{name: bad, namespace: shop}")
                .replace(
                    "resolution: DNS",
                    "resolution: DNS\n  addresses: [10.0.0.0/8]"
                )
        ),
    );
    write(
        "d-unknown.json",
        r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}"#,
    );
    write("notes.txt", "not read");

    let report = wayfinder_file::check(&[dir.path().to_path_buf()]);
    assert!(report.has_errors(), "{report}");
    assert_eq!(
        summary(&report),
        vec![
            // The syntax error costs only its own document: the one before it is read, and is
            // a duplicate of a-good.yaml's.
            (Severity::Error, "b-syntax.yaml".into(), 1, 1),
            (Severity::Error, "b-syntax.yaml".into(), 2, 9),
            (Severity::Error, "c-service-entry.yaml".into(), 2, 9),
            (Severity::Warning, "d-unknown.json".into(), 1, 1),
        ],
        "{report}"
    );
    let syntax = line(&report, "b-syntax.yaml: document 2");
    assert_eq!((&syntax.object, &syntax.field), (&None, &None));

    let se = line(&report, "c-service-entry.yaml");
    assert_eq!(se.object.as_deref(), Some("ServiceEntry shop/bad"));
    assert_eq!(se.field.as_deref(), Some("spec.addresses[0]"));
    assert!(se.message.contains("CIDR"), "{}", se.message);
    let shown = se.to_string();
    let path = dir.path().join("c-service-entry.yaml");
    assert!(
        shown.starts_with(&format!(
            "error: {}: document 2 (line 9): ServiceEntry shop/bad: spec.addresses[0]: ",
            path.display()
        )),
        "{shown}"
    );

    let unknown = line(&report, "d-unknown.json");
    assert!(
        unknown.message.contains("ConfigMap (v1)"),
        "{}",
        unknown.message
    );

    // Objects read: VS + SE, the VS before the syntax error, then the two SEs.
    assert_eq!((report.objects_checked, report.files_checked), (5, 4));
    let text = report.to_string();
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(
        text.ends_with("checked 5 objects in 4 files: 3 errors, 1 warning"),
        "{text}"
    );
}

#[test]
fn istio_fields_are_warnings_typos_errors_and_security_policies_refused() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
    let keepalive = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ping}\nspec:\n  host: ratings\n  trafficPolicy:\n    connectionPool:\n      http:\n        http2KeepAlive: {interval: 15s, timeout: 5s}\n";
    let typo = VS.replace("  hosts:", "  hostz: [x]\n  hosts:");
    write("rules.yaml", &format!("{keepalive}---\n{typo}"));
    // A version Istio does not serve: refused rather than skipped (its rules would be lost).
    let policy = "apiVersion: security.istio.io/v1alpha1\nkind: RequestAuthentication\nmetadata: {name: jwt, namespace: foo}\nspec:\n  jwtRules: [{issuer: https://example.com}]\n";
    write("policy.yaml", policy);

    let report = wayfinder_file::check(&[dir.path().to_path_buf()]);
    let warning = line(&report, "rules.yaml: document 1");
    assert_eq!(warning.severity, Severity::Warning, "{report}");
    assert_eq!(
        warning.object.as_deref(),
        Some("DestinationRule default/ping")
    );
    assert_eq!(
        warning.field.as_deref(),
        Some("spec.trafficPolicy.connectionPool.http.http2KeepAlive")
    );
    let error = line(&report, "rules.yaml: document 2");
    assert_eq!(error.severity, Severity::Error, "{report}");
    assert_eq!(error.field.as_deref(), Some("spec.hostz"));
    assert!(error.message.contains("unknown field"), "{report}");
    let refused = line(&report, "policy.yaml");
    assert_eq!(refused.severity, Severity::Error, "{report}");
    assert!(
        refused
            .message
            .contains("reads RequestAuthentication of security.istio.io/{v1,v1beta1} only"),
        "{report}"
    );
    assert!(
        refused
            .object
            .as_deref()
            .unwrap()
            .starts_with("RequestAuthentication ")
    );
    assert!(report.has_errors());
}

#[test]
fn authorization_policies_are_checked_and_custom_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Istio's own builder test input (copied into the root crate's tests).
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/it/istio/authz/http");
    fs::copy(
        corpus.join("allow-full-rule-in.yaml"),
        dir.path().join("full.yaml"),
    )
    .unwrap();
    let custom = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ext, namespace: foo}\nspec:\n  action: CUSTOM\n  provider: {name: my-authz}\n  rules: [{to: [{operation: {paths: [/admin]}}]}]\n";
    fs::write(dir.path().join("custom.yaml"), custom).unwrap();

    let report = wayfinder_file::check(&[dir.path().to_path_buf()]);
    let errors: Vec<&ReportLine> = report
        .problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .collect();
    assert_eq!(errors.len(), 1, "{report}");
    let error = line(&report, "custom.yaml");
    assert_eq!(error.object.as_deref(), Some("AuthorizationPolicy foo/ext"));
    assert_eq!(error.field.as_deref(), Some("spec.action"));
    assert!(error.message.contains("CUSTOM"), "{report}");
}

#[test]
fn peer_authentications_are_checked_with_their_fields() {
    let dir = tempfile::tempdir().unwrap();
    let pa = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: foo}\nspec:\n  mtls: {mode: STRICT}\n";
    fs::write(dir.path().join("good.yaml"), pa).unwrap();
    let ports = pa.replace(
        "mtls: {mode: STRICT}",
        "portLevelMtls: {8080: {mode: DISABLE}}",
    );
    fs::write(dir.path().join("ports.yaml"), ports).unwrap();

    let report = wayfinder_file::check(&[dir.path().to_path_buf()]);
    assert_eq!(report.problems.len(), 1, "{report}");
    let error = line(&report, "ports.yaml");
    assert_eq!(error.severity, Severity::Error, "{report}");
    assert_eq!(
        error.object.as_deref(),
        Some("PeerAuthentication foo/default")
    );
    assert_eq!(error.field.as_deref(), Some("spec.portLevelMtls"));
}

#[test]
fn duplicates_across_files_and_missing_paths_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.yaml"), VS).unwrap();
    let b = dir.path().join("b.yaml");
    fs::write(&b, VS).unwrap();
    let missing = dir.path().join("missing");

    let report = wayfinder_file::check(&[dir.path().to_path_buf(), b.clone(), missing.clone()]);
    let dup = line(&report, "b.yaml");
    assert_eq!(dup.severity, Severity::Error);
    assert_eq!(
        dup.object.as_deref(),
        Some("VirtualService default/reviews")
    );
    assert_eq!(
        dup.message,
        format!(
            "duplicate, first defined at {}: document 1 (line 1)",
            dir.path().join("a.yaml").display()
        )
    );
    let gone = line(&report, "missing");
    assert_eq!(gone.origin, Location::Path(missing));
    assert_eq!(gone.message, "does not exist");
    // `b.yaml` was named twice (in the directory and on its own) and read once.
    assert_eq!(report.files_checked, 2);
    assert_eq!(report.problems.len(), 2, "{report}");
}

#[test]
fn rejected_objects_and_warnings_name_the_object_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let heavy = VS.replace("{host: reviews}}", "{host: reviews}, weight: 250}");
    let light = VS
        .replace("{name: reviews}", "{name: light}")
        .replace("{host: reviews}}", "{host: reviews}, weight: 50}");
    fs::write(dir.path().join("vs.yaml"), format!("{heavy}---\n{light}")).unwrap();
    let report = wayfinder_file::check(&[dir.path().to_path_buf()]);
    assert_eq!(
        summary(&report),
        vec![
            (Severity::Error, "vs.yaml".into(), 1, 1),
            (Severity::Warning, "vs.yaml".into(), 2, 8),
        ],
        "{report}"
    );
    let shown = report.problems[0].to_string();
    let path = dir.path().join("vs.yaml");
    assert_eq!(
        shown,
        format!(
            "error: {}: document 1 (line 1): VirtualService default/reviews: \
             spec.http[0].route[0].weight: weight 250 is out of range 0..=100",
            path.display()
        )
    );
    assert!(report.problems[1].to_string().starts_with("warning: "));
    assert!(report.has_errors());
}

#[test]
fn a_clean_directory_has_no_problems() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("all.yaml"), format!("{VS}---\n{SE}")).unwrap();
    let report = wayfinder_file::check(&[dir.path().to_path_buf()]);
    assert_eq!(report.problems, vec![], "{report}");
    assert!(!report.has_errors());
    assert_eq!(
        report.to_string(),
        "checked 2 objects in 1 file: 0 errors, 0 warnings"
    );

    let empty = wayfinder_file::check(&[Path::new(dir.path()).join("all.yaml")]);
    assert_eq!(empty.files_checked, 1);
}

#[test]
fn files_the_server_would_not_read_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("good.yaml"), SE).unwrap();
    let fifo = dir.path().join("fifo.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let big = fs::File::create(dir.path().join("big.yaml")).unwrap();
    big.set_len(wayfinder_file::DEFAULT_MAX_FILE_BYTES + 1)
        .unwrap();
    let report = wayfinder_file::check(&[dir.path().to_path_buf()]);
    assert!(report.has_errors(), "{report}");
    let fifo_line = line(&report, "fifo.yaml");
    assert_eq!(fifo_line.severity, Severity::Error);
    assert!(
        fifo_line.message.contains("not a regular file (a FIFO)"),
        "{report}"
    );
    let big_line = line(&report, "big.yaml");
    assert!(
        big_line
            .message
            .contains("over the limit of 67108864 bytes"),
        "{report}"
    );
    assert_eq!(report.files_checked, 1, "only good.yaml was read: {report}");
}
