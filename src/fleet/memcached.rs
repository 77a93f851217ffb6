//! A minimal memcached text-protocol client: `gets`, `add` and `cas` of one item over a
//! blocking TCP connection with a timeout on every step. The ticket-key updater needs only
//! these three commands on one background thread; a crate would bring a connection pool and
//! an async runtime of its own for no gain.

use super::clip;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Largest item the client accepts: a ticket-key list is a few hundred bytes per key.
const MAX_ITEM: usize = 64 * 1024;

pub struct Memcached {
    reader: BufReader<TcpStream>,
}

/// What a conditional store answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Stored {
    Yes,
    /// Another instance stored first (`NOT_STORED` or `EXISTS`, or `NOT_FOUND` for a `cas`).
    Lost,
}

impl Memcached {
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Memcached, String> {
        Ok(Memcached {
            reader: BufReader::new(super::connect(host, port, timeout)?),
        })
    }

    /// The item's value and its CAS unique, or `None` when there is no such item.
    pub fn gets(&mut self, key: &str) -> Result<Option<(Vec<u8>, u64)>, String> {
        check_key(key)?;
        self.send(format!("gets {key}\r\n").as_bytes())?;
        let line = self.line()?;
        if line == "END" {
            return Ok(None);
        }
        // VALUE <key> <flags> <bytes> <cas unique>
        let fields: Vec<&str> = line.split(' ').collect();
        let (len, cas) = match fields.as_slice() {
            ["VALUE", k, _flags, len, cas] if *k == key => (len.parse::<usize>(), cas.parse()),
            _ => return Err(format!("unexpected answer to gets: {}", clip(&line))),
        };
        let (Ok(len), Ok(cas)) = (len, cas) else {
            return Err(format!("malformed answer to gets: {}", clip(&line)));
        };
        if len > MAX_ITEM {
            return Err(format!("item of {len} bytes is too large"));
        }
        let mut value = vec![0; len + 2];
        self.reader
            .read_exact(&mut value)
            .map_err(|e| format!("reading the item: {e}"))?;
        if !value.ends_with(b"\r\n") {
            return Err("item not followed by CRLF".into());
        }
        value.truncate(len);
        match self.line()?.as_str() {
            "END" => Ok(Some((value, cas))),
            other => Err(format!("unexpected answer after the item: {}", clip(other))),
        }
    }

    /// Stores `value` under `key` whatever was there.
    pub fn set(&mut self, key: &str, value: &[u8], expires: u32) -> Result<(), String> {
        match self.store(format!("set {key} 0 {expires} {}", value.len()), key, value)? {
            Stored::Yes => Ok(()),
            Stored::Lost => Err("set was not stored".into()),
        }
    }

    /// Removes `key` (whether or not it was there).
    pub fn delete(&mut self, key: &str) -> Result<(), String> {
        check_key(key)?;
        self.send(format!("delete {key}\r\n").as_bytes())?;
        match self.line()?.as_str() {
            "DELETED" | "NOT_FOUND" => Ok(()),
            other => Err(format!("unexpected answer to delete: {}", clip(other))),
        }
    }

    /// Stores `value` only if no item `key` exists.
    pub fn add(&mut self, key: &str, value: &[u8], expires: u32) -> Result<Stored, String> {
        self.store(format!("add {key} 0 {expires} {}", value.len()), key, value)
    }

    /// Replaces the item only if nobody changed it since `gets` returned `cas`.
    pub fn cas(
        &mut self,
        key: &str,
        value: &[u8],
        expires: u32,
        cas: u64,
    ) -> Result<Stored, String> {
        self.store(
            format!("cas {key} 0 {expires} {} {cas}", value.len()),
            key,
            value,
        )
    }

    fn store(&mut self, command: String, key: &str, value: &[u8]) -> Result<Stored, String> {
        check_key(key)?;
        let mut out = command.into_bytes();
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
        self.send(&out)?;
        match self.line()?.as_str() {
            "STORED" => Ok(Stored::Yes),
            "NOT_STORED" | "EXISTS" | "NOT_FOUND" => Ok(Stored::Lost),
            other => Err(format!("unexpected answer to a store: {}", clip(other))),
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.reader
            .get_mut()
            .write_all(bytes)
            .map_err(|e| format!("sending: {e}"))
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
        if !line.ends_with(b"\r\n") {
            return Err("answer line too long or cut".into());
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|_| "answer line is not text".into())
    }
}

/// memcached keys: up to 250 bytes, no spaces or control characters.
fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > 250 || key.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!("invalid memcached key {key:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Instant;

    /// A server on 127.0.0.1 that reads one command and answers `answer` (or nothing).
    fn server(answer: &'static [u8]) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut buf = [0; 512];
                let _ = s.read(&mut buf);
                let _ = s.write_all(answer);
                std::thread::sleep(Duration::from_secs(2));
            }
        });
        port
    }

    fn client(port: u16) -> Memcached {
        Memcached::connect("127.0.0.1", port, Duration::from_millis(300)).expect("connect")
    }

    #[test]
    fn answers_good_and_bad() {
        let p = server(b"VALUE k 0 5 42\r\nhello\r\nEND\r\n");
        assert_eq!(client(p).gets("k"), Ok(Some((b"hello".to_vec(), 42))));
        assert_eq!(client(server(b"END\r\n")).gets("k"), Ok(None));
        assert_eq!(
            client(server(b"NOT_STORED\r\n")).add("k", b"v", 10),
            Ok(Stored::Lost)
        );
        assert_eq!(
            client(server(b"STORED\r\n")).cas("k", b"v", 10, 7),
            Ok(Stored::Yes)
        );
        // Garbage, a lying length, an item too large, a bad key: errors, no panic.
        for answer in [
            &b"HELLO\r\n"[..],
            b"VALUE k 0 9 1\r\nhello\r\nEND\r\n",
            b"VALUE k 0 99999999 1\r\n",
            b"VALUE other 0 5 1\r\nhello\r\nEND\r\n",
        ] {
            let leaked: &'static [u8] = Vec::leak(answer.to_vec());
            assert!(client(server(leaked)).gets("k").is_err(), "{answer:?}");
        }
        assert!(client(server(b"")).gets("a key").is_err());
    }

    #[test]
    fn a_silent_server_times_out() {
        let start = Instant::now();
        let e = client(server(b"")).gets("k");
        assert!(e.is_err(), "{e:?}");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
    }
}
