//! The CGI response head at the start of a FastCGI application's STDOUT (RFC 3875 section
//! 6): header fields up to an empty line, with `Status: NNN reason` giving the status (200
//! when absent, 302 when only `Location:` is given with an absolute URL).

/// A parsed CGI response head.
#[derive(Debug, PartialEq, Eq)]
pub struct CgiHead {
    pub status: u16,
    /// The fields to send on, `Status` taken out; names as the application wrote them.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// `Content-Length`, when given (once, and a number).
    pub content_length: Option<u64>,
    /// Bytes of the input the head took, the empty line included.
    pub len: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub enum CgiError {
    /// A line without `name:`, or a name with bytes a field name cannot have.
    Field,
    /// `Status:` that does not start with three digits (and a space).
    Status,
    /// `Content-Length` not a number, or given twice with different values.
    ContentLength,
}

impl std::fmt::Display for CgiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CgiError::Field => "malformed header line in the CGI response",
            CgiError::Status => "malformed Status header in the CGI response",
            CgiError::ContentLength => "malformed Content-Length in the CGI response",
        })
    }
}

/// Parses the head at the start of `data`: `Ok(None)` while the empty line that ends it has
/// not arrived. Lines end in CRLF or LF (PHP writes CRLF; scripts by hand often LF).
pub fn parse(data: &[u8]) -> Result<Option<CgiHead>, CgiError> {
    let mut fields = Vec::new();
    let mut status = None;
    let mut location = false;
    let mut content_length = None;
    let mut at = 0;
    loop {
        let Some(nl) = memchr::memchr(b'\n', &data[at..]) else {
            return Ok(None);
        };
        let line = &data[at..at + nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        at += nl + 1;
        if line.is_empty() {
            break;
        }
        let colon = memchr::memchr(b':', line).ok_or(CgiError::Field)?;
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
            return Err(CgiError::Field);
        }
        let value = trim(&line[colon + 1..]);
        if value.iter().any(|&b| b == 0 || b == b'\r') {
            return Err(CgiError::Field);
        }
        if name.eq_ignore_ascii_case(b"status") {
            status = Some(parse_status(value)?);
            continue;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_u64(value).ok_or(CgiError::ContentLength)?;
            if content_length.is_some_and(|c| c != n) {
                return Err(CgiError::ContentLength);
            }
            content_length = Some(n);
            continue;
        }
        if name.eq_ignore_ascii_case(b"location") {
            location = value.first() != Some(&b'/');
        }
        fields.push((name.to_vec(), value.to_vec()));
    }
    let status = status.unwrap_or(if location { 302 } else { 200 });
    Ok(Some(CgiHead {
        status,
        fields,
        content_length,
        len: at,
    }))
}

fn parse_status(v: &[u8]) -> Result<u16, CgiError> {
    match v {
        [a, b, c, rest @ ..]
            if a.is_ascii_digit()
                && b.is_ascii_digit()
                && c.is_ascii_digit()
                && (rest.is_empty() || rest[0] == b' ') =>
        {
            let n = u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0');
            if (100..=999).contains(&n) {
                Ok(n)
            } else {
                Err(CgiError::Status)
            }
        }
        _ => Err(CgiError::Status),
    }
}

fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
    let end = v.len()
        - v[start..]
            .iter()
            .rev()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
    &v[start..end]
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
