//! `basic-auth`: HTTP Basic authentication against an htpasswd file. The file is read on the
//! first request and again when its modification time or size changes, looked at no more
//! than once a second per worker. Hashes: bcrypt (`$2y$`, `$2b$`, `$2a$`; the `bcrypt`
//! crate), SHA-256 and SHA-512 crypt (`$5$`, `$6$`; `sha-crypt`) and Apache's MD5 (`$apr1$`,
//! htpasswd's default; `apr1.rs` on `md-5`). Credentials a request carried are never logged.

mod apr1;
mod request;

pub use request::AuthRequest;

use crate::config::BasicAuthConf;
use crate::http::{Request, Response};
use base64::Engine;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// How often a worker looks whether the file changed.
const RECHECK: Duration = Duration::from_secs(1);
/// Accepted `Authorization` values remembered per worker, so that a client's every request
/// does not pay bcrypt's or SHA-crypt's thousands of rounds. Forgotten when the file changes.
const MAX_REMEMBERED: usize = 1024;

/// One path's Basic authentication (per worker).
pub struct BasicAuth {
    file: PathBuf,
    /// `WWW-Authenticate: Basic realm="..."`.
    challenge: String,
    state: RefCell<State>,
}

#[derive(Default)]
struct State {
    /// The file's modification time and size when read; `None` before the first read.
    seen: Option<(SystemTime, u64)>,
    checked: Option<Instant>,
    /// `None` when the file could not be read (every request gets 500).
    users: Option<HashMap<String, String>>,
    remembered: HashMap<Vec<u8>, ()>,
}

/// What a request's credentials are worth.
pub enum Verdict {
    Pass,
    Refuse(Response),
}

impl BasicAuth {
    pub fn new(conf: &BasicAuthConf) -> BasicAuth {
        let realm: String = conf
            .realm
            .chars()
            .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
            .collect();
        BasicAuth {
            file: conf.htpasswd.clone(),
            challenge: format!("Basic realm=\"{realm}\", charset=\"UTF-8\""),
            state: RefCell::new(State::default()),
        }
    }

    pub fn check(&self, req: &Request, client: std::net::IpAddr) -> Verdict {
        let mut state = self.state.borrow_mut();
        self.refresh(&mut state);
        let Some(users) = &state.users else {
            return Verdict::Refuse(Response::error(500));
        };
        let Some(value) = req.header(b"authorization") else {
            return self.challenge();
        };
        if state.remembered.contains_key(value) {
            return Verdict::Pass;
        }
        let Some((user, password)) = credentials(value) else {
            tracing::info!(client = %client, "401: a malformed Basic Authorization header");
            return self.challenge();
        };
        let ok = users
            .get(&user)
            .is_some_and(|hash| verify(password.as_bytes(), hash));
        if !ok {
            // The user name may be a password typed in the wrong field: not logged.
            tracing::info!(client = %client, "401: Basic credentials not accepted");
            return self.challenge();
        }
        if state.remembered.len() >= MAX_REMEMBERED {
            state.remembered.clear();
        }
        state.remembered.insert(value.to_vec(), ());
        Verdict::Pass
    }

    fn challenge(&self) -> Verdict {
        Verdict::Refuse(
            Response::error(401).with_header("www-authenticate", self.challenge.clone()),
        )
    }

    /// Reads the file again when it changed, at most once per [`RECHECK`].
    fn refresh(&self, state: &mut State) {
        let now = Instant::now();
        if state
            .checked
            .is_some_and(|t| now.duration_since(t) < RECHECK)
        {
            return;
        }
        state.checked = Some(now);
        let meta = std::fs::metadata(&self.file)
            .and_then(|m| Ok((m.modified()?, m.len())))
            .ok();
        if meta.is_some() && meta == state.seen {
            return;
        }
        state.remembered.clear();
        match (meta, std::fs::read_to_string(&self.file)) {
            (Some(seen), Ok(text)) => {
                state.users = Some(parse(&self.file, &text));
                state.seen = Some(seen);
            }
            (_, Err(e)) => {
                if state.users.is_some() || state.seen.is_none() {
                    tracing::error!(
                        "basic-auth: cannot read {}: {e}; answering 500",
                        self.file.display()
                    );
                }
                state.users = None;
                // Read again at the next look.
                state.seen = Some((SystemTime::UNIX_EPOCH, u64::MAX));
            }
            (None, Ok(_)) => {}
        }
    }
}

/// `user:hash` lines; blank lines and `#` comments skipped. A line that is not one, or whose
/// hash is of a kind spate does not verify, is skipped with one log line naming it.
fn parse(file: &std::path::Path, text: &str) -> HashMap<String, String> {
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let problem = match line.split_once(':') {
            None => "no user:hash",
            Some(("", _)) => "an empty user name",
            Some((_, hash)) if !known_hash(hash) => {
                "a hash other than $2y$ (bcrypt), $5$ / $6$ (SHA-crypt) or $apr1$ (MD5)"
            }
            Some((user, hash)) => {
                users.insert(user.to_string(), hash.to_string());
                continue;
            }
        };
        tracing::warn!(
            "basic-auth: {}:{}: skipped: {problem}",
            file.display(),
            i + 1
        );
    }
    users
}

fn known_hash(h: &str) -> bool {
    ["$2y$", "$2b$", "$2a$", "$5$", "$6$", "$apr1$"]
        .iter()
        .any(|p| h.starts_with(p))
}

fn verify(password: &[u8], hash: &str) -> bool {
    if hash.starts_with("$2") {
        return bcrypt::verify(password, hash).unwrap_or(false);
    }
    if hash.starts_with("$apr1$") {
        return apr1::verify(password, hash);
    }
    let Ok(password) = std::str::from_utf8(password) else {
        return false;
    };
    if hash.starts_with("$5$") {
        return sha_crypt::sha256_check(password, hash).is_ok();
    }
    if hash.starts_with("$6$") {
        return sha_crypt::sha512_check(password, hash).is_ok();
    }
    false
}

/// `Basic BASE64(user:password)`.
fn credentials(value: &[u8]) -> Option<(String, String)> {
    let value = value.trim_ascii();
    let (scheme, token) = value.split_at(value.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim_ascii())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// Compares in time that does not depend on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hash_htpasswd_writes_verifies() {
        // Written by apache2-utils' htpasswd (-m, -B -C 5, -5, -2).
        let cases = [
            ("secret", "$apr1$rAFlN/eG$3.S8re52e90EBspIH1/PM."),
            ("pw2", "$2y$05$8Rc8w3yhLaUIXC1fRlfC0.W0eeu/lTeJmB0JD/UiUsZAZlmCe/Chq"),
            ("pw3", "$6$BMRzG4Ar7tyHks0T$1bWozRDsEx.28QHy45L4t5Gq4IxOovABj4nM9F4K2eCv.akt.f/UvRY6AIK/MNux1MzXXnJnaHufWX.nfDTYZ1"),
            ("pw4", "$5$AQ/XvPIDrYlHiWv/$vhP16GQFizmcYkPHmagE.5xYSvbS9Kz4AYrklXzFlCA"),
        ];
        for (pw, hash) in cases {
            assert!(verify(pw.as_bytes(), hash), "{hash}");
            assert!(!verify(b"wrong", hash), "{hash}");
        }
    }

    #[test]
    fn credentials_decode() {
        // "alice:se:cret"
        assert_eq!(
            credentials(b"Basic YWxpY2U6c2U6Y3JldA=="),
            Some(("alice".into(), "se:cret".into()))
        );
        assert_eq!(credentials(b"Bearer YWxpY2U6c2U6Y3JldA=="), None);
        assert_eq!(credentials(b"Basic !!!"), None);
        assert_eq!(credentials(b"Basic"), None);
    }

    #[test]
    fn broken_lines_are_skipped() {
        let users = parse(
            std::path::Path::new("h"),
            "# users\nalice:$apr1$x$y\nbroken line\n:$apr1$x$y\nold:{SHA}abc\n\nbob:$2y$05$z\n",
        );
        let mut names: Vec<_> = users.keys().cloned().collect();
        names.sort();
        assert_eq!(names, ["alice", "bob"]);
    }
}
