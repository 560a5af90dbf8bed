//! Interned-name lookups of one rank group (see [`NameTable`]).

use std::collections::HashMap;

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
