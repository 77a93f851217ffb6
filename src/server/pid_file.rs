//! `pid-file`: the process id, written once the sockets are bound and removed at exit, as
//! h2o does. After a binary upgrade the new process has written its own id there: the old
//! one leaves the file alone.

use std::path::{Path, PathBuf};

/// A written pid file; dropping it removes the file if it still names this process.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    pid: u32,
}

impl PidFile {
    /// Writes this process's id and a newline to `path` (replacing what was there).
    pub fn write(path: &Path) -> Result<PidFile, String> {
        let pid = std::process::id();
        std::fs::write(path, format!("{pid}\n"))
            .map_err(|e| format!("cannot write pid-file {}: {e}", path.display()))?;
        Ok(PidFile {
            path: path.to_path_buf(),
            pid,
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours =
            std::fs::read_to_string(&self.path).is_ok_and(|s| s.trim().parse() == Ok(self.pid));
        if ours {
            // After `user` gave up root the directory may not let us; h2o leaves it too.
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::debug!("cannot remove pid-file {}: {e}", self.path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_removed_only_while_it_names_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spate.pid");
        let f = PidFile::write(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
        drop(f);
        assert!(!path.exists());
        // A newer process (binary upgrade) wrote its id: the file stays.
        let f = PidFile::write(&path).unwrap();
        std::fs::write(&path, "1\n").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
        assert!(PidFile::write(&dir.path().join("no/such/dir/x.pid"))
            .unwrap_err()
            .starts_with("cannot write pid-file"));
    }
}
