//! The process: descriptors passed across exec (the binary upgrade, `server/upgrade.rs`),
//! descriptor flags, the open-file limit, and stopping a child (`fastcgi.spawn`).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Mutex;

/// Makes the child `cmd` starts inherit `fds`, which this process keeps closed on exec:
/// between fork and exec their close-on-exec flag is cleared in the child.
pub fn keep_open_across_exec(cmd: &mut Command, fds: Vec<RawFd>) {
    // SAFETY: between fork and exec only fcntl(2), which is async-signal-safe, runs, on
    // descriptor numbers (a wrong one is an error, which fails the spawn); `fds` was
    // allocated before the fork and is only read.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Takes over `fd`, a descriptor this process inherited across exec (named in the
/// environment by the process that started it), and makes it closed on exec. An error when
/// `fd` is not open, is standard input, output or error, or is not inheritable: every
/// descriptor this process opens itself is closed on exec, and so is one taken over before,
/// so no descriptor gets two owners.
pub fn adopt_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if fd <= libc::STDERR_FILENO {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "standard input, output and error are not taken over",
        ));
    }
    // One adoption at a time: the flag is read, then set.
    static ADOPTING: Mutex<()> = Mutex::new(());
    let _one = ADOPTING.lock().unwrap_or_else(|e| e.into_inner());
    let flags = fd_flags(fd)?;
    if flags & libc::FD_CLOEXEC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an inherited descriptor (it is closed on exec)",
        ));
    }
    set_fd_flags(fd, flags | libc::FD_CLOEXEC)?;
    // SAFETY: `fd` is open and was not closed on exec. std, tokio and this crate open every
    // descriptor closed on exec (O_CLOEXEC, SOCK_CLOEXEC, EPOLL_CLOEXEC), and adoption sets
    // the flag under `ADOPTING`: so `fd` came across exec, nothing in this process owns it,
    // and from here on the OwnedFd alone does.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends SIGTERM to the process `pid` (a child this process started: `fastcgi.spawn`).
pub fn terminate(pid: u32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, libc::SIGTERM) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The descriptor flags of `fd` (fcntl(2) `F_GETFD`): `FD_CLOEXEC` or not.
pub fn fd_flags(fd: RawFd) -> io::Result<libc::c_int> {
    // SAFETY: F_GETFD takes no pointer.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(flags)
    }
}

/// The limit on open descriptors (`RLIMIT_NOFILE`): soft and hard.
pub fn open_file_limit() -> io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        Ok(lim)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the limit on open descriptors (`RLIMIT_NOFILE`).
pub fn set_open_file_limit(lim: &libc::rlimit) -> io::Result<()> {
    // SAFETY: setrlimit with a valid pointer to a struct it only reads.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, lim) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the descriptor flags of `fd` (fcntl(2) `F_SETFD`).
fn set_fd_flags(fd: RawFd, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: F_SETFD takes an integer, no pointer.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags) } < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::{AsRawFd, IntoRawFd};

    #[test]
    fn terminate_sends_sigterm() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = Command::new("/bin/sleep").arg("30").spawn().unwrap();
        terminate(child.id()).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn keep_open_across_exec_passes_the_descriptors_on() {
        let (r, w) = crate::sys::file::pipe().unwrap();
        let fd = w.as_raw_fd();
        let mut cmd = Command::new("/bin/sh");
        // (dash redirects only descriptors 0 to 9 with `>&N`.)
        cmd.arg("-c").arg(format!("echo kept > /proc/self/fd/{fd}"));
        keep_open_across_exec(&mut cmd, vec![fd]);
        let status = cmd.status().unwrap();
        assert!(status.success());
        // Ours stays closed on exec.
        assert_ne!(fd_flags(fd).unwrap() & libc::FD_CLOEXEC, 0);
        drop(w);
        let mut got = String::new();
        std::fs::File::from(r).read_to_string(&mut got).unwrap();
        assert_eq!(got, "kept\n");
        // Not one of ours: the spawn fails.
        let mut cmd = Command::new("/bin/true");
        keep_open_across_exec(&mut cmd, vec![-1]);
        assert!(cmd.status().is_err());
    }

    #[test]
    fn adopt_inherited_takes_an_inheritable_descriptor_once() {
        let (r, w) = crate::sys::file::pipe().unwrap();
        let raw = w.into_raw_fd();
        // As a binary upgrade passes it: not closed on exec.
        set_fd_flags(raw, fd_flags(raw).unwrap() & !libc::FD_CLOEXEC).unwrap();
        let w = adopt_inherited(raw).unwrap();
        assert_ne!(fd_flags(raw).unwrap() & libc::FD_CLOEXEC, 0);
        assert!(adopt_inherited(raw).is_err());
        // Closed on exec from the start: not inherited.
        assert!(adopt_inherited(r.as_raw_fd()).is_err());
        assert!(adopt_inherited(libc::STDOUT_FILENO).is_err());
        // Closed: not open (or, opened again by another test meanwhile, closed on exec).
        drop(w);
        assert!(adopt_inherited(raw).is_err());
        assert_eq!(
            adopt_inherited(libc::c_int::MAX)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn fd_flags_are_read_and_set() {
        let (r, _w) = crate::sys::file::pipe().unwrap();
        let fd = r.as_raw_fd();
        assert_eq!(fd_flags(fd).unwrap(), libc::FD_CLOEXEC);
        set_fd_flags(fd, 0).unwrap();
        assert_eq!(fd_flags(fd).unwrap(), 0);
        set_fd_flags(fd, libc::FD_CLOEXEC).unwrap();
        assert_eq!(fd_flags(fd).unwrap(), libc::FD_CLOEXEC);
        assert!(fd_flags(-1).is_err());
        assert!(set_fd_flags(-1, 0).is_err());
    }

    #[test]
    fn open_file_limit_is_read_and_set() {
        let lim = open_file_limit().unwrap();
        assert!(lim.rlim_cur <= lim.rlim_max);
        // Setting it as it is changes nothing.
        set_open_file_limit(&lim).unwrap();
        let again = open_file_limit().unwrap();
        assert_eq!(
            (again.rlim_cur, again.rlim_max),
            (lim.rlim_cur, lim.rlim_max)
        );
        let too_high = libc::rlimit {
            rlim_cur: lim.rlim_max.saturating_add(1),
            rlim_max: lim.rlim_max,
        };
        if lim.rlim_max != libc::RLIM_INFINITY {
            assert!(set_open_file_limit(&too_high).is_err());
        }
    }
}
