//! QUIC's counters: events of a connection's life (handshake, path change, close) and of
//! the endpoint (stateless resets, datagrams forwarded between workers). Bumped
//! once per event, never per request; per packet only on the paths that exist for a few
//! packets (a forwarded datagram of a migrated connection).

use std::cell::Cell;

/// What the counters count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A handshake completed (the connection reached 1-RTT).
    Handshake,
    /// A connection moved to a new client address (NAT rebinding or migration): quinn
    /// switched paths on an authenticated packet from it and validates the new one.
    Migration,
    /// A stateless reset answered a packet of a connection we do not know.
    StatelessReset,
    /// A datagram read on this worker's socket belonged to another endpoint's connection
    /// and was passed to it (connection IDs name their endpoint, `server/quic/route.rs`).
    Forwarded,
}

const EVENTS: usize = 4;

// 0-RTT and Retry are counted process-wide by `quic_admission`, where `retry: auto` reads them.

/// The counters, as summed into a `Snapshot`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub handshakes: u64,
    pub migrations: u64,
    pub stateless_resets: u64,
    pub forwarded: u64,
    /// Of connections that ended: packets sent, and those declared lost.
    pub sent_packets: u64,
    pub lost_packets: u64,
}

impl Counters {
    pub const ZERO: Counters = Counters {
        handshakes: 0,
        migrations: 0,
        stateless_resets: 0,
        forwarded: 0,
        sent_packets: 0,
        lost_packets: 0,
    };

    pub(super) fn local() -> Counters {
        LOCAL.with(|l| {
            let e = |x: Event| l.events[x as usize].get();
            Counters {
                handshakes: e(Event::Handshake),
                migrations: e(Event::Migration),
                stateless_resets: e(Event::StatelessReset),
                forwarded: e(Event::Forwarded),
                sent_packets: l.sent_packets.get(),
                lost_packets: l.lost_packets.get(),
            }
        })
    }

    pub(super) fn add(&mut self, o: &Counters) {
        self.handshakes += o.handshakes;
        self.migrations += o.migrations;
        self.stateless_resets += o.stateless_resets;
        self.forwarded += o.forwarded;
        self.sent_packets += o.sent_packets;
        self.lost_packets += o.lost_packets;
    }
}

struct Local {
    events: [Cell<u64>; EVENTS],
    sent_packets: Cell<u64>,
    lost_packets: Cell<u64>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            events: [const { Cell::new(0) }; EVENTS],
            sent_packets: Cell::new(0),
            lost_packets: Cell::new(0),
        }
    };
}

/// Counts one event (when this worker counts).
pub fn count(e: Event) {
    if super::enabled() {
        LOCAL.with(|l| super::bump(&l.events[e as usize], 1));
    }
}

/// A handshake completed.
pub fn handshake() {
    count(Event::Handshake);
}

/// A connection ended: the packets it sent in all, and those declared lost.
pub fn closed(sent_packets: u64, lost_packets: u64) {
    if super::enabled() {
        LOCAL.with(|l| {
            super::bump(&l.sent_packets, sent_packets);
            super::bump(&l.lost_packets, lost_packets);
        });
    }
}

/// The endpoint answered a datagram itself (`DatagramEvent::Response`): counts it when it is
/// a stateless reset.
pub fn answered(packet: &[u8]) {
    if is_stateless_reset(packet) {
        count(Event::StatelessReset);
    }
}

/// Whether an endpoint's own answer to a datagram (`DatagramEvent::Response`) is a stateless
/// reset: it has a short header, where version negotiation has a long one (RFC 9000 17.2.1,
/// 10.3).
pub fn is_stateless_reset(packet: &[u8]) -> bool {
    packet.first().is_some_and(|b| b & 0x80 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_counted_only_when_counting_is_on() {
        super::super::enable(false);
        count(Event::Migration);
        assert_eq!(Counters::local().migrations, 0);
        super::super::enable(true);
        count(Event::Migration);
        handshake();
        handshake();
        let c = Counters::local();
        assert_eq!((c.migrations, c.handshakes), (1, 2));
        let mut sum = Counters::ZERO;
        sum.add(&c);
        sum.add(&c);
        assert_eq!(sum.handshakes, 4);
        super::super::enable(false);
    }

    #[test]
    fn a_short_header_answer_is_a_stateless_reset() {
        assert!(is_stateless_reset(&[0x45, 1, 2]));
        assert!(!is_stateless_reset(&[0xc0, 0, 0, 0, 0]));
        assert!(!is_stateless_reset(&[]));
    }
}
