//! A real Prometheus server for the tests that check our exposition and
//! quantiles against it (`tests/metrics.rs`, `tests/serving.rs`).

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `name` (`prometheus`, `promtool`) on `PATH`; absent: skipped, or a failure under `CI=true`.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()));
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but `{name}` is not installed (.ci/run installs Debian's prometheus package)"
        );
        super::skip(&format!("`{name}` is not installed (apt-get install prometheus)"));
    }
    found
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` on `addr`: the status code and body.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u32, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let out = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, body.to_string()))
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server on loopback scraping one target, stopped on drop.
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Start `bin` scraping `target` every `every`, and wait until it is ready
    /// and has tried the target once.
    pub fn start(bin: &Path, target: SocketAddr, every: Duration) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        let (interval, timeout) = (every.as_millis(), every.as_millis() * 4 / 5);
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {interval}ms\n  scrape_timeout: {timeout}ms\nscrape_configs:\n  - job_name: gputrace\n    \
                 honor_labels: true\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        let p = Prometheus { child, addr, _dir: dir };
        let until = Instant::now() + Duration::from_secs(30);
        while !matches!(http_get(addr, "/-/ready"), Ok((200, _))) {
            assert!(Instant::now() < until, "prometheus did not become ready on {addr}");
            std::thread::sleep(Duration::from_millis(100));
        }
        // Discovered targets reach the scrape loops in batches (every 5 s by default):
        // wait until ours has been tried once; before that its lastScrape is 0001-01-01.
        while !matches!(http_get(addr, "/api/v1/targets"), Ok((200, b)) if b.contains("\"lastScrape\":\"2")) {
            assert!(Instant::now() < until, "prometheus never scraped {target}");
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    /// An instant query's result vector: (labels, value).
    pub fn query(&self, q: &str) -> Vec<(serde_json::Map<String, Value>, f64)> {
        let (code, body) = http_get(self.addr, &format!("/api/v1/query?query={}", percent_encode(q))).unwrap();
        assert_eq!(code, 200, "query {q}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("query {q}: {body}"))
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().unwrap().parse::<f64>().unwrap();
                (r["metric"].as_object().unwrap().clone(), value)
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `promtool check metrics` accepts `exposition` (skipped without promtool; a failure
/// under `CI=true`).
pub fn promtool_check(exposition: &str) {
    let Some(promtool) = tool("promtool") else { return };
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(exposition.as_bytes()).unwrap();
    let r = check.wait_with_output().unwrap();
    assert!(
        r.status.success(),
        "promtool check metrics: {}{}",
        super::text(&r.stdout),
        super::text(&r.stderr)
    );
}
