//! Accounts: the process's user ids, the account database, and switching to an account
//! (`server/account.rs` says when).

use std::ffi::CStr;
use std::io;

/// An entry of the account database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passwd {
    pub name: String,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// The real user id of the process.
pub fn uid() -> libc::uid_t {
    // SAFETY: getuid only reads process state and cannot fail.
    unsafe { libc::getuid() }
}

/// The effective user id of the process.
pub fn euid() -> libc::uid_t {
    // SAFETY: geteuid only reads process state and cannot fail.
    unsafe { libc::geteuid() }
}

/// The account named `name` (`getpwnam_r`), if there is one.
pub fn user_by_name(name: &CStr) -> io::Result<Option<Passwd>> {
    // SAFETY: `name` is a valid C string; the other pointers come from `lookup` and are
    // valid for the call.
    lookup(|pw, buf, len, out| unsafe { libc::getpwnam_r(name.as_ptr(), pw, buf, len, out) })
}

/// The account with user id `uid` (`getpwuid_r`), if there is one.
pub fn user_by_uid(uid: libc::uid_t) -> io::Result<Option<Passwd>> {
    // SAFETY: the pointers come from `lookup` and are valid for the call.
    lookup(|pw, buf, len, out| unsafe { libc::getpwuid_r(uid, pw, buf, len, out) })
}

/// Sets the supplementary groups to those of the account `name`, and `gid` (initgroups(3)).
pub fn init_groups(name: &CStr, gid: libc::gid_t) -> io::Result<()> {
    // SAFETY: `name` is a valid C string.
    check(unsafe { libc::initgroups(name.as_ptr(), gid) })
}

/// Sets the group id (setgid(2)), for every thread (glibc applies it to all of them).
pub fn set_gid(gid: libc::gid_t) -> io::Result<()> {
    // SAFETY: setgid takes no pointer.
    check(unsafe { libc::setgid(gid) })
}

/// Sets the user id (setuid(2)), for every thread (glibc applies it to all of them).
pub fn set_uid(uid: libc::uid_t) -> io::Result<()> {
    // SAFETY: setuid takes no pointer.
    check(unsafe { libc::setuid(uid) })
}

/// A call's 0 as `Ok`, anything else as errno.
fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Runs a `getpw*_r` call with a buffer that grows while it is too small; returns the entry it
/// found, if any.
fn lookup(
    mut call: impl FnMut(
        *mut libc::passwd,
        *mut libc::c_char,
        usize,
        *mut *mut libc::passwd,
    ) -> libc::c_int,
) -> io::Result<Option<Passwd>> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids).
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let r = call(&mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found);
        if r == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        if found.is_null() {
            return Ok(None);
        }
        // SAFETY: on success `pw_name` points at a NUL-terminated string inside `buf`.
        let name = unsafe { CStr::from_ptr(pw.pw_name) };
        return Ok(Some(Passwd {
            name: name.to_string_lossy().into_owned(),
            uid: pw.pw_uid,
            gid: pw.pw_gid,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The effective ids, as the kernel shows them on the process's own directory.
    fn own_ids() -> (libc::uid_t, libc::gid_t) {
        let m = std::fs::metadata("/proc/self").unwrap();
        (m.uid(), m.gid())
    }

    #[test]
    fn uid_and_euid_are_the_processes() {
        assert_eq!(euid(), own_ids().0);
        // Not a set-user-id program.
        assert_eq!(uid(), euid());
    }

    #[test]
    fn users_are_found_by_name_and_uid() {
        let root = user_by_name(c"root").unwrap().unwrap();
        assert_eq!((root.name.as_str(), root.uid, root.gid), ("root", 0, 0));
        assert_eq!(user_by_uid(0).unwrap(), Some(root));
        assert_eq!(user_by_name(c"no-such-user-of-spate").unwrap(), None);
        let me = user_by_uid(euid()).unwrap().unwrap();
        assert_eq!(
            user_by_name(&std::ffi::CString::new(me.name.clone()).unwrap()).unwrap(),
            Some(me)
        );
    }

    #[test]
    fn lookup_grows_its_buffer_while_too_small() {
        let mut sizes = Vec::new();
        let found = lookup(|pw, buf, len, out| {
            sizes.push(len);
            if len < 4096 {
                return libc::ERANGE;
            }
            // SAFETY: the pointers come from `lookup` and are valid for the call.
            unsafe { libc::getpwuid_r(0, pw, buf, len, out) }
        });
        assert_eq!(found.unwrap().unwrap().uid, 0);
        assert_eq!(sizes, [1024, 4096]);
        assert_eq!(
            lookup(|_, _, _, _| libc::EIO).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
    }

    #[test]
    fn switching_to_the_ids_in_use_changes_nothing() {
        let (u, g) = own_ids();
        set_gid(g).unwrap();
        set_uid(u).unwrap();
        assert_eq!(own_ids(), (u, g));
        if u != 0 {
            // Only root may switch.
            assert_eq!(
                set_uid(0).unwrap_err().kind(),
                io::ErrorKind::PermissionDenied
            );
            assert_eq!(
                set_gid(0).unwrap_err().kind(),
                io::ErrorKind::PermissionDenied
            );
        }
    }

    #[test]
    fn init_groups_sets_the_accounts_groups() {
        let me = user_by_uid(euid()).unwrap().unwrap();
        let name = std::ffi::CString::new(me.name).unwrap();
        if euid() != 0 {
            let e = init_groups(&name, me.gid).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
            return;
        }
        // As root: the groups change, and are put back as they were.
        let mut before = vec![0 as libc::gid_t; 256];
        // SAFETY: `before` has room for the count given.
        let n = unsafe { libc::getgroups(before.len() as libc::c_int, before.as_mut_ptr()) };
        before.truncate(usize::try_from(n).unwrap());
        init_groups(&name, me.gid).unwrap();
        let mut after = vec![0 as libc::gid_t; 256];
        // SAFETY: as above.
        let n = unsafe { libc::getgroups(after.len() as libc::c_int, after.as_mut_ptr()) };
        after.truncate(usize::try_from(n).unwrap());
        assert!(after.contains(&me.gid), "{after:?}");
        // SAFETY: `before` holds `before.len()` groups.
        let r = unsafe { libc::setgroups(before.len(), before.as_ptr()) };
        assert_eq!(r, 0);
    }
}
