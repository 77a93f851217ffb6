//! epoll(7): the instance behind parked and lane connections (`server/connection/park.rs`).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A new epoll instance, closed on exec.
pub fn create() -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 has no memory preconditions; the result is checked.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds `fd` to the instance `epfd` (`op` is `EPOLL_CTL_ADD`) or changes what it waits for
/// (`EPOLL_CTL_MOD`): `event` holds the events and the data its readiness reports.
#[inline]
pub fn control(
    epfd: RawFd,
    op: libc::c_int,
    fd: RawFd,
    mut event: libc::epoll_event,
) -> io::Result<()> {
    // SAFETY: `event` is a valid event for the duration of the call; bad fds are errors.
    let r = unsafe { libc::epoll_ctl(epfd, op, fd, &mut event) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Takes `fd` out of the instance `epfd`.
#[inline]
pub fn delete(epfd: RawFd, fd: RawFd) -> io::Result<()> {
    // SAFETY: a null event is allowed for EPOLL_CTL_DEL; bad fds are errors.
    let r = unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Waits up to `timeout_ms` (0: not at all, -1: without end) for readiness on `epfd` and
/// fills the first entries of `events`; how many.
#[inline]
pub fn wait(
    epfd: RawFd,
    events: &mut [libc::epoll_event],
    timeout_ms: libc::c_int,
) -> io::Result<usize> {
    let max = libc::c_int::try_from(events.len()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `events` has room for `max` entries, which the kernel writes at most.
    let n = unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), max, timeout_ms) };
    // A negative count is an error.
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn readable(data: u64) -> libc::epoll_event {
        libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: data,
        }
    }

    #[test]
    fn create_makes_a_close_on_exec_instance() {
        let ep = create().unwrap();
        let flags = crate::sys::process::fd_flags(ep.as_raw_fd()).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
    }

    #[test]
    fn control_and_wait_report_readiness_with_its_data() {
        let ep = create().unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        control(
            ep.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            b.as_raw_fd(),
            readable(7),
        )
        .unwrap();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        assert_eq!(wait(ep.as_raw_fd(), &mut events, 0).unwrap(), 0);
        a.write_all(b"x").unwrap();
        assert_eq!(wait(ep.as_raw_fd(), &mut events, 1000).unwrap(), 1);
        let data = events[0].u64;
        assert_eq!(data, 7);
        control(
            ep.as_raw_fd(),
            libc::EPOLL_CTL_MOD,
            b.as_raw_fd(),
            readable(9),
        )
        .unwrap();
        assert_eq!(wait(ep.as_raw_fd(), &mut events, 0).unwrap(), 1);
        let data = events[0].u64;
        assert_eq!(data, 9);
        // Twice added is an error.
        let again = control(
            ep.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            b.as_raw_fd(),
            readable(7),
        );
        assert_eq!(again.unwrap_err().raw_os_error(), Some(libc::EEXIST));
    }

    #[test]
    fn delete_stops_the_reports() {
        let ep = create().unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        control(
            ep.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            b.as_raw_fd(),
            readable(1),
        )
        .unwrap();
        a.write_all(b"x").unwrap();
        delete(ep.as_raw_fd(), b.as_raw_fd()).unwrap();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        assert_eq!(wait(ep.as_raw_fd(), &mut events, 0).unwrap(), 0);
        assert_eq!(
            delete(ep.as_raw_fd(), b.as_raw_fd())
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENOENT)
        );
    }

    #[test]
    fn wait_on_a_bad_descriptor_is_an_error() {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 1];
        assert_eq!(
            wait(-1, &mut events, 0).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }
}
