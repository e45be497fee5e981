//! `--log-level` / `--log_output_level`: istiod's `scope:level` list or a tracing filter.
//!
//! istiod's form is `LEVEL` or `SCOPE:LEVEL`, comma-separated, with the levels `debug`,
//! `info`, `warn`, `error`, `fatal` (wayfinder's `error`) and `none` (`off`). The scope
//! `default` sets the level of everything not named otherwise (a bare `LEVEL` is the same);
//! `all` sets every scope and, as in istiod, ends the list. istiod's scopes with a
//! wayfinder equivalent become tracing directives ([`SCOPES`]); any other scope is accepted
//! and ignored with a warning at start, as istiod ignores scopes it has not registered.
//!
//! Anything else must be a tracing filter (`info,wayfinder::xds=debug`) in which every
//! directive names its level: a bare word that is not a level (`verbose`, or a target
//! without `=LEVEL`, which tracing would read as "everything at TRACE for that target and
//! nothing else") is refused. Before this check `default:info` was read as a target named
//! `default:info` and silenced every line.

use std::str::FromStr;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// istiod's logging scopes that have a wayfinder equivalent, and the tracing targets each
/// stands for. A target is a module path prefix: `wayfinder::xds::ads` covers every module
/// below it.
pub const SCOPES: &[(&str, &[&str])] = &[
    // xDS serving: streams, pushes, NACKs, and the ADS port's connections.
    ("ads", &["wayfinder::xds::ads", "wayfinder::server::grpc"]),
    // Building the mesh model and publishing snapshots.
    ("model", &["wayfinder::aggregate", "wayfinder::snapshot"]),
    // Every service registry.
    (
        "serviceregistry",
        &[
            "wayfinder::registries",
            "wayfinder_file",
            // The models the File registry and the config sources drive (what they keep and
            // skip): in wayfinder_file, and under this scope, until they moved.
            "wayfinder_config",
            "wayfinder_consul",
            "wayfinder_eureka",
            "wayfinder_kubernetes",
            "wayfinder_memory",
        ],
    ),
    // ServiceEntry and WorkloadEntry files.
    ("serviceentry", &["wayfinder_file", "wayfinder_config"]),
    // The Kubernetes registry and its client.
    (
        "kube",
        &["wayfinder_kubernetes", "kube_client", "kube_runtime"],
    ),
    // istiod's `grpc` scope is the gRPC library's own log: here, the HTTP/2 stack.
    ("grpc", &["h2", "hyper", "tonic"]),
];

/// A parsed `--log-level`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLevel {
    /// The value as given.
    pub given: String,
    /// The tracing filter it stands for.
    pub filter: String,
    /// Scopes without a wayfinder equivalent, ignored (logged as a warning at start).
    pub ignored_scopes: Vec<String>,
}

/// A `--log-level` that is neither istiod's form nor a tracing filter.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LevelError {
    /// Nothing was given.
    #[error("the level is empty")]
    Empty,
    /// An item names a level that does not exist.
    #[error(
        "{item:?}: {level:?} is not a level (istiod's: debug, info, warn, error, fatal, none; \
         tracing's: trace, debug, info, warn, error, off)"
    )]
    Level {
        /// The item (`SCOPE:LEVEL` or `TARGET=LEVEL`).
        item: String,
        /// Its level.
        level: String,
    },
    /// An item is neither `LEVEL`, `SCOPE:LEVEL` nor `TARGET=LEVEL`.
    #[error("{0:?} is neither a level, istiod's SCOPE:LEVEL nor a tracing directive TARGET=LEVEL")]
    Directive(String),
    /// tracing refused the filter.
    #[error("not a tracing filter: {0}")]
    Filter(String),
}

impl FromStr for LogLevel {
    type Err = LevelError;

    fn from_str(given: &str) -> Result<Self, LevelError> {
        let trimmed = given.trim();
        if trimmed.is_empty() {
            return Err(LevelError::Empty);
        }
        let (filter, ignored_scopes) = match istiod(trimmed)? {
            Some(parsed) => parsed,
            None => (tracing_filter(trimmed)?, Vec::new()),
        };
        Ok(Self {
            given: given.to_owned(),
            filter,
            ignored_scopes,
        })
    }
}

impl LogLevel {
    /// The filter to install.
    pub fn env_filter(&self) -> Result<EnvFilter, LevelError> {
        EnvFilter::builder()
            .parse(&self.filter)
            .map_err(|e| LevelError::Filter(e.to_string()))
    }
}

/// istiod's form as a tracing filter and the ignored scopes; `None` when `s` is not in
/// istiod's form (a tracing filter may still read it).
fn istiod(s: &str) -> Result<Option<(String, Vec<String>)>, LevelError> {
    let mut default = "info";
    let mut directives: Vec<(&str, &str)> = Vec::new();
    let mut ignored = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        if item.contains('=') {
            return Ok(None);
        }
        let (scope, level) = match item.split(':').collect::<Vec<_>>()[..] {
            [level] => match istiod_level(level) {
                Some(level) => ("default", level),
                None => return Ok(None),
            },
            [scope, level] => match istiod_level(level) {
                Some(level) => (scope, level),
                None => {
                    return Err(LevelError::Level {
                        item: item.to_owned(),
                        level: level.to_owned(),
                    });
                }
            },
            _ => return Ok(None),
        };
        match scope {
            "default" => default = level,
            "all" => {
                default = level;
                directives.clear();
                break;
            }
            scope => match SCOPES.iter().find(|(name, _)| *name == scope) {
                Some((_, targets)) => {
                    for target in *targets {
                        directives.retain(|(t, _)| t != target);
                        directives.push((target, level));
                    }
                }
                None => ignored.push(scope.to_owned()),
            },
        }
    }
    let filter = std::iter::once(default.to_owned())
        .chain(directives.iter().map(|(t, l)| format!("{t}={l}")))
        .collect::<Vec<_>>()
        .join(",");
    Ok(Some((filter, ignored)))
}

/// istiod's level names as tracing's.
fn istiod_level(level: &str) -> Option<&'static str> {
    Some(match level.to_ascii_lowercase().as_str() {
        "debug" => "debug",
        "info" => "info",
        "warn" => "warn",
        "error" | "fatal" => "error",
        "none" => "off",
        _ => return None,
    })
}

/// `s` when it is a tracing filter in which every directive names its level.
fn tracing_filter(s: &str) -> Result<String, LevelError> {
    let items: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .collect();
    for &item in &items {
        if item.parse::<LevelFilter>().is_ok() {
            continue;
        }
        let Some((_, level)) = item.rsplit_once('=') else {
            return Err(LevelError::Directive(item.to_owned()));
        };
        if level.parse::<LevelFilter>().is_err() {
            return Err(LevelError::Level {
                item: item.to_owned(),
                level: level.to_owned(),
            });
        }
    }
    // tracing splits on commas without trimming: give it the items as checked.
    let filter = items.join(",");
    EnvFilter::builder()
        .parse(&filter)
        .map_err(|e| LevelError::Filter(e.to_string()))?;
    Ok(filter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> LogLevel {
        s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn filter(s: &str) -> String {
        parse(s).filter
    }

    #[test]
    fn istiod_spellings() {
        assert_eq!(filter("default:info"), "info");
        assert_eq!(filter("debug"), "debug");
        assert_eq!(filter("default:none"), "off");
        assert_eq!(filter("default:fatal"), "error");
        assert_eq!(
            filter("default:warn,ads:debug"),
            "warn,wayfinder::xds::ads=debug,wayfinder::server::grpc=debug"
        );
        assert_eq!(
            filter("ads:debug"),
            "info,wayfinder::xds::ads=debug,wayfinder::server::grpc=debug",
            "scopes not named keep istiod's default, info"
        );
        // A later scope naming the same target wins, as a later flag does in istiod.
        assert_eq!(
            filter("serviceregistry:warn,kube:debug"),
            "info,wayfinder::registries=warn,wayfinder_file=warn,wayfinder_config=warn,\
             wayfinder_consul=warn,wayfinder_eureka=warn,wayfinder_memory=warn,\
             wayfinder_kubernetes=debug,kube_client=debug,kube_runtime=debug"
        );
        // `all` sets everything and ends the list.
        assert_eq!(filter("ads:debug,all:error,model:debug"), "error");
    }

    #[test]
    fn unknown_istiod_scopes_are_ignored_and_reported() {
        let level = parse("default:info,authorization:debug,ads:warn,wasm:error");
        assert_eq!(
            level.filter,
            "info,wayfinder::xds::ads=warn,wayfinder::server::grpc=warn"
        );
        assert_eq!(level.ignored_scopes, ["authorization", "wasm"]);
    }

    #[test]
    fn tracing_filters_pass_through() {
        for s in [
            "info,wayfinder::xds=debug",
            "trace",
            "OFF",
            "wayfinder=debug",
            "warn,h2=off,hyper=error",
        ] {
            let level = parse(s);
            assert_eq!(level.filter, s);
            assert!(level.ignored_scopes.is_empty());
            level.env_filter().unwrap();
        }
    }

    #[test]
    fn values_in_neither_form_are_refused_with_the_reason() {
        let err = |s: &str| s.parse::<LogLevel>().unwrap_err().to_string();
        assert_eq!(
            err("default:verbose"),
            "\"default:verbose\": \"verbose\" is not a level (istiod's: debug, info, warn, \
             error, fatal, none; tracing's: trace, debug, info, warn, error, off)"
        );
        assert!(err("verbose").starts_with("\"verbose\" is neither a level"));
        assert!(err("info,wayfinder").starts_with("\"wayfinder\" is neither"));
        assert!(err("wayfinder=loud").contains("\"loud\" is not a level"));
        assert!(err("a:b:c").contains("neither"));
        assert_eq!(err("  "), "the level is empty");
    }

    #[test]
    fn every_mapped_target_is_a_valid_directive() {
        for (scope, _) in SCOPES {
            parse(&format!("{scope}:debug")).env_filter().unwrap();
        }
    }
}
