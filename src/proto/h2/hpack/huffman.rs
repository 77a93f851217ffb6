//! The static Huffman code of RFC 7541 Appendix B: a bit-at-a-time encoder and a table-driven
//! decoder that consumes four bits per step.
//!
//! The decoder's state table is generated at compile time from [`CODES`] by `const fn`s below,
//! so the code table is the single source of truth.

use super::DecodeError;

/// Number of bytes `src` takes once Huffman-encoded (including the final padding).
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| CODES[b as usize].1 as usize).sum();
    bits.div_ceil(8)
}

/// Appends the Huffman encoding of `src` to `dst`, padded with the EOS prefix (all ones).
pub fn encode(src: &[u8], dst: &mut impl bytes::BufMut) {
    // `acc` holds fewer than 32 pending bits before each symbol is added, and a code is at
    // most 30 bits long, so 64 bits never overflow. Whole 32-bit words go out at once: a
    // value of a few dozen bytes costs a few writes, not one per byte.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let (code, len) = CODES[b as usize];
        acc = (acc << len) | code as u64;
        bits += len as u32;
        if bits >= 32 {
            bits -= 32;
            dst.put_u32((acc >> bits) as u32);
        }
    }
    while bits >= 8 {
        bits -= 8;
        dst.put_u8((acc >> bits) as u8);
    }
    if bits > 0 {
        dst.put_u8(((acc << (8 - bits)) as u8) | (0xff >> bits));
    }
}

/// Decodes `src` and appends the result to `dst`.
///
/// Fails with [`DecodeError::HuffmanEos`] if the EOS symbol appears, with
/// [`DecodeError::BadHuffman`] if the padding is longer than 7 bits or not all ones, and with
/// [`DecodeError::HeaderListTooLarge`] as soon as the output would exceed `limit` bytes (so a
/// hostile string stops costing work at the limit). On error `dst` is left as it was.
pub fn decode(src: &[u8], dst: &mut bytes::BytesMut, limit: usize) -> Result<(), DecodeError> {
    let start = dst.len();
    // Every symbol is at least 5 bits long, which bounds the output.
    let bound = (src.len() * 8 / 5).min(limit);
    dst.resize(start + bound, 0);
    let result = decode_into(src, &mut dst[start..]);
    match result {
        Ok(n) => {
            dst.truncate(start + n);
            Ok(())
        }
        Err(e) => {
            dst.truncate(start);
            Err(e)
        }
    }
}

/// Decodes into `out`; running out of room means the caller's limit was hit.
fn decode_into(src: &[u8], out: &mut [u8]) -> Result<usize, DecodeError> {
    let mut state = 0usize;
    let mut n = 0usize;
    for &byte in src {
        for nibble in [byte >> 4, byte & 0x0f] {
            let step = DECODE[state][nibble as usize];
            if step.flags & FAIL != 0 {
                return Err(DecodeError::HuffmanEos);
            }
            if step.flags & EMIT != 0 {
                let slot = out.get_mut(n).ok_or(DecodeError::HeaderListTooLarge)?;
                *slot = step.sym;
                n += 1;
            }
            state = step.next as usize;
        }
    }
    if ACCEPT[state] {
        Ok(n)
    } else {
        Err(DecodeError::BadHuffman)
    }
}

/// One transition of the nibble decoder: the state after consuming four bits from `state`,
/// and the symbol completed on the way, if any (codes are >= 5 bits, so at most one).
#[derive(Clone, Copy)]
struct Step {
    next: u8,
    sym: u8,
    flags: u8,
}

const EMIT: u8 = 1;
/// The EOS symbol was decoded. The code is complete, so this is the only invalid path.
const FAIL: u8 = 2;

/// Interior nodes of the code tree: a complete binary tree with 257 leaves has 256.
const NODES: usize = 256;
/// Marks a child slot that holds a symbol instead of an interior node index.
const LEAF: u16 = 0x8000;
const EOS: u16 = 256;

static DECODE: [[Step; 16]; NODES] = build_decode_table(&build_tree());
static ACCEPT: [bool; NODES] = build_accept(&build_tree());

/// Builds the code tree: `tree[node][bit]` is an interior node index or `LEAF | symbol`.
/// Zero means "no child yet" (the root, node 0, is never anyone's child).
const fn build_tree() -> [[u16; 2]; NODES] {
    let mut tree = [[0u16; 2]; NODES];
    let mut used = 1usize;
    let mut sym = 0usize;
    while sym < CODES.len() {
        let (code, len) = CODES[sym];
        let mut node = 0usize;
        let mut i = len;
        while i > 1 {
            i -= 1;
            let bit = ((code >> i) & 1) as usize;
            if tree[node][bit] == 0 {
                // A malformed CODES table overflows `tree` here and fails the build.
                tree[node][bit] = used as u16;
                used += 1;
            }
            node = tree[node][bit] as usize;
        }
        tree[node][(code & 1) as usize] = LEAF | sym as u16;
        sym += 1;
    }
    tree
}

const fn build_decode_table(tree: &[[u16; 2]; NODES]) -> [[Step; 16]; NODES] {
    let mut table = [[Step {
        next: 0,
        sym: 0,
        flags: 0,
    }; 16]; NODES];
    let mut state = 0usize;
    while state < NODES {
        let mut nibble = 0usize;
        while nibble < 16 {
            let mut node = state;
            let mut step = Step {
                next: 0,
                sym: 0,
                flags: 0,
            };
            let mut i = 4;
            while i > 0 {
                i -= 1;
                let child = tree[node][(nibble >> i) & 1];
                if child == LEAF | EOS || child == 0 {
                    step.flags = FAIL;
                    break;
                }
                if child & LEAF != 0 {
                    step.flags = EMIT;
                    step.sym = (child & 0xff) as u8;
                    node = 0;
                } else {
                    node = child as usize;
                }
            }
            step.next = node as u8;
            table[state][nibble] = step;
            nibble += 1;
        }
        state += 1;
    }
    table
}

/// A string may end in the root or up to 7 bits down the all-ones path (the EOS prefix).
const fn build_accept(tree: &[[u16; 2]; NODES]) -> [bool; NODES] {
    let mut accept = [false; NODES];
    accept[0] = true;
    let mut node = 0usize;
    let mut depth = 0;
    while depth < 7 {
        node = tree[node][1] as usize;
        accept[node] = true;
        depth += 1;
    }
    accept
}

/// RFC 7541 Appendix B: (code, length in bits) for each symbol 0..=255 and EOS (256).
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),     //   0
    (0x7fffd8, 23),   //   1
    (0xfffffe2, 28),  //   2
    (0xfffffe3, 28),  //   3
    (0xfffffe4, 28),  //   4
    (0xfffffe5, 28),  //   5
    (0xfffffe6, 28),  //   6
    (0xfffffe7, 28),  //   7
    (0xfffffe8, 28),  //   8
    (0xffffea, 24),   //   9
    (0x3ffffffc, 30), //  10
    (0xfffffe9, 28),  //  11
    (0xfffffea, 28),  //  12
    (0x3ffffffd, 30), //  13
    (0xfffffeb, 28),  //  14
    (0xfffffec, 28),  //  15
    (0xfffffed, 28),  //  16
    (0xfffffee, 28),  //  17
    (0xfffffef, 28),  //  18
    (0xffffff0, 28),  //  19
    (0xffffff1, 28),  //  20
    (0xffffff2, 28),  //  21
    (0x3ffffffe, 30), //  22
    (0xffffff3, 28),  //  23
    (0xffffff4, 28),  //  24
    (0xffffff5, 28),  //  25
    (0xffffff6, 28),  //  26
    (0xffffff7, 28),  //  27
    (0xffffff8, 28),  //  28
    (0xffffff9, 28),  //  29
    (0xffffffa, 28),  //  30
    (0xffffffb, 28),  //  31
    (0x14, 6),        //  32
    (0x3f8, 10),      //  33 '!'
    (0x3f9, 10),      //  34 '"'
    (0xffa, 12),      //  35 '#'
    (0x1ff9, 13),     //  36 '$'
    (0x15, 6),        //  37 '%'
    (0xf8, 8),        //  38 '&'
    (0x7fa, 11),      //  39 '''
    (0x3fa, 10),      //  40 '('
    (0x3fb, 10),      //  41 ')'
    (0xf9, 8),        //  42 '*'
    (0x7fb, 11),      //  43 '+'
    (0xfa, 8),        //  44 ','
    (0x16, 6),        //  45 '-'
    (0x17, 6),        //  46 '.'
    (0x18, 6),        //  47 '/'
    (0x0, 5),         //  48 '0'
    (0x1, 5),         //  49 '1'
    (0x2, 5),         //  50 '2'
    (0x19, 6),        //  51 '3'
    (0x1a, 6),        //  52 '4'
    (0x1b, 6),        //  53 '5'
    (0x1c, 6),        //  54 '6'
    (0x1d, 6),        //  55 '7'
    (0x1e, 6),        //  56 '8'
    (0x1f, 6),        //  57 '9'
    (0x5c, 7),        //  58 ':'
    (0xfb, 8),        //  59 ';'
    (0x7ffc, 15),     //  60 '<'
    (0x20, 6),        //  61 '='
    (0xffb, 12),      //  62 '>'
    (0x3fc, 10),      //  63 '?'
    (0x1ffa, 13),     //  64 '@'
    (0x21, 6),        //  65 'A'
    (0x5d, 7),        //  66 'B'
    (0x5e, 7),        //  67 'C'
    (0x5f, 7),        //  68 'D'
    (0x60, 7),        //  69 'E'
    (0x61, 7),        //  70 'F'
    (0x62, 7),        //  71 'G'
    (0x63, 7),        //  72 'H'
    (0x64, 7),        //  73 'I'
    (0x65, 7),        //  74 'J'
    (0x66, 7),        //  75 'K'
    (0x67, 7),        //  76 'L'
    (0x68, 7),        //  77 'M'
    (0x69, 7),        //  78 'N'
    (0x6a, 7),        //  79 'O'
    (0x6b, 7),        //  80 'P'
    (0x6c, 7),        //  81 'Q'
    (0x6d, 7),        //  82 'R'
    (0x6e, 7),        //  83 'S'
    (0x6f, 7),        //  84 'T'
    (0x70, 7),        //  85 'U'
    (0x71, 7),        //  86 'V'
    (0x72, 7),        //  87 'W'
    (0xfc, 8),        //  88 'X'
    (0x73, 7),        //  89 'Y'
    (0xfd, 8),        //  90 'Z'
    (0x1ffb, 13),     //  91 '['
    (0x7fff0, 19),    //  92
    (0x1ffc, 13),     //  93 ']'
    (0x3ffc, 14),     //  94 '^'
    (0x22, 6),        //  95 '_'
    (0x7ffd, 15),     //  96 '`'
    (0x3, 5),         //  97 'a'
    (0x23, 6),        //  98 'b'
    (0x4, 5),         //  99 'c'
    (0x24, 6),        // 100 'd'
    (0x5, 5),         // 101 'e'
    (0x25, 6),        // 102 'f'
    (0x26, 6),        // 103 'g'
    (0x27, 6),        // 104 'h'
    (0x6, 5),         // 105 'i'
    (0x74, 7),        // 106 'j'
    (0x75, 7),        // 107 'k'
    (0x28, 6),        // 108 'l'
    (0x29, 6),        // 109 'm'
    (0x2a, 6),        // 110 'n'
    (0x7, 5),         // 111 'o'
    (0x2b, 6),        // 112 'p'
    (0x76, 7),        // 113 'q'
    (0x2c, 6),        // 114 'r'
    (0x8, 5),         // 115 's'
    (0x9, 5),         // 116 't'
    (0x2d, 6),        // 117 'u'
    (0x77, 7),        // 118 'v'
    (0x78, 7),        // 119 'w'
    (0x79, 7),        // 120 'x'
    (0x7a, 7),        // 121 'y'
    (0x7b, 7),        // 122 'z'
    (0x7ffe, 15),     // 123 '{'
    (0x7fc, 11),      // 124 '|'
    (0x3ffd, 14),     // 125 '}'
    (0x1ffd, 13),     // 126 '~'
    (0xffffffc, 28),  // 127
    (0xfffe6, 20),    // 128
    (0x3fffd2, 22),   // 129
    (0xfffe7, 20),    // 130
    (0xfffe8, 20),    // 131
    (0x3fffd3, 22),   // 132
    (0x3fffd4, 22),   // 133
    (0x3fffd5, 22),   // 134
    (0x7fffd9, 23),   // 135
    (0x3fffd6, 22),   // 136
    (0x7fffda, 23),   // 137
    (0x7fffdb, 23),   // 138
    (0x7fffdc, 23),   // 139
    (0x7fffdd, 23),   // 140
    (0x7fffde, 23),   // 141
    (0xffffeb, 24),   // 142
    (0x7fffdf, 23),   // 143
    (0xffffec, 24),   // 144
    (0xffffed, 24),   // 145
    (0x3fffd7, 22),   // 146
    (0x7fffe0, 23),   // 147
    (0xffffee, 24),   // 148
    (0x7fffe1, 23),   // 149
    (0x7fffe2, 23),   // 150
    (0x7fffe3, 23),   // 151
    (0x7fffe4, 23),   // 152
    (0x1fffdc, 21),   // 153
    (0x3fffd8, 22),   // 154
    (0x7fffe5, 23),   // 155
    (0x3fffd9, 22),   // 156
    (0x7fffe6, 23),   // 157
    (0x7fffe7, 23),   // 158
    (0xffffef, 24),   // 159
    (0x3fffda, 22),   // 160
    (0x1fffdd, 21),   // 161
    (0xfffe9, 20),    // 162
    (0x3fffdb, 22),   // 163
    (0x3fffdc, 22),   // 164
    (0x7fffe8, 23),   // 165
    (0x7fffe9, 23),   // 166
    (0x1fffde, 21),   // 167
    (0x7fffea, 23),   // 168
    (0x3fffdd, 22),   // 169
    (0x3fffde, 22),   // 170
    (0xfffff0, 24),   // 171
    (0x1fffdf, 21),   // 172
    (0x3fffdf, 22),   // 173
    (0x7fffeb, 23),   // 174
    (0x7fffec, 23),   // 175
    (0x1fffe0, 21),   // 176
    (0x1fffe1, 21),   // 177
    (0x3fffe0, 22),   // 178
    (0x1fffe2, 21),   // 179
    (0x7fffed, 23),   // 180
    (0x3fffe1, 22),   // 181
    (0x7fffee, 23),   // 182
    (0x7fffef, 23),   // 183
    (0xfffea, 20),    // 184
    (0x3fffe2, 22),   // 185
    (0x3fffe3, 22),   // 186
    (0x3fffe4, 22),   // 187
    (0x7ffff0, 23),   // 188
    (0x3fffe5, 22),   // 189
    (0x3fffe6, 22),   // 190
    (0x7ffff1, 23),   // 191
    (0x3ffffe0, 26),  // 192
    (0x3ffffe1, 26),  // 193
    (0xfffeb, 20),    // 194
    (0x7fff1, 19),    // 195
    (0x3fffe7, 22),   // 196
    (0x7ffff2, 23),   // 197
    (0x3fffe8, 22),   // 198
    (0x1ffffec, 25),  // 199
    (0x3ffffe2, 26),  // 200
    (0x3ffffe3, 26),  // 201
    (0x3ffffe4, 26),  // 202
    (0x7ffffde, 27),  // 203
    (0x7ffffdf, 27),  // 204
    (0x3ffffe5, 26),  // 205
    (0xfffff1, 24),   // 206
    (0x1ffffed, 25),  // 207
    (0x7fff2, 19),    // 208
    (0x1fffe3, 21),   // 209
    (0x3ffffe6, 26),  // 210
    (0x7ffffe0, 27),  // 211
    (0x7ffffe1, 27),  // 212
    (0x3ffffe7, 26),  // 213
    (0x7ffffe2, 27),  // 214
    (0xfffff2, 24),   // 215
    (0x1fffe4, 21),   // 216
    (0x1fffe5, 21),   // 217
    (0x3ffffe8, 26),  // 218
    (0x3ffffe9, 26),  // 219
    (0xffffffd, 28),  // 220
    (0x7ffffe3, 27),  // 221
    (0x7ffffe4, 27),  // 222
    (0x7ffffe5, 27),  // 223
    (0xfffec, 20),    // 224
    (0xfffff3, 24),   // 225
    (0xfffed, 20),    // 226
    (0x1fffe6, 21),   // 227
    (0x3fffe9, 22),   // 228
    (0x1fffe7, 21),   // 229
    (0x1fffe8, 21),   // 230
    (0x7ffff3, 23),   // 231
    (0x3fffea, 22),   // 232
    (0x3fffeb, 22),   // 233
    (0x1ffffee, 25),  // 234
    (0x1ffffef, 25),  // 235
    (0xfffff4, 24),   // 236
    (0xfffff5, 24),   // 237
    (0x3ffffea, 26),  // 238
    (0x7ffff4, 23),   // 239
    (0x3ffffeb, 26),  // 240
    (0x7ffffe6, 27),  // 241
    (0x3ffffec, 26),  // 242
    (0x3ffffed, 26),  // 243
    (0x7ffffe7, 27),  // 244
    (0x7ffffe8, 27),  // 245
    (0x7ffffe9, 27),  // 246
    (0x7ffffea, 27),  // 247
    (0x7ffffeb, 27),  // 248
    (0xffffffe, 28),  // 249
    (0x7ffffec, 27),  // 250
    (0x7ffffed, 27),  // 251
    (0x7ffffee, 27),  // 252
    (0x7ffffef, 27),  // 253
    (0x7fffff0, 27),  // 254
    (0x3ffffee, 26),  // 255
    (0x3fffffff, 30), // EOS
];

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn dec(src: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut out = BytesMut::new();
        decode(src, &mut out, usize::MAX)?;
        Ok(out.to_vec())
    }

    fn enc(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(src, &mut out);
        assert_eq!(out.len(), encoded_len(src));
        out
    }

    #[test]
    fn code_table_is_canonical_and_complete() {
        // Canonical: sorted by (length, symbol), each code is the previous plus one, shifted.
        let mut order: Vec<usize> = (0..257).collect();
        order.sort_by_key(|&s| (CODES[s].1, s));
        let mut code = 0u32;
        let mut prev_len = CODES[order[0]].1;
        for (i, &s) in order.iter().enumerate() {
            let len = CODES[s].1;
            if i > 0 {
                code = (code + 1) << (len - prev_len);
            }
            prev_len = len;
            assert_eq!(CODES[s].0, code, "symbol {s}");
        }
        // Complete (Kraft sum exactly 1): the last code is all ones.
        assert_eq!(code, (1u32 << 30) - 1);
    }

    #[test]
    fn rfc_examples() {
        // RFC 7541 C.4.1 and C.6.1.
        let cases: [(&[u8], &str); 4] = [
            (b"www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),
            (b"no-cache", "a8eb10649cbf"),
            (b"custom-key", "25a849e95ba97d7f"),
            (
                b"Mon, 21 Oct 2013 20:13:21 GMT",
                "d07abe941054d444a8200595040b8166e082a62d1bff",
            ),
        ];
        for (plain, hex) in cases {
            let wire = unhex(hex);
            assert_eq!(enc(plain), wire);
            assert_eq!(dec(&wire).unwrap(), plain);
        }
    }

    /// One bit at a time, as RFC 7541 section 5.2 describes it.
    fn enc_bitwise(src: &[u8]) -> Vec<u8> {
        let mut bits = Vec::new();
        for &b in src {
            let (code, len) = CODES[b as usize];
            bits.extend((0..len).rev().map(|i| (code >> i) & 1 == 1));
        }
        while bits.len() % 8 != 0 {
            bits.push(true);
        }
        bits.chunks(8)
            .map(|c| c.iter().fold(0u8, |acc, &b| acc << 1 | b as u8))
            .collect()
    }

    #[test]
    fn word_writes_match_the_bitwise_encoding_at_every_length() {
        let text: Vec<u8> = (0..200u32).map(|i| (i * 37 % 256) as u8).collect();
        for len in 0..=text.len() {
            assert_eq!(enc(&text[..len]), enc_bitwise(&text[..len]), "length {len}");
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        assert_eq!(dec(&enc(&all)).unwrap(), all);
        for b in 0..=255u8 {
            for len in 1..=9 {
                let s = vec![b; len];
                assert_eq!(dec(&enc(&s)).unwrap(), s);
            }
        }
        assert_eq!(dec(&[]).unwrap(), b"");
    }

    #[test]
    fn rejects_eos() {
        // EOS (30 ones) followed by padding.
        assert_eq!(dec(&[0xff, 0xff, 0xff, 0xff]), Err(DecodeError::HuffmanEos));
        // 'a' (00011) then EOS.
        assert_eq!(
            dec(&[0x1f, 0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::HuffmanEos)
        );
    }

    #[test]
    fn rejects_bad_padding() {
        // '0' is 00000: three bits of zero padding are not an EOS prefix.
        assert_eq!(dec(&[0x00]), Err(DecodeError::BadHuffman));
        // 'a' then 8 bits of ones: padding longer than 7 bits.
        assert_eq!(dec(&[0x1f, 0xff]), Err(DecodeError::BadHuffman));
        // A lone all-ones byte is 8 bits of padding.
        assert_eq!(dec(&[0xff]), Err(DecodeError::BadHuffman));
        // Ones padding of 3 bits is fine: 'a' + 111.
        assert_eq!(dec(&[0x1f]).unwrap(), b"a");
        // A truncated long code ('\\' is 19 bits) leaves non-ones bits.
        let mut w = enc(b"\\");
        w.pop();
        assert_eq!(dec(&w), Err(DecodeError::BadHuffman));
    }

    #[test]
    fn stops_at_limit() {
        let wire = enc(b"hello world");
        let mut out = BytesMut::from(&b"keep"[..]);
        assert_eq!(
            decode(&wire, &mut out, 10),
            Err(DecodeError::HeaderListTooLarge)
        );
        assert_eq!(&out[..], b"keep");
        decode(&wire, &mut out, 11).unwrap();
        assert_eq!(&out[..], b"keephello world");
    }

    /// RFC 7541 section 5.2 read literally: one bit at a time down the tree.
    fn dec_bitwise(src: &[u8], limit: usize) -> Result<Vec<u8>, DecodeError> {
        let tree = build_tree();
        let mut out = Vec::new();
        let mut node = 0usize;
        for i in 0..src.len() * 8 {
            let bit = (src[i / 8] >> (7 - i % 8)) & 1;
            let child = tree[node][bit as usize];
            if child == LEAF | EOS {
                return Err(DecodeError::HuffmanEos);
            }
            if child & LEAF != 0 {
                if out.len() == limit {
                    return Err(DecodeError::HeaderListTooLarge);
                }
                out.push(child as u8);
                node = 0;
            } else {
                node = child as usize;
            }
        }
        if ACCEPT[node] {
            Ok(out)
        } else {
            Err(DecodeError::BadHuffman)
        }
    }

    #[test]
    fn nibble_decoder_agrees_with_the_bitwise_one() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..20_000 {
            let len = (next() % 40) as usize;
            let wire: Vec<u8> = if i % 3 == 0 {
                // Random bytes: mostly long codes, EOS and bad padding.
                (0..len).map(|_| next() as u8).collect()
            } else {
                // Valid text (bytes biased to the short codes), then maybe damaged.
                let text: Vec<u8> = (0..len)
                    .map(|_| match next() % 4 {
                        0 => next() as u8,
                        _ => {
                            b"/abcdefghijklmnopqrstuvwxyz0123456789.-_?=&%ABCXYZ"
                                [(next() % 50) as usize]
                        }
                    })
                    .collect();
                let mut w = enc(&text);
                match next() % 4 {
                    0 if !w.is_empty() => {
                        let at = (next() as usize) % w.len();
                        w[at] ^= 1 << (next() % 8);
                    }
                    1 => {
                        w.pop();
                    }
                    2 => w.push(0xff),
                    _ => {}
                }
                w
            };
            let limit = if i % 5 == 0 {
                (next() % 30) as usize
            } else {
                usize::MAX
            };
            let mut out = BytesMut::from(&b"kept"[..]);
            let got = decode(&wire, &mut out, limit).map(|()| out[4..].to_vec());
            assert_eq!(got, dec_bitwise(&wire, limit), "{wire:02x?} limit {limit}");
            if got.is_err() {
                assert_eq!(&out[..], b"kept");
            }
        }
    }

    pub(crate) fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
