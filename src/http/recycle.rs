//! Per-thread free lists for the vectors every request and response carries (a request's
//! header field ranges, a response's header fields): once a worker is warm, the fast paths
//! allocate nothing for them. A malloc and free of such a list cost about a tenth of a small
//! request's instructions, more when a batch of responses overflows the allocator's cache.
//!
//! Bounded: at most [`LISTS_MAX`] lists of at most [`LIST_CAPACITY_MAX`] entries each per
//! thread and kind, so a burst of large requests leaves no memory behind.

use bytes::Bytes;
use std::cell::RefCell;
use std::ops::Range;
use std::thread::LocalKey;

/// Lists kept per thread and kind.
pub const LISTS_MAX: usize = 64;
/// The largest list kept (entries); larger ones are freed.
pub const LIST_CAPACITY_MAX: usize = 64;
/// A fresh list's room, so it is worth keeping when it comes back.
const FRESH_CAPACITY: usize = 8;

/// A request's header fields: (name, value) ranges into its head.
pub type FieldList = Vec<(Range<usize>, Range<usize>)>;
/// A response's header fields.
pub type HeaderList = Vec<(Bytes, Bytes)>;

type FreeLists<T> = RefCell<Vec<Vec<T>>>;

thread_local! {
    static FIELD_LISTS: FreeLists<(Range<usize>, Range<usize>)> = const { RefCell::new(Vec::new()) };
    static HEADER_LISTS: FreeLists<(Bytes, Bytes)> = const { RefCell::new(Vec::new()) };
}

/// An empty field list with room for `n` fields.
pub fn field_list(n: usize) -> FieldList {
    take(&FIELD_LISTS, n)
}

/// Keeps a request's field list for the next request.
pub fn give_field_list(list: FieldList) {
    give(&FIELD_LISTS, list);
}

/// An empty header list with room for `n` fields.
pub fn header_list(n: usize) -> HeaderList {
    take(&HEADER_LISTS, n)
}

/// Keeps a response's header list, once written, for the next response (a list shared with
/// other responses is only let go).
pub fn give_header_list(list: impl OwnHeaderList) {
    if let Some(list) = list.into_own() {
        give(&HEADER_LISTS, list);
    }
}

/// A header list that may be given back: a list, or a response's fields (which are the
/// response's own to give only when not shared with other responses).
pub trait OwnHeaderList {
    /// The list, when it is this value's own.
    fn into_own(self) -> Option<HeaderList>;
}

impl OwnHeaderList for HeaderList {
    #[inline]
    fn into_own(self) -> Option<HeaderList> {
        Some(self)
    }
}

fn take<T: 'static>(free: &'static LocalKey<FreeLists<T>>, n: usize) -> Vec<T> {
    let list = free.try_with(|f| f.borrow_mut().pop()).ok().flatten();
    match list {
        Some(mut l) => {
            l.reserve(n);
            l
        }
        None if n > 0 => Vec::with_capacity(n.max(FRESH_CAPACITY)),
        None => Vec::new(),
    }
}

fn give<T: 'static>(free: &'static LocalKey<FreeLists<T>>, mut list: Vec<T>) {
    if list.capacity() == 0 || list.capacity() > LIST_CAPACITY_MAX {
        return;
    }
    list.clear();
    // `try_with`: a list dropped while the thread exits is freed as usual.
    let _ = free.try_with(|f| {
        let mut f = f.borrow_mut();
        if f.len() < LISTS_MAX {
            f.push(list);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_come_back_empty_and_reused() {
        let mut l = header_list(3);
        l.push((Bytes::from_static(b"a"), Bytes::from_static(b"b")));
        let ptr = l.as_ptr();
        give_header_list(l);
        let again = header_list(1);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), ptr);
    }

    #[test]
    fn large_lists_are_not_kept() {
        // By capacity, not address: the allocator may hand the freed block out again.
        give_field_list(Vec::with_capacity(LIST_CAPACITY_MAX + 1));
        assert!(FIELD_LISTS.with(|f| f.borrow().is_empty()));
        assert!(field_list(1).capacity() <= LIST_CAPACITY_MAX);
    }

    #[test]
    fn the_pool_is_bounded() {
        for _ in 0..LISTS_MAX + 10 {
            give_field_list(Vec::with_capacity(4));
        }
        assert_eq!(FIELD_LISTS.with(|f| f.borrow().len()), LISTS_MAX);
    }
}
