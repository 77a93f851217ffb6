//! Compiles an Apache/h2o access-log format string into a list of [`Piece`]s once, so that
//! writing a line only walks the list.

use super::time::{self, TimeFormat};
use super::Escape;

/// A compiled format with how its values are escaped.
#[derive(Clone)]
pub(crate) struct Compiled {
    pub pieces: Vec<Piece>,
    pub escape: Escape,
    /// Per piece: a value alone inside a quoted string of the format (`"%{referer}i"`). In
    /// JSON, such a value that is missing is written as a bare `null`.
    pub quoted_alone: Vec<bool>,
}

impl Compiled {
    pub fn new(format: &str, escape: Escape) -> Result<Compiled, String> {
        let pieces = compile(format)?;
        let quoted_alone = match escape {
            Escape::Apache => vec![false; pieces.len()],
            Escape::Json => quoted_alone(&pieces),
        };
        Ok(Compiled {
            pieces,
            escape,
            quoted_alone,
        })
    }
}

/// Which escapes sit alone between a pair of quotes of the format's own text: the literal
/// before ends by opening a string (`"` or `'`) and the literal after starts by closing it.
fn quoted_alone(pieces: &[Piece]) -> Vec<bool> {
    let mut quote: Option<u8> = None;
    // The last literal's last byte opened the current string.
    let mut just_opened = false;
    let mut alone = vec![false; pieces.len()];
    for (k, piece) in pieces.iter().enumerate() {
        let Piece::Literal(text) = piece else {
            let closes = |next: Option<&Piece>| matches!(next, Some(Piece::Literal(t)) if Some(t[0]) == quote);
            alone[k] = just_opened && closes(pieces.get(k + 1));
            just_opened = false;
            continue;
        };
        for (i, &b) in text.iter().enumerate() {
            just_opened = false;
            match quote {
                Some(q) if b == q => {
                    // Closed unless behind an odd number of backslashes.
                    let backslashes = text[..i].iter().rev().take_while(|&&c| c == b'\\').count();
                    if backslashes % 2 == 0 {
                        quote = None;
                    }
                }
                Some(_) => {}
                None if b == b'"' || b == b'\'' => {
                    quote = Some(b);
                    just_opened = true;
                }
                None => {}
            }
        }
    }
    alone
}

/// One part of a compiled format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text copied as is (runs of plain characters and `%%`).
    Literal(Box<[u8]>),
    /// `%A`: the local IP address.
    LocalAddr,
    /// `%h`, `%a`: the client's IP address.
    RemoteAddr,
    /// `%p`, `%{local}p`: the local port.
    LocalPort,
    /// `%{remote}p`: the client's port.
    RemotePort,
    /// `%b`: body bytes, `-` when none.
    BodyBytesClf,
    /// `%B`: body bytes, `0` when none.
    BodyBytes,
    /// `%O`: bytes sent including the response head.
    TotalBytes,
    /// `%H`: `HTTP/1.1` and the like.
    Protocol,
    /// `%l`, `%u`: identd name and user, which a server without authentication never knows;
    /// also the `%{NAME}x` values of h2o that spate does not measure ([`UNMEASURED`]).
    Dash,
    /// `%m`
    Method,
    /// `%q`: `?query`, or nothing.
    Query,
    /// `%r`: `METHOD TARGET PROTOCOL`.
    RequestLine,
    /// `%s` (also `%>s`, `%<s`).
    Status,
    /// `%U`: the path without the query.
    Path,
    /// `%V`, `%v`: the authority the client asked for.
    Authority,
    /// `%t` and `%{sec}t`-style forms.
    Time(TimeFormat),
    /// `%D`, `%{us}T`: duration in microseconds.
    DurationMicros,
    /// `%{duration}x`: duration in seconds with six decimals, as h2o prints it.
    DurationFrac,
    /// `%{ms}T`: duration in milliseconds.
    DurationMillis,
    /// `%{ssl.protocol-version}x`: `TLSv1.3`, `TLSv1.2`.
    TlsVersion,
    /// `%{ssl.session-reused}x`: `1` for a resumed session, `0` for a full handshake.
    TlsResumed,
    /// `%{ssl.cipher}x`: the suite's OpenSSL name.
    TlsCipher,
    /// `%{ssl.cipher-bits}x`: the suite's key length in bits.
    TlsCipherBits,
    /// `%{http2.stream-id}x`
    Http2StreamId,
    /// `%T`, `%{s}T`: duration in whole seconds.
    DurationSecs,
    /// `%{NAME}i`, the name stored lowercased.
    RequestHeader(Box<[u8]>),
    /// `%{NAME}o`, the name stored lowercased.
    ResponseHeader(Box<[u8]>),
}

/// h2o's `%{NAME}x` values that spate does not measure: accepted, so that h2o's formats load,
/// and logged as missing (`-`, or `null` in JSON), as h2o logs a value it does not have.
pub(crate) const UNMEASURED: &[&str] = &[
    "connection-id",
    "connect-time",
    "request-header-time",
    "request-body-time",
    "request-total-time",
    "process-time",
    "response-time",
    "http1.request-index",
    "http2.priority.received",
    "http2.priority.received.exclusive",
    "http2.priority.received.parent",
    "http2.priority.received.weight",
    "http2.priority.actual",
    "http2.priority.actual.parent",
    "http2.priority.actual.weight",
    "ssl.session-id",
];

/// Parses `format`; the error names the offending escape.
pub(crate) fn compile(format: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut literal: Vec<u8> = Vec::new();
    let bytes = format.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let Some(off) = memchr::memchr(b'%', &bytes[i..]) else {
            literal.extend_from_slice(&bytes[i..]);
            break;
        };
        literal.extend_from_slice(&bytes[i..i + off]);
        let start = i + off;
        i = start + 1;

        // `%{ARG}X`
        let mut arg: Option<&str> = None;
        if bytes.get(i) == Some(&b'{') {
            let Some(len) = memchr::memchr(b'}', &bytes[i + 1..]) else {
                return Err(format!("unterminated `%{{` at offset {start}"));
            };
            arg = Some(&format[i + 1..i + 1 + len]);
            i += len + 2;
        }
        // Apache's `<` / `>` (original or final request) mean the same thing here.
        while matches!(bytes.get(i), Some(b'<' | b'>')) {
            i += 1;
        }
        let Some(&c) = bytes.get(i) else {
            return Err(format!(
                "`%` at offset {start} is not followed by an escape"
            ));
        };
        // The escape letter must be one ASCII byte; anything else is reported below.
        let piece = match (c, arg) {
            (b'%', None) => {
                literal.push(b'%');
                i += 1;
                continue;
            }
            (b'A', None) => Piece::LocalAddr,
            (b'a' | b'h', None) => Piece::RemoteAddr,
            (b'b', None) => Piece::BodyBytesClf,
            (b'B', None) => Piece::BodyBytes,
            (b'D', None) => Piece::DurationMicros,
            (b'H', None) => Piece::Protocol,
            (b'l' | b'u', None) => Piece::Dash,
            (b'm', None) => Piece::Method,
            (b'O', None) => Piece::TotalBytes,
            (b'p', None | Some("local")) => Piece::LocalPort,
            (b'p', Some("remote")) => Piece::RemotePort,
            (b'q', None) => Piece::Query,
            (b'r', None) => Piece::RequestLine,
            (b's', None) => Piece::Status,
            (b't', None) => Piece::Time(TimeFormat::Clf),
            (b't', Some(f)) => Piece::Time(time::parse(f)?),
            (b'T', None | Some("s")) => Piece::DurationSecs,
            (b'T', Some("ms")) => Piece::DurationMillis,
            (b'T', Some("us")) => Piece::DurationMicros,
            (b'U', None) => Piece::Path,
            (b'x', Some("duration")) => Piece::DurationFrac,
            (b'x', Some("ssl.protocol-version")) => Piece::TlsVersion,
            (b'x', Some("ssl.session-reused")) => Piece::TlsResumed,
            (b'x', Some("ssl.cipher")) => Piece::TlsCipher,
            (b'x', Some("ssl.cipher-bits")) => Piece::TlsCipherBits,
            (b'x', Some("http2.stream-id")) => Piece::Http2StreamId,
            (b'x', Some(name)) if UNMEASURED.contains(&name) => Piece::Dash,
            (b'V' | b'v', None) => Piece::Authority,
            (b'i', Some(name)) if !name.is_empty() => Piece::RequestHeader(lower(name)),
            (b'o', Some(name)) if !name.is_empty() => Piece::ResponseHeader(lower(name)),
            _ => return Err(unknown(format, start, i)),
        };
        i += 1;
        if !literal.is_empty() {
            pieces.push(Piece::Literal(std::mem::take(&mut literal).into()));
        }
        pieces.push(piece);
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal.into()));
    }
    Ok(pieces)
}

fn lower(name: &str) -> Box<[u8]> {
    name.to_ascii_lowercase().into_bytes().into()
}

/// Describes the escape spanning `start..=end` (the letter at `end` may be a multibyte char).
fn unknown(format: &str, start: usize, end: usize) -> String {
    let tail = format.get(end..).and_then(|t| t.chars().next());
    let escape = match tail {
        Some(ch) => format!("{}{ch}", &format[start..end]),
        None => format[start..].to_string(),
    };
    format!("unknown or unsupported escape `{escape}` at offset {start}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Piece {
        Piece::Literal(s.as_bytes().into())
    }

    #[test]
    fn compiles_common_format() {
        let p = compile("%h %l %u %t \"%r\" %>s %b").unwrap();
        assert_eq!(
            p,
            vec![
                Piece::RemoteAddr,
                lit(" "),
                Piece::Dash,
                lit(" "),
                Piece::Dash,
                lit(" "),
                Piece::Time(TimeFormat::Clf),
                lit(" \""),
                Piece::RequestLine,
                lit("\" "),
                Piece::Status,
                lit(" "),
                Piece::BodyBytesClf,
            ]
        );
    }

    #[test]
    fn merges_percent_into_literals() {
        assert_eq!(compile("a%%b").unwrap(), vec![lit("a%b")]);
        assert_eq!(compile("").unwrap(), vec![]);
        assert_eq!(compile("%%").unwrap(), vec![lit("%")]);
    }

    #[test]
    fn compiles_arguments() {
        assert_eq!(
            compile("%{User-Agent}i%{X-Y}o%{remote}p%{local}p%{usec_frac}t%{ms}T%{duration}x")
                .unwrap(),
            vec![
                Piece::RequestHeader((*b"user-agent").into()),
                Piece::ResponseHeader((*b"x-y").into()),
                Piece::RemotePort,
                Piece::LocalPort,
                Piece::Time(TimeFormat::UsecFrac),
                Piece::DurationMillis,
                Piece::DurationFrac,
            ]
        );
    }

    #[test]
    fn finds_values_alone_between_quotes() {
        let c = Compiled::new(
            r#"{"ua":"%{user-agent}i","s":%s,"r":"%m %U",'x':'%{x}o',"e":"a\"%{y}i"}"#,
            Escape::Json,
        )
        .unwrap();
        let alone: Vec<bool> = c
            .pieces
            .iter()
            .zip(&c.quoted_alone)
            .filter(|(p, _)| !matches!(p, Piece::Literal(_)))
            .map(|(_, a)| *a)
            .collect();
        // ua alone; %s unquoted; %m and %U share a string; x alone in single quotes; y
        // follows an escaped quote inside a string, so it is not alone.
        assert_eq!(alone, [true, false, false, false, true, false]);
    }

    #[test]
    fn rejects_bad_escapes() {
        for bad in [
            "%Z",
            "%",
            "abc %",
            "%{foo",
            "%{%c}t",
            "%{}i",
            "%{x}s",
            "%{foo}p",
            "%{connect-times}x",
            "%é",
        ] {
            assert!(compile(bad).is_err(), "{bad:?} should be rejected");
        }
        let e = compile("ok %Z").unwrap_err();
        assert!(e.contains("`%Z`") && e.contains("offset 3"), "{e}");
        let e = compile("%{%x}t").unwrap_err();
        assert!(e.contains("strftime"), "{e}");
    }
}
