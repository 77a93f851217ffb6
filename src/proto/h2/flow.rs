//! Flow-control windows (RFC 9113 section 6.9), one type for the server connection and the
//! client: what the peer lets us send, or what we let the peer send.
//!
//! A window is signed: a SETTINGS_INITIAL_WINDOW_SIZE that shrinks may push a send window
//! below zero (section 6.9.2), and the sender then waits until WINDOW_UPDATEs bring it back
//! above. No change may take it above 2^31-1 (a flow-control error: the connection's for the
//! connection window and for a SETTINGS change, the stream's for a stream's WINDOW_UPDATE).

use super::frame::MAX_WINDOW;

/// One flow-control window, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window(i64);

/// A change would take the window above 2^31-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow;

/// More bytes arrived than the window allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded;

impl Window {
    /// A window of `size` bytes.
    #[inline]
    pub const fn new(size: u32) -> Window {
        Window(size as i64)
    }

    /// The window's size: negative when a SETTINGS change shrank it below what was sent.
    #[inline]
    pub const fn size(self) -> i64 {
        self.0
    }

    /// The bytes that may be sent now (none while the window is negative).
    #[inline]
    pub const fn available(self) -> u64 {
        if self.0 > 0 {
            self.0 as u64
        } else {
            0
        }
    }

    /// Some bytes may be sent now.
    #[inline]
    pub const fn is_open(self) -> bool {
        self.0 > 0
    }

    /// `n` bytes were sent (within [`Window::available`]).
    #[inline]
    pub fn consume(&mut self, n: u64) {
        self.0 -= n as i64;
    }

    /// `n` bytes arrived: an error when the window did not allow them.
    #[inline]
    pub fn receive(&mut self, n: u32) -> Result<(), Exceeded> {
        self.0 -= i64::from(n);
        match self.0 < 0 {
            true => Err(Exceeded),
            false => Ok(()),
        }
    }

    /// A WINDOW_UPDATE of `increment` from the peer.
    #[inline]
    pub fn grow(&mut self, increment: u32) -> Result<(), Overflow> {
        self.adjust(i64::from(increment))
    }

    /// We give `n` bytes of credit back (our WINDOW_UPDATE): never more than was received,
    /// so it cannot take the window past its size.
    #[inline]
    pub fn credit(&mut self, n: u32) {
        self.0 += i64::from(n);
    }

    /// SETTINGS_INITIAL_WINDOW_SIZE changed by `delta` (new minus old initial size).
    #[inline]
    pub fn adjust(&mut self, delta: i64) -> Result<(), Overflow> {
        self.0 += delta;
        match self.0 > i64::from(MAX_WINDOW) {
            true => Err(Overflow),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_section_6_9() {
        let mut w = Window::new(100);
        w.consume(60);
        assert_eq!((w.size(), w.available(), w.is_open()), (40, 40, true));
        // A smaller initial window may take it below zero: nothing may be sent.
        w.adjust(-50).unwrap();
        assert_eq!((w.size(), w.available(), w.is_open()), (-10, 0, false));
        w.grow(10).unwrap();
        assert!(!w.is_open());
        // Up to 2^31-1 exactly, not beyond.
        let mut w = Window::new(MAX_WINDOW - 1);
        assert_eq!(w.grow(1), Ok(()));
        assert_eq!(w.grow(1), Err(Overflow));
        let mut w = Window::new(MAX_WINDOW);
        assert_eq!(w.adjust(1), Err(Overflow));
        // Receiving: what the window allows, then an error.
        let mut w = Window::new(10);
        assert_eq!(w.receive(10), Ok(()));
        assert_eq!(w.receive(1), Err(Exceeded));
    }
}
