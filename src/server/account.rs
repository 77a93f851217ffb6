//! `user`: the account the server runs as once its sockets, logs and keys are open, as in
//! h2o. Only root can switch; a server already running as that account goes on as it is.

use std::ffi::CString;

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
        let found = crate::sys::account::user_by_name(&c_name)
            .map_err(|e| format!("cannot look up {name}: {e}"))?;
        let entry = found.ok_or_else(|| format!("no such user {name}"))?;
        Ok(Account {
            name: name.to_string(),
            uid: entry.uid,
            gid: entry.gid,
        })
    }

    /// Makes this account the process's: its supplementary groups, group and user id, for
    /// every thread (glibc applies set*id to all of them). Nothing to do when the process
    /// already runs as it; an error when that needs root and the process is not.
    pub fn switch_to(&self) -> Result<(), String> {
        let (uid, euid) = (crate::sys::account::uid(), crate::sys::account::euid());
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
        let failed = |what: &str, e: std::io::Error| {
            format!("cannot switch to user {}: {what} failed: {e}", self.name)
        };
        use crate::sys::account::{init_groups, set_gid, set_uid};
        init_groups(&name, self.gid).map_err(|e| failed("initgroups", e))?;
        set_gid(self.gid).map_err(|e| failed("setgid", e))?;
        set_uid(self.uid).map_err(|e| failed("setuid", e))?;
        // Root must be gone for good: setuid(0) succeeding again would mean it is not.
        if self.uid != 0 && set_uid(0).is_ok() {
            return Err(format!(
                "cannot switch to user {}: root could be regained",
                self.name
            ));
        }
        Ok(())
    }
}

/// The name of the account the process runs as (for messages and tests).
pub fn current_user_name() -> Option<String> {
    let uid = crate::sys::account::euid();
    let found = crate::sys::account::user_by_uid(uid);
    found.ok().flatten().map(|entry| entry.name)
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
        if crate::sys::account::uid() == me.uid {
            assert_eq!(me.switch_to(), Ok(()));
        }
    }
}
