//! The last response field section an encoder made, whole: proxied responses of one
//! backend, and files of one kind, repeat their status and fields (the backend's `date`
//! changes once a second), so a section equal to the last one is copied in one piece instead
//! of being filtered and encoded field by field. Our sections use the static table only, so a
//! section depends on nothing but its status and fields: the connections that share an
//! [`super::Encoder`] share it. Bounded: one section of at most [`MAX_KEY`] bytes, never one
//! with a sensitive field. A kept section never expires: its key holds every field, the Date
//! among them, so a new second is a miss; it depends on no time or file, unlike a kept answer
//! (`http::repeat`).

use bytes::BufMut;

/// Status and field bytes (with their lengths) of the largest section kept.
const MAX_KEY: usize = 2048;

/// The last section kept, and what it was made from.
#[derive(Debug, Default)]
pub(crate) struct SectionMemo {
    /// The status (2 bytes), then each field's name and value, each after its length (4
    /// bytes, little-endian).
    key: Vec<u8>,
    /// The encoded section (prefix, status and field lines); empty when none is kept.
    section: Vec<u8>,
}

impl SectionMemo {
    /// Appends the kept section if it was made from `status` and `fields`; true if it did.
    #[inline]
    pub(crate) fn get<'a>(
        &self,
        status: u16,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut impl BufMut,
    ) -> bool {
        if self.section.is_empty() || !same(&self.key, status, fields) {
            return false;
        }
        out.put_slice(&self.section);
        true
    }

    /// Keeps `section` as the encoding of `status` and `fields`, in place of the last one.
    pub(crate) fn put<'a>(
        &mut self,
        status: u16,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        section: &[u8],
    ) {
        self.key.clear();
        self.section.clear();
        self.key.extend_from_slice(&status.to_be_bytes());
        for (name, value) in fields {
            if super::sensitive::any_case(name)
                || self.key.len() + name.len() + value.len() + 8 > MAX_KEY
            {
                self.key.clear();
                return;
            }
            for part in [name, value] {
                self.key
                    .extend_from_slice(&(part.len() as u32).to_le_bytes());
                self.key.extend_from_slice(part);
            }
        }
        self.section.extend_from_slice(section);
    }
}

fn same<'a>(key: &[u8], status: u16, fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> bool {
    let Some(mut rest) = key.strip_prefix(&status.to_be_bytes()[..]) else {
        return false;
    };
    for (name, value) in fields {
        for part in [name, value] {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                return false;
            };
            if u32::from_le_bytes(*len) as usize != part.len() {
                return false;
            }
            let Some((kept, tail)) = tail.split_at_checked(part.len()) else {
                return false;
            };
            if kept != part {
                return false;
            }
            rest = tail;
        }
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn got(memo: &SectionMemo, status: u16, fields: &[(&[u8], &[u8])]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        memo.get(status, fields.iter().copied(), &mut out)
            .then_some(out)
    }

    #[test]
    fn the_section_comes_back_for_the_same_status_and_fields_only() {
        let mut memo = SectionMemo::default();
        let fields: &[(&[u8], &[u8])] = &[(b"server", b"x"), (b"etag", b"\"1\"")];
        memo.put(200, fields.iter().copied(), b"section");
        assert_eq!(got(&memo, 200, fields).as_deref(), Some(&b"section"[..]));
        assert_eq!(got(&memo, 404, fields), None);
        assert_eq!(got(&memo, 200, &fields[..1]), None);
        assert_eq!(
            got(&memo, 200, &[(b"server", b"x"), (b"etag", b"\"2\"")]),
            None
        );
        // The same bytes split elsewhere between name and value.
        assert_eq!(
            got(&memo, 200, &[(b"serverx", b""), (b"etag", b"\"1\"")]),
            None
        );
        let more: &[(&[u8], &[u8])] = &[(b"server", b"x"), (b"etag", b"\"1\""), (b"a", b"b")];
        assert_eq!(got(&memo, 200, more), None);
    }

    #[test]
    fn sensitive_or_long_sections_are_not_kept() {
        let mut memo = SectionMemo::default();
        memo.put(200, [(&b"set-cookie"[..], &b"a=b"[..])].into_iter(), b"s1");
        assert_eq!(got(&memo, 200, &[(b"set-cookie", b"a=b")]), None);
        let long = vec![b'v'; MAX_KEY];
        memo.put(200, [(&b"x"[..], &long[..])].into_iter(), b"s2");
        assert_eq!(got(&memo, 200, &[(b"x", &long)]), None);
    }
}
