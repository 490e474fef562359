//! One arena of interned `u32` slices: the trie classes, position sets and product states of
//! `names`, the subset states and partition signatures of `union`.

use hashbrown::HashTable;

/// Distinct `u32` slices numbered from 0 in the order first seen, stored end to end in one
/// arena (no allocation per slice). The table holds ids only: a lookup hashes the slice once
/// and compares it with the arena's slices of that hash.
#[derive(Debug, Default)]
pub struct SliceInterner {
    /// Ids, placed by their slice's hash.
    ids: HashTable<u32>,
    /// Per id its slice's hash (to place it again when the table grows).
    hashes: Vec<u64>,
    offsets: Vec<u32>,
    arena: Vec<u32>,
}

impl SliceInterner {
    /// An interner with room for `slices` slices of `width` values each before it grows.
    pub fn with_capacity(slices: usize, width: usize) -> Self {
        Self {
            ids: HashTable::with_capacity(slices),
            hashes: Vec::with_capacity(slices),
            offsets: Vec::with_capacity(slices),
            arena: Vec::with_capacity(slices * width),
        }
    }

    /// The slice's id, and whether it is new.
    pub fn id(&mut self, slice: &[u32]) -> (u32, bool) {
        let mut hasher = rustc_hash::FxHasher::default();
        std::hash::Hash::hash_slice(slice, &mut hasher);
        let hash = std::hash::Hasher::finish(&hasher);
        let (offsets, arena) = (&self.offsets, &self.arena);
        let found = self
            .ids
            .find(hash, |&id| same_words(slice_at(offsets, arena, id), slice));
        if let Some(&id) = found {
            return (id, false);
        }
        let id = self.hashes.len() as u32;
        self.offsets.push(self.arena.len() as u32);
        self.arena.extend_from_slice(slice);
        self.hashes.push(hash);
        let hashes = &self.hashes;
        self.ids.insert_unique(hash, id, |&id| hashes[id as usize]);
        (id, true)
    }

    pub fn get(&self, id: u32) -> &[u32] {
        slice_at(&self.offsets, &self.arena, id)
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

/// Slice `id` of an arena whose slice `i` starts at `offsets[i]` (the last runs to its end).
fn slice_at<'a>(offsets: &[u32], arena: &'a [u32], id: u32) -> &'a [u32] {
    let start = offsets[id as usize] as usize;
    let end = offsets
        .get(id as usize + 1)
        .map_or(arena.len(), |&e| e as usize);
    &arena[start..end]
}

/// `a == b` for the short slices interned here (a few words): a loop, where `==` on slices
/// calls `memcmp`, whose call costs more than such a comparison.
fn same_words(a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_numbered_in_the_order_first_seen_across_growth() {
        let mut interner = SliceInterner::with_capacity(2, 2);
        assert_eq!(interner.id(&[]), (0, true));
        // many more slices than the capacity: the table grows and finds each again
        let slices: Vec<Vec<u32>> = (0..5000u32).map(|i| vec![i % 7, i, i / 3]).collect();
        for (i, slice) in slices.iter().enumerate() {
            assert_eq!(interner.id(slice), (i as u32 + 1, true));
        }
        for (i, slice) in slices.iter().enumerate() {
            assert_eq!(interner.id(slice), (i as u32 + 1, false));
            assert_eq!(interner.get(i as u32 + 1), slice.as_slice());
        }
        assert_eq!(interner.id(&[]), (0, false));
        assert_eq!(interner.id(&[0, 0]), (5001, true)); // a prefix of [0, 0, 0]: its own id
        assert_eq!(interner.len(), 5002);
    }
}
