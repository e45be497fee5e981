//! HTTP answers as the Consul and Eureka targets read them: text a person can write and read,
//! so that seeds are real answers pasted in.
//!
//! ```text
//! GET /v1/health/service/web?dc=dc1 200
//! X-Consul-Index: 12
//! X-Consul-KnownLeader: true
//!
//! [{"Node": …}]
//! %%
//! GET /v1/catalog/services 200
//! …
//! ```
//!
//! Records are separated by a line `%%`. Each starts with a request line (`GET`, the path
//! and query, the answer's status), then header lines up to an empty line, then the body. A
//! record whose request line does not read so is skipped; a missing status is 200.

/// One answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The path asked, without the query.
    pub path: &'a str,
    /// The query string, without `?`.
    pub query: &'a str,
    /// The HTTP status.
    pub status: u16,
    /// Header names and values, as written.
    pub headers: Vec<(&'a [u8], &'a [u8])>,
    /// The body.
    pub body: &'a [u8],
}

impl<'a> Record<'a> {
    /// The value of the query parameter `name` (the first, not percent-decoded).
    pub fn query(&self, name: &str) -> Option<&'a str> {
        self.query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    }
}

/// The records of `data`.
pub fn records(data: &[u8]) -> Vec<Record<'_>> {
    super::split(data).filter_map(record).collect()
}

fn record(text: &[u8]) -> Option<Record<'_>> {
    let (request, mut rest) = line(text);
    let request = std::str::from_utf8(request).ok()?;
    let mut words = request.split(' ');
    if words.next()? != "GET" {
        return None;
    }
    let target = words.next()?;
    let status = words.next().map_or(Some(200), |s| s.parse().ok())?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Vec::new();
    loop {
        let (header, after) = line(rest);
        rest = after;
        if header.is_empty() {
            break;
        }
        if let Some(colon) = header.iter().position(|&b| b == b':') {
            headers.push((&header[..colon], header[colon + 1..].trim_ascii()));
        }
    }
    Some(Record {
        path,
        query,
        status,
        headers,
        body: rest,
    })
}

/// The first line of `text` (without its `\n`) and what follows it.
fn line(text: &[u8]) -> (&[u8], &[u8]) {
    match text.iter().position(|&b| b == b'\n') {
        Some(at) => (&text[..at], &text[at + 1..]),
        None => (text, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_request_line_headers_and_body_of_each_record() {
        let data = b"GET /v1/catalog/services?stale&dc=dc2 200\nX-Consul-Index: 7\n\n{\"web\": []}\n%%\nGET /apps/delta\n\n\n%%\nPOST /x 200\n\n{}";
        let records = records(data);
        assert_eq!(records.len(), 2, "the POST is skipped");
        assert_eq!(records[0].path, "/v1/catalog/services");
        assert_eq!(records[0].query("dc"), Some("dc2"));
        assert_eq!(records[0].query("stale"), None);
        assert_eq!(records[0].headers, [(&b"X-Consul-Index"[..], &b"7"[..])]);
        assert_eq!(records[0].body, b"{\"web\": []}");
        assert_eq!((records[1].path, records[1].status), ("/apps/delta", 200));
        assert_eq!(
            records[1].body, b"",
            "the separator takes the last line break"
        );
    }
}
