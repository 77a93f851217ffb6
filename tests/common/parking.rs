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

/// Sends SIGHUP (the same configuration: the new generation takes over the listener, the old
/// one drains) and waits until the server logged the reload, and a little more.
pub fn reload_and_wait(s: &Spate) {
    super::signal(&s.child, libc::SIGHUP);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !s.stderr_lines().iter().any(|l| l.contains("reload")) && std::time::Instant::now() < end
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
}
