//! `file.send-compressed: gunzip`: a `.gz` sent decompressed, a piece at a time as the client
//! takes it, so memory per response stays bounded whatever the file's size.

use crate::http::body::Next;
use crate::http::{BodyError, BodyStream, Frame, OpenFile, Side};
use bytes::Bytes;
use flate2::read::MultiGzDecoder;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Decompressed bytes handed on at a time.
const OUT_CHUNK: usize = 16 * 1024;

/// The open `.gz` read from its start, from memory when the open-file cache read it whole.
struct GzFile {
    file: Rc<OpenFile>,
    offset: u64,
}

impl Read for GzFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match &self.file.contents {
            Some(c) => {
                let start = usize::try_from(self.offset)
                    .unwrap_or(usize::MAX)
                    .min(c.len());
                let n = buf.len().min(c.len() - start);
                buf[..n].copy_from_slice(&c[start..start + n]);
                n
            }
            None => self.file.file.read_at(buf, self.offset)?,
        };
        self.offset += n as u64;
        Ok(n)
    }
}

/// The decompressed body of a `.gz` file.
pub struct GunzipBody {
    decoder: MultiGzDecoder<GzFile>,
    done: bool,
}

impl GunzipBody {
    pub fn new(file: Rc<OpenFile>) -> GunzipBody {
        GunzipBody {
            decoder: MultiGzDecoder::new(GzFile { file, offset: 0 }),
            done: false,
        }
    }
}

impl BodyStream for GunzipBody {
    fn poll_frame(&mut self, _cx: &mut Context<'_>) -> Poll<Next> {
        if self.done {
            return Poll::Ready(None);
        }
        let mut out = vec![0; OUT_CHUNK];
        let mut filled = 0;
        while filled < out.len() {
            match self.decoder.read(&mut out[filled..]) {
                Ok(0) => {
                    self.done = true;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // A broken `.gz` is the site's fault: one log line, and the client sees
                    // the body cut short.
                    tracing::warn!(error = %e, "file.send-compressed gunzip: bad .gz file");
                    self.done = true;
                    return Poll::Ready(Some(Err(BodyError::new(
                        Side::Internal,
                        format!("gunzip: {e}"),
                    ))));
                }
            }
        }
        if filled == 0 {
            return Poll::Ready(None);
        }
        out.truncate(filled);
        Poll::Ready(Some(Ok(Frame::Data(Bytes::from(out)))))
    }
}
