//! Query parameters of reads, parsed as Consul parses them: `wait` is a Go duration (default 5m,
//! at most 10m, plus a random jitter of up to a sixteenth), `index` an unsigned integer,
//! `passing` a Go bool or present without a value, `tag` repeatable.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

/// The default `wait` of a blocking query.
const DEFAULT_WAIT: Duration = Duration::from_secs(5 * 60);
/// The longest `wait` of a blocking query.
const MAX_WAIT: Duration = Duration::from_secs(10 * 60);

/// Parsed query parameters.
#[derive(Debug, Default)]
pub(super) struct Query {
    pub(super) dc: Option<String>,
    pub(super) index: u64,
    /// `wait`, with Consul's default and cap applied (no jitter).
    pub(super) wait: Duration,
    pub(super) stale: bool,
    pub(super) consistent: bool,
    /// `passing` as given: `Some("")` when present without a value.
    pub(super) passing: Option<String>,
    pub(super) tags: Vec<String>,
    pub(super) token: Option<String>,
}

impl Query {
    /// Parses a raw query string; `Err` holds Consul's 400 body.
    pub(super) fn parse(raw: Option<&str>) -> Result<Query, &'static str> {
        let mut q = Query {
            wait: DEFAULT_WAIT,
            ..Query::default()
        };
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (key, value) = (decode(key), decode(value));
            match key.as_str() {
                "dc" if q.dc.is_none() => q.dc = Some(value),
                "index" if !value.is_empty() => {
                    q.index = value.parse().map_err(|_| "Invalid index")?;
                }
                "wait" if !value.is_empty() => {
                    let wait = parse_go_duration(&value).ok_or("Invalid wait time")?;
                    q.wait = if wait.is_zero() {
                        DEFAULT_WAIT
                    } else {
                        wait.min(MAX_WAIT)
                    };
                }
                "stale" => q.stale = true,
                "consistent" => q.consistent = true,
                "passing" if q.passing.is_none() => q.passing = Some(value),
                "tag" => q.tags.push(value),
                "token" if q.token.is_none() && !value.is_empty() => q.token = Some(value),
                _ => {}
            }
        }
        if q.stale && q.consistent {
            return Err("Cannot specify ?stale with ?consistent, conflicting semantics.");
        }
        Ok(q)
    }

    /// `X-Consul-Effective-Consistency` for this request.
    pub(super) fn consistency(&self) -> &'static str {
        if self.stale {
            "stale"
        } else if self.consistent {
            "consistent"
        } else {
            "leader"
        }
    }

    /// Whether `passing` asks for passing instances only; `Err` holds Consul's 400 body.
    pub(super) fn passing(&self) -> Result<bool, &'static str> {
        match self.passing.as_deref() {
            None => Ok(false),
            Some("" | "1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(_) => Err("Invalid value for ?passing"),
        }
    }

    /// How long a blocking query may wait: `wait` plus a random jitter of up to wait/16.
    pub(super) fn timeout(&self) -> Duration {
        let bound = u64::try_from(self.wait.as_nanos() / 16).unwrap_or(u64::MAX);
        let jitter = match bound {
            0 => 0,
            b => RandomState::new().hash_one(0u8) % b,
        };
        self.wait + Duration::from_nanos(jitter)
    }
}

/// Parses a Go duration (`300ms`, `1.5h`, `1m30s`, `-2s`); negative ones become zero.
pub(super) fn parse_go_duration(s: &str) -> Option<Duration> {
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number = &rest[..digits];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        nanos += value * scale;
    }
    if negative || nanos <= 0.0 {
        return Some(Duration::ZERO);
    }
    Some(Duration::from_secs_f64((nanos / 1e9).min(1e12)))
}

/// Percent-decodes a query component, `+` meaning a space (as Go's `url.ParseQuery`).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let pair = bytes.get(i + 1).zip(bytes.get(i + 2));
                match pair.and_then(|(hi, lo)| hex_pair(*hi, *lo)) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_pair(hi: u8, lo: u8) -> Option<u8> {
    let digit = |b: u8| char::from(b).to_digit(16);
    Some(u8::try_from(digit(hi)? * 16 + digit(lo)?).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_go_duration("10s"), Some(ms(10_000)));
        assert_eq!(parse_go_duration("5m"), Some(ms(300_000)));
        assert_eq!(parse_go_duration("250ms"), Some(ms(250)));
        assert_eq!(parse_go_duration("1m30s"), Some(ms(90_000)));
        assert_eq!(parse_go_duration("1.5h"), Some(ms(5_400_000)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("-3s"), Some(Duration::ZERO));
        for bad in ["", "10", "s", "1x", "1..5s", "+"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn query_parsing() {
        let q = Query::parse(Some("dc=dc%202&index=7&wait=20m&tag=a&tag=b+c&passing")).unwrap();
        assert_eq!(q.dc.as_deref(), Some("dc 2"));
        assert_eq!((q.index, q.wait), (7, MAX_WAIT));
        assert_eq!(q.tags, ["a", "b c"]);
        assert_eq!(q.passing(), Ok(true));
        assert!(q.timeout() >= MAX_WAIT && q.timeout() <= MAX_WAIT + MAX_WAIT / 16);
        assert_eq!(Query::parse(None).unwrap().wait, DEFAULT_WAIT);
        assert_eq!(Query::parse(Some("index=x")).unwrap_err(), "Invalid index");
        assert_eq!(
            Query::parse(Some("wait=1y")).unwrap_err(),
            "Invalid wait time"
        );
        let bad = Query::parse(Some("passing=maybe")).unwrap();
        assert_eq!(bad.passing(), Err("Invalid value for ?passing"));
        assert!(Query::parse(Some("stale&consistent")).is_err());
    }
}
