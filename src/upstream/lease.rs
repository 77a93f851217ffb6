//! A balancer's count of one request in flight on a backend, held by whatever carries the
//! request (an exchange, a stream, a tunnel) and dropped with it.

use std::cell::Cell;
use std::rc::Rc;

/// Counts one request in flight on a backend until it is dropped (with the exchange).
pub struct Lease {
    in_flight: Rc<Cell<u32>>,
}

impl Lease {
    /// One more request in flight on the backend whose count `in_flight` is.
    pub fn new(in_flight: &Rc<Cell<u32>>) -> Lease {
        in_flight.set(in_flight.get() + 1);
        Lease {
            in_flight: in_flight.clone(),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let n = &self.in_flight;
        n.set(n.get().saturating_sub(1));
    }
}
