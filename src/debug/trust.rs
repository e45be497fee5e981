//! Who may read the debug pages.
//!
//! `/debug/*` shows the whole mesh: every service and endpoint, every proxy's configuration
//! (certificate and key file paths included), every NACK. A peer on the loopback interface
//! (`127.0.0.0/8`, `::1`, or `::ffff:127.0.0.1` on a dual-stack socket) may read it: it runs
//! on this host, where `wayfinder request` and `curl localhost` work. Any other peer must
//! send `Authorization: Bearer TOKEN` with the token held in the file named by
//! `--debug-token-file`; without that flag no other peer is let in. Everyone else gets 403
//! with a body naming the flag. `/ready` stays open for probes (it says only "ready" or which
//! registries are not), and the monitoring port's `/metrics` and `/version` are not behind
//! this rule: Prometheus scrapes them from other hosts.
//!
//! The peer is the TCP peer (`ConnectInfo<SocketAddr>`, set by the server's accept loop); a
//! request without one is not loopback. Forwarding headers are not read: a reverse proxy on
//! this host in front of the debug port would make every request loopback, so put one, if
//! any, in front of a port bound elsewhere.
//!
//! The token is compared without a timing signal: the server keeps an HMAC-SHA256 of it
//! under a random key made at start, and checks a presented token with `ring::hmac::verify`,
//! whose comparison takes the same time wherever the first difference is and whatever the
//! presented token's length.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ring::hmac;
use ring::rand::SystemRandom;

/// The longest token a file may hold.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// The token of `--debug-token-file`, kept as an HMAC under a key of this process.
#[derive(Clone)]
pub struct DebugToken {
    key: hmac::Key,
    tag: hmac::Tag,
}

impl std::fmt::Debug for DebugToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DebugToken(…)")
    }
}

/// A token file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("cannot read the token file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds nothing but whitespace.
    #[error("the token file {} is empty", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file is longer than [`MAX_TOKEN_BYTES`].
    #[error("the token file {} holds more than {MAX_TOKEN_BYTES} bytes", path.display())]
    TooLong {
        /// The file.
        path: PathBuf,
    },
    /// The token has characters an `Authorization` header cannot carry as they are.
    #[error(
        "the token in {} has characters other than visible ASCII (no spaces or control \
         characters inside it)", path.display()
    )]
    NotVisible {
        /// The file.
        path: PathBuf,
    },
    /// No random key could be made.
    #[error("no random key for the debug token: the system's random source failed")]
    Random,
}

/// Reads a token file: its content without leading and trailing whitespace (so a final
/// newline does not count), which must be 1 to [`MAX_TOKEN_BYTES`] visible ASCII characters.
/// `wayfinder request --token-file` reads the same way.
pub fn read_token_file(path: &Path) -> Result<String, TokenError> {
    use std::io::Read;
    let read = |source| TokenError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    // One byte more than allowed tells a file that is too long, without reading all of it
    // (a token file pointing at /dev/zero must not take the memory).
    file.take(MAX_TOKEN_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLong {
            path: path.to_owned(),
        });
    }
    let token = bytes.trim_ascii();
    if token.is_empty() {
        return Err(TokenError::Empty {
            path: path.to_owned(),
        });
    }
    if !token.iter().all(u8::is_ascii_graphic) {
        return Err(TokenError::NotVisible {
            path: path.to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(token).into_owned())
}

impl DebugToken {
    /// Reads the token from `path` (see [`read_token_file`]).
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        Self::new(&read_token_file(path)?)
    }

    fn new(token: &str) -> Result<Self, TokenError> {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new())
            .map_err(|_| TokenError::Random)?;
        let tag = hmac::sign(&key, token.as_bytes());
        Ok(Self { key, tag })
    }

    fn matches(&self, presented: &[u8]) -> bool {
        hmac::verify(&self.key, presented, self.tag.as_ref()).is_ok()
    }
}

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No token is configured and the peer is not loopback.
    NoTokenConfigured,
    /// The request carries no bearer token.
    Missing,
    /// The request's bearer token is not the configured one.
    Wrong,
}

impl Refusal {
    fn body(&self) -> &'static str {
        match self {
            Refusal::NoTokenConfigured => {
                "forbidden: the debug pages answer only loopback peers; to let other hosts in, \
                 start the server with --debug-token-file and send that token as \
                 `Authorization: Bearer TOKEN` (wayfinder request --token-file)\n"
            }
            Refusal::Missing => {
                "forbidden: from another host the debug pages need `Authorization: Bearer TOKEN` \
                 with the token of the server's --debug-token-file (wayfinder request \
                 --token-file)\n"
            }
            Refusal::Wrong => {
                "forbidden: the bearer token is not the one in the server's --debug-token-file\n"
            }
        }
    }
}

/// Whether `peer` may read the debug pages with `headers`.
pub(crate) fn check(
    token: Option<&DebugToken>,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    if peer.is_some_and(|p| p.ip().to_canonical().is_loopback()) {
        return Ok(());
    }
    let Some(token) = token else {
        return Err(Refusal::NoTokenConfigured);
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer(v.as_bytes()))
        .ok_or(Refusal::Missing)?;
    if token.matches(presented) {
        Ok(())
    } else {
        Err(Refusal::Wrong)
    }
}

/// Whether `peer` may load `/ui`, a page that holds no data and reads the debug pages with
/// the token a user gives it: loopback peers, and other peers when a token is configured
/// (without one they could read nothing). The refusal's body is the debug pages'.
pub(crate) fn may_ask(
    token: Option<&DebugToken>,
    peer: Option<SocketAddr>,
) -> Result<(), &'static str> {
    let loopback = peer.is_some_and(|p| p.ip().to_canonical().is_loopback());
    if loopback || token.is_some() {
        Ok(())
    } else {
        Err(Refusal::NoTokenConfigured.body())
    }
}

/// The credentials of `Bearer CREDENTIALS` (the scheme is case-insensitive, RFC 9110).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// The peer's address, which axum's `ConnectInfo` gives the request.
pub(crate) fn peer(request: &Request) -> Option<SocketAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

/// The middleware in front of the debug pages (see the module docs).
pub(crate) async fn require(
    State(token): State<Option<DebugToken>>,
    request: Request,
    next: Next,
) -> Response {
    let peer = peer(&request);
    match check(token.as_ref(), peer, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            let path = request.uri().path();
            let peer = peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string());
            if refusal == Refusal::Wrong {
                tracing::warn!(%peer, path, "debug page refused: wrong bearer token");
            } else {
                tracing::debug!(%peer, path, ?refusal, "debug page refused");
            }
            (StatusCode::FORBIDDEN, refusal.body()).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(authorization: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = authorization {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn peer(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn loopback_peers_need_no_token() {
        for p in [
            "127.0.0.1:5000",
            "127.8.9.10:1",
            "[::1]:5000",
            "[::ffff:127.0.0.1]:5000",
        ] {
            assert_eq!(check(None, peer(p), &headers(None)), Ok(()), "{p}");
        }
    }

    #[test]
    fn other_peers_need_the_token() {
        let token = DebugToken::new("s3cret-token").unwrap();
        let other = peer("198.51.100.7:4000");
        let check = |t: Option<&DebugToken>, auth| check(t, other, &headers(auth));
        assert_eq!(check(None, None), Err(Refusal::NoTokenConfigured));
        assert_eq!(
            check(None, Some("Bearer s3cret-token")),
            Err(Refusal::NoTokenConfigured)
        );
        assert_eq!(check(Some(&token), None), Err(Refusal::Missing));
        assert_eq!(
            check(Some(&token), Some("Basic abc")),
            Err(Refusal::Missing)
        );
        assert_eq!(check(Some(&token), Some("Bearer ")), Err(Refusal::Missing));
        assert_eq!(
            check(Some(&token), Some("Bearer s3cret-tokeN")),
            Err(Refusal::Wrong)
        );
        assert_eq!(
            check(Some(&token), Some("Bearer s3cret")),
            Err(Refusal::Wrong)
        );
        assert_eq!(check(Some(&token), Some("Bearer s3cret-token")), Ok(()));
        assert_eq!(check(Some(&token), Some("bearer  s3cret-token ")), Ok(()));
        let mapped = peer("[::ffff:198.51.100.7]:4000");
        assert_eq!(
            super::check(Some(&token), mapped, &headers(None)),
            Err(Refusal::Missing)
        );
        assert_eq!(
            super::check(Some(&token), None, &headers(None)),
            Err(Refusal::Missing),
            "a request without a peer address is not loopback"
        );
    }

    #[test]
    fn the_ui_answers_those_who_could_read_the_pages() {
        let token = DebugToken::new("s3cret-token").unwrap();
        assert_eq!(may_ask(None, peer("127.0.0.1:5000")), Ok(()));
        assert_eq!(may_ask(Some(&token), peer("198.51.100.7:4000")), Ok(()));
        let refused = may_ask(None, peer("198.51.100.7:4000")).unwrap_err();
        assert!(refused.contains("--debug-token-file"), "{refused}");
        assert!(
            may_ask(None, None).is_err(),
            "no peer address is not loopback"
        );
    }

    #[test]
    fn every_refusal_names_the_flag() {
        for r in [Refusal::NoTokenConfigured, Refusal::Missing, Refusal::Wrong] {
            assert!(r.body().contains("--debug-token-file"), "{r:?}");
        }
    }

    #[test]
    fn token_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, content: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, content).unwrap();
            path
        };
        assert_eq!(
            read_token_file(&file("ok", b"  abc.DEF-123_~+/=\n")).unwrap(),
            "abc.DEF-123_~+/="
        );
        let err = |path: PathBuf| read_token_file(&path).unwrap_err().to_string();
        assert!(err(file("empty", b" \n\n")).contains("is empty"));
        assert!(err(file("space", b"a b")).contains("visible ASCII"));
        assert!(err(file("utf8", "tökén".as_bytes())).contains("visible ASCII"));
        assert!(err(file("long", &[b'a'; MAX_TOKEN_BYTES + 1])).contains("more than 4096"));
        assert!(read_token_file(&file("max", &[b'a'; MAX_TOKEN_BYTES])).is_ok());
        let missing = dir.path().join("missing");
        assert!(err(missing.clone()).contains(&*missing.to_string_lossy()));
        assert!(
            read_token_file(Path::new("/dev/zero"))
                .unwrap_err()
                .to_string()
                .contains("more than")
        );
        assert_eq!(
            format!("{:?}", DebugToken::new("x").unwrap()),
            "DebugToken(…)"
        );
    }
}
