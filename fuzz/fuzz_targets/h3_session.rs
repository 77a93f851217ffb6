//! Feeds an HTTP/3 server session arbitrary stream bytes: each record is a tag byte (bits
//! 0-2: which stream, uni 2/6/10/14 or request 0/4/8/12; bit 3: FIN; bit 4: the stream is
//! reset instead), a length byte, then that many bytes. Request stream bytes accumulate in
//! a buffer per stream, as the QUIC glue keeps them. The session must never panic, and
//! must keep to its contract (DATA never past a content-length, End only once).
#![no_main]

use std::collections::HashMap;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use spate::proto::h3::{qpack, Error, RequestEvent, Session, Settings};

fuzz_target!(|data: &[u8]| {
    let mut s = Session::new(Settings {
        max_field_section_size: 2048,
        qpack_max_table_capacity: 1024,
        qpack_blocked_streams: 2,
        max_header_fields: 20,
        enable_connect_protocol: true,
    });
    let _ = s.control_stream_prelude();
    let mut encoder = qpack::Encoder::default();
    let mut buffers: HashMap<u64, BytesMut> = HashMap::new();
    let mut done: Vec<u64> = Vec::new();
    let mut events = Vec::new();
    let mut rest = data;
    while let [tag, len, tail @ ..] = rest {
        let n = (*len as usize).min(tail.len());
        let (chunk, next) = tail.split_at(n);
        rest = next;
        let which = u64::from(tag & 7);
        let fin = tag & 8 != 0;
        let id = if which < 4 {
            which * 4 + 2
        } else {
            (which - 4) * 4
        };
        if done.contains(&id) {
            continue;
        }
        if tag & 0x10 != 0 {
            if s.stream_gone(id).is_err() {
                return;
            }
            buffers.remove(&id);
            done.push(id);
            continue;
        }
        let result = if which < 4 {
            s.on_uni_stream(id, chunk, fin).map(|out| {
                for u in out.unblocked {
                    assert!(u % 4 == 0);
                }
            })
        } else {
            let buf = buffers.entry(id).or_default();
            buf.extend_from_slice(chunk);
            events.clear();
            s.on_request_stream(id, buf, fin, &mut events)
        };
        match result {
            Ok(()) => {}
            Err(Error::Stream(..)) => {
                buffers.remove(&id);
                done.push(id);
            }
            Err(Error::Connection(..)) => return,
        }
        for e in events.drain(..) {
            match e {
                RequestEvent::Head(h) => {
                    assert!(h.target.end <= h.bytes.len());
                    for (n, v) in &h.fields {
                        assert!(n.end <= h.bytes.len() && v.end <= h.bytes.len());
                    }
                    let mut out = BytesMut::new();
                    Session::encode_response_head(
                        &mut encoder,
                        200,
                        [(&b"x"[..], &h.bytes[..])],
                        &mut out,
                    );
                }
                RequestEvent::End => {
                    buffers.remove(&id);
                    done.push(id);
                }
                _ => {}
            }
        }
        let _ = s.take_decoder_stream_bytes();
    }
});
