//! Parsing tests: the quirks real servers send, and errors that point at the field.

use super::*;

#[test]
fn one_element_lists_may_be_objects_or_missing() {
    let one = br#"{"applications":{"application":{"name":"A","instance":{"instanceId":"i","port":{"$":"80","@enabled":true}}}}}"#;
    let apps = parse_applications(one).unwrap();
    assert_eq!(apps.application.0.len(), 1);
    let inst = &apps.application.0[0].instance.0[0];
    assert_eq!(
        inst.port.as_ref().map(|p| (p.number, p.enabled)),
        Some((80, Some(true)))
    );
    for empty in [
        &br#"{"applications":{"application":[]}}"#[..],
        br#"{"applications":{"versions__delta":"1","apps__hashcode":""}}"#,
        br#"{"applications":{"application":null}}"#,
    ] {
        assert!(parse_applications(empty).unwrap().application.0.is_empty());
    }
}

#[test]
fn metadata_drops_type_markers_and_stringifies_scalars() {
    let body = br#"{"applications":{"application":[{"name":"A","instance":[{"hostName":"h",
        "metadata":{"@class":"java.util.Collections$EmptyMap","class":"java.util.Collections$EmptyMap","n":3,"b":true,"k":"v"}}]}]}}"#;
    let apps = parse_applications(body).unwrap();
    let inst = &apps.application.0[0].instance.0[0];
    let want: BTreeMap<String, String> = [("b", "true"), ("k", "v"), ("n", "3")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(inst.metadata, want);
    assert_eq!(inst.id(), "h", "instanceId falls back to hostName");
}

#[test]
fn errors_name_the_field_and_the_position() {
    let body = br#"{"applications":{"application":[{"name":"A","instance":[{"instanceId":"i"},{"instanceId":"j","port":{"$":"abc","@enabled":"true"}}]}]}}"#;
    let err = parse_applications(body).unwrap_err();
    assert!(
        err.starts_with(
            "applications.application[0].instance[1].port: invalid port number \"abc\""
        ),
        "{err}"
    );
    assert!(err.contains("line 1 column"), "{err}");
    let err = parse_applications(br#"{"applications": {"#).unwrap_err();
    assert!(
        err.contains("EOF while parsing") && err.contains("line 1"),
        "{err}"
    );
    let err = parse_applications(br#"{"apps": {}}"#).unwrap_err();
    assert!(err.contains("missing field `applications`"), "{err}");
}
