//! A small HTTP/1.1 client over a TCP stream, for what the kube client hides: raw list bodies,
//! watch lines as sent, and status codes.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use serde_json::Value;

/// An answer whose body is read as it comes.
pub(crate) struct Raw {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    /// Bytes left in the current chunk (chunked) or in the body (`Content-Length`).
    left: Option<usize>,
    buffer: Vec<u8>,
    ended: bool,
}

/// Sends `method path` (path with query) to `url` with an optional JSON body.
pub(crate) async fn request(
    url: &str,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
) -> Raw {
    let addr = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some((content_type, body)) = body {
        head += &format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        );
    }
    head += "\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    if let Some((_, body)) = body {
        stream.write_all(body.as_bytes()).await.unwrap();
    }
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let left = if chunked {
        Some(0)
    } else {
        header("content-length").map(|v| v.parse().unwrap())
    };
    Raw {
        status,
        headers,
        reader,
        chunked,
        left,
        buffer: Vec::new(),
        ended: false,
    }
}

/// `GET path`.
pub(crate) async fn get(url: &str, path: &str) -> Raw {
    request(url, "GET", path, None).await
}

impl Raw {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// More body bytes into the buffer; false at the end of the body.
    async fn fill(&mut self) -> bool {
        if self.ended {
            return false;
        }
        if self.chunked && self.left == Some(0) {
            let mut size = String::new();
            self.reader.read_line(&mut size).await.unwrap();
            if size.trim().is_empty() {
                size.clear();
                self.reader.read_line(&mut size).await.unwrap();
            }
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                self.ended = true;
                return false;
            }
            self.left = Some(n);
        }
        let mut buf = vec![0; 64 * 1024];
        let want = self.left.map_or(buf.len(), |l| l.min(buf.len()));
        let n = self.reader.read(&mut buf[..want]).await.unwrap_or(0);
        if n == 0 {
            self.ended = true;
            return false;
        }
        self.buffer.extend_from_slice(&buf[..n]);
        if let Some(left) = &mut self.left {
            *left -= n;
            if *left == 0 && !self.chunked {
                self.ended = true;
            }
        }
        true
    }

    /// The next line of the body as JSON (a watch event); `None` once the body ends.
    pub(crate) async fn next_json_line(&mut self) -> Option<Value> {
        loop {
            if let Some(at) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=at).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some(serde_json::from_slice(&line).unwrap());
            }
            if !self.fill().await {
                if self.buffer.iter().all(u8::is_ascii_whitespace) {
                    return None;
                }
                let rest = std::mem::take(&mut self.buffer);
                return Some(serde_json::from_slice(&rest).unwrap());
            }
        }
    }

    /// The whole body as JSON.
    pub(crate) async fn json(mut self) -> Value {
        while self.fill().await {}
        serde_json::from_slice(&self.buffer).unwrap()
    }
}
