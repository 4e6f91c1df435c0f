//! Finding a job's metrics port: the TCP ports its process tree listens on,
//! from `/proc` (each process's socket inodes, matched against the listening
//! sockets of `/proc/<pid>/net/tcp` and `tcp6`).
//!
//! Only listeners reachable on loopback are returned (bound to a loopback
//! address or to every address): the scraper never leaves the machine unless
//! the user names another host with `--serving-metrics`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// A listening socket of the job's tree: where to reach it on loopback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listener {
    /// Loopback address to connect to (127.0.0.1 or ::1).
    pub loopback: IpAddr,
    /// The port.
    pub port: u16,
}

/// `root` and every process below it (from each process's parent in `/proc/<pid>/stat`).
pub fn process_tree(proc_root: &Path, root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir(proc_root) {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            if let Some(ppid) = parent_of(&stat) {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i]) {
            out.extend(c.iter().copied().filter(|p| !out.contains(p)).collect::<Vec<_>>());
        }
        i += 1;
    }
    out
}

/// The parent pid in a `/proc/<pid>/stat` line (`pid (comm) state ppid ...`;
/// the command may hold spaces and parentheses, so read after the last `)`).
fn parent_of(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Socket inodes the processes hold open.
fn socket_inodes(proc_root: &Path, pids: &[u32]) -> HashSet<u64> {
    let mut out = HashSet::new();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else { continue };
            let t = target.to_string_lossy();
            if let Some(n) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                if let Ok(inode) = n.parse() {
                    out.insert(inode);
                }
            }
        }
    }
    out
}

/// Listening sockets of a `/proc/net/tcp` or `tcp6` table: `(address, port, inode)`.
fn listening(table: &str) -> Vec<(IpAddr, u16, u64)> {
    let mut out = Vec::new();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
        if f.len() < 10 || f[3] != "0A" {
            continue;
        }
        let Some((addr, port)) = f[1].split_once(':') else { continue };
        let (Some(ip), Ok(port), Ok(inode)) = (hex_ip(addr), u16::from_str_radix(port, 16), f[9].parse()) else {
            continue;
        };
        out.push((ip, port, inode));
    }
    out
}

/// The kernel writes addresses as 32-bit words in host (little-endian)
/// order: the word's little-endian bytes are the address in network order.
fn hex_ip(h: &str) -> Option<IpAddr> {
    let word = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::to_le_bytes);
    match h.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(h)?))),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[4 * i..4 * i + 4].copy_from_slice(&word(&h[8 * i..8 * i + 8])?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

/// How to reach a listener bound to `ip` from this machine without leaving
/// it, or `None` when it is bound to another address only.
fn loopback_for(ip: IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() || v4.is_unspecified() => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        IpAddr::V6(v6) if v6.is_loopback() || v6.is_unspecified() => Some(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) if v4.is_loopback() || v4.is_unspecified() => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            _ => None,
        },
        _ => None,
    }
}

/// The loopback-reachable TCP listeners of the process tree under `root`,
/// sorted by port.
pub fn listeners(proc_root: &Path, root: u32) -> Vec<Listener> {
    let pids = process_tree(proc_root, root);
    let inodes = socket_inodes(proc_root, &pids);
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut out = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(proc_root.join(root.to_string()).join("net").join(table)) else {
            continue;
        };
        for (ip, port, inode) in listening(&text) {
            if let (true, Some(loopback)) = (inodes.contains(&inode), loopback_for(ip)) {
                out.insert(Listener { loopback, port });
            }
        }
    }
    // One address per port is enough; IPv4 sorts first.
    let mut seen = HashSet::new();
    out.into_iter().filter(|l| seen.insert(l.port)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn tables_parse() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                  0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0 100 0 0 10 0\n\
                  1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 43 1\n\
                  2: 0100007F:1F91 0100007F:9999 01 00000000:00000000 00:00000000 00000000  1000        0 44 1\n\
                  3: 0700000A:1F92 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 45 1\n";
        let l = listening(v4);
        assert_eq!(
            l,
            [
                (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 8080, 4242),
                (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 80, 43),
                (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)), 8082, 45),
            ]
        );
        assert_eq!(loopback_for(l[2].0), None);
        let v6 =
            "sl local rem st\n 0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 0:0 0:0 0 1000 0 77 1\n";
        assert_eq!(listening(v6), [(IpAddr::V6(Ipv6Addr::LOCALHOST), 8080, 77)]);
        assert_eq!(parent_of("12 (a) b (c)) S 7 12 12"), Some(7));
    }

    #[test]
    fn finds_this_process_listener() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let found = listeners(Path::new("/proc"), std::process::id());
        assert!(
            found.contains(&Listener {
                loopback: IpAddr::V4(Ipv4Addr::LOCALHOST),
                port
            }),
            "{found:?}"
        );
        drop(l);
        assert!(!listeners(Path::new("/proc"), std::process::id()).iter().any(|x| x.port == port));
    }
}
