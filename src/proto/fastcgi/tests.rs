use super::cgi::{self, CgiError};
use super::*;

#[test]
fn begin_params_stdin_are_laid_out_as_the_spec_says() {
    let mut out = BytesMut::new();
    begin_request(&mut out, true);
    assert_eq!(&out[..], &[1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
    let mut p = Params::default();
    p.push(b"SCRIPT_NAME", b"/a.php");
    p.push_http(b"user-agent", &[b'x'; 200]);
    let pairs = parse_params(p.as_bytes()).unwrap();
    assert_eq!(pairs[0], (b"SCRIPT_NAME".to_vec(), b"/a.php".to_vec()));
    assert_eq!(pairs[1].0, b"HTTP_USER_AGENT".to_vec());
    assert_eq!(pairs[1].1.len(), 200);
    // 200 needs the four-byte length.
    assert_eq!(&p.as_bytes()[19..24], &[15, 0x80, 0, 0, 200]);
}

#[test]
fn long_streams_split_into_records() {
    let mut out = BytesMut::new();
    stream_records(&mut out, STDIN, &vec![7u8; MAX_CONTENT + 10]);
    end_stream(&mut out, STDIN);
    assert_eq!(out.len(), 3 * HEADER_LEN + MAX_CONTENT + 10);
    assert_eq!(&out[4..6], &[0xff, 0xff]);
    let second = HEADER_LEN + MAX_CONTENT;
    assert_eq!(&out[second..second + 8], &record_header(STDIN, 10));
    assert_eq!(&out[out.len() - 8..], &[1, STDIN, 0, 1, 0, 0, 0, 0]);
}

fn record(kind: u8, id: u16, content: &[u8], padding: u8) -> Vec<u8> {
    let mut v = vec![1, kind];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&(content.len() as u16).to_be_bytes());
    v.push(padding);
    v.push(0);
    v.extend_from_slice(content);
    v.extend(std::iter::repeat_n(0, usize::from(padding)));
    v
}

#[test]
fn records_come_out_whole_and_in_order() {
    let mut wire = record(STDOUT, 1, b"Status: 404\r\n\r\nno", 3);
    wire.extend(record(STDERR, 1, b"warning", 0));
    wire.extend(record(STDOUT, 0, b"management", 0));
    wire.extend(record(END_REQUEST, 1, &[0, 0, 0, 5, 0, 0, 0, 0], 0));
    // Fed a byte at a time, nothing comes out before a record is whole.
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for b in wire {
        buf.put_u8(b);
        while let Some(r) = next_record(&mut buf).unwrap() {
            got.push(r);
        }
    }
    assert_eq!(
        got,
        vec![
            Record::Stdout(Bytes::from_static(b"Status: 404\r\n\r\nno")),
            Record::Stderr(Bytes::from_static(b"warning")),
            Record::Other,
            Record::End {
                app_status: 5,
                protocol_status: 0
            },
        ]
    );
    assert!(buf.is_empty());
}

#[test]
fn malformed_records_are_errors() {
    let mut buf = BytesMut::from(&[2u8, 6, 0, 1, 0, 0, 0, 0][..]);
    assert_eq!(next_record(&mut buf), Err(RecordError::Version(2)));
    let mut buf = BytesMut::from(&record(PARAMS, 1, b"", 0)[..]);
    assert_eq!(next_record(&mut buf), Err(RecordError::Type(PARAMS)));
    let mut buf = BytesMut::from(&record(END_REQUEST, 1, b"abc", 0)[..]);
    assert_eq!(next_record(&mut buf), Err(RecordError::BadEnd));
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A cheap stand-in for the fuzzer: every short input, and pseudo-random long ones.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for n in 0..2000 {
        let len = n % 300;
        let mut v = Vec::with_capacity(len);
        for _ in 0..len {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            v.push(seed as u8);
        }
        if n % 2 == 0 && len > 1 {
            v[0] = 1;
        }
        let mut buf = BytesMut::from(&v[..]);
        while let Ok(Some(_)) = next_record(&mut buf) {}
        let _ = cgi::parse(&v);
        let _ = parse_params(&v);
    }
}

#[test]
fn cgi_heads() {
    let h = cgi::parse(b"Content-Type: text/html\r\nX-A:  b \r\n\r\nbody")
        .unwrap()
        .unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(h.len, 37);
    assert_eq!(h.fields[1], (b"X-A".to_vec(), b"b".to_vec()));
    let h = cgi::parse(b"Status: 404 Not Found\nContent-Length: 3\n\n")
        .unwrap()
        .unwrap();
    assert_eq!(
        (h.status, h.content_length, h.fields.len()),
        (404, Some(3), 0)
    );
    let h = cgi::parse(b"Location: http://a/\r\n\r\n").unwrap().unwrap();
    assert_eq!(h.status, 302);
    let h = cgi::parse(b"Location: /local\r\n\r\n").unwrap().unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(cgi::parse(b"Content-Type: text/html\r\n"), Ok(None));
    assert_eq!(cgi::parse(b"no colon\r\n\r\n"), Err(CgiError::Field));
    assert_eq!(cgi::parse(b"Status: 20\r\n\r\n"), Err(CgiError::Status));
    assert_eq!(cgi::parse(b"Status: 2000\r\n\r\n"), Err(CgiError::Status));
    assert_eq!(
        cgi::parse(b"Content-Length: x\r\n\r\n"),
        Err(CgiError::ContentLength)
    );
}
