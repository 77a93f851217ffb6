//! The loading context (file name, collected errors) and typed readers for directive values.
//! Every reader records an error saying what was expected and returns `None` on a bad value,
//! so loading goes on and reports every problem.

use super::yaml::{Node, Sources};
use super::{ConfigError, Location, LogTarget, PathAt};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(super) struct Ctx {
    /// The configuration file and those it includes (`!file`): a node's line says which.
    pub sources: Sources,
    /// Relative paths in the file are resolved against this (the config file's directory).
    pub base_dir: PathBuf,
    pub errors: Vec<ConfigError>,
    /// Things accepted that deserve a word ([`super::Config::warnings`]).
    pub warnings: Vec<ConfigError>,
    /// Every `proxy.ssl.cafile` read so far ([`super::Config::proxy_ca_files`]).
    pub proxy_ca_files: Vec<PathAt>,
    /// `send-server-name: preserve`: proxied answers keep the backend's Server field.
    pub preserve_server_header: bool,
    /// `send-informational` (global): copied into every proxy's settings.
    pub send_informational: super::SendInformational,
    /// `https://` backends read so far: the next one's [`super::UpstreamTls::id`].
    pub upstream_tls_count: usize,
    /// `fastcgi.spawn`s so far: each gets its own socket.
    pub fastcgi_spawns: usize,
    /// `limit-req-zones` read so far (`config/edge.rs`).
    pub limit_zones: Vec<super::LimitZone>,
    /// `limit-conn-zones` read so far.
    pub limit_conn_zones: Vec<super::LimitConnZone>,
}

impl Ctx {
    pub fn new(file: &str) -> Ctx {
        let base_dir = Path::new(file)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        Ctx {
            sources: Sources::new(file, &base_dir),
            base_dir,
            errors: Vec::new(),
            warnings: Vec::new(),
            proxy_ca_files: Vec::new(),
            preserve_server_header: false,
            send_informational: super::SendInformational::ExceptH1,
            upstream_tls_count: 0,
            fastcgi_spawns: 0,
            limit_zones: Vec::new(),
            limit_conn_zones: Vec::new(),
        }
    }

    /// Where a node's `line` is: in which file and on which line of it.
    pub fn at(&self, line: u32) -> Location {
        let (file, line) = self.sources.locate(line);
        Location { file, line }
    }

    pub fn error(&mut self, line: u32, message: impl Into<String>) {
        self.errors.push(ConfigError {
            at: self.at(line),
            message: message.into(),
        });
    }

    /// [`Ctx::error`], unless the same message was already recorded at that line: options
    /// inherited by every path below a level are checked once per path.
    pub fn error_once(&mut self, line: u32, message: impl Into<String>) {
        let message = message.into();
        let at = self.at(line);
        if !self
            .errors
            .iter()
            .any(|e| e.at == at && e.message == message)
        {
            self.errors.push(ConfigError { at, message });
        }
    }

    /// Records a warning: the configuration is accepted, but `message` says what spate does
    /// differently from what the directive asks of h2o.
    pub fn warn(&mut self, line: u32, message: impl Into<String>) {
        self.warnings.push(ConfigError {
            at: self.at(line),
            message: message.into(),
        });
    }

    /// A path (as [`Ctx::path`]) with where it was written.
    pub fn path_at(&mut self, name: &str, v: &Node) -> Option<PathAt> {
        let path = self.path(name, v)?;
        Some(PathAt {
            path,
            at: self.at(v.line),
        })
    }

    /// `ON` / `OFF`.
    pub fn bool(&mut self, name: &str, v: &Node) -> Option<bool> {
        let b = v.as_bool();
        if b.is_none() {
            self.error(v.line, format!("{name} expects ON or OFF, got {}", show(v)));
        }
        b
    }

    /// A non-negative integer no smaller than `min`.
    pub fn uint(&mut self, name: &str, v: &Node, min: u64) -> Option<u64> {
        match v.as_u64() {
            Some(n) if n >= min => Some(n),
            _ => {
                self.error(
                    v.line,
                    format!("{name} expects an integer >= {min}, got {}", show(v)),
                );
                None
            }
        }
    }

    /// An integer that fits `T` (usize, u32, u16), at least `min`.
    pub fn int<T: TryFrom<u64>>(&mut self, name: &str, v: &Node, min: u64) -> Option<T> {
        let n = self.uint(name, v, min)?;
        let r = T::try_from(n).ok();
        if r.is_none() {
            self.error(v.line, format!("{name}: {n} is too large"));
        }
        r
    }

    pub fn seconds(&mut self, name: &str, v: &Node) -> Option<Duration> {
        self.uint(name, v, 0).map(Duration::from_secs)
    }

    pub fn millis(&mut self, name: &str, v: &Node) -> Option<Duration> {
        self.uint(name, v, 0).map(Duration::from_millis)
    }

    /// A non-empty scalar.
    pub fn string(&mut self, name: &str, v: &Node) -> Option<String> {
        match v.as_str() {
            Some(s) if !s.is_empty() => Some(s.to_owned()),
            _ => {
                self.error(v.line, format!("{name} expects a string, got {}", show(v)));
                None
            }
        }
    }

    /// A scalar or a sequence of scalars.
    pub fn strings(&mut self, name: &str, v: &Node) -> Option<Vec<String>> {
        if let Some(items) = v.as_seq() {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(self.string(name, item)?);
            }
            Some(out)
        } else if v.as_map().is_some() {
            self.error(
                v.line,
                format!("{name} expects a string or a sequence of strings, got a mapping"),
            );
            None
        } else {
            self.string(name, v).map(|s| vec![s])
        }
    }

    /// A file system path; a relative one as [`super::paths::resolve`] says.
    pub fn path(&mut self, name: &str, v: &Node) -> Option<PathBuf> {
        let s = self.string(name, v)?;
        Some(super::paths::resolve(&self.base_dir, Path::new(&s)))
    }

    /// A log's destination: a path (relative to the configuration's directory) or, when it
    /// starts with `|`, a command that reads the lines on its standard input.
    pub fn log_target(&mut self, name: &str, v: &Node) -> Option<LogTarget> {
        let s = self.string(name, v)?;
        match s.strip_prefix('|') {
            Some(command) if command.trim().is_empty() => {
                self.error(v.line, format!("{name}: the command after | is empty"));
                None
            }
            Some(command) => Some(LogTarget::Pipe(command.trim().to_string())),
            None => self.path(name, v).map(LogTarget::File),
        }
    }

    /// The entries of a mapping value.
    pub fn map<'a>(&mut self, name: &str, v: &'a Node) -> Option<&'a [(Node, Node)]> {
        let m = v.as_map();
        if m.is_none() {
            self.error(v.line, format!("{name} expects a mapping, got {}", show(v)));
        }
        m
    }

    /// Checks the keys of a sub-mapping (`respond`, `listen`, ...) against the allowed ones,
    /// reporting unknown keys with a suggestion. Returns the entries whose keys are allowed.
    pub fn known_keys<'a>(
        &mut self,
        what: &str,
        entries: &'a [(Node, Node)],
        allowed: &[&str],
    ) -> Vec<(&'a str, &'a Node)> {
        let mut out = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            match k.as_str() {
                Some(key) if allowed.contains(&key) => out.push((key, v)),
                Some(key) => {
                    let hint = suggest(key, allowed.iter().copied())
                        .map(|s| format!(" (did you mean {s}?)"))
                        .unwrap_or_default();
                    self.error(k.line, format!("unknown key {key} in {what}{hint}"));
                }
                None => self.error(k.line, format!("{what} expects string keys")),
            }
        }
        out
    }
}

/// How a bad value is shown in an error.
pub(super) fn show(v: &Node) -> String {
    match v.as_str() {
        Some(s) => format!("\"{s}\""),
        None => format!("a {}", v.type_name()),
    }
}

/// The candidate closest to `word` within an edit distance of 2, if any.
pub(super) fn suggest<'a>(
    word: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over bytes (directive names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let replace = prev[j] + usize::from(ca != cb);
            cur[j + 1] = replace.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_and_suggestion() {
        assert_eq!(edit_distance("listen", "listen"), 0);
        assert_eq!(edit_distance("lisen", "listen"), 1);
        assert_eq!(edit_distance("file.dri", "file.dir"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        let names = ["listen", "hosts", "file.dir"];
        assert_eq!(suggest("lsiten", names.iter().copied()), Some("listen"));
        assert_eq!(suggest("host", names.iter().copied()), Some("hosts"));
        assert_eq!(suggest("completely", names.iter().copied()), None);
    }

    #[test]
    fn relative_paths_use_the_config_directory() {
        let mut ctx = Ctx::new("/etc/spate/spate.yaml");
        let node = Node {
            line: 1,
            kind: super::super::yaml::NodeKind::Scalar(super::super::yaml::Scalar {
                value: "htdocs".into(),
                quoted: false,
            }),
        };
        assert_eq!(
            ctx.path("file.dir", &node),
            Some(PathBuf::from("/etc/spate/htdocs"))
        );
    }
}
