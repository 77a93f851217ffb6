//! Where a relative path written in the configuration points.

use std::path::{Path, PathBuf};

/// Where a relative path in the configuration is: beside the configuration file (spate's rule,
/// so a tree of a configuration and its files works wherever it is started from), unless it is
/// found only under the working directory, where h2o resolves every relative path (so an h2o
/// tree moved over works as it did). "Found" is the path itself, or for a file still to be
/// made (a log, the pid file) the directory it goes in.
pub(super) fn resolve(base_dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    let beside = base_dir.join(p);
    let found = |candidate: &Path| {
        candidate.exists()
            || (p.parent().is_some_and(|d| !d.as_os_str().is_empty())
                && candidate.parent().is_some_and(Path::is_dir))
    };
    if !found(&beside) && found(p) {
        if let Ok(cwd) = std::env::current_dir() {
            return cwd.join(p);
        }
    }
    beside
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unit tests run in the crate's directory, which has `src/config`.
    #[test]
    fn a_relative_path_found_only_under_the_working_directory_is_taken_from_there() {
        let conf = tempfile::tempdir().unwrap();
        let cwd = std::env::current_dir().unwrap();
        let base = conf.path();
        assert_eq!(
            resolve(base, Path::new("src/config")),
            cwd.join("src/config")
        );
        // A file to be made in a directory that is there.
        assert_eq!(
            resolve(base, Path::new("src/new.log")),
            cwd.join("src/new.log")
        );
        // Found in neither, or beside the configuration too: beside the configuration.
        assert_eq!(resolve(base, Path::new("htdocs")), base.join("htdocs"));
        assert_eq!(
            resolve(base, Path::new("access.log")),
            base.join("access.log")
        );
        std::fs::create_dir_all(base.join("src/config")).unwrap();
        assert_eq!(
            resolve(base, Path::new("src/config")),
            base.join("src/config")
        );
        assert_eq!(
            resolve(base, Path::new("src/new.log")),
            base.join("src/new.log")
        );
        assert_eq!(resolve(base, Path::new("/abs")), PathBuf::from("/abs"));
    }
}
