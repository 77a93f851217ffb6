//! The fields that stay out of every table and memo, and that the encoder marks for
//! intermediaries to keep out of theirs (the N bit): credentials and cookies.

/// Whether a field of this name (in any case) must stay out of every table and memo.
pub(super) fn any_case(name: &[u8]) -> bool {
    [
        &b"authorization"[..],
        b"proxy-authorization",
        b"set-cookie",
        b"cookie",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// Fields an intermediary must not put in a compression table (RFC 9204 section 7.1.3):
/// [`any_case`] for a lowercase `name`.
pub(super) fn lowercase(name: &[u8]) -> bool {
    matches!(
        name,
        b"authorization" | b"proxy-authorization" | b"set-cookie" | b"cookie"
    )
}
