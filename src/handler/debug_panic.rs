//! Test-only trigger for the panic containment of `server/panics.rs`, compiled into debug
//! builds only (never into a release build).

/// With the environment variable `SPATE_DEBUG_PANIC_PATH` set, a request for exactly that
/// path panics inside its connection's handling, so the integration tests can show the
/// containment.
pub(super) fn on_path(path: &[u8]) {
    static PATH: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    let armed = PATH.get_or_init(|| {
        std::env::var_os("SPATE_DEBUG_PANIC_PATH").map(|v| {
            use std::os::unix::ffi::OsStrExt;
            v.as_bytes().to_vec()
        })
    });
    if armed.as_deref() == Some(path) {
        panic!("SPATE_DEBUG_PANIC_PATH requested");
    }
}
