//! A minimal HTTP endpoint for the exposition: `GET /metrics` answers the latest text
//! it was handed, anything else a short 404 or 405. It serves nothing but metrics.
//!
//! One thread runs an event loop (`mio`: epoll on Linux) over the listener and every
//! open connection, so no client can hold up another: a scrape is read and answered as
//! soon as its bytes arrive, however many silent, slow or busy connections are open.
//! Bounded by construction:
//!
//! - at most [`Limits::max_connections`] connections are open; a new one beyond that
//!   closes the oldest connection still waiting for its request (the idle and slow
//!   ones), or, if every one is being answered, the oldest of those;
//! - a connection has [`Limits::read_deadline`] (milliseconds) to send its whole
//!   request head, of at most [`MAX_HEAD`] bytes, and [`Limits::write_deadline`] to
//!   take the answer; past it, it is closed;
//! - each connection holds its request head (at most [`MAX_HEAD`] bytes) and the
//!   head of its answer; the body is the served text, shared.
//!
//! The endpoint runs in `gputrace run`, never in the traced job.

use mio::net::{TcpListener as MioListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes of a request head read at most; a longer head gets 431.
pub const MAX_HEAD: usize = 8 * 1024;

/// Request bytes read and dropped after the answer, so that closing does not reset
/// the connection before the client has read the answer.
const DRAIN_BYTES: usize = 64 * 1024;
/// How long a connection is kept for that after the answer.
const DRAIN_TIME: Duration = Duration::from_millis(100);

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

    /// Connections closed unanswered: shed to make room for a new one, or past their
    /// deadline.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// How much the endpoint takes on.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once; a new one beyond sheds the oldest idle one.
    pub max_connections: usize,
    /// Time a connection has, from its opening, to send its whole request head.
    pub read_deadline: Duration,
    /// Time a connection has, once its request is read, to take the whole answer.
    pub write_deadline: Duration,
}

impl Default for Limits {
    /// 64 connections; 1000 ms to send a request (Prometheus sends its few hundred
    /// bytes at once), 5 s to take the answer.
    fn default() -> Self {
        Limits {
            max_connections: 64,
            read_deadline: Duration::from_millis(1000),
            write_deadline: Duration::from_secs(5),
        }
    }
}

/// Why a listen address was refused; each names the text given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenAddrError {
    /// The host resolves, but to no address.
    #[error("`{0}` resolves to no address")]
    NoAddress(String),
    /// Neither a port nor a host and port that resolves.
    #[error("`{given}` is not PORT, :PORT or HOST:PORT ({source})")]
    Unresolved {
        /// The text given.
        given: String,
        /// Why it did not resolve.
        #[source]
        source: std::io::Error,
    },
}

/// Parse a listen address: `PORT` or `:PORT` is loopback (`127.0.0.1:PORT`); `HOST:PORT`
/// (`0.0.0.0:9400`, `[::1]:9400`, `localhost:9400`) is taken as given.
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, ListenAddrError> {
    let t = s.trim();
    let port_only = t.strip_prefix(':').unwrap_or(t);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    match t.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| ListenAddrError::NoAddress(s.to_string())),
        Err(source) => Err(ListenAddrError::Unresolved {
            given: s.to_string(),
            source,
        }),
    }
}

/// A running endpoint; dropping it stops its thread (at once: the loop is woken).
pub struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX);

impl Endpoint {
    /// Listen on `addr` and serve `content`.
    pub fn bind(addr: SocketAddr, content: Arc<Content>, limits: Limits) -> std::io::Result<Endpoint> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let mut listener = MioListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let mut server = Server {
            poll,
            listener,
            conns: BTreeMap::new(),
            next_id: 0,
            content,
            limits: Limits {
                max_connections: limits.max_connections.max(1),
                ..limits
            },
            accept_backlog: false,
        };
        let loop_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("gputrace-metrics".into())
            .spawn(move || server.run(&loop_stop))?;
        Ok(Endpoint {
            addr,
            stop,
            waker,
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where a connection is in its one request.
enum Stage {
    /// Reading the request head (`head` so far).
    Reading { head: Vec<u8> },
    /// Writing `answer` from `sent`.
    Writing { answer: Answer, sent: usize },
    /// Answer sent and our side shut: reading and dropping what the client still
    /// sends (`drained` bytes so far) until it closes.
    Draining { drained: usize },
}

struct Conn {
    stream: TcpStream,
    stage: Stage,
    /// When the current stage must be over.
    deadline: Instant,
}

/// What one step of a connection leaves.
enum Next {
    /// Waiting for the socket.
    Wait,
    /// Done (or broken): close it.
    Close,
}

/// The event loop's state. Connections are keyed by an id that only grows, so the
/// first one in the map is the oldest.
struct Server {
    poll: Poll,
    listener: MioListener,
    conns: BTreeMap<usize, Conn>,
    next_id: usize,
    content: Arc<Content>,
    limits: Limits,
    /// Accepting failed for want of descriptors: try again at the next turn.
    accept_backlog: bool,
}

impl Server {
    fn run(&mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(256);
        while !stop.load(Ordering::Relaxed) {
            let timeout = self.next_timeout();
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                // The poll itself failed: nothing can be served any more.
                return;
            }
            let mut accept = std::mem::take(&mut self.accept_backlog);
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => accept = true,
                    WAKER => {}
                    Token(id) => self.step(id),
                }
            }
            if accept {
                self.accept_all();
            }
            self.expire(Instant::now());
        }
    }

    /// Until the nearest deadline (at most a second; 20 ms while accepting is held up).
    fn next_timeout(&self) -> Duration {
        let now = Instant::now();
        let nearest = self
            .conns
            .values()
            .map(|c| c.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(1));
        let cap = if self.accept_backlog {
            Duration::from_millis(20)
        } else {
            Duration::from_secs(1)
        };
        nearest.min(cap)
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // Out of descriptors, or a connection reset before it was accepted: make
                // room and come back at the next turn (the listener's readiness is only
                // reported again when a new connection arrives).
                Err(_) => {
                    self.shed_one();
                    self.accept_backlog = true;
                    return;
                }
            }
        }
    }

    fn admit(&mut self, mut stream: TcpStream) {
        if self.conns.len() >= self.limits.max_connections {
            self.shed_one();
        }
        let id = self.next_id;
        self.next_id += 1;
        if self
            .poll
            .registry()
            .register(&mut stream, Token(id), Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            return;
        }
        let conn = Conn {
            stream,
            stage: Stage::Reading { head: Vec::new() },
            deadline: Instant::now() + self.limits.read_deadline,
        };
        self.conns.insert(id, conn);
        // Its request may already be there (edge-triggered: no event would tell).
        self.step(id);
    }

    /// Close the oldest connection still waiting for its request, else the oldest.
    fn shed_one(&mut self) {
        let idle = self
            .conns
            .iter()
            .find(|(_, c)| matches!(c.stage, Stage::Reading { .. }))
            .map(|(&id, _)| id);
        if let Some(id) = idle.or_else(|| self.conns.keys().next().copied()) {
            self.close(id, true);
        }
    }

    fn close(&mut self, id: usize, unanswered: bool) {
        if let Some(mut c) = self.conns.remove(&id) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            if unanswered {
                self.content.refused.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Close every connection past its deadline.
    fn expire(&mut self, now: Instant) {
        let late: Vec<(usize, bool)> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(&id, c)| (id, !matches!(c.stage, Stage::Draining { .. })))
            .collect();
        for (id, unanswered) in late {
            self.close(id, unanswered);
        }
    }

    /// Take a connection as far as its socket allows.
    fn step(&mut self, id: usize) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        let next = advance(c, &self.content, &self.limits);
        if let Next::Close = next {
            let unanswered = !matches!(c.stage, Stage::Draining { .. });
            self.close(id, unanswered);
        }
    }
}

/// Read, answer and drain as far as the socket allows, moving from stage to stage.
fn advance(c: &mut Conn, content: &Content, limits: &Limits) -> Next {
    loop {
        match &mut c.stage {
            Stage::Reading { head } => match read_head(&mut c.stream, head) {
                Ok(Some(request)) => {
                    c.stage = Stage::Writing {
                        answer: answer(request, content),
                        sent: 0,
                    };
                    c.deadline = Instant::now() + limits.write_deadline;
                }
                Ok(None) => return Next::Wait,
                Err(_) => return Next::Close,
            },
            Stage::Writing { answer, sent } => {
                while *sent < answer.len() {
                    match c.stream.write(answer.from(*sent)) {
                        Ok(0) => return Next::Close,
                        Ok(n) => *sent += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Wait,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => return Next::Close,
                    }
                }
                // Closing with unread request bytes would reset the connection before
                // the client reads the answer: end our side, then drain a little of theirs.
                if c.stream.shutdown(std::net::Shutdown::Write).is_err() {
                    return Next::Close;
                }
                c.stage = Stage::Draining { drained: 0 };
                c.deadline = Instant::now() + DRAIN_TIME;
            }
            Stage::Draining { drained } => {
                let mut sink = [0u8; 4096];
                loop {
                    match c.stream.read(&mut sink) {
                        Ok(0) => return Next::Close,
                        Ok(n) => {
                            *drained += n;
                            if *drained >= DRAIN_BYTES {
                                return Next::Close;
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Wait,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => return Next::Close,
                    }
                }
            }
        }
    }
}

/// Read what the socket has into `head`: the request once the head is complete (or
/// too large, or cut short by the client), `None` while more is to come.
fn read_head(stream: &mut TcpStream, head: &mut Vec<u8>) -> std::io::Result<Option<Request>> {
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = find_head_end(head) {
            return Ok(Some(parse_head(&head[..end])));
        }
        if head.len() > MAX_HEAD {
            return Ok(Some(Request::TooLarge));
        }
        match stream.read(&mut buf) {
            Ok(0) => return Ok(Some(Request::Malformed)),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
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

/// An answer: status line and headers, then the body, shared with every other
/// connection answered the same text (64 scrapes of a large exposition hold one copy).
struct Answer {
    head: Vec<u8>,
    body: Option<Arc<str>>,
}

impl Answer {
    fn len(&self) -> usize {
        self.head.len() + self.body.as_ref().map_or(0, |b| b.len())
    }

    /// The bytes from offset `at` to the end of the head or of the body.
    fn from(&self, at: usize) -> &[u8] {
        match (at.checked_sub(self.head.len()), &self.body) {
            (None, _) => &self.head[at..],
            (Some(i), Some(body)) => &body.as_bytes()[i..],
            (Some(_), None) => &[],
        }
    }
}

/// The whole answer to `request`: status line, headers and (unless HEAD) body.
fn answer(request: Request, content: &Content) -> Answer {
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
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    Answer {
        head,
        body: (!head_only).then_some(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

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
    fn a_silent_client_is_closed_at_its_read_deadline() {
        let (e, content) = endpoint(Limits {
            read_deadline: Duration::from_millis(200),
            ..Limits::default()
        });
        let mut silent = TcpStream::connect(e.addr()).unwrap();
        let ok = get(e.addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(ok.ends_with("m_total 1\n"), "{ok}");
        silent.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let started = Instant::now();
        let mut out = Vec::new();
        let _ = silent.read_to_end(&mut out);
        assert!(out.is_empty() && started.elapsed() < Duration::from_secs(2), "closed, unanswered");
        assert_eq!(content.refused(), 1);
    }

    #[test]
    fn a_full_table_sheds_the_oldest_idle_connection() {
        let (e, content) = endpoint(Limits {
            max_connections: 4,
            read_deadline: Duration::from_secs(60),
            ..Limits::default()
        });
        let mut held: Vec<TcpStream> = (0..6).map(|_| TcpStream::connect(e.addr()).unwrap()).collect();
        let ok = get(e.addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(ok.ends_with("m_total 1\n"), "the newest connection is served: {ok}");
        assert!(content.refused() >= 3, "{}", content.refused());
        // The first ones were shed: they read end of file, unanswered.
        held[0].set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        let _ = held[0].read_to_end(&mut out);
        assert!(out.is_empty());
    }

    /// #43: 200 hostile connections on loopback (silent, 1 byte a second, and GETs
    /// that never read their answer, sent all at once) must not hold up a scrape:
    /// each of several scrapes over 3 s is answered within 1 s.
    #[test]
    fn a_scrape_is_answered_within_a_second_beside_200_hostile_connections() {
        let (e, content) = endpoint(Limits::default());
        let addr = e.addr();
        let silent: Vec<TcpStream> = (0..70).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut slow: Vec<TcpStream> = (0..65).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let greedy: Vec<TcpStream> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..65)
                .map(|_| {
                    s.spawn(move || {
                        let mut c = TcpStream::connect(addr).unwrap();
                        let _ = c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n");
                        c
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let dripping = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let request = b"GET /metrics HTTP/1.1\r\n\r\n";
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    for c in &mut slow {
                        let _ = c.write_all(&request[i % request.len()..][..1]);
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };
        for _ in 0..4 {
            let started = Instant::now();
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: prometheus\r\n\r\n").unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            let took = started.elapsed();
            assert!(out.ends_with("m_total 1\n"), "no answer after {took:?}: {out:?}");
            assert!(took < Duration::from_secs(1), "answered in {took:?}");
            eprintln!("scrape beside 200 hostile connections answered in {took:?}");
            std::thread::sleep(Duration::from_millis(750));
        }
        stop.store(true, Ordering::Relaxed);
        dripping.join().unwrap();
        assert!(content.served() >= 4);
        drop((silent, greedy));
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
