//! Logging: the level filter and the two line formats, neither of which a client can forge.
//!
//! - **Level.** `--log-level` (alias `--log_output_level`) takes istiod's
//!   `scope:level,scope:level` or a tracing filter; see [`level`] for the scope mapping. A
//!   value in neither form is refused at start with the reason. `RUST_LOG`, when set, is
//!   used instead, read and refused the same way.
//! - **Text** (default). tracing-subscriber's line layout, with the fields formatted by
//!   [`text::EscapedFields`]: every control character in the message, a field or a span's
//!   fields is escaped (`\n`, `\r`, `\t`, `\u{1b}`, …), so no value can split a line or
//!   colour the terminal. tracing-subscriber 0.3.23 escapes only ESC, BEL, BS, FF, DEL and
//!   C1 in the message itself: not newlines, and nothing in other fields.
//! - **JSON** (`--log-format json`, or istiod's `--log_as_json`). One object per line from
//!   [`json::JsonLines`]: keys are field names from the code, each key appears once (a field
//!   named like one of the line's own keys becomes `fields.NAME`), and client text is only
//!   ever a value.
//!
//! Lines go to standard error; ANSI colours only when it is a terminal. A line that cannot be
//! written (standard error closed) is dropped and the server carries on.

use std::io::IsTerminal;

use tracing::Dispatch;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::JsonFields;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cli::{LogArgs, LogFormat};

pub mod json;
pub mod level;
pub mod text;

pub use level::{LevelError, LogLevel};

/// Logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `RUST_LOG` is in neither form.
    #[error("invalid RUST_LOG {value:?}: {source}")]
    RustLog {
        /// Its value.
        value: String,
        /// Why.
        source: LevelError,
    },
    /// The level did not build a filter (it was checked when parsed, so this is a bug).
    #[error("invalid log level {value:?}: {source}")]
    Level {
        /// Its value.
        value: String,
        /// Why.
        source: LevelError,
    },
    /// A global subscriber was already installed.
    #[error("logging was already set up: {0}")]
    Installed(#[from] tracing_subscriber::util::TryInitError),
}

/// Installs the process's logger from the flags (`RUST_LOG` overrides the level), then logs
/// a warning for every istiod scope the level named that wayfinder has no equivalent for.
pub fn init(args: &LogArgs) -> Result<(), LoggingError> {
    let from_env = match std::env::var("RUST_LOG") {
        Ok(value) if !value.trim().is_empty() => Some(
            value
                .parse::<LogLevel>()
                .map_err(|source| LoggingError::RustLog { value, source })?,
        ),
        _ => None,
    };
    let level = from_env.as_ref().unwrap_or(&args.level);
    let filter = level.env_filter().map_err(|source| LoggingError::Level {
        value: level.given.clone(),
        source,
    })?;
    let ansi = std::io::stderr().is_terminal();
    dispatch(filter, args.format(), ansi, std::io::stderr).try_init()?;
    for scope in &level.ignored_scopes {
        tracing::warn!(
            %scope,
            "--log-level: istiod scope {scope:?} has no equivalent in wayfinder and is ignored"
        );
    }
    Ok(())
}

/// A logger writing `format` lines to `writer`.
pub fn dispatch<W>(filter: EnvFilter, format: LogFormat, ansi: bool, writer: W) -> Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        // A line that cannot be written (standard error closed: a pipe's reader gone) is
        // dropped. tracing-subscriber would report it with `eprintln!`, which panics on the
        // same closed stream: the SIGTERM handler died in its "shutting down" line and the
        // server never stopped.
        .log_internal_errors(false);
    match format {
        LogFormat::Text => builder
            .with_ansi(ansi)
            .fmt_fields(text::EscapedFields)
            .finish()
            .into(),
        LogFormat::Json => builder
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(json::JsonLines)
            .finish()
            .into(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What `f` logs at INFO and above, in the text or JSON format.
    pub(crate) fn capture(json: bool, f: impl FnOnce()) -> String {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let writer = move || Sink(sink.clone());
        let format = if json {
            LogFormat::Json
        } else {
            LogFormat::Text
        };
        let dispatch = dispatch(EnvFilter::new("info"), format, false, writer);
        tracing::dispatcher::with_default(&dispatch, f);
        let bytes = buffer.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// The keys of a JSON object, in order; panics on a repeated key.
    pub(crate) fn unique_keys(line: &str) -> Vec<String> {
        use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
                let mut keys = Vec::new();
                while let Some((key, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                    assert!(!keys.contains(&key), "key {key:?} twice");
                    keys.push(key);
                }
                Ok(keys)
            }
        }
        let mut de = serde_json::Deserializer::from_str(line);
        de.deserialize_map(Keys).unwrap()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn levels_filter_lines() {
        let out = capture(false, || {
            tracing::debug!("hidden");
            tracing::info!("shown");
        });
        assert!(out.contains("shown") && !out.contains("hidden"), "{out}");
    }
}
