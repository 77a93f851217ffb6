//! Trailing PADDING cut from client packets before quinn reads their frames.
//!
//! ngtcp2 clients (h2load, curl) pad every packet that carries stream data to the full
//! datagram size, so a request of 60 bytes arrives in a packet of about 1,400. quinn-proto
//! decodes each PADDING byte as a frame of its own (some 20 instructions a byte: more than
//! the rest of a proxied request's HTTP/3 work). Our packet keys wrap quinn's rustls keys:
//! after a packet is decrypted, a run of PADDING frames that ends the payload is cut to one
//! frame (a packet keeps at least one frame, and PADDING means nothing). Where the frames end
//! is found by walking their lengths; a frame type we do not know, or a frame that runs to
//! the end of the packet, leaves the payload as it is.
//!
//! The cut payload is copied into a buffer of its own size: quinn counts a buffered STREAM
//! frame's memory as its packet's payload length, and a slice of the padded datagram would
//! keep all of it allocated while being counted as the short payload.

use bytes::BytesMut;
use quinn_proto::crypto::{
    self, CryptoError, ExportKeyingMaterialError, HeaderKey, KeyPair, Keys, PacketKey,
    UnsupportedVersion,
};
use quinn_proto::transport_parameters::TransportParameters;
use quinn_proto::{ConnectionId, Side, TransportError};
use std::any::Any;
use std::sync::Arc;

/// PADDING bytes below this are left for quinn: the copy would cost more than it saves.
const MIN_CUT: usize = 64;

/// `inner` with packet keys that cut trailing padding from what they decrypt.
pub(super) fn wrap(inner: Arc<dyn crypto::ServerConfig>) -> Arc<dyn crypto::ServerConfig> {
    Arc::new(Config(inner))
}

struct Config(Arc<dyn crypto::ServerConfig>);

impl crypto::ServerConfig for Config {
    fn initial_keys(
        &self,
        version: u32,
        dst_cid: &ConnectionId,
    ) -> Result<Keys, UnsupportedVersion> {
        // Initial packets are padded once per connection: not worth it.
        self.0.initial_keys(version, dst_cid)
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.0.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(
        self: Arc<Self>,
        version: u32,
        params: &TransportParameters,
    ) -> Box<dyn crypto::Session> {
        Box::new(Session(self.0.clone().start_session(version, params)))
    }
}

struct Session(Box<dyn crypto::Session>);

impl crypto::Session for Session {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        self.0.initial_keys(dst_cid, side)
    }

    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        self.0.handshake_data()
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.0.peer_identity()
    }

    fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
        self.0.early_crypto()
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.0.early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.0.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        self.0.read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.0.transport_parameters()
    }

    /// Handshake and 1-RTT keys: the peer's packets are unpadded.
    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        self.0.write_handshake(buf).map(|k| Keys {
            header: k.header,
            packet: unpadded(k.packet),
        })
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        self.0.next_1rtt_keys().map(unpadded)
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.0.is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.0.export_keying_material(output, label, context)
    }
}

fn unpadded(keys: KeyPair<Box<dyn PacketKey>>) -> KeyPair<Box<dyn PacketKey>> {
    KeyPair {
        local: keys.local,
        remote: Box::new(Unpadding(keys.remote)),
    }
}

/// The peer's packet key: decrypts, then cuts trailing padding.
struct Unpadding(Box<dyn PacketKey>);

impl PacketKey for Unpadding {
    fn encrypt(&self, packet: u64, buf: &mut [u8], header_len: usize) {
        self.0.encrypt(packet, buf, header_len)
    }

    fn decrypt(
        &self,
        packet: u64,
        header: &[u8],
        payload: &mut BytesMut,
    ) -> Result<(), CryptoError> {
        self.0.decrypt(packet, header, payload)?;
        if payload.len() > MIN_CUT {
            if let Some(start) = padding_start(payload) {
                if payload.len() - start > MIN_CUT {
                    // One PADDING frame stays: a packet without frames is an error.
                    *payload = BytesMut::from(&payload[..=start]);
                }
            }
        }
        Ok(())
    }

    fn tag_len(&self) -> usize {
        self.0.tag_len()
    }

    fn confidentiality_limit(&self) -> u64 {
        self.0.confidentiality_limit()
    }

    fn integrity_limit(&self) -> u64 {
        self.0.integrity_limit()
    }
}

/// Where the PADDING frames that end `payload` (a decrypted packet's frames) begin, if the
/// frames before them are all of types we know and well formed.
pub fn padding_start(payload: &[u8]) -> Option<usize> {
    let zeros = zeros_start(payload);
    if zeros == payload.len() {
        return None;
    }
    let mut at = 0;
    // Frames before the trailing zeros; a frame boundary at or past them starts the padding.
    while at < zeros {
        let mut r = Reader { buf: payload, at };
        skip_frame(&mut r)?;
        at = r.at;
    }
    (at < payload.len()).then_some(at)
}

/// Where the run of zero bytes ending `bytes` begins (`bytes.len()` if none), a word at a
/// time.
fn zeros_start(bytes: &[u8]) -> usize {
    let mut end = bytes.len();
    while end >= 8 {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[end - 8..end]);
        if u64::from_ne_bytes(word) != 0 {
            break;
        }
        end -= 8;
    }
    while end > 0 && bytes[end - 1] == 0 {
        end -= 1;
    }
    end
}

/// Reads past one frame (RFC 9000, section 19). None for a type we do not know, a frame
/// that runs to the end of the packet, or one cut short.
fn skip_frame(r: &mut Reader<'_>) -> Option<()> {
    let ty = r.varint()?;
    match ty {
        // PADDING, PING, HANDSHAKE_DONE
        0x00 | 0x01 | 0x1e => {}
        // ACK, ACK with ECN counts
        0x02 | 0x03 => {
            r.varints(2)?; // largest acknowledged, delay
            let ranges = r.varint()?;
            r.varint()?; // first range
            for _ in 0..ranges {
                r.varints(2)?; // gap, length
            }
            if ty == 0x03 {
                r.varints(3)?;
            }
        }
        // RESET_STREAM
        0x04 => r.varints(3)?,
        // STOP_SENDING, MAX_STREAM_DATA, STREAM_DATA_BLOCKED
        0x05 | 0x11 | 0x15 => r.varints(2)?,
        // CRYPTO: offset, length, data
        0x06 => {
            r.varint()?;
            r.with_length()?;
        }
        // NEW_TOKEN
        0x07 => r.with_length()?,
        // STREAM: id, offset if OFF, length if LEN (else it runs to the end), data
        0x08..=0x0f => {
            r.varint()?;
            if ty & 0x04 != 0 {
                r.varint()?;
            }
            if ty & 0x02 == 0 {
                return None;
            }
            r.with_length()?;
        }
        // MAX_DATA, MAX_STREAMS, DATA_BLOCKED, STREAMS_BLOCKED, RETIRE_CONNECTION_ID
        0x10 | 0x12 | 0x13 | 0x14 | 0x16 | 0x17 | 0x19 => r.varint().map(drop)?,
        // NEW_CONNECTION_ID: sequence, retire prior to, length (one byte), id, reset token
        0x18 => {
            r.varints(2)?;
            let len = usize::from(r.byte()?);
            r.skip(len + 16)?;
        }
        // PATH_CHALLENGE, PATH_RESPONSE
        0x1a | 0x1b => r.skip(8)?,
        // CONNECTION_CLOSE: code, frame type, reason
        0x1c => {
            r.varints(2)?;
            r.with_length()?;
        }
        // CONNECTION_CLOSE (application): code, reason
        0x1d => {
            r.varint()?;
            r.with_length()?;
        }
        _ => return None,
    }
    Some(())
}

struct Reader<'b> {
    buf: &'b [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// A QUIC variable-length integer.
    fn varint(&mut self) -> Option<u64> {
        let first = self.byte()?;
        let len = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for _ in 1..len {
            v = (v << 8) | u64::from(self.byte()?);
        }
        Some(v)
    }

    fn varints(&mut self, n: usize) -> Option<()> {
        for _ in 0..n {
            self.varint()?;
        }
        Some(())
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        let end = self.at.checked_add(n)?;
        if end > self.buf.len() {
            return None;
        }
        self.at = end;
        Some(())
    }

    /// A length, then that many bytes.
    fn with_length(&mut self) -> Option<()> {
        let n = usize::try_from(self.varint()?).ok()?;
        self.skip(n)
    }
}

#[cfg(test)]
mod tests {
    use super::padding_start;

    /// A STREAM frame with offset and length: id 0, offset 0, `data`.
    fn stream(data: &[u8]) -> Vec<u8> {
        let mut f = vec![0x0e, 0x00, 0x00, data.len() as u8];
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn trailing_padding_after_known_frames_is_found() {
        // ACK (largest 5, delay 1, one extra range), STREAM, then padding.
        let mut p = vec![0x02, 0x05, 0x01, 0x01, 0x00, 0x00, 0x01];
        p.extend(stream(b"GET"));
        let end = p.len();
        p.resize(end + 1000, 0);
        assert_eq!(padding_start(&p), Some(end));
    }

    #[test]
    fn zeros_inside_a_frame_are_not_padding() {
        // The stream data itself ends with zeros: the padding starts after them.
        let mut p = stream(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let end = p.len();
        p.resize(end + 200, 0);
        assert_eq!(padding_start(&p), Some(end));
        // An ACK whose last fields are zero, then nothing: no padding at all.
        assert_eq!(padding_start(&[0x02, 0x05, 0x00, 0x00, 0x00]), None);
        // MAX_DATA 0 then padding: the padding starts after the field.
        assert_eq!(padding_start(&[0x10, 0x00, 0x00, 0x00]), Some(2));
    }

    #[test]
    fn padding_between_frames_is_walked_over() {
        let mut p = vec![0x01, 0x00, 0x00, 0x00];
        p.extend(stream(b"x"));
        let end = p.len();
        p.resize(end + 100, 0);
        assert_eq!(padding_start(&p), Some(end));
        // A packet of padding only.
        assert_eq!(padding_start(&[0u8; 300]), Some(0));
    }

    #[test]
    fn unknown_open_ended_or_short_frames_are_left_alone() {
        let pad = |mut p: Vec<u8>| {
            p.resize(p.len() + 100, 0);
            p
        };
        // A STREAM frame without a length runs to the end: its zeros are data.
        assert_eq!(padding_start(&pad(vec![0x08, 0x00, b'x'])), None);
        // DATAGRAM, ACK_FREQUENCY (two-byte type): not walked.
        assert_eq!(padding_start(&pad(vec![0x31, 0x01, b'x'])), None);
        assert_eq!(padding_start(&pad(vec![0x40, 0xaf, 1, 2, 3, 4])), None);
        // A length past the end.
        assert_eq!(
            padding_start(&pad(vec![0x0e, 0x00, 0x00, 0x7f, 0x3f, 1])),
            None
        );
        // NEW_CONNECTION_ID: its id and token may hold zeros.
        let mut ncid = vec![0x18, 0x01, 0x00, 0x08];
        ncid.extend([0u8; 24]);
        let end = ncid.len();
        assert_eq!(padding_start(&pad(ncid)), Some(end));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in 0..600 {
            let mut p = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                p.push(if x % 3 == 0 { 0 } else { x as u8 });
            }
            if let Some(at) = padding_start(&p) {
                assert!(p[at..].iter().all(|b| *b == 0));
            }
        }
    }
}
