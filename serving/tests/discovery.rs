//! Discovery against this test process's own listeners (its own process: no other
//! test's sockets): a port that never answers is asked twice, then never again; a
//! TCPStore port is never asked; nothing is written when no endpoint is found.

use gputrace_serving::{Config, Scraper, Target};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn counting_listener() -> (u16, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let n = Arc::new(AtomicU64::new(0));
    let count = n.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(s); // never answer
        }
    });
    (port, n)
}

#[test]
fn silent_ports_are_asked_twice_and_skipped_ports_never() {
    let (_silent, silent_hits) = counting_listener();
    let (skipped, skipped_hits) = counting_listener();
    let dir = tempfile::tempdir().unwrap();
    let s = Scraper::start(Config {
        target: Target::Discover {
            root: std::process::id(),
            proc_root: "/proc".into(),
            skip_ports: vec![skipped],
        },
        interval: Duration::from_millis(30),
        timeout: Duration::from_millis(60),
        out_dir: dir.path().to_path_buf(),
        header: Default::default(),
    });
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while silent_hits.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Long enough for a third try if there were one (10 rounds of ~0.1 s).
    std::thread::sleep(Duration::from_millis(1500));
    let o = s.finish();
    assert_eq!(
        silent_hits.load(Ordering::SeqCst),
        2,
        "asked once, again after 10 rounds, then never"
    );
    assert_eq!(skipped_hits.load(Ordering::SeqCst), 0);
    assert!(o.url.is_none() && o.file.is_none() && o.scrapes == 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no endpoint, no file");
}
