//! The allocator's memory.

/// Gives the free memory of glibc's heap back to the system (malloc_trim(3)); whether any
/// went.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim_heap() -> bool {
    // SAFETY: malloc_trim only releases free heap memory; it has no preconditions.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trim_heap_keeps_what_is_in_use() {
        let kept = vec![7u8; 1 << 20];
        drop(vec![1u8; 8 << 20]);
        super::trim_heap();
        assert!(kept.iter().all(|&b| b == 7));
    }
}
