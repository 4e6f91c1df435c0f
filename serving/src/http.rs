//! A plain blocking HTTP/1.1 GET over `std::net::TcpStream`, with a
//! deadline and a size limit: all a scrape needs, no async runtime.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Largest response body read; a larger page is an error, not a truncation.
pub const MAX_BODY: usize = 16 << 20;

/// `http://HOST:PORT/PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// Host name or address as written (`[::1]` keeps its brackets).
    pub host: String,
    /// Port (80 when the URL names none).
    pub port: u16,
    /// Path and query, starting with `/` (`/metrics` when the URL has none).
    pub path: String,
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.path)
    }
}

/// Why a URL was refused; each names the URL given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// Not `http://` (no TLS: scrapes are of this machine or its network).
    #[error("`{0}`: only http:// URLs are supported")]
    NotHttp(String),
    /// An IPv6 host without its closing bracket.
    #[error("`{0}`: unclosed `[`")]
    UnclosedBracket(String),
    /// No host before the port or path.
    #[error("`{0}`: no host")]
    NoHost(String),
    /// The port is not a number from 0 to 65535.
    #[error("`{url}`: `{port}` is not a port")]
    BadPort {
        /// The URL given.
        url: String,
        /// Its port as written.
        port: String,
    },
}

impl Url {
    /// Parse `http://host[:port][/path]`; a missing path is `/metrics`.
    pub fn parse(s: &str) -> Result<Url, UrlError> {
        let rest = s.strip_prefix("http://").ok_or_else(|| UrlError::NotHttp(s.to_string()))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/metrics"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| UrlError::UnclosedBracket(s.to_string()))?;
            (format!("[{h}]"), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(UrlError::NoHost(s.to_string()));
        }
        let port = match port {
            Some(p) => p.parse::<u16>().map_err(|_| UrlError::BadPort {
                url: s.to_string(),
                port: p.to_string(),
            })?,
            None => 80,
        };
        Ok(Url {
            host,
            port,
            path: path.to_string(),
        })
    }

    /// Whether the host is this machine's loopback (`localhost`, 127.0.0.0/8, `::1`).
    pub fn is_loopback(&self) -> bool {
        let h = self.host.trim_start_matches('[').trim_end_matches(']');
        h.eq_ignore_ascii_case("localhost") || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    fn addrs(&self) -> std::io::Result<Vec<SocketAddr>> {
        let h = self.host.trim_start_matches('[').trim_end_matches(']');
        Ok((h, self.port).to_socket_addrs()?.collect())
    }
}

/// Why a GET failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Connecting, writing or reading failed (refused, timed out, reset).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The whole exchange took longer than its deadline.
    #[error("no complete answer within {0:?}")]
    Deadline(Duration),
    /// The answer is not HTTP, or not a 200.
    #[error("{0}")]
    Protocol(String),
    /// The body is larger than [`MAX_BODY`].
    #[error("the page is larger than {} MiB", MAX_BODY >> 20)]
    TooLarge,
}

/// GET `url` and return the body of a 200 answer, all within `timeout`.
/// Asks for the plain text format (`vllm:` names keep their colon).
pub fn get(url: &Url, timeout: Duration) -> Result<String, HttpError> {
    let deadline = Instant::now() + timeout;
    let left = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
    let mut last = None;
    let mut stream = None;
    for addr in url.addrs()? {
        let Some(t) = left() else { break };
        match TcpStream::connect_timeout(&addr, t) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut stream = match (stream, last) {
        (Some(s), _) => s,
        (None, Some(e)) => return Err(e.into()),
        (None, None) => return Err(HttpError::Deadline(timeout)),
    };
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\nAccept: text/plain;version=0.0.4\r\nUser-Agent: gputrace\r\nConnection: close\r\n\r\n",
        url.path, url.host, url.port
    );
    stream.set_write_timeout(left())?;
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let t = left().ok_or(HttpError::Deadline(timeout))?;
        stream.set_read_timeout(Some(t))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > MAX_BODY + 64 * 1024 {
                    return Err(HttpError::TooLarge);
                }
                if response_complete(&raw) {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(HttpError::Deadline(timeout))
            }
            Err(e) => return Err(e.into()),
        }
    }
    body_of(&raw)
}

/// Split the head from the body: `(head, body start)`.
fn split_head(raw: &[u8]) -> Option<(&str, usize)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some((std::str::from_utf8(&raw[..end]).ok()?, end + 4))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// Whether a Content-Length answer has all its bytes (a server keeping the
/// connection open despite `Connection: close` must not cost the deadline).
fn response_complete(raw: &[u8]) -> bool {
    let Some((head, start)) = split_head(raw) else { return false };
    match header(head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(n) => raw.len() - start >= n,
        None => false,
    }
}

fn body_of(raw: &[u8]) -> Result<String, HttpError> {
    let (head, start) = split_head(raw).ok_or_else(|| HttpError::Protocol("not an HTTP answer".into()))?;
    let status = head.lines().next().unwrap_or("");
    let mut parts = status.split_ascii_whitespace();
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Protocol("not an HTTP answer".into()));
    }
    if code != "200" {
        return Err(HttpError::Protocol(format!("HTTP status {}", status.trim())));
    }
    let mut body = &raw[start..];
    let decoded;
    if header(head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        decoded = dechunk(body).ok_or_else(|| HttpError::Protocol("bad chunked body".into()))?;
        body = &decoded;
    } else if let Some(n) = header(head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        body = body
            .get(..n)
            .ok_or_else(|| HttpError::Protocol("the answer was cut short".into()))?;
    }
    if header(head, "content-encoding").is_some_and(|v| !v.eq_ignore_ascii_case("identity")) {
        return Err(HttpError::Protocol("the answer is compressed".into()));
    }
    if body.len() > MAX_BODY {
        return Err(HttpError::TooLarge);
    }
    String::from_utf8(body.to_vec()).map_err(|_| HttpError::Protocol("the page is not UTF-8".into()))
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:8000").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("127.0.0.1", 8000, "/metrics"));
        assert!(u.is_loopback());
        let u = Url::parse("http://[::1]:9/m?x=1").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("[::1]", 9, "/m?x=1"));
        assert!(u.is_loopback());
        assert!(Url::parse("http://localhost/metrics").unwrap().is_loopback());
        assert!(!Url::parse("http://10.0.0.7:8000/metrics").unwrap().is_loopback());
        for bad in ["https://x/", "ftp://x", "http://:80/", "http://x:99999/", "http://[::1/"] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    fn serve_once(answer: &'static [u8]) -> Url {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(answer);
            // Keep the connection open a while: the client must stop at Content-Length.
            std::thread::sleep(Duration::from_millis(500));
        });
        Url::parse(&format!("http://127.0.0.1:{port}/metrics")).unwrap()
    }

    #[test]
    fn content_length_chunked_and_errors() {
        let u = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        let t = Instant::now();
        assert_eq!(get(&u, Duration::from_secs(5)).unwrap(), "hello");
        assert!(t.elapsed() < Duration::from_millis(400));
        let u = serve_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n");
        assert_eq!(get(&u, Duration::from_secs(5)).unwrap(), "abcde");
        let u = serve_once(b"HTTP/1.0 404 Not Found\r\n\r\nno");
        assert!(get(&u, Duration::from_secs(5)).unwrap_err().to_string().contains("404"));
        let u = serve_once(b"SSH-2.0-OpenSSH\r\n\r\n");
        assert!(matches!(get(&u, Duration::from_secs(5)), Err(HttpError::Protocol(_))));
    }

    #[test]
    fn a_silent_server_costs_the_deadline_only() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let u = Url::parse(&format!("http://{}/metrics", l.local_addr().unwrap())).unwrap();
        let t = Instant::now();
        assert!(matches!(get(&u, Duration::from_millis(300)), Err(HttpError::Deadline(_))));
        assert!(t.elapsed() < Duration::from_secs(2));
        drop(l);
        assert!(matches!(get(&u, Duration::from_millis(300)), Err(HttpError::Io(_))));
    }
}
