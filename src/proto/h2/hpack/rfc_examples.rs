//! RFC 7541 Appendix C: every example decoded, and encoded byte for byte.
//! Test-only: `hpack/mod.rs` includes it under `#[cfg(test)]`, so its `unwrap`s never see peer
//! input.

use bytes::BytesMut;

use super::{Decoder, Encoder, Indexing};

type Fields<'a> = &'a [(&'a str, &'a str)];

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Decodes each block in turn with one decoder, checking the fields and the table size.
fn decode_sequence(table_size: usize, blocks: &[(&str, Fields<'_>, usize)]) {
    let mut dec = Decoder::new(table_size, usize::MAX);
    for (hex, expected, size) in blocks {
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        dec.decode(&unhex(hex), &mut buf, |f| got.push(f)).unwrap();
        let got: Vec<(&[u8], &[u8])> = got
            .iter()
            .map(|f| (&buf[f.name.clone()], &buf[f.value.clone()]))
            .collect();
        let want: Vec<(&[u8], &[u8])> = expected
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        assert_eq!(got, want, "block {hex}");
        assert_eq!(dec.table_size(), *size, "table size after {hex}");
    }
}

/// Encodes each field list with one encoder and compares with the expected wire.
fn encode_sequence(
    enc: &mut Encoder,
    indexing: Indexing,
    blocks: &[(&str, Fields<'_>, usize)],
    first_prefix: &str,
) {
    for (i, (hex, fields, _)) in blocks.iter().enumerate() {
        let mut out = Vec::new();
        let mut block = enc.block(&mut out);
        for (n, v) in fields.iter() {
            block.field_with(n.as_bytes(), v.as_bytes(), indexing);
        }
        let mut want = if i == 0 {
            unhex(first_prefix)
        } else {
            Vec::new()
        };
        want.extend(unhex(hex));
        assert_eq!(out, want, "block {i}");
    }
}

const C3_FIELDS: [Fields<'static>; 3] = [
    &[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ],
    &[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ],
    &[
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ],
];

const C5_FIELDS: [Fields<'static>; 3] = [
    &[
        (":status", "302"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ],
    &[
        (":status", "307"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ],
    &[
        (":status", "200"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
        ("location", "https://www.example.com"),
        ("content-encoding", "gzip"),
        (
            "set-cookie",
            "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
        ),
    ],
];

fn c3() -> [(&'static str, Fields<'static>, usize); 3] {
    [
        (
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            C3_FIELDS[0],
            57,
        ),
        ("8286 84be 5808 6e6f 2d63 6163 6865", C3_FIELDS[1], 110),
        (
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            C3_FIELDS[2],
            164,
        ),
    ]
}

fn c4() -> [(&'static str, Fields<'static>, usize); 3] {
    [
        (
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            C3_FIELDS[0],
            57,
        ),
        ("8286 84be 5886 a8eb 1064 9cbf", C3_FIELDS[1], 110),
        (
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            C3_FIELDS[2],
            164,
        ),
    ]
}

fn c5() -> [(&'static str, Fields<'static>, usize); 3] {
    [
        (
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
             6c65 2e63 6f6d",
            C5_FIELDS[0],
            222,
        ),
        ("4803 3330 37c1 c0bf", C5_FIELDS[1], 222),
        (
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
             3d31",
            C5_FIELDS[2],
            215,
        ),
    ]
}

fn c6() -> [(&'static str, Fields<'static>, usize); 3] {
    [
        (
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            C5_FIELDS[0],
            222,
        ),
        ("4883 640e ffc1 c0bf", C5_FIELDS[1], 222),
        (
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            C5_FIELDS[2],
            215,
        ),
    ]
}

#[test]
fn c2_single_representations() {
    let cases: [(&str, Indexing, (&str, &str), usize); 4] = [
        (
            "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            Indexing::Incremental,
            ("custom-key", "custom-header"),
            55,
        ),
        (
            "040c 2f73 616d 706c 652f 7061 7468",
            Indexing::Without,
            (":path", "/sample/path"),
            0,
        ),
        (
            "1008 7061 7373 776f 7264 0673 6563 7265 74",
            Indexing::Never,
            ("password", "secret"),
            0,
        ),
        ("82", Indexing::Auto, (":method", "GET"), 0),
    ];
    for (hex, indexing, (name, value), size) in cases {
        let mut dec = Decoder::new(4096, usize::MAX);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        dec.decode(&unhex(hex), &mut buf, |f| got.push(f)).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(&buf[got[0].name.clone()], name.as_bytes());
        assert_eq!(&buf[got[0].value.clone()], value.as_bytes());
        assert_eq!(got[0].never_indexed, indexing == Indexing::Never);
        assert_eq!(dec.table_size(), size);

        let mut enc = Encoder::default();
        enc.set_huffman(false);
        let mut out = Vec::new();
        enc.block(&mut out)
            .field_with(name.as_bytes(), value.as_bytes(), indexing);
        assert_eq!(out, unhex(hex));
    }
}

#[test]
fn c3_requests_without_huffman() {
    decode_sequence(4096, &c3());
    let mut enc = Encoder::default();
    enc.set_huffman(false);
    encode_sequence(&mut enc, Indexing::Auto, &c3(), "");
}

#[test]
fn c4_requests_with_huffman() {
    decode_sequence(4096, &c4());
    encode_sequence(&mut Encoder::default(), Indexing::Auto, &c4(), "");
}

#[test]
fn c5_responses_without_huffman() {
    decode_sequence(256, &c5());
    let mut enc = Encoder::new(256);
    enc.set_huffman(false);
    // Our encoder announces its 256-byte table in the first block (3fe101 = update to 256).
    encode_sequence(&mut enc, Indexing::Incremental, &c5(), "3fe101");
}

#[test]
fn c6_responses_with_huffman() {
    decode_sequence(256, &c6());
    let mut enc = Encoder::new(256);
    // "307" is 3 bytes either way; the RFC Huffman-codes it, we only do so when it is
    // shorter, so that one string goes out raw.
    let mut blocks = c6();
    blocks[1].0 = "4803 3330 37c1 c0bf";
    encode_sequence(&mut enc, Indexing::Incremental, &blocks, "3fe101");
}
