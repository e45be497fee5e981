//! The JSON format: one object per line, every key unique, no key chosen by a client.
//!
//! tracing-subscriber's own JSON format with `flatten_event(true)` writes each event field
//! beside `timestamp`, `level` and `target` as it comes, so a field named like one of them,
//! or a second field named `message` (a NACK's detail logged as `message` beside the format
//! string), produced a line with two equal keys, which JSON parsers resolve differently.
//! Without flattening the same happens inside `fields`, and every consumer of today's lines
//! (tests, scripts, log pipelines reading `message`) would have to change. [`JsonLines`]
//! keeps the flattened shape and guards it instead:
//!
//! - keys are only ever field names from the code, never text from a request;
//! - the line's own keys ([`RESERVED`]) and the first `message` (the event's message) win; a
//!   field whose key is taken is written as `fields.NAME` (then `fields.NAME.2`, …);
//! - values are JSON strings, numbers or booleans, escaped by serde_json, and in addition
//!   DEL, the C1 controls and the Unicode separators and bidirectional controls are written
//!   as `\uXXXX` ([`super::text::must_escape`]), so a raw line shown in a terminal cannot
//!   carry an escape sequence either.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::io;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::{LookupSpan, SpanRef};

use super::text::must_escape;

/// The keys a line writes itself; an event field with one of these names is renamed.
pub const RESERVED: [&str; 10] = [
    "timestamp",
    "level",
    "target",
    "span",
    "spans",
    "fields",
    "filename",
    "line_number",
    "threadName",
    "threadId",
];

/// The event formatter of `--log-format json`: `timestamp`, `level`, the message and the
/// event's fields, `target`, and, inside a span, `span` and `spans` (as tracing-subscriber's
/// format with `flatten_event(true)` writes them), with the guarantees of the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonLines;

impl<S> FormatEvent<S, JsonFields> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let mut fields = EventFields::default();
        event.record(&mut fields);

        let mut line = Object::new(&RESERVED);
        line.reserved("timestamp", timestamp.into());
        line.reserved("level", meta.level().as_str().into());
        for (name, value) in fields.values {
            line.field(name, value);
        }
        let target = fields.log_target.as_deref().unwrap_or(meta.target());
        line.reserved("target", target.into());
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope.from_root().map(|s| span(&s)).collect();
            if let Some(current) = spans.last() {
                line.reserved("span", current.clone());
            }
            line.reserved("spans", Value::Array(spans));
        }

        let mut bytes = Vec::with_capacity(256);
        let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, EscapeControls);
        line.serialize(&mut serializer).map_err(|_| fmt::Error)?;
        writer.write_str(std::str::from_utf8(&bytes).map_err(|_| fmt::Error)?)?;
        writer.write_char('\n')
    }
}

/// One span as an object: its `name`, then its fields (a field called `name` is renamed).
fn span<S>(span: &SpanRef<'_, S>) -> Value
where
    S: for<'a> LookupSpan<'a>,
{
    let mut object = Object::new(&["name"]);
    object.reserved("name", span.name().into());
    let extensions = span.extensions();
    let recorded = extensions
        .get::<FormattedFields<JsonFields>>()
        .and_then(|f| serde_json::from_str::<serde_json::Map<String, Value>>(&f.fields).ok());
    for (name, value) in recorded.into_iter().flatten() {
        object.field(name, value);
    }
    Value::Object(
        object
            .entries
            .into_iter()
            .map(|(k, v)| (k.into_owned(), v))
            .collect(),
    )
}

/// A JSON object under construction, in writing order, whose keys stay unique.
struct Object {
    reserved: &'static [&'static str],
    entries: Vec<(Cow<'static, str>, Value)>,
    message_taken: bool,
}

impl Object {
    fn new(reserved: &'static [&'static str]) -> Self {
        Self {
            reserved,
            entries: Vec::new(),
            message_taken: false,
        }
    }

    fn reserved(&mut self, key: &'static str, value: Value) {
        self.entries.push((Cow::Borrowed(key), value));
    }

    /// Adds a field under its name, or under `fields.NAME` (`.2`, `.3`, …) when that is
    /// reserved or taken.
    fn field(&mut self, name: impl Into<Cow<'static, str>>, value: Value) {
        let name = name.into();
        let free = if name == "message" {
            !std::mem::replace(&mut self.message_taken, true)
        } else {
            !self.reserved.contains(&&*name) && !self.taken(&name)
        };
        if free {
            self.entries.push((name, value));
            return;
        }
        let mut key = format!("fields.{name}");
        let mut n = 1;
        while self.taken(&key) {
            n += 1;
            key = format!("fields.{name}.{n}");
        }
        self.entries.push((Cow::Owned(key), value));
    }

    fn taken(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (key, value) in &self.entries {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// An event's fields as JSON values, in the order the event names them. The `log` crate's
/// metadata fields are dropped but its target, which replaces the line's `target`.
#[derive(Default)]
struct EventFields {
    values: Vec<(&'static str, Value)>,
    log_target: Option<String>,
}

impl EventFields {
    fn add(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if !name.starts_with("log.") {
            self.values
                .push((name.strip_prefix("r#").unwrap_or(name), value));
        }
    }
}

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "log.target" {
            self.log_target = Some(value.to_owned());
        }
        self.add(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.add(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.add(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.add(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.add(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(err) = source {
            let _ = write!(text, ": {err}");
            source = err.source();
        }
        self.add(field, text.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.add(field, format!("{value:?}").into());
    }
}

/// serde_json's compact output, with the characters [`must_escape`] names that serde_json
/// leaves as they are (DEL, C1, separators, bidirectional controls) written as `\uXXXX`.
struct EscapeControls;

impl serde_json::ser::Formatter for EscapeControls {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut clean = 0;
        for (i, c) in fragment.char_indices() {
            if must_escape(c) {
                writer.write_all(&fragment.as_bytes()[clean..i])?;
                // Every such character is in the Basic Multilingual Plane: one \u escape.
                write!(writer, "\\u{:04x}", u32::from(c))?;
                clean = i + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[clean..])
    }
}

#[cfg(test)]
mod tests {
    use crate::logging::tests::{capture, unique_keys};
    use serde_json::Value;

    #[test]
    fn fields_named_like_the_line_s_own_keys_are_renamed() {
        let out = capture(true, || {
            let message = "client text";
            let level = "chosen";
            tracing::warn!(%message, level, target = 1, fields = true, "proxy rejected");
        });
        let keys = unique_keys(out.trim_end());
        assert_eq!(
            keys,
            [
                "timestamp",
                "level",
                "message",
                "fields.message",
                "fields.level",
                "fields.target",
                "fields.fields",
                "target"
            ]
        );
        let line: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(line["message"], "proxy rejected");
        assert_eq!(line["fields.message"], "client text");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["fields.level"], "chosen");
        assert_eq!(line["target"], module_path!());
    }

    #[test]
    fn client_text_is_one_escaped_value() {
        let id = "evil\"}\n{\"level\":\"ERROR\",\"x\":\"\x1b[2J\u{9b}31m\u{2028}";
        let out = capture(true, || {
            let span = tracing::info_span!("conn", name = id, peer = "10.0.0.1");
            let _entered = span.enter();
            tracing::info!(proxy = %id, "xDS stream opened");
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.trim_end().bytes().all(|b| b >= 0x20 && b != 0x7f),
            "raw control bytes in {out:?}"
        );
        assert!(out.contains(r"\u001b[2J\u009b31m\u2028"), "{out}");
        unique_keys(out.trim_end());
        let line: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(line["proxy"], id);
        assert_eq!(line["span"]["name"], "conn");
        assert_eq!(line["span"]["fields.name"], id);
        assert_eq!(line["spans"][0]["peer"], "10.0.0.1");
    }
}
