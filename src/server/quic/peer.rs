//! The link between the two processes of a binary upgrade (SIGUSR2), for QUIC. Both read the
//! same UDP sockets in turn (the new process once it serves, the old one until then), so a
//! datagram of one process's connection may be read by the other. The connection IDs each
//! process issues carry its process bit (`route::PROCESS_BIT`); a datagram with the other
//! process's bit is passed over this link, a Unix SOCK_SEQPACKET socket pair made at the
//! upgrade, and its owner handles it as if it had read it (and answers from its own copy of
//! the socket). The link ends when either process exits: then the other's datagrams are
//! answered locally (a stateless reset: the connection is gone).
//!
//! A message is a fixed header (the datagram's ECN mark, remote address and local address)
//! followed by the datagram. Sends never wait: a full link drops the datagram, as the network
//! may, and QUIC recovers it.

use super::route::{self, Forwarded};
use bytes::BytesMut;
use socket2::{Domain, Socket, Type};
use std::io::{self, IoSlice, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

/// Bytes of the header before each datagram.
const HEADER: usize = 40;
/// The largest datagram passed (a UDP payload).
const MAX_DATAGRAM: usize = 65_535;
/// Send buffer of each end: what may wait in the link before datagrams are dropped.
const LINK_BUFFER: usize = 4 << 20;

/// The link to the other process, while both live.
static LINK: Mutex<Option<Arc<Socket>>> = Mutex::new(None);

/// A new link's two ends: ours, and the one the new process inherits.
pub fn pair() -> io::Result<(Socket, Socket)> {
    let (ours, theirs) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None)?;
    for s in [&ours, &theirs] {
        let _ = s.set_send_buffer_size(LINK_BUFFER);
        let _ = s.set_recv_buffer_size(LINK_BUFFER);
    }
    Ok((ours, theirs))
}

/// Whether a link to another process is up (the other process has not exited).
pub fn linked() -> bool {
    LINK.lock().unwrap_or_else(|e| e.into_inner()).is_some()
}

/// Starts using `sock` as the link: datagrams of the other process's connections go to it,
/// and a thread hands what comes from it to our endpoints until the other process exits.
pub fn install(sock: Socket) -> io::Result<()> {
    let sock = Arc::new(sock);
    *LINK.lock().unwrap_or_else(|e| e.into_inner()) = Some(sock.clone());
    std::thread::Builder::new()
        .name("quic-upgrade-link".into())
        .spawn(move || receive(sock))?;
    Ok(())
}

/// Passes `d` to the other process. False when there is no link (any more).
pub fn send(d: &Forwarded) -> bool {
    let Some(sock) = LINK.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
        return false;
    };
    let header = encode_header(d);
    let parts = [IoSlice::new(&header), IoSlice::new(&d.data)];
    match sock.send_vectored_with_flags(&parts, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) {
        Ok(_) => {
            crate::metrics::quic_admission::upgrade_sent();
            true
        }
        // Full: dropped, as the network may drop it.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
        Err(e) => {
            end(&sock, &e.to_string());
            false
        }
    }
}

/// The link's receiving side: every message is a datagram of one of our connections.
fn receive(sock: Arc<Socket>) {
    let mut buf = vec![0u8; HEADER + MAX_DATAGRAM];
    loop {
        let n = match (&*sock).read(&mut buf) {
            Ok(0) => {
                end(&sock, "the other process exited");
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                end(&sock, &e.to_string());
                return;
            }
        };
        let Some(d) = decode(&buf[..n]) else {
            tracing::debug!("QUIC upgrade link: a message without its header, dropped");
            continue;
        };
        // One of ours by its tag; anything else (not ours, or an endpoint gone) is dropped
        // rather than sent back.
        if let Some(tag) = route::tag_of(&d.data) {
            if route::deliver_here(tag, d) {
                crate::metrics::quic_admission::upgrade_received();
            }
        }
    }
}

/// Drops the link `sock` (if it is still the link), saying why once.
fn end(sock: &Arc<Socket>, why: &str) {
    let mut link = LINK.lock().unwrap_or_else(|e| e.into_inner());
    if link.as_ref().is_some_and(|l| Arc::ptr_eq(l, sock)) {
        *link = None;
        tracing::info!(
            "binary upgrade: QUIC datagrams are no longer passed to the other process ({why})"
        );
    }
}

fn encode_header(d: &Forwarded) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0] = d.ecn.map_or(0xff, |e| e as u8);
    put_ip(&mut h[1..18], Some(d.remote.ip()));
    h[18..20].copy_from_slice(&d.remote.port().to_be_bytes());
    put_ip(&mut h[20..37], d.local_ip);
    h
}

fn decode(msg: &[u8]) -> Option<Forwarded> {
    let h = msg.get(..HEADER)?;
    let ecn = match h[0] {
        0xff => None,
        bits => Some(quinn_proto::EcnCodepoint::from_bits(bits)?),
    };
    let remote = SocketAddr::new(get_ip(&h[1..18])?, u16::from_be_bytes([h[18], h[19]]));
    Some(Forwarded {
        data: BytesMut::from(&msg[HEADER..]),
        remote,
        local_ip: get_ip(&h[20..37]),
        ecn,
    })
}

/// An address in 17 bytes: its family (0 none, 4, 6), then its bytes.
fn put_ip(out: &mut [u8], ip: Option<IpAddr>) {
    match ip {
        None => out[0] = 0,
        Some(IpAddr::V4(v4)) => {
            out[0] = 4;
            out[1..5].copy_from_slice(&v4.octets());
        }
        Some(IpAddr::V6(v6)) => {
            out[0] = 6;
            out[1..17].copy_from_slice(&v6.octets());
        }
    }
}

fn get_ip(b: &[u8]) -> Option<IpAddr> {
    match b[0] {
        4 => Some(IpAddr::V4(Ipv4Addr::new(b[1], b[2], b[3], b[4]))),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[1..17]);
            Some(IpAddr::V6(Ipv6Addr::from(o)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_carries_the_datagram_and_its_addresses() {
        for (remote, local) in [
            ("127.0.0.1:4433", Some("127.0.0.2")),
            ("[::1]:9", None),
            ("[2001:db8::7]:65535", Some("::1")),
        ] {
            let d = Forwarded {
                data: BytesMut::from(&b"\x40datagram"[..]),
                remote: remote.parse().unwrap(),
                local_ip: local.map(|l| l.parse().unwrap()),
                ecn: Some(quinn_proto::EcnCodepoint::Ect0),
            };
            let mut msg = encode_header(&d).to_vec();
            msg.extend_from_slice(&d.data);
            let back = decode(&msg).unwrap();
            assert_eq!(back.data, d.data);
            assert_eq!(back.remote, d.remote);
            assert_eq!(back.local_ip, d.local_ip);
            assert_eq!(back.ecn, d.ecn);
        }
        assert!(decode(&[0u8; 10]).is_none());
    }

    #[test]
    fn the_link_passes_whole_datagrams() {
        let (a, b) = pair().unwrap();
        let d = Forwarded {
            data: BytesMut::from(&vec![7u8; 1400][..]),
            remote: "10.0.0.1:5".parse().unwrap(),
            local_ip: None,
            ecn: None,
        };
        let header = encode_header(&d);
        a.send_vectored_with_flags(&[IoSlice::new(&header), IoSlice::new(&d.data)], 0)
            .unwrap();
        let mut buf = vec![0u8; HEADER + MAX_DATAGRAM];
        let n = (&b).read(&mut buf).unwrap();
        let back = decode(&buf[..n]).unwrap();
        assert_eq!(back.data.len(), 1400);
        drop(a);
        assert_eq!((&b).read(&mut buf).unwrap(), 0, "the end of the other side");
    }
}
