//! Interned-name lookups of one rank group (see [`NameTable`]).

use std::collections::HashMap;

use crate::store::rows::Text;

/// The interned names of one rank group, looked up once per event: a table
/// indexed by id when the ids are small (ranks number their names from 1),
/// a hash map for the others. Either way an unknown id is `None`.
pub(super) struct NameTable<T> {
    dense: Vec<Option<T>>,
    sparse: HashMap<u32, T>,
}

impl<T> NameTable<T> {
    pub(super) fn new(names: impl ExactSizeIterator<Item = (u32, T)>) -> Self {
        let limit = names.len().saturating_mul(4).saturating_add(64);
        let mut table = NameTable {
            dense: Vec::new(),
            sparse: HashMap::new(),
        };
        for (id, value) in names {
            let i = id as usize;
            if i < limit {
                if table.dense.len() <= i {
                    table.dense.resize_with(i + 1, || None);
                }
                table.dense[i] = Some(value);
            } else {
                table.sparse.insert(id, value);
            }
        }
        table
    }

    pub(super) fn get(&self, id: u32) -> Option<&T> {
        match self.dense.get(id as usize) {
            Some(Some(v)) => Some(v),
            _ => self.sparse.get(&id),
        }
    }
}

/// Strings a thread interned: each distinct string once, as a shared
/// [`Text`], and the bytes they hold.
#[derive(Default)]
struct Interned {
    set: foldhash::HashSet<Text>,
    bytes: usize,
}

/// Interned strings per thread at most, and their bytes: then the thread
/// starts over (a string that comes again is allocated again once).
const INTERN_MAX_STRINGS: usize = 1 << 16;
const INTERN_MAX_BYTES: usize = 16 << 20;

thread_local! {
    static INTERNED: std::cell::RefCell<Interned> = std::cell::RefCell::default();
}

/// `s` as a shared [`Text`]: the copy this thread made before when there is
/// one. Every batch names its ranks' job, node and agent and every name its
/// events use (at 16,384 ranks, ~650,000 names per step, nearly all the
/// same few hundred); a copy per batch was an allocation and a free for each.
/// Memory: at most [`INTERN_MAX_STRINGS`] strings of [`INTERN_MAX_BYTES`]
/// per thread (the runtime's workers).
pub(super) fn intern(s: &str) -> Text {
    INTERNED.with_borrow_mut(|i| {
        if let Some(t) = i.set.get(s) {
            return t.clone();
        }
        let t = Text::from(s);
        if s.len() > INTERN_MAX_BYTES {
            // Never kept: it would only empty the table.
            return t;
        }
        if i.set.len() >= INTERN_MAX_STRINGS || i.bytes + s.len() > INTERN_MAX_BYTES {
            *i = Interned::default();
        }
        i.bytes += s.len();
        i.set.insert(t.clone());
        t
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_interned_again_is_the_same_copy_and_the_table_is_bounded() {
        let a = intern("ncclDevKernel_AllGather_RING_LL");
        let b = intern(&String::from("ncclDevKernel_AllGather_RING_LL"));
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, "ncclDevKernel_AllGather_RING_LL");
        let c = intern("ncclDevKernel_ReduceScatter_RING_LL");
        assert!(!std::sync::Arc::ptr_eq(&a, &c));
        assert_eq!(&*intern(""), "");
        // Past the bound the thread starts over: still the right strings,
        // never more than the bound held.
        for i in 0..INTERN_MAX_STRINGS + 10 {
            assert_eq!(&*intern(&format!("k{i}")), format!("k{i}"));
            INTERNED.with_borrow(|t| assert!(t.set.len() <= INTERN_MAX_STRINGS));
        }
        let huge = "x".repeat(INTERN_MAX_BYTES + 1);
        assert_eq!(intern(&huge).len(), huge.len());
        INTERNED.with_borrow(|t| assert!(t.bytes <= INTERN_MAX_BYTES));
    }
}
