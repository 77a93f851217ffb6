//! The kernel's random bytes.

use std::io;

/// Fills `buf` from the kernel's random source with one getrandom(2) call: how many bytes it
/// wrote (all of them for up to 256, unless a signal came first).
pub fn fill(buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the pointer and length describe `buf`, which getrandom fills at most.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    // A negative count is an error.
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_writes_random_bytes() {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        assert_eq!(fill(&mut a).unwrap(), 32);
        assert_eq!(fill(&mut b).unwrap(), 32);
        // 2^-256 odds of a false failure.
        assert_ne!(a, b);
        assert_eq!(fill(&mut []).unwrap(), 0);
    }
}
