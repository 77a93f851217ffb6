//! `file.dirlisting`: an HTML index of a directory that has no index file.

use super::path::encode_path;
use bytes::Bytes;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;

/// Renders the listing of the directory at `dir` (a filesystem path), titled with `shown` (the
/// decoded request path, ending in `/`). Names are HTML-escaped and links percent-encoded.
pub fn render(dir: &[u8], shown: &[u8]) -> io::Result<Bytes> {
    let mut names: Vec<(Vec<u8>, bool)> = Vec::new();
    for entry in std::fs::read_dir(OsStr::from_bytes(dir))? {
        let entry = entry?;
        let ty = entry.file_type()?;
        // A symlink is listed as what it points to, as a browser will find it.
        let is_dir = ty.is_dir() || (ty.is_symlink() && entry.path().is_dir());
        names.push((entry.file_name().as_bytes().to_vec(), is_dir));
    }
    names.sort();

    let mut out = Vec::with_capacity(256 + names.len() * 64);
    out.extend_from_slice(b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
    escape_html(shown, &mut out);
    out.extend_from_slice(b"</title></head>\n<body><h1>Index of ");
    escape_html(shown, &mut out);
    out.extend_from_slice(b"</h1>\n<ul>\n");
    if shown != b"/" {
        out.extend_from_slice(b"<li><a href=\"../\">../</a></li>\n");
    }
    let mut href = Vec::new();
    for (name, is_dir) in &names {
        href.clear();
        // `./` keeps a name such as `a:b` from reading as a URL scheme.
        href.extend_from_slice(b"./");
        encode_path(name, &mut href);
        let slash: &[u8] = if *is_dir { b"/" } else { b"" };
        out.extend_from_slice(b"<li><a href=\"");
        escape_html(&href, &mut out);
        out.extend_from_slice(slash);
        out.extend_from_slice(b"\">");
        escape_html(name, &mut out);
        out.extend_from_slice(slash);
        out.extend_from_slice(b"</a></li>\n");
    }
    out.extend_from_slice(b"</ul>\n</body></html>\n");
    Ok(Bytes::from(out))
}

/// Escapes text for HTML content and attribute values; bytes that are not UTF-8 become U+FFFD
/// so the page stays valid.
fn escape_html(text: &[u8], out: &mut Vec<u8>) {
    for ch in String::from_utf8_lossy(text).chars() {
        match ch {
            '&' => out.extend_from_slice(b"&amp;"),
            '<' => out.extend_from_slice(b"&lt;"),
            '>' => out.extend_from_slice(b"&gt;"),
            '"' => out.extend_from_slice(b"&quot;"),
            '\'' => out.extend_from_slice(b"&#39;"),
            c => {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_escaped_and_encoded_names() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("<script>alert('x')&.txt"), b"").unwrap();
        std::fs::write(d.path().join("a b\"c"), b"").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let html = render(d.path().as_os_str().as_bytes(), b"/x/<b>/").unwrap();
        let html = std::str::from_utf8(&html).unwrap();
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
        assert!(html.contains("Index of /x/&lt;b&gt;/"));
        assert!(
            html.contains(">&lt;script&gt;alert(&#39;x&#39;)&amp;.txt</a>"),
            "{html}"
        );
        assert!(
            html.contains("href=\"./%3Cscript%3Ealert(&#39;x&#39;)&amp;.txt\""),
            "{html}"
        );
        assert!(
            html.contains("href=\"./a%20b%22c\">a b&quot;c</a>"),
            "{html}"
        );
        assert!(html.contains("href=\"./sub/\">sub/</a>"));
        assert!(html.contains("href=\"../\""));
        let root = render(d.path().as_os_str().as_bytes(), b"/").unwrap();
        assert!(!std::str::from_utf8(&root).unwrap().contains("../"));
    }
}
