//! Descriptors handed to tokio's reactor (`AsyncFd`), for those it has no type of its own
//! for: the parking epoll instance, and the listeners the lane accepts on.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Registers `owner` with the current runtime's reactor for `interest`. Call inside a runtime.
pub fn register<T: OwnsFd>(owner: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // SAFETY: an `OwnsFd` owns its descriptor: it stays open, and `as_raw_fd` returns that
    // same one, until the value is dropped, which is no earlier than the `AsyncFd` that owns
    // it from here on. (Swapping the value through `AsyncFd::get_mut`, which tokio forbids,
    // would break this; nothing here does.)
    unsafe { AsyncFd::register_with_interest(owner, interest) }.map_err(io::Error::from)
}

/// A value that owns one open descriptor for its whole life and always names it.
pub trait OwnsFd: AsRawFd + sealed::Sealed {}

impl OwnsFd for OwnedFd {}
impl OwnsFd for std::net::TcpListener {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::os::fd::OwnedFd {}
    impl Sealed for std::net::TcpListener {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_watches_an_owned_descriptor() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let addr = listener.local_addr().unwrap();
            let watched = register(listener, Interest::READABLE).unwrap();
            let _client = std::net::TcpStream::connect(addr).unwrap();
            let mut ready = watched.readable().await.unwrap();
            assert!(matches!(ready.try_io(|l| l.get_ref().accept()), Ok(Ok(_))));

            let epoll = crate::sys::epoll::create().unwrap();
            assert!(register(epoll, Interest::READABLE).is_ok());
        });
    }
}
