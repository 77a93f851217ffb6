//! The connection's open streams, in slots that do not move: a stream is made in a free slot
//! and left there when it closes, for the next one. A stream is a few hundred bytes, and a
//! table that packed its entries (push, swap-remove) moved one on every opening and closing,
//! a copy through memory each time. A slot's index stays valid while its stream is open.

use super::stream::{set_send, Recv, Send, Stream};

/// The id of a free slot: stream ids have 31 bits.
const VACANT: u32 = u32::MAX;

#[derive(Debug, Default)]
pub struct StreamTable {
    /// Each slot's stream id, or [`VACANT`]: searched on every frame, so apart from the
    /// streams themselves.
    ids: Vec<u32>,
    slots: Vec<Stream>,
    /// Streams open (slots not vacant).
    live: usize,
}

impl StreamTable {
    /// The slot of stream `id`.
    #[inline]
    pub fn position(&self, id: u32) -> Option<usize> {
        if id == VACANT {
            return None;
        }
        self.ids.iter().position(|&x| x == id)
    }

    /// Opens stream `id` in the first free slot (a new one when none is free), its halves
    /// `recv` and `send`, and returns the slot.
    #[inline(always)]
    pub fn open(
        &mut self,
        id: u32,
        send_window: u32,
        recv_window: u32,
        (recv, send): (Recv, Send),
        reserve: usize,
    ) -> usize {
        self.live += 1;
        if let Some(i) = self.ids.iter().position(|&x| x == VACANT) {
            self.ids[i] = id;
            self.slots[i].reopen(id, send_window, recv_window, recv, send);
            return i;
        }
        if self.slots.capacity() == 0 {
            self.slots.reserve_exact(reserve);
            self.ids.reserve_exact(reserve);
        }
        self.ids.push(id);
        self.slots
            .push(Stream::new(id, send_window, recv_window, recv, send));
        self.ids.len() - 1
    }

    /// Closes the stream in slot `i`: what it still holds (a body being sent, a request body
    /// pipe) is dropped now, and the slot is free.
    #[inline]
    pub fn close(&mut self, i: usize) {
        self.ids[i] = VACANT;
        self.live -= 1;
        let s = &mut self.slots[i];
        set_send(&mut s.send, Send::Done);
        if s.recv.pipe().is_some() {
            s.recv = Recv::ENDED;
        }
        s.sent = None;
    }

    /// Whether slot `i` holds an open stream.
    #[inline]
    pub fn is_open(&self, i: usize) -> bool {
        self.ids[i] != VACANT
    }

    /// Slots, open or free: the bound of an index walk (skip free ones with `is_open`).
    #[inline]
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Open streams.
    #[inline]
    pub fn len(&self) -> usize {
        self.live
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The open streams.
    pub fn iter(&self) -> impl Iterator<Item = &Stream> {
        self.ids
            .iter()
            .zip(&self.slots)
            .filter(|(&id, _)| id != VACANT)
            .map(|(_, s)| s)
    }

    /// Room for this many slots: what an idle connection keeps of the table.
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Where the slots are (tests of whose allocation a table uses).
    #[cfg(test)]
    pub fn as_ptr(&self) -> *const Stream {
        self.slots.as_ptr()
    }

    /// The bytes it holds (its capacities).
    pub fn size(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Stream>()
            + self.ids.capacity() * std::mem::size_of::<u32>()
    }
}

impl std::ops::Index<usize> for StreamTable {
    type Output = Stream;

    #[inline]
    fn index(&self, i: usize) -> &Stream {
        &self.slots[i]
    }
}

impl std::ops::IndexMut<usize> for StreamTable {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut Stream {
        &mut self.slots[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened() -> (Recv, Send) {
        let send = Send::Waiting {
            held: true,
            head: false,
        };
        (Recv::ENDED, send)
    }

    #[test]
    fn slots_are_reused_and_streams_do_not_move() {
        let mut t = StreamTable::default();
        let a = t.open(1, 100, 100, opened(), 4);
        let b = t.open(3, 100, 100, opened(), 4);
        let c = t.open(5, 100, 100, opened(), 4);
        assert_eq!((a, b, c), (0, 1, 2));
        let at = std::ptr::from_ref(&t[c]);
        t.close(a);
        assert_eq!(t.len(), 2);
        assert_eq!(t.position(1), None);
        assert_eq!(t.position(5), Some(c));
        assert_eq!(
            std::ptr::from_ref(&t[c]),
            at,
            "closing another left it in place"
        );
        assert_eq!(
            t.open(7, 100, 100, opened(), 4),
            a,
            "the free slot is taken first"
        );
        assert_eq!(t[a].id, 7);
        assert_eq!(t.slots(), 3);
        assert_eq!(t.iter().map(|s| s.id).collect::<Vec<_>>(), [7, 3, 5]);
        t.close(b);
        assert!(!t.is_open(b));
        assert_eq!(t.position(VACANT), None);
        t.close(a);
        t.close(c);
        assert!(t.is_empty());
        assert_eq!(t.iter().count(), 0);
    }
}
