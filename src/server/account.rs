//! `user`: the account the server runs as once its sockets, logs and keys are open, as in
//! h2o. Only root can switch; a server already running as that account goes on as it is.

use std::ffi::{CStr, CString};

/// A system account, looked up by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

impl Account {
    /// Looks `name` up in the system's account database (`getpwnam_r`).
    pub fn find(name: &str) -> Result<Account, String> {
        let c_name = CString::new(name).map_err(|_| format!("{name:?} contains a NUL byte"))?;
        // SAFETY: the pointers come from `lookup` and are valid for the call.
        let found = lookup(|pw, buf, len, out| unsafe {
            libc::getpwnam_r(c_name.as_ptr(), pw, buf, len, out)
        })
        .map_err(|e| format!("cannot look up {name}: {e}"))?;
        let (_, uid, gid) = found.ok_or_else(|| format!("no such user {name}"))?;
        Ok(Account {
            name: name.to_string(),
            uid,
            gid,
        })
    }

    /// Makes this account the process's: its supplementary groups, group and user id, for
    /// every thread (glibc applies set*id to all of them). Nothing to do when the process
    /// already runs as it; an error when that needs root and the process is not.
    pub fn switch_to(&self) -> Result<(), String> {
        // SAFETY: these calls only read process state.
        let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
        if uid == self.uid && euid == self.uid {
            return Ok(());
        }
        if euid != 0 {
            return Err(format!(
                "cannot switch to user {}: only root can, and spate runs as uid {euid}",
                self.name
            ));
        }
        let name = CString::new(self.name.as_str())
            .map_err(|_| format!("{:?} contains a NUL byte", self.name))?;
        let failed = |what: &str| {
            format!(
                "cannot switch to user {}: {what} failed: {}",
                self.name,
                std::io::Error::last_os_error()
            )
        };
        // SAFETY: `name` is a valid C string; the ids come from the account database.
        unsafe {
            if libc::initgroups(name.as_ptr(), self.gid) != 0 {
                return Err(failed("initgroups"));
            }
            if libc::setgid(self.gid) != 0 {
                return Err(failed("setgid"));
            }
            if libc::setuid(self.uid) != 0 {
                return Err(failed("setuid"));
            }
            // Root must be gone for good: setuid(0) succeeding again would mean it is not.
            if self.uid != 0 && libc::setuid(0) == 0 {
                return Err(format!(
                    "cannot switch to user {}: root could be regained",
                    self.name
                ));
            }
        }
        Ok(())
    }
}

/// The name of the account the process runs as (for messages and tests).
pub fn current_user_name() -> Option<String> {
    // SAFETY: geteuid only reads process state.
    let uid = unsafe { libc::geteuid() };
    // SAFETY: the pointers come from `lookup` and are valid for the call.
    let found = lookup(|pw, buf, len, out| unsafe { libc::getpwuid_r(uid, pw, buf, len, out) });
    found.ok().flatten().map(|(name, _, _)| name)
}

/// Runs a `getpw*_r` call with a buffer that grows while it is too small; returns the entry it
/// found (name, uid, gid), if any.
fn lookup(
    mut call: impl FnMut(
        *mut libc::passwd,
        *mut libc::c_char,
        usize,
        *mut *mut libc::passwd,
    ) -> libc::c_int,
) -> std::io::Result<Option<(String, libc::uid_t, libc::gid_t)>> {
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
            return Err(std::io::Error::from_raw_os_error(r));
        }
        if found.is_null() {
            return Ok(None);
        }
        // SAFETY: on success `pw_name` points at a NUL-terminated string inside `buf`.
        let name = unsafe { CStr::from_ptr(pw.pw_name) };
        return Ok(Some((
            name.to_string_lossy().into_owned(),
            pw.pw_uid,
            pw.pw_gid,
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_are_found_by_name() {
        let root = Account::find("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(
            Account::find("no-such-user-of-spate").unwrap_err(),
            "no such user no-such-user-of-spate"
        );
        assert!(Account::find("a\0b").unwrap_err().contains("NUL"));
    }

    #[test]
    fn switching_to_the_account_in_use_changes_nothing() {
        let me = Account::find(&current_user_name().unwrap()).unwrap();
        // SAFETY: reads process state.
        if unsafe { libc::getuid() } == me.uid {
            assert_eq!(me.switch_to(), Ok(()));
        }
    }
}
