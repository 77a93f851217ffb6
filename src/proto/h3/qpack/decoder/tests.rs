//! RFC 9204 Appendix B byte for byte, fragmentation, every error, the bomb.

use super::*;
use crate::proto::h3::qpack::Encoder;

pub(crate) fn unhex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

type Pairs = Vec<(String, String)>;

fn decode(d: &mut Decoder, stream: u64, section: &[u8]) -> Result<(Decoded, Pairs), QpackError> {
    let mut buf = BytesMut::new();
    let mut fields = Vec::new();
    let r = d.decode_section(stream, section, &mut buf, &mut fields)?;
    let pairs = fields
        .iter()
        .map(|f| {
            (
                String::from_utf8(buf[f.name.clone()].to_vec()).unwrap(),
                String::from_utf8(buf[f.value.clone()].to_vec()).unwrap(),
            )
        })
        .collect();
    Ok((r, pairs))
}

fn pairs(list: &[(&str, &str)]) -> Pairs {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn feed(d: &mut Decoder, hex: &str) -> Vec<u64> {
    let mut unblocked = Vec::new();
    d.on_encoder_stream(&unhex(hex), &mut unblocked).unwrap();
    unblocked
}

fn output(d: &mut Decoder) -> Vec<u8> {
    d.take_output().map(|b| b.to_vec()).unwrap_or_default()
}

/// The examples' decoder: a 220-byte table (MaxEntries 6).
fn rfc_decoder() -> Decoder {
    Decoder::new(220, 100, 16 * 1024)
}

const B2_ENCODER: &str = "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d
                          c10c 2f73 616d 706c 652f 7061 7468";
const B3_ENCODER: &str = "4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565";
const B4_SECTION: &str = "0500 80 c1 81";
const B5_ENCODER: &str = "810d 6375 7374 6f6d 2d76 616c 7565 32";

#[test]
fn b1_literal_with_static_name_reference() {
    let mut d = Decoder::new(0, 0, 16 * 1024);
    let section = unhex("0000 510b 2f69 6e64 6578 2e68 746d 6c");
    let (r, got) = decode(&mut d, 0, &section).unwrap();
    assert_eq!(r, Decoded::Done);
    assert_eq!(got, pairs(&[(":path", "/index.html")]));
    // Required Insert Count 0: nothing to acknowledge.
    assert_eq!(output(&mut d), b"");
    // Our encoder writes the same representation, Huffman-coding the value (shorter).
    let mut out = Vec::new();
    Encoder::default().encode_section([(&b":path"[..], &b"/index.html"[..])], &mut out);
    assert_eq!(out[..3], [0x00, 0x00, 0x51]);
    assert_eq!(out[3] & 0x80, 0x80);
    assert!(out.len() < section.len());
    assert_eq!(decode(&mut d, 0, &out).unwrap().1, got);
}

#[test]
fn b2_to_b5_dynamic_table() {
    let mut d = rfc_decoder();
    // B.2: capacity 220, two inserts with static name references, a post-base section.
    assert!(feed(&mut d, B2_ENCODER).is_empty());
    assert_eq!((d.insert_count(), d.table_size()), (2, 106));
    let (r, got) = decode(&mut d, 4, &unhex("0381 10 11")).unwrap();
    assert_eq!(r, Decoded::Done);
    assert_eq!(
        got,
        pairs(&[(":authority", "www.example.com"), (":path", "/sample/path")])
    );
    assert_eq!(output(&mut d), unhex("84"));

    // B.3: a speculative insert with a literal name, acknowledged by an increment.
    feed(&mut d, B3_ENCODER);
    assert_eq!((d.insert_count(), d.table_size()), (3, 160));
    assert_eq!(output(&mut d), unhex("01"));

    // B.4: stream 8's section needs the duplicate; it arrives first here, so it blocks, and
    // the stream is cancelled.
    let (r, _) = decode(&mut d, 8, &unhex(B4_SECTION)).unwrap();
    assert_eq!(r, Decoded::Blocked);
    assert_eq!(d.blocked_streams(), 1);
    d.cancel_stream(8);
    assert_eq!(d.blocked_streams(), 0);
    assert_eq!(output(&mut d), unhex("48"));
    // The duplicate; our decoder acknowledges inserts with an increment (a policy the
    // example leaves open), and the same section now decodes.
    feed(&mut d, "02");
    assert_eq!((d.insert_count(), d.table_size()), (4, 217));
    assert_eq!(output(&mut d), unhex("01"));
    let (r, got) = decode(&mut d, 8, &unhex(B4_SECTION)).unwrap();
    assert_eq!(r, Decoded::Done);
    assert_eq!(
        got,
        pairs(&[
            (":authority", "www.example.com"),
            (":path", "/"),
            ("custom-key", "custom-value")
        ])
    );
    assert_eq!(output(&mut d), unhex("88"));

    // B.5: an insert with a dynamic name reference that evicts entry 0.
    feed(&mut d, B5_ENCODER);
    assert_eq!((d.insert_count(), d.table_size()), (5, 215));
    assert_eq!(output(&mut d), unhex("01"));
    // Entry 4 is the newest; entry 0 is gone. Required Insert Count 5 encodes as 6.
    let (_, got) = decode(&mut d, 12, &unhex("0600 80")).unwrap();
    assert_eq!(got, pairs(&[("custom-key", "custom-value2")]));
    assert_eq!(
        decode(&mut d, 16, &unhex("0600 84 80")).unwrap_err(),
        QpackError::Decompression("reference to an evicted entry")
    );
}

#[test]
fn encoder_stream_in_any_pieces() {
    let wire = unhex(&[B2_ENCODER, B3_ENCODER, "02", B5_ENCODER].concat());
    let state = |d: &Decoder| (d.insert_count(), d.table_size());
    let mut whole = rfc_decoder();
    whole.on_encoder_stream(&wire, &mut Vec::new()).unwrap();
    assert_eq!(state(&whole), (5, 215));
    for cut in 0..=wire.len() {
        let mut d = rfc_decoder();
        d.on_encoder_stream(&wire[..cut], &mut Vec::new()).unwrap();
        d.on_encoder_stream(&wire[cut..], &mut Vec::new()).unwrap();
        assert_eq!(state(&d), state(&whole), "split at {cut}");
    }
    let mut d = rfc_decoder();
    for b in &wire {
        d.on_encoder_stream(std::slice::from_ref(b), &mut Vec::new())
            .unwrap();
    }
    assert_eq!(state(&d), state(&whole));
    let (_, got) = decode(&mut d, 0, &unhex("0600 80 81")).unwrap();
    assert_eq!(
        got,
        pairs(&[
            ("custom-key", "custom-value2"),
            (":authority", "www.example.com")
        ])
    );
}

#[test]
fn blocked_streams_wait_then_unblock() {
    let mut d = rfc_decoder();
    feed(&mut d, "3fbd01");
    // Two streams wait for the B.2 inserts (Required Insert Count 2).
    assert_eq!(
        decode(&mut d, 4, &unhex("0381 10 11")).unwrap().0,
        Decoded::Blocked
    );
    // Asking again does not count twice.
    assert_eq!(
        decode(&mut d, 4, &unhex("0381 10 11")).unwrap().0,
        Decoded::Blocked
    );
    assert_eq!(d.blocked_streams(), 1);
    // The first insert is not enough.
    assert!(feed(&mut d, "c00f 7777 772e 6578 616d 706c 652e 636f 6d").is_empty());
    let unblocked = feed(&mut d, "c10c 2f73 616d 706c 652f 7061 7468");
    assert_eq!(unblocked, [4]);
    let (r, got) = decode(&mut d, 4, &unhex("0381 10 11")).unwrap();
    assert_eq!(r, Decoded::Done);
    assert_eq!(got.len(), 2);
    // One acknowledgment covers both inserts: no increment.
    assert_eq!(output(&mut d), unhex("84"));
}

#[test]
fn too_many_blocked_streams() {
    let mut d = Decoder::new(220, 1, 16 * 1024);
    feed(&mut d, "3fbd01");
    assert_eq!(
        decode(&mut d, 0, &unhex("0280 10")).unwrap().0,
        Decoded::Blocked
    );
    assert_eq!(
        decode(&mut d, 4, &unhex("0280 10")).unwrap_err(),
        QpackError::Decompression("too many blocked streams")
    );
    let mut none = Decoder::new(220, 0, 16 * 1024);
    feed(&mut none, "3fbd01");
    assert!(decode(&mut none, 0, &unhex("0280 10")).is_err());
}

#[test]
fn encoder_stream_errors() {
    let cases = [
        // Capacity above our SETTINGS (221 > 220).
        ("3fbe01", "table capacity above our SETTINGS"),
        // Insert with static name index 99 (out of range).
        ("ff24 01 61", "static index out of range"),
        // Insert with dynamic name reference into an empty table.
        ("3fbd01 80 01 61", "dynamic index out of range or evicted"),
        // Duplicate of an entry that does not exist.
        ("3fbd01 00", "dynamic index out of range or evicted"),
        // An entry larger than the capacity (capacity 32: name "a" + value "" = 33).
        ("3f01 41 61 00", "entry larger than the table"),
        // An insert before any capacity was set (capacity 0).
        ("41 61 00", "entry larger than the table"),
        // Invalid Huffman (EOS padding of 8 bits).
        ("3fbd01 41 61 81 ff", "bad Huffman string"),
        // An integer beyond 32 bits.
        ("3f ff ff ff ff ff 0f", "integer overflow"),
    ];
    for (hex, why) in cases {
        let mut d = rfc_decoder();
        assert_eq!(
            d.on_encoder_stream(&unhex(hex), &mut Vec::new()),
            Err(QpackError::EncoderStream(why)),
            "{hex}"
        );
    }
    // A string longer than any entry could be is refused before it is all buffered.
    let mut d = rfc_decoder();
    let mut huge = unhex("3fbd01 4a 63757374 6f6d2d6b 6579");
    integer::encode(100_000, 7, 0, &mut huge);
    huge.resize(huge.len() + 2000, b'a');
    assert_eq!(
        d.on_encoder_stream(&huge, &mut Vec::new()),
        Err(QpackError::EncoderStream("encoder instruction too long"))
    );
}

#[test]
fn field_section_errors() {
    let mut d = rfc_decoder();
    feed(&mut d, B2_ENCODER);
    let cases = [
        // Truncated prefix and lines.
        ("", "field section truncated"),
        ("00", "field section truncated"),
        ("0000 51", "field section truncated"),
        ("0000 510b 2f", "field section truncated"),
        // Encoded Required Insert Count above 2 * MaxEntries (12).
        ("0d00", "bad Required Insert Count"),
        // Static index 99.
        ("0000 ff24", "static index out of range"),
        // Required Insert Count 0 but a dynamic reference.
        ("0000 80", "relative index before Base"),
        ("0000 10", "reference at or above Required Insert Count"),
        // Base below zero: Required Insert Count 2, sign set, delta 2.
        ("0382", "negative Base"),
        // A reference at the Required Insert Count (absolute 1 with count 1).
        ("0200 10 11", "reference at or above Required Insert Count"),
        // A Required Insert Count larger than the section needs (2, referencing only 0).
        (
            "0381 10",
            "Required Insert Count above the largest reference",
        ),
        // A bad Huffman value.
        ("0000 5181ff", "bad Huffman string"),
    ];
    for (hex, why) in cases {
        assert_eq!(
            decode(&mut d, 0, &unhex(hex)).unwrap_err(),
            QpackError::Decompression(why),
            "{hex}"
        );
    }
    // Nothing was acknowledged for the refused sections.
    assert_eq!(output(&mut d), unhex("02"));
}

#[test]
fn every_representation_and_the_n_bit() {
    let mut d = rfc_decoder();
    feed(&mut d, B2_ENCODER);
    feed(&mut d, B3_ENCODER);
    // Required Insert Count 3 (encoded 4), Base 1 (sign, delta 1): entries 1 and 2 are
    // post-base 0 and 1, entry 0 is relative 0.
    let section = unhex(
        "04 81
         80
         11
         09 05 68656c6c6f
         71 03 61 6263
         31 61 01 62
         21 61 01 62",
    );
    let mut buf = BytesMut::new();
    let mut fields = Vec::new();
    let r = d
        .decode_section(0, &section, &mut buf, &mut fields)
        .unwrap();
    assert_eq!(r, Decoded::Done);
    let got: Vec<(&[u8], &[u8], bool)> = fields
        .iter()
        .map(|f| (&buf[f.name.clone()], &buf[f.value.clone()], f.never_indexed))
        .collect();
    assert_eq!(
        got,
        [
            (&b":authority"[..], &b"www.example.com"[..], false),
            (b"custom-key", b"custom-value", false),
            (b"custom-key", b"hello", true),
            (b":path", b"abc", true),
            (b"a", b"b", true),
            (b"a", b"b", false),
        ]
    );
    assert_eq!(output(&mut d), unhex("80"));
}

#[test]
fn section_size_limit_and_the_bomb() {
    // A table entry of about 4 KB, referenced 100 000 times in one section.
    let mut d = Decoder::new(8192, 10, 64 * 1024);
    let mut wire = unhex("3f e1 3f");
    let value = vec![b'x'; 4000];
    wire.extend(unhex("4162")); // Insert with literal name "b"...
    integer::encode(value.len(), 7, 0, &mut wire);
    wire.extend_from_slice(&value);
    d.on_encoder_stream(&wire, &mut Vec::new()).unwrap();
    assert_eq!(d.insert_count(), 1);
    let mut section = unhex("0200");
    section.extend(std::iter::repeat_n(0x80, 100_000));
    let mut buf = BytesMut::new();
    let mut fields = Vec::new();
    let t = std::time::Instant::now();
    let r = d
        .decode_section(4, &section, &mut buf, &mut fields)
        .unwrap();
    assert_eq!(r, Decoded::TooLarge);
    assert!(buf.is_empty() && fields.is_empty());
    assert!(buf.capacity() <= 64 * 1024, "{}", buf.capacity());
    assert!(t.elapsed() < std::time::Duration::from_millis(100));
    // The state is intact and the section acknowledged: the next one decodes.
    assert_eq!(output(&mut d), unhex("84"));
    let (r, got) = decode(&mut d, 8, &unhex("0200 80 80")).unwrap();
    assert_eq!(r, Decoded::Done);
    assert_eq!(got.len(), 2);

    // Literals count too, Huffman-coded ones included, and so do the 32 bytes per field.
    let mut d = Decoder::new(0, 0, 100);
    let mut big = Vec::new();
    Encoder::default().encode_section([(&b"x-a"[..], &[b'a'; 70][..])], &mut big);
    assert_eq!(decode(&mut d, 0, &big).unwrap().0, Decoded::TooLarge);
    let mut ok = Vec::new();
    Encoder::default().encode_section([(&b"x-a"[..], &[b'a'; 65][..])], &mut ok);
    assert_eq!(decode(&mut d, 0, &ok).unwrap().0, Decoded::Done);
    let mut many = Vec::new();
    Encoder::default().encode_section([(&b":path"[..], &b"/"[..]); 4], &mut many);
    assert_eq!(decode(&mut d, 0, &many).unwrap().0, Decoded::TooLarge);
}

#[test]
fn required_insert_count_wraps() {
    // MaxEntries 6, FullRange 12: after 20 inserts, count 20 encodes as 20 % 12 + 1 = 9.
    let mut d = Decoder::new(220, 10, 16 * 1024);
    feed(&mut d, "3fbd01");
    for i in 0..20u8 {
        let mut wire = unhex("4161 01");
        wire.push(b'a' + i);
        d.on_encoder_stream(&wire, &mut Vec::new()).unwrap();
    }
    assert_eq!(d.insert_count(), 20);
    // Base 20, relative 0 = absolute 19, the value 't'.
    let (_, got) = decode(&mut d, 0, &unhex("0900 80")).unwrap();
    assert_eq!(got, pairs(&[("a", "t")]));
    // Encoded 8 means 19 here (not blocked, but 19 is above the largest reference + 1? no:
    // absolute 18 is relative 0 from Base 19).
    let (_, got) = decode(&mut d, 4, &unhex("0800 80")).unwrap();
    assert_eq!(got, pairs(&[("a", "s")]));
    // Encoded 10 means 21: one ahead, so blocked.
    assert_eq!(
        decode(&mut d, 8, &unhex("0a00 80")).unwrap().0,
        Decoded::Blocked
    );
}

#[test]
fn encoder_output_round_trips() {
    let fields: [(&[u8], &[u8]); 7] = [
        (b":status", b"200"),
        (b"content-type", b"text/html; charset=utf-8"),
        (b"Content-Length", b"1234"),
        (b"set-cookie", b"id=1"),
        (b"x-custom", b"some value that compresses well with huffman"),
        (b"X-Upper", b"\x01\xff"),
        (b"server", b""),
    ];
    let mut out = Vec::new();
    Encoder::default().encode_section(fields, &mut out);
    let mut d = Decoder::new(0, 0, 16 * 1024);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    assert_eq!(
        d.decode_section(0, &out, &mut buf, &mut got),
        Ok(Decoded::Done)
    );
    let got: Vec<(Vec<u8>, Vec<u8>, bool)> = got
        .iter()
        .map(|f| {
            (
                buf[f.name.clone()].to_vec(),
                buf[f.value.clone()].to_vec(),
                f.never_indexed,
            )
        })
        .collect();
    for (i, (n, v)) in fields.iter().enumerate() {
        assert_eq!(got[i].0, n.to_ascii_lowercase());
        assert_eq!(&got[i].1, v);
        assert_eq!(got[i].2, i == 3, "N bit on {:?}", n);
    }
    // The static hits are one byte each: `:status 200` is index 25, `server ""` is 92.
    assert_eq!(&out[..3], &[0, 0, 0xc0 | 25]);
    assert_eq!(out[out.len() - 2..], [0xff, 92 - 63]);
    // Huffman was used where shorter.
    let mut plain = Vec::new();
    Encoder::default().encode_section([(&b"x-custom"[..], &b"aaaaaaaa"[..])], &mut plain);
    assert_eq!(plain[2] & 0x08, 0x08);
}
