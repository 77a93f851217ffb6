//! Where log lines go: files and `| command` pipes, each opened once per process and shared
//! by every writer (workers take duplicates of one descriptor).
//!
//! Opening in one place lets the server open its logs before it gives up root (`user`), as
//! h2o does, and start each log command once instead of once per worker. SIGUSR1 opens the
//! files again (after logrotate renamed them); a command keeps its pipe.

use crate::config::LogTarget;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};

/// The largest write a pipe takes in one piece (POSIX `PIPE_BUF` on Linux): writers sharing a
/// pipe keep their lines whole by writing at most this much at a time.
pub const PIPE_ATOMIC: usize = 4096;

struct Opened {
    target: LogTarget,
    file: File,
    /// The command reading a pipe, kept so that it is reaped once it exits.
    command: Option<Child>,
}

static OPENED: Mutex<Vec<Opened>> = Mutex::new(Vec::new());

/// Commands of logs a reload removed, until they exit (so they are reaped, not left zombies).
static RETIRED: Mutex<Vec<Child>> = Mutex::new(Vec::new());

fn opened() -> MutexGuard<'static, Vec<Opened>> {
    OPENED.lock().unwrap_or_else(|e| e.into_inner())
}

/// A descriptor for writing to `target`: a duplicate of the one opened the first time (the
/// file is created 0644 for appending; the command is started).
pub fn open(target: &LogTarget) -> io::Result<File> {
    let mut all = opened();
    if let Some(o) = all.iter().find(|o| &o.target == target) {
        return o.file.try_clone();
    }
    let new = Opened::new(target)?;
    let copy = new.file.try_clone()?;
    all.push(new);
    Ok(copy)
}

impl Opened {
    fn new(target: &LogTarget) -> io::Result<Opened> {
        let (file, command) = match target {
            LogTarget::File(path) => (open_append(path)?, None),
            LogTarget::Pipe(command) => {
                let (file, child) = start(command)?;
                (file, Some(child))
            }
        };
        Ok(Opened {
            target: target.clone(),
            file,
            command,
        })
    }
}

/// Opens every log file again (after a rename); pipes stay. The first failure is returned,
/// the other files are still reopened; a file that fails keeps its old descriptor.
pub fn reopen_files() -> Result<(), String> {
    let mut first_error = None;
    for o in opened().iter_mut() {
        if let LogTarget::File(path) = &o.target {
            match open_append(path) {
                Ok(f) => o.file = f,
                Err(e) => {
                    first_error.get_or_insert(format!("cannot reopen {}: {e}", path.display()));
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Forgets every destination not in `kept` (after a reload): its file closes, and its command
/// sees the end of its input once the last writer (an old worker still draining) lets go.
/// Commands retired earlier that have exited are reaped.
pub fn keep_only(kept: &[&LogTarget]) {
    let mut retired = RETIRED.lock().unwrap_or_else(|e| e.into_inner());
    keep_only_in(&mut opened(), &mut retired, kept);
}

fn keep_only_in(all: &mut Vec<Opened>, retired: &mut Vec<Child>, kept: &[&LogTarget]) {
    retired.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
    let (keep, gone): (Vec<Opened>, Vec<Opened>) =
        all.drain(..).partition(|o| kept.contains(&&o.target));
    *all = keep;
    retired.extend(gone.into_iter().filter_map(|o| o.command));
}

/// Starts `/bin/sh -c COMMAND` with its standard input a pipe; returns the pipe's write end.
fn start(command: &str) -> io::Result<(File, Child)> {
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot start `{command}`: {e}")))?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("the command's standard input is not a pipe"))?;
    Ok((File::from(std::os::fd::OwnedFd::from(stdin)), child))
}

/// Opens `path` for appending (created 0644), as every log file is.
fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)
}

/// Writes whole lines from `buf`. To a pipe (`atomic`), in pieces of at most [`PIPE_ATOMIC`]
/// bytes cut after a newline, so that lines of other writers never land inside one; a single
/// line longer than that goes alone.
pub fn write_lines(file: &mut File, buf: &[u8], atomic: bool) -> io::Result<()> {
    if !atomic {
        return file.write_all(buf);
    }
    let mut rest = buf;
    while !rest.is_empty() {
        let (piece, after) = rest.split_at(piece_len(rest));
        file.write_all(piece)?;
        rest = after;
    }
    Ok(())
}

/// How much of `rest` goes in the next write to a pipe (see [`write_lines`]).
fn piece_len(rest: &[u8]) -> usize {
    if rest.len() <= PIPE_ATOMIC {
        return rest.len();
    }
    let newline = |b: &u8| *b == b'\n';
    match rest[..PIPE_ATOMIC].iter().rposition(newline) {
        Some(i) => i + 1,
        None => rest.iter().position(newline).map_or(rest.len(), |i| i + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn line(n: usize) -> Vec<u8> {
        let mut l = vec![b'x'; n - 1];
        l.push(b'\n');
        l
    }

    fn pieces(buf: &[u8]) -> Vec<usize> {
        let mut sizes = Vec::new();
        let mut rest = buf;
        while !rest.is_empty() {
            sizes.push(piece_len(rest));
            rest = &rest[piece_len(rest)..];
        }
        sizes
    }

    #[test]
    fn pipe_writes_are_whole_lines_of_at_most_pipe_buf() {
        // 100 lines of 100 bytes: pieces of 40 lines (4,000 bytes), the rest in the last.
        let buf: Vec<u8> = (0..100).flat_map(|_| line(100)).collect();
        assert_eq!(pieces(&buf), vec![4000, 4000, 2000]);
        // A line longer than PIPE_BUF goes alone, whole.
        let buf = [line(50), line(5000), line(50)].concat();
        assert_eq!(pieces(&buf), vec![50, 5000, 50]);
        // Exactly PIPE_BUF in one piece; no newline at all, everything.
        assert_eq!(pieces(&line(4096)), vec![4096]);
        assert_eq!(pieces(&[b'x'; 9000]), vec![9000]);
    }

    #[test]
    fn a_destination_a_reload_removed_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let kept = LogTarget::File(dir.path().join("kept.log"));
        // The command says when its input ends.
        let gone = LogTarget::Pipe(format!("cat > /dev/null; echo ended > {}", out.display()));
        // A registry of its own: the process-wide one is shared with the other tests.
        let mut all = vec![Opened::new(&kept).unwrap(), Opened::new(&gone).unwrap()];
        let mut retired = Vec::new();
        keep_only_in(&mut all, &mut retired, &[&kept]);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].target, kept);
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !out.exists() && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(out.exists(), "the removed command saw the end of its input");
        // Reaped at the next call once it has exited.
        while retired.iter_mut().any(|c| matches!(c.try_wait(), Ok(None)))
            && std::time::Instant::now() < end
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        keep_only_in(&mut all, &mut retired, &[&kept]);
        assert!(retired.is_empty());
    }

    #[test]
    fn a_command_gets_the_lines_on_its_standard_input() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let target = LogTarget::Pipe(format!("cat > {}", out.display()));
        let mut a = open(&target).unwrap();
        let mut b = open(&target).unwrap();
        write_lines(&mut a, b"one\n", true).unwrap();
        write_lines(&mut b, b"two\n", true).unwrap();
        drop((a, b));
        // The registry keeps the write end: the command sees the end of input only when it
        // is closed, so read what arrived instead of waiting for it to exit.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut got = String::new();
        while got != "one\ntwo\n" && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(10));
            got.clear();
            if let Ok(mut f) = File::open(&out) {
                f.read_to_string(&mut got).unwrap();
            }
        }
        assert_eq!(got, "one\ntwo\n");
        assert_eq!(
            opened().iter().filter(|o| o.target == target).count(),
            1,
            "one command for both writers"
        );
    }
}
