//! Name interning for the output stream.
//!
//! In: names (kernel, span, process group) as events are buffered. Out:
//! the wire ids events carry, and per chunk the definitions of every id the
//! chunk references.
//!
//! Two levels: [`Interner`] gives each distinct name a provisional id while
//! the ordering passes buffer events; [`Published`] maps it to the wire id
//! when the event is emitted, in order of first use in the output. So the
//! ids (and the whole output) do not depend on how many ordering passes
//! were needed. Invariants: wire ids start at 1 and are never redefined;
//! every chunk lists every id its events reference (a chunk is a
//! self-contained `RankEvents` group, as the collector validates each batch
//! on its own); names are never empty.

use rankscope_proto::v1 as proto;

/// Distinct names, provisional ids from 1.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    ids: foldhash::HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
}

/// What an empty kernel name is imported as (the wire protocol requires a
/// non-empty name).
pub(crate) const UNNAMED: &str = "(unnamed)";

impl Interner {
    /// The provisional id of `name` (empty names read as [`UNNAMED`]).
    pub(crate) fn intern(&mut self, name: &str) -> u32 {
        let name = if name.is_empty() { UNNAMED } else { name };
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        self.names.push(name.into());
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.ids.insert(name.into(), id);
        id
    }

    pub(crate) fn name(&self, id: u32) -> &str {
        id.checked_sub(1)
            .and_then(|i| self.names.get(i as usize))
            .map_or(UNNAMED, |n| n)
    }
}

/// Wire ids and the names referenced by the chunk being built.
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// Wire id by provisional id - 1 (0 = not yet published).
    wire_of: Vec<u32>,
    next_wire: u32,
    /// Wire id -> (provisional id, chunk stamp of last reference).
    by_wire: Vec<(u32, u64)>,
    /// Wire ids referenced by the current chunk, in first-use order.
    used: Vec<u32>,
    stamp: u64,
}

impl Published {
    pub(crate) fn new() -> Self {
        Self {
            stamp: 1,
            next_wire: 1,
            ..Self::default()
        }
    }

    /// The wire id of provisional id `prov` (0 stays 0), recorded as used
    /// by the current chunk.
    pub(crate) fn use_name(&mut self, prov: u32) -> u32 {
        let Some(i) = prov.checked_sub(1).map(|i| i as usize) else {
            return 0;
        };
        if self.wire_of.len() <= i {
            self.wire_of.resize(i + 1, 0);
        }
        if self.wire_of[i] == 0 {
            self.wire_of[i] = self.next_wire;
            self.by_wire.push((prov, 0));
            self.next_wire += 1;
        }
        let wire = self.wire_of[i];
        let slot = &mut self.by_wire[(wire - 1) as usize];
        if slot.1 != self.stamp {
            slot.1 = self.stamp;
            self.used.push(wire);
        }
        wire
    }

    /// Definitions of the names the current chunk used; starts a new chunk.
    pub(crate) fn take_chunk_names(&mut self, interner: &Interner) -> Vec<proto::InternedName> {
        let mut used = std::mem::take(&mut self.used);
        used.sort_unstable();
        self.stamp += 1;
        used.into_iter()
            .map(|wire| proto::InternedName {
                id: wire,
                name: interner
                    .name(self.by_wire[(wire - 1) as usize].0)
                    .to_owned(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_ids_follow_first_use_and_chunks_list_their_names() {
        let mut i = Interner::default();
        let a = i.intern("a");
        let b = i.intern("b");
        assert_eq!(i.intern("a"), a);
        assert_eq!(i.intern(""), i.intern(UNNAMED));
        let mut p = Published::new();
        assert_eq!(p.use_name(b), 1); // b is used first: wire 1
        assert_eq!(p.use_name(0), 0);
        assert_eq!(p.use_name(b), 1);
        let names = p.take_chunk_names(&i);
        assert_eq!(
            names,
            vec![proto::InternedName {
                id: 1,
                name: "b".into()
            }]
        );
        assert_eq!(p.use_name(a), 2);
        assert_eq!(p.use_name(b), 1); // re-listed in the new chunk
        let names: Vec<_> = p
            .take_chunk_names(&i)
            .into_iter()
            .map(|n| (n.id, n.name))
            .collect();
        assert_eq!(names, vec![(1, "b".to_owned()), (2, "a".to_owned())]);
        assert!(p.take_chunk_names(&i).is_empty());
    }
}
