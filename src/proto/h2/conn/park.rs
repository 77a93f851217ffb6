//! A quiet connection's compact form. Once a connection has had no stream and no input for
//! [`super::QUIET_TRIM`] (its tables already trimmed), the driver may [`Connection::park`] it:
//! what outlives streams (HPACK contexts, flow-control windows, the highest stream id, recent
//! resets; not the addresses, which its driver keeps anyway) moves into a [`Parked`] less than half the connection's size, and the
//! rest, which only matters while streams are open, is dropped. The response side's HPACK
//! table is emptied ([`hpack::Encoder::forget`]); the request side's is the peer's to keep,
//! packed in place when small ([`hpack::Stowed`]: most clients index only their
//! `:authority`), so that a parked connection holds no heap block of its own.
//! [`Connection::unpark`] puts it back with that rest at its initial values when the client
//! sends again.

use super::{Budget, Connection, Dribble, HeadersCache, Phase, Stats};
use crate::http::clock::DATE_LEN;
use crate::proto::h2::flow::Window;
use crate::proto::h2::hpack;
use crate::proto::h2::output::SplicedBodies;
use crate::proto::h2::table::StreamTable;
use bytes::BytesMut;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// The state of an open connection that survives while it has no stream.
pub struct Parked {
    cfg: Arc<super::Settings>,
    decoder: hpack::Decoder,
    /// The decoder's dynamic table, when small enough to be packed here.
    decoder_table: Option<hpack::Stowed>,
    encoder: hpack::Encoder,
    recv_conn_window: u32,
    recv_conn_unacked: u32,
    max_client_stream: u32,
    peer_max_frame: u32,
    peer_initial_window: u32,
    send_conn_window: Window,
    last_frame_at: Instant,
    peer_goaway: bool,
    /// Streams reset lately, whose frames may still be in flight; `None` when there are
    /// none (almost always).
    recently_reset: Option<Box<[u32]>>,
}

impl Parked {
    /// A connection that has not started: what [`Connection::new`] begins from.
    pub(super) fn fresh(cfg: Arc<super::Settings>, now: Instant) -> Parked {
        Parked {
            decoder: hpack::Decoder::new(hpack::DEFAULT_TABLE_SIZE, cfg.max_header_list),
            cfg,
            decoder_table: None,
            encoder: {
                // The ETag and length of each answer go once: sent as they are (see
                // `Encoder::set_huffman_unindexed`).
                let mut e = hpack::Encoder::default();
                e.set_huffman_unindexed(false);
                e
            },
            recv_conn_window: super::frame::DEFAULT_WINDOW,
            recv_conn_unacked: 0,
            max_client_stream: 0,
            peer_max_frame: super::frame::DEFAULT_MAX_FRAME_SIZE,
            peer_initial_window: super::frame::DEFAULT_WINDOW,
            send_conn_window: Window::new(super::frame::DEFAULT_WINDOW),
            last_frame_at: now,
            peer_goaway: false,
            recently_reset: None,
        }
    }
}

impl Connection {
    /// Whether [`Connection::park`] loses nothing: open, quiet and trimmed, with no stream,
    /// no output, no header block or request in progress and no credit held back. Everything
    /// [`Parked`] leaves out is at its initial value then.
    pub fn parkable(&self) -> bool {
        self.phase == Phase::Open
            && self.closed.is_none()
            && !self.trim_when_quiet
            && !self.drain_when_open
            && !self.recv_paused
            && self.streams.is_empty()
            && self.out.is_empty()
            && self.partial.is_none()
            && self.requests.is_empty()
            && self.stalled_since.is_none()
            && self.in_handler == 0
            && self.sending == 0
            && self.streaming == 0
            && self.body_pipes == 0
            && self.unread_total == 0
            && self.credit_held == 0
            && self.opened_with_body.is_none()
            && self.cancelled.is_empty()
            && self.done.is_empty()
            && self.ready.is_empty()
    }

    /// The compact form of a [`Connection::parkable`] connection.
    pub fn park(self) -> Parked {
        debug_assert!(self.parkable());
        // Exhaustive: a field added to `Connection` must say here whether it survives.
        let Connection {
            cfg,
            peer: _,
            local: _,
            phase: _,
            closed: _,
            out: _,
            spliced: _,
            decoder,
            hbuf: _,
            fields: _,
            partial: _,
            block: _,
            memo: _,
            recv_conn_window,
            recv_conn_unacked,
            max_client_stream,
            last_frame_at,
            peer_goaway,
            encoder,
            headers_cache: _,
            peer_max_frame,
            peer_initial_window,
            send_conn_window,
            stalled_since: _,
            date: _,
            coarse_ns: _,
            // Taken by the driver before it parks.
            stats: _,
            turn_mark: _,
            streams: _,
            ready: _,
            requests: _,
            held: _,
            in_handler: _,
            sending: _,
            streaming: _,
            body_pipes: _,
            unread_total: _,
            credit_held: _,
            opened_with_body: _,
            cancelled: _,
            done: _,
            closed_unwritten: _,
            recv_paused: _,
            batch_opened: _,
            opened_lately: _,
            wrote_large: _,
            drain_when_open: _,
            trim_when_quiet: _,
            recently_reset,
            // Full again: they refill completely within a second, and a parked connection
            // has been quiet for longer.
            resets: _,
            control: _,
            dribble: _,
        } = self;
        // The peer forgets its copy at our next block: the fields of a response given a
        // second or more ago are not worth their bytes for as long as the connection idles.
        let mut encoder = encoder;
        encoder.forget();
        let mut decoder = decoder;
        let decoder_table = decoder.stow_table();
        Parked {
            cfg,
            decoder,
            decoder_table,
            encoder,
            recv_conn_window,
            recv_conn_unacked,
            max_client_stream,
            peer_max_frame,
            peer_initial_window,
            send_conn_window,
            last_frame_at,
            peer_goaway,
            recently_reset: (!recently_reset.is_empty())
                .then(|| Vec::from(recently_reset).into_boxed_slice()),
        }
    }

    /// The open connection `p` was parked from, between `peer` and `local`, as of `now`.
    pub fn unpark(p: Parked, peer: SocketAddr, local: SocketAddr, now: Instant) -> Connection {
        let mut c = Connection::from_parked(p, peer, local, now);
        c.phase = Phase::Open;
        c
    }

    /// `p`'s state, everything else initial; in [`Phase::Preface`].
    pub(super) fn from_parked(
        p: Parked,
        peer: SocketAddr,
        local: SocketAddr,
        now: Instant,
    ) -> Connection {
        let mut decoder = p.decoder;
        if let Some(table) = &p.decoder_table {
            decoder.unstow_table(table);
        }
        Connection {
            resets: Budget::new(p.cfg.max_resets_per_second, now),
            control: Budget::new(p.cfg.max_control_frames_per_second, now),
            dribble: Dribble::default(),
            cfg: p.cfg,
            peer,
            local,
            phase: Phase::Preface,
            closed: None,
            out: Vec::new(),
            spliced: SplicedBodies::default(),
            decoder,
            hbuf: BytesMut::new(),
            fields: Vec::new(),
            partial: None,
            block: Vec::new(),
            memo: Default::default(),
            recv_conn_window: p.recv_conn_window,
            recv_conn_unacked: p.recv_conn_unacked,
            max_client_stream: p.max_client_stream,
            last_frame_at: p.last_frame_at,
            peer_goaway: p.peer_goaway,
            encoder: p.encoder,
            headers_cache: HeadersCache::default(),
            peer_max_frame: p.peer_max_frame,
            peer_initial_window: p.peer_initial_window,
            send_conn_window: p.send_conn_window,
            stalled_since: None,
            date: [b' '; DATE_LEN],
            coarse_ns: 0,
            stats: Stats::default(),
            turn_mark: 0,
            streams: StreamTable::default(),
            ready: Default::default(),
            requests: VecDeque::new(),
            held: VecDeque::new(),
            in_handler: 0,
            sending: 0,
            streaming: 0,
            body_pipes: 0,
            unread_total: 0,
            credit_held: 0,
            opened_with_body: None,
            cancelled: Vec::new(),
            done: Vec::new(),
            closed_unwritten: 0,
            recv_paused: false,
            batch_opened: 0,
            opened_lately: 0,
            wrote_large: false,
            drain_when_open: false,
            trim_when_quiet: false,
            recently_reset: p
                .recently_reset
                .map_or_else(VecDeque::new, |r| Vec::from(r).into()),
        }
    }
}
