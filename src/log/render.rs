//! Turns a compiled format and a [`LogRecord`] into one log line.

use super::format::{Piece, TimeFormat};
use super::LogRecord;
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// The `%t` text for the last second seen: requests within one second share it, so the date is
/// formatted about once a second rather than once a line.
#[derive(Debug, Default)]
pub(crate) struct ClfClock {
    second: Option<u64>,
    text: Vec<u8>,
}

impl ClfClock {
    fn get(&mut self, second: u64) -> &[u8] {
        if self.second != Some(second) {
            self.text.clear();
            format_clf(second, &mut self.text);
            self.second = Some(second);
        }
        &self.text
    }
}

/// Appends one line, with its `\n`, to `out`.
pub(crate) fn render(
    pieces: &[Piece],
    rec: &LogRecord<'_>,
    clock: &mut ClfClock,
    out: &mut Vec<u8>,
) {
    let req = rec.req;
    for piece in pieces {
        match piece {
            Piece::Literal(text) => out.extend_from_slice(text),
            Piece::LocalAddr => push_ip(out, req.local.ip()),
            Piece::RemoteAddr => push_ip(out, req.peer.ip()),
            Piece::LocalPort => push_u64(out, req.local.port().into()),
            Piece::RemotePort => push_u64(out, req.peer.port().into()),
            Piece::BodyBytesClf if rec.body_bytes == 0 => out.push(b'-'),
            Piece::BodyBytesClf | Piece::BodyBytes => push_u64(out, rec.body_bytes),
            Piece::TotalBytes => push_u64(out, rec.total_bytes),
            Piece::Protocol => out.extend_from_slice(req.version.as_str().as_bytes()),
            Piece::Dash => out.push(b'-'),
            Piece::Method => push_escaped(out, req.method.as_bytes()),
            Piece::Query => {
                if let Some(q) = req.query() {
                    out.push(b'?');
                    push_escaped(out, q);
                }
            }
            Piece::RequestLine => {
                push_escaped(out, req.method.as_bytes());
                out.push(b' ');
                push_escaped(out, req.target());
                out.push(b' ');
                out.extend_from_slice(req.version.as_str().as_bytes());
            }
            Piece::Status => push_u64(out, rec.status.into()),
            Piece::Path => push_escaped(out, req.path()),
            Piece::Authority => push_field(out, req.authority()),
            Piece::Time(f) => push_time(out, *f, rec.received_at, clock),
            Piece::DurationMicros => push_u64(out, saturate(rec.duration.as_micros())),
            Piece::DurationMillis => push_u64(out, saturate(rec.duration.as_millis())),
            Piece::DurationSecs => push_u64(out, rec.duration.as_secs()),
            Piece::RequestHeader(name) => push_field(out, req.header(name)),
            Piece::ResponseHeader(name) => {
                let value = rec
                    .resp_headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| &v[..]);
                push_field(out, value);
            }
        }
    }
    out.push(b'\n');
}

/// A value that may be absent: `-` when missing or empty, as Apache prints it.
fn push_field(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(v) if !v.is_empty() => push_escaped(out, v),
        _ => out.push(b'-'),
    }
}

/// Copies `v`, writing bytes outside printable ASCII, `"` and `\` as `\xNN` so that a line
/// stays one line and quoted fields stay parseable.
fn push_escaped(out: &mut Vec<u8>, v: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut rest = v;
    while let Some(i) = rest.iter().position(|&b| needs_escape(b)) {
        out.extend_from_slice(&rest[..i]);
        let b = rest[i];
        out.extend_from_slice(&[
            b'\\',
            b'x',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 15)],
        ]);
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
}

fn needs_escape(b: u8) -> bool {
    !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\'
}

fn push_ip(out: &mut Vec<u8>, ip: IpAddr) {
    use std::io::Write;
    // A dual-stack listener reports IPv4 clients as `::ffff:a.b.c.d`; log them as IPv4.
    let _ = write!(out, "{}", ip.to_canonical());
}

fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Zero-padded to `width` digits.
fn push_u64_padded(out: &mut Vec<u8>, n: u64, width: usize) {
    let start = out.len();
    push_u64(out, n);
    let len = out.len() - start;
    if len < width {
        out.splice(start..start, std::iter::repeat_n(b'0', width - len));
    }
}

fn saturate(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn push_time(out: &mut Vec<u8>, f: TimeFormat, at: SystemTime, clock: &mut ClfClock) {
    // A clock before 1970 is a broken clock; log the epoch rather than fail.
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    match f {
        TimeFormat::Clf => out.extend_from_slice(clock.get(since.as_secs())),
        TimeFormat::Sec => push_u64(out, since.as_secs()),
        TimeFormat::Msec => push_u64(out, saturate(since.as_millis())),
        TimeFormat::Usec => push_u64(out, saturate(since.as_micros())),
        TimeFormat::MsecFrac => push_u64_padded(out, since.subsec_millis().into(), 3),
        TimeFormat::UsecFrac => push_u64_padded(out, since.subsec_micros().into(), 6),
    }
}

/// `[10/Oct/2000:13:55:36 +0000]` for `secs` since the epoch, in UTC.
fn format_clf(secs: u64, out: &mut Vec<u8>) {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    out.push(b'[');
    push_u64_padded(out, day, 2);
    out.push(b'/');
    out.extend_from_slice(MONTHS[(month - 1) as usize]);
    out.push(b'/');
    push_u64_padded(out, year, 4);
    out.push(b':');
    push_u64_padded(out, rem / 3600, 2);
    out.push(b':');
    push_u64_padded(out, rem / 60 % 60, 2);
    out.push(b':');
    push_u64_padded(out, rem % 60, 2);
    out.extend_from_slice(b" +0000]");
}

/// (year, month 1-12, day 1-31) of the proleptic Gregorian calendar for days since 1970-01-01.
/// Counts in 400-year eras starting on March 1st, so the leap day ends each era's year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = z / 146_097;
    let doe = z % 146_097; // day of era, 0..146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era, 0..399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of year from March 1st
    let mp = (5 * doy + 2) / 153; // month from March, 0..11
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clf(secs: u64) -> String {
        let mut v = Vec::new();
        format_clf(secs, &mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn formats_clf_dates() {
        assert_eq!(clf(0), "[01/Jan/1970:00:00:00 +0000]");
        assert_eq!(clf(971_185_536), "[10/Oct/2000:13:45:36 +0000]");
        // Leap days, and the day after, in a century leap year and an ordinary one.
        assert_eq!(clf(951_782_400), "[29/Feb/2000:00:00:00 +0000]");
        assert_eq!(clf(951_868_799), "[29/Feb/2000:23:59:59 +0000]");
        assert_eq!(clf(1_709_251_199), "[29/Feb/2024:23:59:59 +0000]");
        assert_eq!(clf(1_709_251_200), "[01/Mar/2024:00:00:00 +0000]");
        assert_eq!(clf(1_735_689_599), "[31/Dec/2024:23:59:59 +0000]");
    }

    #[test]
    fn civil_dates_match_day_counting() {
        // Walk day by day across several years and check the date advances by exactly one.
        let mut prev = civil_from_days(10_950); // 1999-12-25
        for d in 10_951..12_500 {
            let cur = civil_from_days(d);
            let next_in_month = (prev.0, prev.1, prev.2 + 1);
            let next_month = (prev.0, prev.1 + 1, 1);
            let next_year = (prev.0 + 1, 1, 1);
            assert!(
                cur == next_in_month || cur == next_month || cur == next_year,
                "{prev:?} -> {cur:?}"
            );
            prev = cur;
        }
    }

    #[test]
    fn clock_reuses_the_second() {
        let mut c = ClfClock::default();
        assert_eq!(c.get(0), b"[01/Jan/1970:00:00:00 +0000]");
        // Within the same second the cached text is returned without formatting again.
        c.text = b"cached".to_vec();
        assert_eq!(c.get(0), b"cached");
        assert_eq!(c.get(61), b"[01/Jan/1970:00:01:01 +0000]");
    }

    #[test]
    fn escapes_quotes_backslashes_and_control_bytes() {
        let mut v = Vec::new();
        push_escaped(&mut v, b"a\"b\\c\nd\x7f\xff\te ~");
        assert_eq!(v, b"a\\x22b\\x5cc\\x0ad\\x7f\\xff\\x09e ~");
    }

    #[test]
    fn pads_numbers() {
        let mut v = Vec::new();
        push_u64_padded(&mut v, 7, 3);
        v.push(b' ');
        push_u64_padded(&mut v, 1234, 3);
        v.push(b' ');
        push_u64(&mut v, u64::MAX);
        assert_eq!(v, b"007 1234 18446744073709551615");
    }
}
