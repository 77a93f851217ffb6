//! Reopening log files after logrotate renamed them (SIGUSR1, as h2o and nginx do): every
//! file once on the main thread ([`super::target::reopen_files`]), the error log's writer at
//! once, and each worker's access logs on the worker's own thread (they take the new
//! descriptor, after writing out what they buffered), woken through a process-wide counter
//! and `Notify`.

use crate::config::LogTarget;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use tokio::sync::Notify;

/// Reopen requests so far; a worker compares it with the count it last acted on.
static REQUESTS: AtomicU64 = AtomicU64::new(0);
static WAKE: Notify = Notify::const_new();

/// Reopens the error log now and asks every worker to reopen its access logs.
pub fn request() {
    let files = super::target::reopen_files();
    let error_log = ErrorLog::reopen();
    for e in [files.err(), error_log.err()].into_iter().flatten() {
        // Still writing to the old file, if any: say so there.
        tracing::error!("{e}");
    }
    REQUESTS.fetch_add(1, Ordering::AcqRel);
    WAKE.notify_waiters();
}

/// A worker's view of the reopen requests.
pub struct Requests {
    seen: u64,
}

impl Default for Requests {
    fn default() -> Requests {
        Requests {
            seen: REQUESTS.load(Ordering::Acquire),
        }
    }
}

impl Requests {
    /// Completes once a reopen was requested after the last one this saw.
    pub async fn next(&mut self) {
        loop {
            let woken = WAKE.notified();
            tokio::pin!(woken);
            // Registered before the check, so a request between the two is not missed.
            woken.as_mut().enable();
            let now = REQUESTS.load(Ordering::Acquire);
            if now != self.seen {
                self.seen = now;
                return;
            }
            woken.await;
        }
    }
}

/// The `error-log` file, when one is configured: the writer of the diagnostics subscriber.
pub struct ErrorLog;

static ERROR_LOG: OnceLock<(LogTarget, Mutex<File>)> = OnceLock::new();

impl ErrorLog {
    /// Opens `target` as the error log (once, at start).
    pub fn open(target: &LogTarget) -> Result<ErrorLog, String> {
        let file = super::target::open(target)
            .map_err(|e| format!("cannot open error-log {target}: {e}"))?;
        ERROR_LOG
            .set((target.clone(), Mutex::new(file)))
            .map_err(|_| "the error log is already open".to_string())?;
        Ok(ErrorLog)
    }

    /// Where the error log goes, when one is configured.
    pub fn target() -> Option<&'static LogTarget> {
        ERROR_LOG.get().map(|(t, _)| t)
    }

    /// Takes the error log file's new descriptor after [`super::target::reopen_files`]; a
    /// pipe, or no error log, stays as it is.
    fn reopen() -> Result<(), String> {
        let Some((target @ LogTarget::File(_), file)) = ERROR_LOG.get() else {
            return Ok(());
        };
        let new = super::target::open(target)
            .map_err(|e| format!("cannot reopen error-log {target}: {e}"))?;
        *lock(file) = new;
        Ok(())
    }
}

fn lock(file: &Mutex<File>) -> MutexGuard<'_, File> {
    // A panic while writing a line leaves a usable file behind.
    file.lock().unwrap_or_else(|e| e.into_inner())
}

/// One diagnostic line being written, holding the file.
pub struct ErrorLogLine(Option<MutexGuard<'static, File>>);

impl Write for ErrorLogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.0 {
            Some(f) => f.write(buf),
            None => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.0 {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for ErrorLog {
    type Writer = ErrorLogLine;

    fn make_writer(&'a self) -> ErrorLogLine {
        ErrorLogLine(ERROR_LOG.get().map(|(_, f)| lock(f)))
    }
}
