//! A minimal HTTP endpoint for the exposition: `GET /metrics` answers the latest text
//! it was handed, anything else a short 404 or 405. It serves nothing but metrics.
//!
//! Bounded by construction: one accepting thread, a fixed number of worker threads fed
//! through a bounded queue (a connection that finds the queue full is closed at once),
//! a request head of at most [`MAX_HEAD`] bytes, and a deadline per connection for
//! reading the request and writing the answer. A slow or malformed client costs one
//! worker at most [`Limits::deadline`], and never the traced job, which runs in another
//! process.

use crossbeam::channel::{bounded, Receiver, TrySendError};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes of a request head read at most; a longer head gets 431.
pub const MAX_HEAD: usize = 8 * 1024;

/// The text the endpoint serves, replaced whole by [`Content::set`].
#[derive(Debug, Default)]
pub struct Content {
    text: Mutex<Arc<str>>,
    served: AtomicU64,
    refused: AtomicU64,
}

impl Content {
    /// Replace the served text.
    pub fn set(&self, text: String) {
        *self.text.lock().unwrap_or_else(|p| p.into_inner()) = Arc::from(text);
    }

    /// The served text.
    pub fn get(&self) -> Arc<str> {
        self.text.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Scrapes answered with the metrics so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Connections closed unanswered because every worker was busy and the queue full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// How much the endpoint takes on.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Worker threads answering requests.
    pub workers: usize,
    /// Accepted connections waiting for a worker.
    pub queue: usize,
    /// Time a connection may take to send its request and receive the answer.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            workers: 2,
            queue: 16,
            deadline: Duration::from_secs(5),
        }
    }
}

/// Parse a listen address: `PORT` or `:PORT` is loopback (`127.0.0.1:PORT`); `HOST:PORT`
/// (`0.0.0.0:9400`, `[::1]:9400`, `localhost:9400`) is taken as given.
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    let port_only = t.strip_prefix(':').unwrap_or(t);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    match t.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| format!("`{s}` resolves to no address")),
        Err(e) => Err(format!("`{s}` is not PORT, :PORT or HOST:PORT ({e})")),
    }
}

/// A running endpoint; dropping it stops the threads (within about 50 ms, plus any
/// answer in progress).
pub struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Endpoint {
    /// Listen on `addr` and serve `content`.
    pub fn bind(addr: SocketAddr, content: Arc<Content>, limits: Limits) -> std::io::Result<Endpoint> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = bounded::<TcpStream>(limits.queue.max(1));
        let mut threads = Vec::new();
        for i in 0..limits.workers.max(1) {
            let (rx, content, stop) = (rx.clone(), content.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("gputrace-metrics-{i}"))
                    .spawn(move || worker(rx, &content, &stop, limits.deadline))?,
            );
        }
        drop(rx);
        let accept_stop = stop.clone();
        threads.push(std::thread::Builder::new().name("gputrace-metrics-accept".into()).spawn(move || {
            while !accept_stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => match tx.try_send(stream) {
                        Ok(()) => {}
                        Err(TrySendError::Full(stream)) | Err(TrySendError::Disconnected(stream)) => {
                            content.refused.fetch_add(1, Ordering::Relaxed);
                            drop(stream);
                        }
                    },
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                    // Out of descriptors, a connection reset before accept: wait and go on.
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        })?);
        Ok(Endpoint { addr, stop, threads })
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn worker(rx: Receiver<TcpStream>, content: &Content, stop: &AtomicBool, deadline: Duration) {
    while !stop.load(Ordering::Relaxed) {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(stream) => {
                // A client that breaks the connection is its own problem.
                let _ = answer(stream, content, deadline);
            }
            Err(crossbeam::channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam::channel::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Metrics { head_only: bool },
    Index { head_only: bool },
    NotFound,
    BadMethod,
    Malformed,
    TooLarge,
}

/// Read a request head (up to the blank line) within `deadline`.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> std::io::Result<Request> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = find_head_end(&head) {
            return Ok(parse_head(&head[..end]));
        }
        if head.len() > MAX_HEAD {
            return Ok(Request::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(Request::Malformed);
        }
        head.extend_from_slice(&buf[..n]);
    }
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .or_else(|| b.windows(2).position(|w| w == b"\n\n"))
}

fn parse_head(head: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(head) else {
        return Request::Malformed;
    };
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Request::Malformed;
    };
    if parts.next().is_some() || !version.starts_with("HTTP/1.") {
        return Request::Malformed;
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Request::BadMethod,
    };
    let path = target.split('?').next().unwrap_or("");
    match path {
        "/metrics" => Request::Metrics { head_only },
        "/" => Request::Index { head_only },
        _ => Request::NotFound,
    }
}

fn answer(mut stream: TcpStream, content: &Content, deadline: Duration) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let until = Instant::now() + deadline;
    let request = read_head(&mut stream, until)?;
    stream.set_write_timeout(Some(deadline))?;
    let index = "gputrace metrics endpoint: GET /metrics\n";
    let (status, body, head_only, kind): (&str, Arc<str>, bool, &str) = match request {
        Request::Metrics { head_only } => {
            content.served.fetch_add(1, Ordering::Relaxed);
            ("200 OK", content.get(), head_only, "text/plain; version=0.0.4; charset=utf-8")
        }
        Request::Index { head_only } => ("200 OK", Arc::from(index), head_only, "text/plain; charset=utf-8"),
        Request::NotFound => (
            "404 Not Found",
            Arc::from("not found: the metrics are at /metrics\n"),
            false,
            "text/plain",
        ),
        Request::BadMethod => ("405 Method Not Allowed", Arc::from("only GET and HEAD\n"), false, "text/plain"),
        Request::Malformed => ("400 Bad Request", Arc::from("bad request\n"), false, "text/plain"),
        Request::TooLarge => (
            "431 Request Header Fields Too Large",
            Arc::from("request head too large\n"),
            false,
            "text/plain",
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    // The write timeout bounds each write; the loop bounds the whole answer.
    let mut rest = &out[..];
    while !rest.is_empty() {
        if Instant::now() >= until + deadline {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        let n = stream.write(rest)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        rest = &rest[n..];
    }
    stream.flush()?;
    // Closing with unread request bytes would reset the connection before the client
    // reads the answer: end our side, then drain a little of theirs.
    stream.shutdown(std::net::Shutdown::Write)?;
    stream.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < 64 * 1024 {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn endpoint(limits: Limits) -> (Endpoint, Arc<Content>) {
        let content = Arc::new(Content::default());
        content.set("m_total 1\n".into());
        let e = Endpoint::bind(parse_listen_addr("0").unwrap(), content.clone(), limits).unwrap();
        (e, content)
    }

    #[test]
    fn serves_metrics_and_nothing_else() {
        let (e, content) = endpoint(Limits::default());
        assert!(e.addr().ip().is_loopback(), "loopback unless an address is given");
        let ok = get(e.addr(), b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("version=0.0.4") && ok.ends_with("\r\n\r\nm_total 1\n"), "{ok}");
        content.set("m_total 2\n".into());
        assert!(get(e.addr(), b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").ends_with("m_total 2\n"));
        let head = get(e.addr(), b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.contains("Content-Length: 10\r\n") && head.ends_with("\r\n\r\n"), "{head}");
        assert!(get(e.addr(), b"GET /etc/passwd HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(e.addr(), b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(e.addr(), b"\x00\xff garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
        let huge = [b"GET /metrics HTTP/1.1\r\nX: ".as_slice(), &[b'a'; 20_000]].concat();
        assert!(get(e.addr(), &huge).starts_with("HTTP/1.1 431"));
        assert_eq!(content.served(), 3);
    }

    #[test]
    fn a_silent_client_does_not_stop_the_others() {
        let (e, _) = endpoint(Limits {
            workers: 1,
            queue: 4,
            deadline: Duration::from_millis(300),
        });
        // Holds the only worker until its deadline, sending nothing.
        let silent = TcpStream::connect(e.addr()).unwrap();
        let started = Instant::now();
        let ok = get(e.addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(ok.ends_with("m_total 1\n"), "{ok}");
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(silent);
    }

    #[test]
    fn a_full_queue_refuses_instead_of_growing() {
        let (e, content) = endpoint(Limits {
            workers: 1,
            queue: 1,
            deadline: Duration::from_millis(500),
        });
        let held: Vec<TcpStream> = (0..6).map(|_| TcpStream::connect(e.addr()).unwrap()).collect();
        let until = Instant::now() + Duration::from_secs(5);
        while content.refused() == 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(content.refused() >= 1, "connections beyond the worker and the queue are closed");
        drop(held);
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let mut s = TcpStream::connect(e.addr()).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            if out.ends_with("m_total 1\n") {
                break;
            }
            assert!(Instant::now() < until, "the endpoint recovers once the flood is over");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen_addr("9400").unwrap(), SocketAddr::from(([127, 0, 0, 1], 9400)));
        assert_eq!(parse_listen_addr(":9400").unwrap(), SocketAddr::from(([127, 0, 0, 1], 9400)));
        assert_eq!(parse_listen_addr("0.0.0.0:9400").unwrap(), SocketAddr::from(([0, 0, 0, 0], 9400)));
        assert!(parse_listen_addr("[::1]:9400").unwrap().ip().is_loopback());
        assert!(parse_listen_addr("nonsense").is_err());
        assert!(parse_listen_addr("70000").is_err());
    }
}
