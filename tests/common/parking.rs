//! The server's parking epoll instances (parked and lane connections, `src/server/park.rs`),
//! read from /proc: a worker's parking instance is itself registered in tokio's epoll
//! instance, which tells it from tokio's; /proc/PID/fdinfo lists each instance's registered
//! descriptors as `tfd:` lines, with their event mask and data.

use super::Spate;

/// One registered socket: the server's fd, its event mask, its data (which names the record).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entry {
    pub fd: u32,
    pub events: u64,
    pub data: u64,
}

/// EPOLLET and EPOLLONESHOT as /proc shows them in an entry's event mask.
pub const EPOLLET: u64 = 1 << 31;
pub const EPOLLONESHOT: u64 = 1 << 30;

/// The entries of the server's parking instances.
pub fn entries(s: &Spate) -> Vec<Entry> {
    let pid = s.child.id();
    let mut instances: Vec<(u32, Vec<Entry>)> = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let target = std::fs::read_link(e.path()).unwrap_or_default();
        if target.to_string_lossy() != "anon_inode:[eventpoll]" {
            continue;
        }
        let fd: u32 = e.file_name().to_string_lossy().parse().unwrap();
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default();
        let watched = info
            .lines()
            .filter_map(|l| l.strip_prefix("tfd:"))
            .filter_map(parse_entry)
            .collect();
        instances.push((fd, watched));
    }
    let parking: Vec<u32> = instances
        .iter()
        .map(|(fd, _)| *fd)
        .filter(|fd| instances.iter().any(|(_, w)| w.iter().any(|e| e.fd == *fd)))
        .collect();
    instances
        .into_iter()
        .filter(|(fd, _)| parking.contains(fd))
        .flat_map(|(_, w)| w)
        .collect()
}

/// `  12 events:    80002019 data: 100000000 pos:0 ino:…` (numbers after `events:` and
/// `data:` in hexadecimal).
fn parse_entry(line: &str) -> Option<Entry> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| {
        let i = w.iter().position(|x| *x == name)?;
        u64::from_str_radix(w.get(i + 1)?, 16).ok()
    };
    Some(Entry {
        fd: w.first()?.parse().ok()?,
        events: field("events:")?,
        data: field("data:")?,
    })
}

/// Sends SIGHUP with a change a reload cannot apply in place (`needs_new_generation`: the
/// new generation takes over the listener, the old one drains) and waits until the old
/// generation drains: the server logged `reloaded` (the old workers are told to drain just
/// after that line), and the old workers closed their copies of the listening socket, which
/// they do once they see that they drain (up to 20 s).
pub fn reload_and_wait(s: &Spate) {
    use std::time::{Duration, Instant};
    let before = listener_copies(s);
    needs_new_generation(s);
    super::signal(&s.child, libc::SIGHUP);
    let end = Instant::now() + Duration::from_secs(20);
    let mut lines: Vec<String> = Vec::new();
    while !lines.iter().any(|l| l.contains("reloaded")) {
        assert!(Instant::now() < end, "no `reloaded` line: {lines:?}");
        lines.extend(s.stderr_lines());
        std::thread::sleep(Duration::from_millis(20));
    }
    // The new workers have their copies; the old ones let go of theirs as they drain.
    while listener_copies(s) > before {
        assert!(
            Instant::now() < end,
            "the old workers still hold the listening socket: {} copies, {before} before the reload",
            listener_copies(s)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Changes the configuration file of `s` so that its next reload starts a new worker
/// generation (the old one drains) while serving as before: `http3-gso` toggled (the QUIC
/// endpoints are set up with it; there is no QUIC listener here).
pub fn needs_new_generation(s: &Spate) {
    let file = s.path().join("spate.yaml");
    let yaml = std::fs::read_to_string(&file).expect("the configuration file");
    let yaml = match yaml.strip_suffix("http3-gso: OFF\n") {
        Some(rest) => format!("{rest}http3-gso: ON\n"),
        None => {
            let yaml = yaml.strip_suffix("http3-gso: ON\n").unwrap_or(&yaml);
            format!("{}\nhttp3-gso: OFF\n", yaml.trim_end())
        }
    };
    std::fs::write(file, yaml).expect("the configuration file");
}

/// How many of the server's descriptors are its listening socket on `s.addr` (the main
/// thread's and each worker's copy): the socket's inode from /proc/net/tcp, then the
/// descriptors that name it.
fn listener_copies(s: &Spate) -> usize {
    let pid = s.child.id();
    let port = format!(":{:04X}", s.addr.port());
    let tcp = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    // `sl local_address rem_address st ... uid timeout inode`: LISTEN is state 0A.
    let inodes: Vec<String> = tcp
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() > 9 && w[1].ends_with(&port) && w[3] == "0A")
        .map(|w| format!("socket:[{}]", w[9]))
        .collect();
    assert!(!inodes.is_empty(), "no listening socket on {}", s.addr);
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| inodes.iter().any(|i| t.to_string_lossy() == *i))
        .count()
}
