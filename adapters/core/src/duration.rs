//! Go-style durations (`100ms`, `1m30s`), as Istio's YAML and pilot-discovery's flags write them.

use std::time::Duration;

/// Parses one or more `<number><unit>` with units `ns`, `us`, `ms`, `s`, `m`, `h` (`100ms`,
/// `1m30s`, `0.5s`); a bare `0` is zero.
pub fn parse(s: &str) -> Result<Duration, String> {
    let err = || format!("{s:?} is not a duration: expected e.g. 100ms, 10s, 1m30s");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(err());
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (number, tail) = rest.split_at(split);
        let value: f64 = number.parse().map_err(|_| err())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        total += value * scale;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|_| err())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert!(parse("10").is_err());
        assert!(parse("fast").is_err());
        assert!(parse("").is_err());
    }
}
