//! `fastcgi.spawn`: the FastCGI applications spate starts itself, as h2o does. Each runs as
//! `/bin/sh -c COMMAND` with a listening Unix socket as its standard input (FastCGI's
//! `FCGI_LISTENSOCK_FILENO`, what php-cgi and fcgiwrap expect), bound at the path the
//! configuration gave the directive; the handlers connect there. They start once, before the
//! switch to `user` (under `user`'s account, or the directive's own `user`), keep running
//! across reloads, and get SIGTERM when the server exits.

use super::account::Account;
use super::StartError;
use crate::config::{Config, FastcgiConf, HandlerConf, UpstreamAddr};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The running applications; stopped when dropped.
#[derive(Default)]
pub struct Spawned {
    children: Vec<(PathBuf, Child)>,
}

impl Spawned {
    /// Starts every `fastcgi.spawn` of `config` (one per directive).
    pub fn start(config: &Config, user: Option<&Account>) -> Result<Spawned, StartError> {
        let mut spawned = Spawned::default();
        for conf in spawns(config) {
            let (Some(spawn), UpstreamAddr::Unix(socket)) = (&conf.spawn, &conf.addr) else {
                continue;
            };
            if spawned.children.iter().any(|(p, _)| p == socket) {
                continue;
            }
            let fail = |e: String| StartError(format!("{}: fastcgi.spawn: {e}", conf.at));
            let account = match &spawn.user {
                Some(name) => Some(Account::find(name).map_err(fail)?),
                None => user.cloned(),
            };
            let _ = std::fs::remove_file(socket);
            let listener = UnixListener::bind(socket)
                .map_err(|e| fail(format!("cannot listen on {}: {e}", socket.display())))?;
            if let Some(a) = &account {
                // The workers connect after the switch to `user`.
                let owner = user.map_or((a.uid, a.gid), |u| (u.uid, u.gid));
                std::os::unix::fs::chown(socket, Some(owner.0), Some(owner.1))
                    .map_err(|e| fail(format!("cannot hand {} over: {e}", socket.display())))?;
            }
            let mut cmd = Command::new("/bin/sh");
            cmd.arg("-c").arg(&spawn.command);
            cmd.stdin(Stdio::from(OwnedFd::from(listener)));
            if let Some(a) = &account {
                cmd.uid(a.uid).gid(a.gid);
            }
            let child = cmd
                .spawn()
                .map_err(|e| fail(format!("cannot start \"{}\": {e}", spawn.command)))?;
            tracing::info!(
                "fastcgi.spawn: started \"{}\" (pid {}) on {}",
                spawn.command,
                child.id(),
                socket.display()
            );
            spawned.children.push((socket.clone(), child));
        }
        Ok(spawned)
    }
}

/// Every FastCGI application of `config`, on paths and as custom handlers.
fn spawns(config: &Config) -> impl Iterator<Item = &FastcgiConf> {
    config.hosts.iter().flat_map(|h| &h.paths).flat_map(
        |p| -> Box<dyn Iterator<Item = &FastcgiConf> + '_> {
            match &p.handler {
                HandlerConf::Fastcgi(c) => Box::new(std::iter::once(c)),
                HandlerConf::File(f) => Box::new(f.custom_handlers.iter().map(|c| &c.fastcgi)),
                _ => Box::new(std::iter::empty()),
            }
        },
    )
}

impl Drop for Spawned {
    fn drop(&mut self) {
        for (socket, child) in &mut self.children {
            let _ = crate::sys::process::terminate(child.id());
            let end = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
            let _ = std::fs::remove_file(socket);
        }
    }
}
