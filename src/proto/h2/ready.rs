//! The streams with body bytes to send, one FIFO per urgency (RFC 9218: 0 goes first, 7
//! last).
//!
//! Almost every stream keeps the default urgency, so only its queue lives inline; the other
//! seven are allocated the first time a stream asks for one. An idle connection then holds
//! one empty queue (32 B) and a null pointer instead of eight queues (256 B).

use std::collections::VecDeque;

/// RFC 9218's default urgency.
const DEFAULT_URGENCY: usize = 3;
/// Urgencies 0..=7.
pub const URGENCIES: usize = 8;

#[derive(Default)]
pub struct ReadyQueues {
    default: VecDeque<u32>,
    /// Indexed by urgency; the slot of the default urgency stays unused.
    others: Option<Box<[VecDeque<u32>; URGENCIES]>>,
}

impl ReadyQueues {
    pub fn push_back(&mut self, urgency: usize, id: u32) {
        self.queue(urgency).push_back(id);
    }

    pub fn push_front(&mut self, urgency: usize, id: u32) {
        self.queue(urgency).push_front(id);
    }

    /// The next stream of `urgency`, if any.
    pub fn pop_front(&mut self, urgency: usize) -> Option<u32> {
        if urgency == DEFAULT_URGENCY {
            return self.default.pop_front();
        }
        self.others.as_mut()?.get_mut(urgency)?.pop_front()
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.default.is_empty()
            && self
                .others
                .as_ref()
                .is_none_or(|o| o.iter().all(VecDeque::is_empty))
    }

    fn queue(&mut self, urgency: usize) -> &mut VecDeque<u32> {
        let urgency = urgency & (URGENCIES - 1);
        if urgency == DEFAULT_URGENCY {
            return &mut self.default;
        }
        &mut self.others.get_or_insert_with(Box::default)[urgency]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urgencies_are_separate_fifos() {
        let mut r = ReadyQueues::default();
        assert!(r.is_empty());
        r.push_back(3, 1);
        assert!(
            r.others.is_none(),
            "the default urgency allocates nothing more"
        );
        r.push_back(3, 3);
        r.push_back(1, 5);
        r.push_front(1, 7);
        assert!(!r.is_empty());
        assert_eq!(r.pop_front(0), None);
        assert_eq!(r.pop_front(1), Some(7));
        assert_eq!(r.pop_front(1), Some(5));
        assert_eq!(r.pop_front(3), Some(1));
        assert_eq!(r.pop_front(3), Some(3));
        assert_eq!(r.pop_front(7), None);
        assert!(r.is_empty());
    }
}
