//! Header lists the benches share.

/// A list of header fields.
pub type Headers = [(&'static [u8], &'static [u8])];

/// A browser's request for a stylesheet.
pub const REQUEST: &Headers = &[
    (b":method", b"GET"),
    (b":scheme", b"https"),
    (b":authority", b"www.example.com"),
    (b":path", b"/assets/css/site.min.css?v=20240101"),
    (
        b"user-agent",
        b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    ),
    (b"accept", b"text/css,*/*;q=0.1"),
    (b"accept-language", b"en-US,en;q=0.5"),
    (b"accept-encoding", b"gzip, deflate, br, zstd"),
    (b"referer", b"https://www.example.com/"),
    (
        b"cookie",
        b"session=6f1c2a9b0d3e4f5a6b7c8d9e; theme=dark; consent=yes",
    ),
    (b"sec-fetch-dest", b"style"),
    (b"sec-fetch-mode", b"no-cors"),
    (b"sec-fetch-site", b"same-origin"),
    (b"if-none-match", b"\"5f2b-18c4e2a7d10\""),
];
