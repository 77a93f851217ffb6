//! A minimal Redis client (RESP2) over a blocking TCP connection with a timeout on every
//! step: the commands the ticket keys, the session cache and the fleet-wide limit zones send
//! from their background threads (and, bounded, from a handshake's cache lookup). The Redis
//! crates bring an async runtime of their own (tokio) or a connection manager we would not
//! use; what we need is a dozen lines of framing.

use super::clip;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Largest bulk string accepted (a ticket-key list or one TLS session is a few KiB).
const MAX_BULK: usize = 256 * 1024;
/// Largest array accepted in an answer.
const MAX_ARRAY: usize = 4096;

/// One answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
    /// An error answer (`-ERR ...`): the command failed, the connection is still good.
    Error(String),
}

pub struct Redis {
    reader: BufReader<TcpStream>,
}

impl Redis {
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Redis, String> {
        Ok(Redis {
            reader: BufReader::new(super::connect(host, port, timeout)?),
        })
    }

    /// Sends one command and reads its answer.
    pub fn command(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.send(&out)?;
        self.reply(0)
    }

    /// Sends `commands` in one write and reads their answers in order (one round trip).
    pub fn pipeline(&mut self, commands: &[Vec<&[u8]>]) -> Result<Vec<Reply>, String> {
        let mut out = Vec::new();
        for c in commands {
            encode(&mut out, c);
        }
        self.send(&out)?;
        commands.iter().map(|_| self.reply(0)).collect()
    }

    /// `GET key`: the value, or `None` when there is none.
    pub fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, String> {
        match self.command(&[b"GET", key.as_bytes()])? {
            Reply::Bulk(v) => Ok(Some(v)),
            Reply::Nil => Ok(None),
            other => Err(unexpected("GET", &other)),
        }
    }

    /// `SET key value EX secs [NX]`: whether it was stored (`NX` loses to an existing key).
    pub fn set(
        &mut self,
        key: &str,
        value: &[u8],
        secs: u32,
        only_new: bool,
    ) -> Result<bool, String> {
        let secs = secs.max(1).to_string();
        let mut args: Vec<&[u8]> = vec![b"SET", key.as_bytes(), value, b"EX", secs.as_bytes()];
        if only_new {
            args.push(b"NX");
        }
        match self.command(&args)? {
            Reply::Status(s) if s == "OK" => Ok(true),
            Reply::Nil => Ok(false),
            other => Err(unexpected("SET", &other)),
        }
    }

    /// Replaces `key` with `value` only if it still holds `expected` (a compare-and-set in
    /// one script, so nothing stays watched on the connection): whether it was replaced.
    pub fn replace_if(
        &mut self,
        key: &str,
        expected: &[u8],
        value: &[u8],
        secs: u32,
    ) -> Result<bool, String> {
        const SCRIPT: &[u8] = b"if redis.call('GET', KEYS[1]) == ARGV[1] then \
            redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3]) return 1 else return 0 end";
        let secs = secs.max(1).to_string();
        match self.command(&[
            b"EVAL",
            SCRIPT,
            b"1",
            key.as_bytes(),
            expected,
            value,
            secs.as_bytes(),
        ])? {
            Reply::Int(n) => Ok(n == 1),
            other => Err(unexpected("EVAL", &other)),
        }
    }

    /// `DEL key`.
    pub fn del(&mut self, key: &str) -> Result<(), String> {
        match self.command(&[b"DEL", key.as_bytes()])? {
            Reply::Int(_) => Ok(()),
            other => Err(unexpected("DEL", &other)),
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.reader
            .get_mut()
            .write_all(bytes)
            .map_err(|e| format!("sending: {e}"))
    }

    fn reply(&mut self, depth: usize) -> Result<Reply, String> {
        if depth > 4 {
            return Err("answer nested too deep".into());
        }
        let line = self.line()?;
        let (kind, rest) = line.split_at(1.min(line.len()));
        let number = || {
            rest.parse::<i64>()
                .map_err(|_| format!("malformed answer: {}", clip(&line)))
        };
        match kind {
            "+" => Ok(Reply::Status(rest.to_owned())),
            "-" => Ok(Reply::Error(clip(rest).to_owned())),
            ":" => Ok(Reply::Int(number()?)),
            "$" => {
                let n = number()?;
                if n < 0 {
                    return Ok(Reply::Nil);
                }
                let n = usize::try_from(n).map_err(|_| "bad length")?;
                if n > MAX_BULK {
                    return Err(format!("value of {n} bytes is too large"));
                }
                let mut value = vec![0; n + 2];
                self.reader
                    .read_exact(&mut value)
                    .map_err(|e| format!("reading a value: {e}"))?;
                if !value.ends_with(b"\r\n") {
                    return Err("value not followed by CRLF".into());
                }
                value.truncate(n);
                Ok(Reply::Bulk(value))
            }
            "*" => {
                let n = number()?;
                if n < 0 {
                    return Ok(Reply::Nil);
                }
                let n = usize::try_from(n).map_err(|_| "bad length")?;
                if n > MAX_ARRAY {
                    return Err(format!("array of {n} items is too large"));
                }
                (0..n)
                    .map(|_| self.reply(depth + 1))
                    .collect::<Result<_, _>>()
                    .map(Reply::Array)
            }
            _ => Err(format!("unexpected answer: {}", clip(&line))),
        }
    }

    /// One answer line without its CRLF, bounded in length.
    fn line(&mut self) -> Result<String, String> {
        let mut line = Vec::new();
        let n = (&mut self.reader)
            .take(1024)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading: {e}"))?;
        if n == 0 {
            return Err("connection closed".into());
        }
        if !line.ends_with(b"\r\n") || line.len() < 3 {
            return Err("answer line too long, short or cut".into());
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|_| "answer line is not text".into())
    }
}

/// A command as a RESP array of bulk strings.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

pub fn unexpected(command: &str, r: &Reply) -> String {
    match r {
        Reply::Error(e) => format!("{command} failed: {e}"),
        other => format!("unexpected answer to {command}: {other:?}")
            .chars()
            .take(120)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Instant;

    /// A server on 127.0.0.1 that reads one command and answers `answer` (or nothing).
    fn server(answer: &'static [u8]) -> u16 {
        server_holding(answer, Duration::from_secs(2))
    }

    /// The same, holding the connection open for `hold` after answering.
    fn server_holding(answer: &'static [u8], hold: Duration) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut buf = [0; 512];
                let _ = s.read(&mut buf);
                let _ = s.write_all(answer);
                std::thread::sleep(hold);
            }
        });
        port
    }

    fn client(port: u16) -> Redis {
        Redis::connect("127.0.0.1", port, Duration::from_millis(300)).expect("connect")
    }

    #[test]
    fn answers_good_and_bad() {
        assert_eq!(
            client(server(b"$5\r\nhello\r\n")).get("k"),
            Ok(Some(b"hello".to_vec()))
        );
        assert_eq!(client(server(b"$-1\r\n")).get("k"), Ok(None));
        assert_eq!(
            client(server(b"+OK\r\n")).set("k", b"v", 10, true),
            Ok(true)
        );
        assert_eq!(
            client(server(b"$-1\r\n")).set("k", b"v", 10, true),
            Ok(false)
        );
        assert_eq!(
            client(server(b":1\r\n")).replace_if("k", b"a", b"b", 10),
            Ok(true)
        );
        assert_eq!(
            client(server(b"*2\r\n:3\r\n$-1\r\n")).command(&[b"X"]),
            Ok(Reply::Array(vec![Reply::Int(3), Reply::Nil]))
        );
        let e = client(server(b"-ERR unknown command\r\n")).get("k");
        assert!(
            e.as_ref().is_err_and(|e| e.contains("unknown command")),
            "{e:?}"
        );
        // Garbage, a lying length, a value too large, deep nesting: errors, no panic.
        for answer in [
            &b"HELLO\r\n"[..],
            b"$9\r\nhello\r\n",
            b"$99999999\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
            b":x\r\n",
            b"\r\n",
        ] {
            let leaked: &'static [u8] = Vec::leak(answer.to_vec());
            let r = client(server(leaked)).command(&[b"GET", b"k"]);
            assert!(
                r.is_err() || matches!(r, Ok(Reply::Error(_))),
                "{answer:?}: {r:?}"
            );
        }
    }

    #[test]
    fn a_silent_server_times_out() {
        // The server holds the connection for a minute: only the client's timeout ends this.
        let port = server_holding(b"", Duration::from_secs(60));
        let start = Instant::now();
        let e = client(port).get("k");
        assert!(e.is_err(), "{e:?}");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            start.elapsed()
        );
    }
}
