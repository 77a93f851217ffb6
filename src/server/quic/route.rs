//! Which endpoint owns a packet. Every endpoint (one per worker and QUIC listener, in every
//! generation alive) registers here and gets a 16-bit tag; the connection IDs it issues start
//! with that tag (`TaggedCids`). A datagram read by one endpoint whose destination connection
//! ID carries another endpoint's tag (the client's address changed, so SO_REUSEPORT's 4-tuple
//! hash picked another socket; or a reload handed the socket to a new generation) is passed
//! to its owner through a bounded channel. The tag's top bit names the process: across a
//! binary upgrade the old and the new process hold opposite bits, and a datagram of the other
//! process's connection goes to it over the upgrade's link (`peer.rs`). See LIFECYCLE.md.

use bytes::BytesMut;
use quinn_proto::{ConnectionId, ConnectionIdGenerator, EcnCodepoint};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

/// Length of the connection IDs we issue: the 2-byte tag and 6 random bytes.
pub const CID_LEN: usize = 8;
/// Datagrams waiting for their owner; beyond this they are dropped (QUIC recovers a loss).
const FORWARD_QUEUE: usize = 1024;

/// The tag bit that names the process. A process started afresh holds 0; the process a binary
/// upgrade starts holds the other bit than the one that started it.
pub const PROCESS_BIT: u16 = 0x8000;
/// This process's value of `PROCESS_BIT` in its tags.
static PROCESS: AtomicU16 = AtomicU16::new(0);

/// Sets this process's bit (0 or `PROCESS_BIT`), before any endpoint registers.
pub fn set_process_bit(bit: u16) {
    PROCESS.store(bit & PROCESS_BIT, Ordering::Relaxed);
}

/// This process's value of `PROCESS_BIT`.
pub fn process_bit() -> u16 {
    PROCESS.load(Ordering::Relaxed)
}

/// A datagram passed from the endpoint that read it to the one that owns its connection.
pub struct Forwarded {
    pub data: BytesMut,
    pub remote: SocketAddr,
    pub local_ip: Option<IpAddr>,
    pub ecn: Option<EcnCodepoint>,
}

/// Endpoints alive in this process, by tag without the process bit. Touched when an endpoint starts or ends and when
/// a packet carries another endpoint's tag; never for a packet of our own.
static ROUTES: Mutex<Vec<Option<mpsc::Sender<Forwarded>>>> = Mutex::new(Vec::new());

/// An endpoint's registration: its tag and the datagrams others forward to it. Dropping it
/// frees the tag.
pub struct Route {
    pub tag: u16,
    pub inbox: mpsc::Receiver<Forwarded>,
}

impl Route {
    /// Registers an endpoint; `None` once 32768 endpoints are alive.
    pub fn register() -> Option<Route> {
        let (tx, rx) = mpsc::channel(FORWARD_QUEUE);
        let mut routes = ROUTES.lock().unwrap_or_else(|e| e.into_inner());
        let tag = match routes.iter().position(Option::is_none) {
            Some(i) => {
                routes[i] = Some(tx);
                i
            }
            None => {
                routes.push(Some(tx));
                routes.len() - 1
            }
        };
        let tag = u16::try_from(tag).ok().filter(|t| t & PROCESS_BIT == 0)?;
        Some(Route {
            tag: tag | process_bit(),
            inbox: rx,
        })
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        let mut routes = ROUTES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = routes.get_mut(usize::from(self.tag & !PROCESS_BIT)) {
            *slot = None;
        }
    }
}

/// Passes `d` to the endpoint with `tag`, in this process or, over the upgrade's link, in the
/// other. True when it went, or was dropped because the owner's queue is full (as the network
/// may drop it); false if there is no such endpoint (any more): the packet is then handled
/// here, and quinn answers an unknown connection ID with a stateless reset.
pub fn forward(tag: u16, d: Forwarded) -> bool {
    if tag & PROCESS_BIT != process_bit() {
        return super::peer::send(&d);
    }
    deliver_here(tag, d)
}

/// Whether an endpoint with `tag` is alive: in this process, or in the other one of a binary
/// upgrade while its link is up.
pub fn has_owner(tag: u16) -> bool {
    if tag & PROCESS_BIT != process_bit() {
        return super::peer::linked();
    }
    let routes = ROUTES.lock().unwrap_or_else(|e| e.into_inner());
    matches!(routes.get(usize::from(tag & !PROCESS_BIT)), Some(Some(tx)) if !tx.is_closed())
}

/// Passes `d` to the endpoint of this process with `tag`; as `forward`.
pub fn deliver_here(tag: u16, d: Forwarded) -> bool {
    if tag & PROCESS_BIT != process_bit() {
        return false;
    }
    let routes = ROUTES.lock().unwrap_or_else(|e| e.into_inner());
    match routes.get(usize::from(tag & !PROCESS_BIT)) {
        Some(Some(tx)) => match tx.try_send(d) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        },
        _ => false,
    }
}

/// The tag of the connection ID a packet is addressed to, when that ID may be one we issued:
/// short-header packets, long-header Handshake and Initial packets. An Initial's ID is the
/// client's own in its first flight (it stays with the endpoint that read it, see
/// `is_initial` and `initial::opens_as_first_flight`) and ours once the client has our first
/// answer (the Initial carrying its acknowledgement, at the start of its second flight). 0-RTT
/// packets stay where they were read: they follow the client's first Initial, and a late one
/// lost is sent again in 1-RTT.
pub fn tag_of(packet: &[u8]) -> Option<u16> {
    let first = *packet.first()?;
    let cid = if first & 0x80 == 0 {
        packet.get(1..1 + CID_LEN)?
    } else {
        // Long header: type in bits 4-5 (0 Initial, 1 0-RTT, 2 Handshake, 3 Retry).
        if !matches!((first >> 4) & 0x03, 0 | 2) {
            return None;
        }
        let len = usize::from(*packet.get(5)?);
        if len != CID_LEN {
            return None;
        }
        packet.get(6..6 + CID_LEN)?
    };
    Some(u16::from_be_bytes([cid[0], cid[1]]))
}

/// Whether a datagram starts with a long-header Initial packet.
pub fn is_initial(packet: &[u8]) -> bool {
    packet
        .first()
        .is_some_and(|b| b & 0x80 != 0 && (b >> 4) & 0x03 == 0)
}

/// Issues connection IDs that start with the endpoint's tag.
pub struct TaggedCids {
    tag: u16,
}

impl TaggedCids {
    pub fn new(tag: u16) -> TaggedCids {
        TaggedCids { tag }
    }
}

impl ConnectionIdGenerator for TaggedCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut id = [0u8; CID_LEN];
        id[..2].copy_from_slice(&self.tag.to_be_bytes());
        // The process's secure random source; on failure (never seen) the ID is still
        // unique enough for routing, and quinn checks collisions.
        let _ = rustls::crypto::aws_lc_rs::default_provider()
            .secure_random
            .fill(&mut id[2..]);
        ConnectionId::new(&id)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_name_endpoints_and_packets_find_them() {
        let a = Route::register().unwrap();
        let mut b = Route::register().unwrap();
        assert_ne!(a.tag, b.tag);
        let cid = TaggedCids::new(b.tag).generate_cid();
        assert_eq!(cid.len(), CID_LEN);
        // A short-header packet to b's connection.
        let mut pkt = vec![0x40];
        pkt.extend_from_slice(&cid);
        pkt.extend_from_slice(&[0; 20]);
        assert_eq!(tag_of(&pkt), Some(b.tag));
        let d = Forwarded {
            data: BytesMut::from(&pkt[..]),
            remote: "127.0.0.1:1".parse().unwrap(),
            local_ip: None,
            ecn: None,
        };
        assert!(forward(b.tag, d));
        assert_eq!(b.inbox.try_recv().unwrap().data.len(), pkt.len());
        // Initial packets name a tag too (the endpoint tells a client's own ID from ours),
        // 0-RTT packets none.
        let mut initial = vec![0xc0, 0, 0, 0, 1, CID_LEN as u8];
        initial.extend_from_slice(&cid);
        assert_eq!(tag_of(&initial), Some(b.tag));
        assert!(is_initial(&initial));
        initial[0] = 0xd0; // 0-RTT
        assert_eq!(tag_of(&initial), None);
        initial[0] = 0xe0; // Handshake
        assert_eq!(tag_of(&initial), Some(b.tag));
        assert!(!is_initial(&initial));
        assert!(has_owner(b.tag));
        let tag = b.tag;
        drop(b);
        let d = Forwarded {
            data: BytesMut::new(),
            remote: "127.0.0.1:1".parse().unwrap(),
            local_ip: None,
            ecn: None,
        };
        assert!(!forward(tag, d), "a gone endpoint gets nothing");
        assert!(!has_owner(tag));
        // The other process's tag, with no upgrade link: handled here.
        let d = Forwarded {
            data: BytesMut::new(),
            remote: "127.0.0.1:1".parse().unwrap(),
            local_ip: None,
            ecn: None,
        };
        assert_eq!(a.tag & PROCESS_BIT, 0);
        assert!(!forward(a.tag | PROCESS_BIT, d));
        drop(a);
    }
}
