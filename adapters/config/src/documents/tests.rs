use std::path::Path;

use serde::de::IgnoredAny;

use super::*;

/// A test kind: `test.example.com/v1` `Thing` with a strict spec.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Thing {
    #[serde(rename = "apiVersion")]
    _api_version: IgnoredAny,
    #[serde(rename = "kind")]
    _kind: IgnoredAny,
    metadata: Meta,
    spec: ThingSpec,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Meta {
    name: String,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThingSpec {
    size: u16,
}

impl Decode for Thing {
    fn accepts(meta: &TypeMeta) -> bool {
        meta.api_version == "test.example.com/v1" && meta.kind == "Thing"
    }

    fn decode<'de, D: Deserializer<'de>>(_: &TypeMeta, de: D) -> Result<Self, D::Error> {
        Thing::deserialize(de)
    }
}

fn thing(name: &str, size: u16) -> String {
    format!(
        "apiVersion: test.example.com/v1\nkind: Thing\nmetadata:\n  name: {name}\nspec:\n  size: {size}\n"
    )
}

/// Every object, or the first document's error.
fn parse_str(path: &str, text: &str) -> Result<Vec<Parsed<Thing>>, DocumentError> {
    parse(Path::new(path), text.as_bytes())
        .into_iter()
        .collect()
}

/// (document, line, name or None when declined) of each parsed object.
fn summary(parsed: &[Parsed<Thing>]) -> Vec<(usize, u64, Option<String>)> {
    parsed
        .iter()
        .map(|p| {
            let name = p.object.as_ref().map(|t| t.metadata.name.clone());
            (p.origin.document, p.origin.line, name)
        })
        .collect()
}

#[test]
fn multi_document_yaml_numbers_documents_and_lines_from_the_file_start() {
    let text = format!(
        "# leading comment\n---\n{}---\n{}\n---\n# empty\n---\n{}",
        thing("a", 1),
        thing("b", 2),
        thing("c", 3)
    );
    let parsed = parse_str("things.yaml", &text).unwrap();
    assert_eq!(
        summary(&parsed),
        vec![
            (1, 3, Some("a".into())),
            (2, 10, Some("b".into())),
            (3, 20, Some("c".into())),
        ]
    );
    assert_eq!(parsed[0].meta.group(), "test.example.com");
    assert_eq!(parsed[0].meta.version(), "v1");
    assert_eq!(
        parsed[2].origin.to_string(),
        "things.yaml: document 3 (line 20)"
    );
}

#[test]
fn an_error_in_the_third_document_names_the_path_document_line_and_field() {
    let bad = "apiVersion: test.example.com/v1\nkind: Thing\nmetadata:\n  name: c\nspec:\n  size: 3\n  colour: red\n";
    let text = format!("{}---\n{}---\n{bad}", thing("a", 1), thing("b", 2));
    let err = parse_str("dir/things.yaml", &text).unwrap_err();
    // Documents 1 and 2 take 6 lines each plus a separator: the third document's content
    // starts on line 15, and `colour` is its 7th line.
    assert_eq!(err.origin.document, 3);
    assert_eq!(err.origin.line, 21);
    let shown = err.to_string();
    assert!(
        shown.starts_with("dir/things.yaml: document 3 (line 21): "),
        "{shown}"
    );
    assert!(shown.contains("unknown field `colour`"), "{shown}");
    assert!(shown.contains("line 21"), "{shown}");
}

#[test]
fn syntax_errors_and_wrong_types_carry_positions() {
    let text = format!("{}---\nkind: [unclosed\n", thing("a", 1));
    let err = parse_str("x.yaml", &text).unwrap_err();
    assert_eq!(err.origin.document, 2);
    assert!(err.origin.line >= 8, "{err}");

    let text = thing("a", 1).replace("size: 1", "size: big");
    let err = parse_str("x.yaml", &text).unwrap_err();
    assert_eq!((err.origin.document, err.origin.line), (1, 6), "{err}");

    let err = parse_str("x.yaml", "kind: Thing\n").unwrap_err();
    assert!(err.message.contains("apiVersion"), "{err}");

    let err = parse_str("x.yaml", "- just\n- a list\n").unwrap_err();
    assert_eq!(err.origin.document, 1, "{err}");
}

#[test]
fn json_files_are_one_document() {
    let text = r#"{
  "apiVersion": "test.example.com/v1",
  "kind": "Thing",
  "metadata": {"name": "j"},
  "spec": {"size": 7}
}"#;
    let parsed = parse_str("thing.json", text).unwrap();
    assert_eq!(summary(&parsed), vec![(1, 1, Some("j".into()))]);

    let bad = text.replace(r#""size": 7"#, r#""size": 7, "extra": true"#);
    let err = parse_str("thing.json", &bad).unwrap_err();
    assert_eq!((err.origin.document, err.origin.line), (1, 5), "{err}");
    assert!(err.message.contains("extra"), "{err}");

    let err = parse_str("thing.json", "{\"kind\": ").unwrap_err();
    assert_eq!(err.origin.document, 1);
    assert!(parse_str("empty.json", "\n").unwrap().is_empty());
}

#[test]
fn kubernetes_lists_yield_their_items_with_their_lines() {
    let text = "\
apiVersion: v1
kind: List
items:
- apiVersion: test.example.com/v1
  kind: Thing
  metadata:
    name: one
  spec:
    size: 1
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: other}
  data: {a: b}
- apiVersion: test.example.com/v1
  kind: Thing
  metadata: {name: two}
  spec: {size: 2}
metadata:
  resourceVersion: \"\"
";
    let parsed = parse_str("list.yaml", text).unwrap();
    assert_eq!(
        summary(&parsed),
        vec![
            (1, 4, Some("one".into())),
            (1, 10, None),
            (1, 14, Some("two".into()))
        ]
    );
    assert_eq!(parsed[1].meta.kind, "ConfigMap");

    let bad = text.replace("{size: 2}", "{size: 2, weight: 3}");
    let err = parse_str("list.yaml", &bad).unwrap_err();
    assert_eq!((err.origin.document, err.origin.line), (1, 17), "{err}");
    assert!(err.message.contains("weight"), "{err}");
}

#[test]
fn kubernetes_lists_in_json() {
    let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "test.example.com/v1", "kind": "Thing",
   "metadata": {"name": "one"}, "spec": {"size": 1}},
  {"apiVersion": "test.example.com/v1", "kind": "Thing",
   "metadata": {"name": "two"}, "spec": {"size": 2}}
]}"#;
    let parsed = parse_str("list.json", text).unwrap();
    assert_eq!(
        summary(&parsed),
        vec![(1, 2, Some("one".into())), (1, 4, Some("two".into()))]
    );
    let empty = r#"{"apiVersion": "v1", "kind": "List", "items": []}"#;
    assert!(parse_str("list.json", empty).unwrap().is_empty());
}

#[test]
fn declined_kinds_are_returned_without_being_deserialized() {
    // The spec would not deserialize as a Thing; it is not looked at.
    let text = "apiVersion: other/v1\nkind: Thing\nspec: {anything: [1, 2]}\n";
    let parsed = parse_str("x.yaml", text).unwrap();
    assert_eq!(summary(&parsed), vec![(1, 1, None)]);
    assert_eq!(parsed[0].meta.to_string(), "Thing (other/v1)");
}

#[test]
fn empty_and_null_documents_yield_nothing() {
    assert!(parse_str("x.yaml", "").unwrap().is_empty());
    assert!(
        parse_str("x.yaml", "# nothing\n---\n---\n")
            .unwrap()
            .is_empty()
    );
    let parsed = parse_str("x.yaml", &format!("~\n---\n{}", thing("a", 1))).unwrap();
    assert_eq!(summary(&parsed), vec![(2, 3, Some("a".into()))]);
}

#[test]
fn invalid_utf8_is_an_error_with_its_line() {
    let mut bytes = format!("{}---\n", thing("a", 1)).into_bytes();
    bytes.extend_from_slice(b"kind: \xff\n");
    bytes.extend_from_slice(format!("---\n{}", thing("c", 3)).as_bytes());
    let outcomes = parse::<Thing>(Path::new("x.yaml"), &bytes);
    assert_eq!(outcomes.len(), 3);
    let err = outcomes[1].as_ref().unwrap_err();
    assert_eq!((err.origin.document, err.origin.line), (2, 8), "{err}");
    assert!(err.message.contains("UTF-8"), "{err}");
    // The documents around it are read: bad bytes cost only their own document.
    let names: Vec<_> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok()?.object.as_ref())
        .map(|t| t.metadata.name.as_str())
        .collect();
    assert_eq!(names, ["a", "c"]);
}

#[test]
fn each_document_stands_on_its_own() {
    let wrong_type = thing("b", 2).replace("size: 2", "size: big");
    let text = format!(
        "{}---\nkind: [unclosed\n---\n{wrong_type}---\n{}",
        thing("a", 1),
        thing("d", 4)
    );
    let outcomes = parse::<Thing>(Path::new("x.yaml"), text.as_bytes());
    let shown: Vec<String> = outcomes
        .iter()
        .map(|o| match o {
            Ok(p) => format!("ok {}", p.object.as_ref().unwrap().metadata.name),
            Err(e) => format!("error in document {}", e.origin.document),
        })
        .collect();
    assert_eq!(
        shown,
        ["ok a", "error in document 2", "error in document 3", "ok d"]
    );
    // A syntax error says nothing of the object; a wrong type still tells which object it is.
    assert_eq!(outcomes[1].as_ref().unwrap_err().head, None);
    let head = outcomes[2].as_ref().unwrap_err().head.clone().unwrap();
    assert_eq!(
        (head.meta.kind.as_str(), head.name.as_deref()),
        ("Thing", Some("b"))
    );
}

/// A test kind whose types skip what they do not model.
#[derive(Debug, PartialEq, Deserialize)]
struct Loose {
    spec: LooseSpec,
}

#[derive(Debug, PartialEq, Deserialize)]
struct LooseSpec {
    size: u16,
    #[serde(default)]
    parts: Vec<LooseSpec>,
}

impl Decode for Loose {
    fn accepts(meta: &TypeMeta) -> bool {
        meta.kind == "Loose"
    }

    fn decode<'de, D: Deserializer<'de>>(_: &TypeMeta, de: D) -> Result<Self, D::Error> {
        Loose::deserialize(de)
    }
}

#[test]
fn skipped_fields_are_listed_with_their_paths() {
    let text = "apiVersion: v1\nkind: Loose\nmetadata: {name: l, uid: x}\nspec:\n  size: 1\n  colour: red\n  parts:\n  - {size: 2, shape: {round: true}}\n";
    let outcomes = parse::<Loose>(Path::new("x.yaml"), text.as_bytes());
    let parsed = outcomes[0].as_ref().unwrap();
    let skipped: Vec<String> = parsed.skipped.iter().map(ToString::to_string).collect();
    assert_eq!(
        skipped,
        [
            "apiVersion",
            "kind",
            "metadata",
            "spec.colour",
            "spec.parts[0].shape"
        ]
    );
    assert_eq!(parsed.name.as_deref(), Some("l"));
}
