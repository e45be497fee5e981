//! The text format's fields, with every control character escaped.
//!
//! tracing-subscriber 0.3.23 escapes ESC, BEL, BS, FF, DEL and the C1 controls in an event's
//! message only; other field values are written as they are, and no value has its newlines
//! or carriage returns escaped. A node id holding `\n` and ESC therefore started a forged,
//! coloured line. [`EscapedFields`] formats the message, every field and every span's fields
//! through [`Escaper`], so a value, whoever chose it, stays on its line and cannot reach the
//! terminal as a control sequence.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// Formats fields as tracing-subscriber's default does (`message key=value key="text"`),
/// with every control character escaped (see [`escape`]).
///
/// A second field named `message` (an explicit `message = …` beside the format string) is
/// written as `message=…`, never as a second message.
#[derive(Clone, Copy, Debug, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor {
            writer,
            first: true,
            message_written: false,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// True for the characters no log line shows as they are: every control character (C0,
/// including `\n`, `\r`, `\t` and ESC; DEL; C1), the Unicode line and paragraph separators,
/// and the bidirectional overrides and isolates that reorder what a reader sees.
pub fn must_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Writes `c` escaped as Rust writes it: `\n`, `\r`, `\t`, else `\u{1b}`.
pub fn escape<W: Write + ?Sized>(c: char, out: &mut W) -> fmt::Result {
    match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        c => write!(out, "\\u{{{:x}}}", u32::from(c)),
    }
}

/// A [`fmt::Write`] that passes text through, escaping what [`must_escape`] names.
///
/// A backslash is not escaped: a client may write the two characters `\n`, which read like an
/// escaped newline but cannot split a line. Escaping backslashes as well would double every
/// backslash that `Debug` formatting (quoted strings, errors) already wrote.
pub struct Escaper<'a, W: Write + ?Sized>(pub &'a mut W);

impl<W: Write + ?Sized> Write for Escaper<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut clean = 0;
        for (i, c) in s.char_indices() {
            if must_escape(c) {
                self.0.write_str(&s[clean..i])?;
                escape(c, self.0)?;
                clean = i + c.len_utf8();
            }
        }
        self.0.write_str(&s[clean..])
    }
}

struct TextVisitor<'a> {
    writer: Writer<'a>,
    first: bool,
    message_written: bool,
    result: fmt::Result,
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" && !self.message_written {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.record_debug(field, &format_args!("{}", Chain(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        // The `log` crate's metadata (normalised into the line's target by the formatter).
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        if !std::mem::take(&mut self.first) {
            self.result = self.writer.write_char(' ');
        }
        if name == "message" && !self.message_written {
            self.message_written = true;
        } else {
            let name = name.strip_prefix("r#").unwrap_or(name);
            self.result = self.result.and_then(|()| write!(self.writer, "{name}="));
        }
        self.result = self
            .result
            .and_then(|()| write!(Escaper(&mut self.writer), "{value:?}"));
    }
}

/// An error and its sources, `outer: inner: innermost`.
struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(err) = source {
            write!(f, ": {err}")?;
            source = err.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::tests::capture;

    fn escaped(s: &str) -> String {
        let mut out = String::new();
        Escaper(&mut out).write_str(s).unwrap();
        out
    }

    #[test]
    fn every_control_character_is_escaped() {
        assert_eq!(escaped("a\nb\r\tc"), "a\\nb\\r\\tc");
        assert_eq!(escaped("\x1b[31mred\x07"), "\\u{1b}[31mred\\u{7}");
        assert_eq!(escaped("del\x7f c1\u{9b}"), "del\\u{7f} c1\\u{9b}");
        assert_eq!(escaped("\u{2028}\u{202e}"), "\\u{2028}\\u{202e}");
        assert_eq!(escaped("ünïcode \\n stays"), "ünïcode \\n stays");
        for c in (0..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            assert!(must_escape(c), "{c:?}");
        }
    }

    #[test]
    fn messages_fields_and_spans_stay_on_one_line() {
        let id = "evil\nINFO forged\x1b[2J";
        let out = capture(false, || {
            let span = tracing::info_span!("conn", peer = %id);
            let _entered = span.enter();
            tracing::warn!(proxy = %id, quoted = id, "opened {id}");
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(!out.contains('\x1b'), "{out}");
        assert!(
            out.contains("conn{peer=evil\\nINFO forged\\u{1b}[2J}"),
            "{out}"
        );
        assert!(
            out.contains(
                "opened evil\\nINFO forged\\u{1b}[2J proxy=evil\\nINFO forged\\u{1b}[2J \
                 quoted=\"evil\\nINFO forged\\u{1b}[2J\""
            ),
            "{out}"
        );
    }

    #[test]
    fn a_second_message_field_is_a_field() {
        let out = capture(false, || {
            let message = "from the client";
            tracing::warn!(%message, "rejected");
        });
        assert!(out.contains("rejected message=from the client"), "{out}");
    }

    #[test]
    fn errors_show_their_sources() {
        let err = std::io::Error::other(std::fmt::Error);
        let out = capture(false, || {
            tracing::error!(error = &err as &(dyn std::error::Error + 'static), "failed");
        });
        assert!(
            out.contains("failed error=an error occurred when formatting an argument"),
            "{out}"
        );
    }
}
