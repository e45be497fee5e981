//! Security policies: `PeerAuthentication`, `AuthorizationPolicy` and `RequestAuthentication`
//! read and judged as the networking kinds are, and refused in a version Istio does not serve,
//! each on its own document.

use std::path::Path;

use crate::objects::decode::{self, Item, VALIDATE};
use crate::{ConfigSpec, Kind, MtlsMode};

const SAMPLE: &str = "\
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: finance, namespace: foo}
spec:
  selector:
    matchLabels: {app: finance}
  mtls: {mode: STRICT}
  portLevelMtls:
    8080: {mode: DISABLE}
";

#[test]
fn peer_authentication_is_read_in_v1_and_v1beta1() {
    let text = format!(
        "{SAMPLE}---\n{}",
        "apiVersion: security.istio.io/v1beta1\nkind: PeerAuthentication\n\
         metadata: {name: default, namespace: foo}\nspec: {mtls: {mode: PERMISSIVE}}\n"
    );
    let items = decode::read(Path::new("pa.yaml"), text.as_bytes(), VALIDATE);
    let [Item::Object(finance), Item::Object(default)] = &items[..] else {
        panic!("{items:#?}")
    };
    assert_eq!(finance.problems, [], "{:?}", finance.problems);
    assert_eq!(
        finance.object.key().to_string(),
        "PeerAuthentication foo/finance"
    );
    let ConfigSpec::PeerAuthentication(pa) = &finance.object.spec else {
        panic!("{:?}", finance.object.spec)
    };
    assert_eq!(pa.port_level_mtls[&8080].mode, MtlsMode::Disable);
    assert_eq!(default.object.kind(), Kind::PeerAuthentication);
    assert_eq!(default.rejection(), None);
}

#[test]
fn per_port_modes_without_a_selector_reject_the_policy_with_the_field() {
    let text = SAMPLE.replace("  selector:\n    matchLabels: {app: finance}\n", "");
    let items = decode::read(Path::new("pa.yaml"), text.as_bytes(), VALIDATE);
    let [Item::Object(judged)] = &items[..] else {
        panic!("{items:#?}")
    };
    let err = judged.rejection().expect("refused");
    assert_eq!(
        err.to_string(),
        "pa.yaml: document 1 (line 1): invalid: PeerAuthentication foo/finance: \
         spec.portLevelMtls: \
         requires a selector with labels: a mesh or namespace policy cannot have per-port modes"
    );
}

#[test]
fn a_mode_istio_does_not_name_or_a_field_nobody_defines_rejects_the_document() {
    let bad_mode = SAMPLE.replace("mode: STRICT", "mode: STRCT");
    let items = decode::read(Path::new("pa.yaml"), bad_mode.as_bytes(), VALIDATE);
    let [Item::Refused(refused)] = &items[..] else {
        panic!("{items:#?}")
    };
    let err = refused.error.to_string();
    assert!(err.contains("line 7"), "{err}");
    assert!(
        err.contains("mode: \"STRCT\" is not an mTLS mode: UNSET, DISABLE, PERMISSIVE or STRICT"),
        "{err}"
    );
    assert_eq!(
        refused.refusal().kind.as_deref(),
        Some("PeerAuthentication")
    );

    // `labels` is the networking kinds' selector, not this one's.
    let typo = SAMPLE.replace("matchLabels:", "labels:");
    let items = decode::read(Path::new("pa.yaml"), typo.as_bytes(), VALIDATE);
    let [Item::Object(judged)] = &items[..] else {
        panic!("{items:#?}")
    };
    let err = judged.rejection().expect("refused").to_string();
    assert!(err.contains("spec.selector.labels: unknown field"), "{err}");
}

#[test]
fn authorization_policy_is_read_judged_and_custom_refused() {
    let allow = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n\
                 metadata: {name: api, namespace: foo}\nspec:\n  \
                 rules: [{to: [{operation: {paths: [/api/*]}}]}]\n";
    let custom = "apiVersion: security.istio.io/v1beta1\nkind: AuthorizationPolicy\n\
                  metadata: {name: ext, namespace: foo}\nspec:\n  action: CUSTOM\n  \
                  provider: {name: opa}\n  rules: [{}]\n";
    let typo = allow.replace("rules:", "rulez: []\n  rules:");
    let text = format!("{allow}---\n{custom}---\n{typo}");
    let items = decode::read(Path::new("ap.yaml"), text.as_bytes(), VALIDATE);
    let [
        Item::Object(allow),
        Item::Object(custom),
        Item::Object(typo),
    ] = &items[..]
    else {
        panic!("{items:#?}")
    };
    assert_eq!(allow.rejection(), None);
    let object = &allow.object;
    assert_eq!(object.kind(), Kind::AuthorizationPolicy);
    let ConfigSpec::AuthorizationPolicy(ap) = &object.spec else {
        panic!("{object:?}")
    };
    assert_eq!(ap.rules.as_ref().map(Vec::len), Some(1));
    let err = custom.rejection().expect("refused").to_string();
    assert!(
        err.contains("spec.action: CUSTOM needs an external authorizer"),
        "{err}"
    );
    let err = typo.rejection().expect("refused").to_string();
    assert!(err.contains("spec.rulez: unknown field"), "{err}");
}

#[test]
fn security_policies_of_unknown_versions_are_refused() {
    let policies = [
        (
            "security.istio.io/v1alpha1",
            "RequestAuthentication",
            "reads RequestAuthentication of security.istio.io/{v1,v1beta1} only",
        ),
        (
            "security.istio.io/v1alpha1",
            "AuthorizationPolicy",
            "reads AuthorizationPolicy of security.istio.io/{v1,v1beta1} only",
        ),
        (
            "security.istio.io/v1alpha1",
            "PeerAuthentication",
            "reads PeerAuthentication of security.istio.io/{v1,v1beta1} only",
        ),
    ];
    for (api_version, kind, message) in policies {
        let text =
            format!("apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: p}}\nspec: {{}}\n");
        let items = decode::read(Path::new("p.yaml"), text.as_bytes(), VALIDATE);
        let [Item::Refused(refused)] = &items[..] else {
            panic!("{items:#?}")
        };
        assert!(
            refused.error.to_string().contains(message),
            "{}",
            refused.error
        );
        assert_eq!(refused.refusal().name.as_deref(), Some("p"));
    }
}
