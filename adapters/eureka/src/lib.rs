//! The Eureka registry: the applications of a Netflix/Spring Cloud Eureka server as wayfinder
//! services, kept up to date with Eureka's own delta protocol.
//!
//! Start with [`Config`]: give the server's base URL, [`Config::build`] an [`EurekaRegistry`]
//! and hand it to the server as any other [`Registry`]. Inside, `watch` is the poll loop,
//! `client` the HTTP requests, `api` the lenient JSON types, `mirror` the local copy of the
//! server's registry and `convert` the mapping described below. With the `fake` feature,
//! the `fake` module is an in-process Eureka server for tests.
//!
//! # Protocol
//!
//! Every request sends `Accept: application/json` (Eureka answers XML otherwise). The stream
//! starts with a full fetch, `GET {url}/apps`, whose result is the first item, a [`Event::Reset`].
//! Until that succeeds, each failure is an error item, retried with a jittered exponential
//! backoff from 200 ms (or the interval, if shorter) up to 30 s (or the interval, if longer).
//!
//! Then, every `interval`, it fetches `GET {url}/apps/delta` (Netflix
//! `DiscoveryClient.getAndUpdateDelta`): `ADDED` and `MODIFIED` instances replace the local
//! copy's, `DELETED` ones are removed (instances are keyed by application and `instanceId`,
//! falling back to `hostName`). The reconcile hashcode of the result (instances counted per
//! status, sorted by status: `DOWN_1_UP_3_`) must equal the delta's `apps__hashcode`; when it
//! does not, or when the server serves no deltas (403, 404 or an empty body), or when the last
//! good fetch is older than two minutes (deltas cover only the server's last three minutes),
//! the adapter fetches the full registry instead. The services are then compared with what
//! was last sent, and only those that changed go out, as [`Event::Upsert`] or
//! [`Event::Remove`]: an unchanged poll sends nothing, and a `Reset` is sent only once.
//!
//! Eureka servers cache their answers (Spring's `response-cache-update-interval`, 30 s by
//! default), so changes reach the adapter that much later.
//!
//! # Errors
//!
//! Every failure is an error item and the last good state stays: [`RegistryError::Unavailable`]
//! for connection errors, timeouts (`timeout` per request) and non-2xx answers (with the status
//! and the beginning of the body), [`RegistryError::Malformed`] for a body that does not parse
//! (serde_json's message with line and column, preceded by the field's path such as
//! `applications.application[0].instance[1].port`). Origins are `GET <url>`, with a password
//! in the URL shown as `***`. After a failure the next poll waits for the next tick or the
//! backoff delay, whichever is later. A poll that works again sends [`Event::Recovered`] when
//! nothing changed, or its changes (which count as the recovery).
//!
//! Instances and services that break a mapping rule are [`RegistryError::Invalid`] items (the
//! rest is served): sent when they first appear, and again after any change or failure so
//! that health stays true, but not on every unchanged poll.
//!
//! The stream ends as soon as its `shutdown` token is cancelled, even during a request.
//!
//! # Mapping
//!
//! Instances are grouped into services by (namespace, hostname); instances of several
//! applications may share a service.
//!
//! - **Hostname**: metadata [`HOSTNAME_KEY`] if set (lower-cased); else the first entry of the
//!   comma-separated `vipAddress`, plus `suffix`; else the application name plus `suffix`;
//!   lower-cased. An instance whose hostname is not a valid DNS name is skipped with an
//!   `Invalid` item naming the application and instance, as is one without an IP `ipAddr`.
//! - **Namespace**: metadata [`NAMESPACE_KEY`], default `default`.
//! - **Ports**: an enabled `port` gives the service port `http`, with the protocol of metadata
//!   `protocol` (Istio's names, default HTTP); an enabled `securePort` gives `https` (HTTPS).
//!   A service has a port only if every instance in it enables that port. The `http` number is
//!   metadata [`PORT_KEY`] if instances set it, else the port most instances use; for both
//!   ports, ties go to the lowest number, and disagreeing protocols to the most common. Every
//!   endpoint carries its own instance's port numbers.
//! - **Endpoints**: address `ipAddr`; labels from metadata without Eureka's `@class`-style
//!   keys and without the three `wayfinder.io/` keys; `Healthy` only when `status` is `UP` and
//!   `overriddenStatus` is not `OUT_OF_SERVICE`, else `Unhealthy`; for `Amazon` data centers
//!   the locality is the `availability-zone` and its region (the zone without its last letter).
//! - **Service**: client-side load balancing, no labels, not mesh-external.
//!
//! Every registration passes `Registration::validate` before it is sent; one that does not is
//! an `Invalid` item and the service keeps what was last sent.
//!
//! # JSON quirks
//!
//! Parsing follows what real servers send: `port`/`securePort` as `{"$": 8080, "@enabled":
//! "true"}` with the number possibly a string and `@enabled` a string or a bool; one-element
//! lists (`application`, `instance`) sent as a bare object; an empty registry with
//! `"application": []` or no key at all; numbers as strings; metadata with `@class` keys or
//! `class: java.util.Collections$EmptyMap` (dropped); a missing `instanceId` (`hostName` is
//! used).
//!
//! # Dependencies
//!
//! Among wayfinder's crates, only `wayfinder-registry` (the contract). Outside: reqwest (HTTP,
//! rustls for https URLs), serde and serde_json (the answers), tokio and futures (the poll
//! loop and the stream), tracing. With `fake`, axum serves the in-process Eureka.

mod api;
mod client;
mod convert;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
mod mirror;
mod watch;

#[cfg(feature = "fake")]
pub mod fake;

use std::time::Duration;

use wayfinder_registry::answer::DEFAULT_MAX_ANSWER_BYTES;
use wayfinder_registry::{CancellationToken, EventStream, Registration, RegistryId, Source};

#[cfg(doc)]
use wayfinder_registry::{Event, Registry, RegistryError};

/// Metadata key an instance uses to declare the hostname it shares with other registries.
pub const HOSTNAME_KEY: &str = "wayfinder.io/hostname";
/// Metadata key for the namespace (default "default").
pub const NAMESPACE_KEY: &str = "wayfinder.io/namespace";
/// Metadata key for the service port number clients dial (default: the instances' port).
pub const PORT_KEY: &str = "wayfinder.io/port";

/// Configuration of a Eureka registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Base URL including the path: `http://127.0.0.1:8761/eureka` (Spring Cloud) or
    /// `http://host:8080/eureka/v2` (Netflix). `user:password@` is sent as basic auth.
    pub url: String,
    /// Period of delta polls (default 5 s).
    pub interval: Duration,
    /// Appended to vip addresses and application names to make hostnames (default `.eureka`);
    /// empty, or a dot followed by DNS labels.
    pub suffix: String,
    /// Timeout of each request, connecting included (default 10 s).
    pub timeout: Duration,
    /// The largest answer read; a larger one is refused as an error, nothing more of it read
    /// (default [`DEFAULT_MAX_ANSWER_BYTES`], 64 MiB).
    pub max_answer_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:8761/eureka".into(),
            interval: Duration::from_secs(5),
            suffix: ".eureka".into(),
            timeout: Duration::from_secs(10),
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
        }
    }
}

impl Config {
    /// Checks the configuration (an http or https URL, non-zero durations, a valid suffix)
    /// and builds the registry. Nothing is fetched until [`Source::watch`].
    pub fn build(self, id: RegistryId) -> Result<EurekaRegistry, BuildError> {
        let url = reqwest::Url::parse(self.url.trim()).map_err(|e| BuildError::Url {
            url: self.url.clone(),
            reason: e.to_string(),
        })?;
        let bad = |reason: &str| BuildError::Url {
            url: self.url.clone(),
            reason: reason.into(),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("the scheme must be http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("a query or fragment is not allowed"));
        }
        if self.interval.is_zero() {
            return Err(BuildError::ZeroDuration("interval"));
        }
        if self.timeout.is_zero() {
            return Err(BuildError::ZeroDuration("timeout"));
        }
        let suffix_ok = self.suffix.is_empty()
            || self
                .suffix
                .strip_prefix('.')
                .is_some_and(|rest| convert::is_dns_name(&rest.to_ascii_lowercase()));
        if !suffix_ok {
            return Err(BuildError::Suffix(self.suffix));
        }
        // reqwest is built with `rustls-no-provider` in this workspace: building a client
        // panics unless a process-wide crypto provider is installed. Installing it again fails
        // harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = client::Client::new(&url, self.timeout, self.max_answer_bytes)?;
        Ok(EurekaRegistry {
            id: id.clone(),
            settings: watch::Settings {
                id,
                client,
                interval: self.interval,
                suffix: self.suffix,
            },
        })
    }
}

/// A registry of the applications of one Eureka server; see the crate docs.
pub struct EurekaRegistry {
    id: RegistryId,
    settings: watch::Settings,
}

impl std::fmt::Debug for EurekaRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EurekaRegistry")
            .field("id", &self.id)
            .field("url", &self.settings.client.base())
            .field("interval", &self.settings.interval)
            .field("suffix", &self.settings.suffix)
            .finish()
    }
}

impl Source<Registration> for EurekaRegistry {
    fn id(&self) -> &RegistryId {
        &self.id
    }

    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream {
        watch::stream(self.settings, shutdown)
    }
}

/// Why a [`Config`] cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The URL does not parse, is not http or https, or has a query or fragment.
    #[error("invalid Eureka URL {url:?}: {reason}")]
    Url {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `interval` or `timeout` is zero.
    #[error("{0} must be longer than zero")]
    ZeroDuration(&'static str),
    /// The hostname suffix is neither empty nor `.` followed by DNS labels.
    #[error("invalid hostname suffix {0:?}: expected empty or a dot and DNS labels (\".eureka\")")]
    Suffix(String),
    /// The HTTP client cannot be built (its TLS setup failed).
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(config: Config) -> Result<EurekaRegistry, BuildError> {
        config.build(RegistryId::new("Eureka"))
    }

    #[test]
    fn builds_valid_configs_and_refuses_bad_ones() {
        let ok = build(Config::default()).unwrap();
        assert_eq!(ok.id().as_str(), "Eureka");
        assert_eq!(ok.settings.id.as_str(), "Eureka");
        let https = Config {
            url: "https://user:secret@eureka.example.com/eureka/v2/".into(),
            ..Config::default()
        };
        let registry = build(https).unwrap();
        assert_eq!(
            registry.settings.client.base(),
            "https://user:***@eureka.example.com/eureka/v2"
        );
        for (url, why) in [
            ("eureka:8761", "scheme"),
            ("ftp://h/eureka", "scheme"),
            ("http://h/eureka?x=1", "query"),
            ("not a url", "relative URL"),
        ] {
            let cfg = Config {
                url: url.into(),
                ..Config::default()
            };
            let err = build(cfg).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
        }
        let zero = Config {
            interval: Duration::ZERO,
            ..Config::default()
        };
        assert!(matches!(
            build(zero),
            Err(BuildError::ZeroDuration("interval"))
        ));
        for suffix in ["eureka", ".bad suffix", "."] {
            let cfg = Config {
                suffix: suffix.into(),
                ..Config::default()
            };
            assert!(
                matches!(build(cfg), Err(BuildError::Suffix(_))),
                "{suffix:?}"
            );
        }
    }
}
