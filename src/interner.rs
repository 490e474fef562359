//! One arena of interned `u32` slices: the trie classes, position sets and product states of
//! `names`, the subset states and partition signatures of `union`.

use rustc_hash::FxHashMap as HashMap;

const NONE: u32 = u32::MAX;

/// Distinct `u32` slices numbered from 0 in the order first seen, stored end to end in one
/// arena (no allocation per slice). Slices with one hash are chained through `next`.
#[derive(Debug, Default)]
pub struct SliceInterner {
    heads: HashMap<u64, u32>,
    next: Vec<u32>,
    offsets: Vec<u32>,
    arena: Vec<u32>,
}

impl SliceInterner {
    /// An interner with room for `slices` slices of `width` values each before it grows.
    pub fn with_capacity(slices: usize, width: usize) -> Self {
        Self {
            heads: HashMap::with_capacity_and_hasher(slices, Default::default()),
            next: Vec::with_capacity(slices),
            offsets: Vec::with_capacity(slices),
            arena: Vec::with_capacity(slices * width),
        }
    }

    /// The slice's id, and whether it is new.
    pub fn id(&mut self, slice: &[u32]) -> (u32, bool) {
        let mut hasher = rustc_hash::FxHasher::default();
        std::hash::Hash::hash_slice(slice, &mut hasher);
        let hash = std::hash::Hasher::finish(&hasher);
        let head = self.heads.get(&hash).copied().unwrap_or(NONE);
        let mut id = head;
        while id != NONE {
            if self.get(id) == slice {
                return (id, false);
            }
            id = self.next[id as usize];
        }
        let id = self.next.len() as u32;
        self.offsets.push(self.arena.len() as u32);
        self.arena.extend_from_slice(slice);
        self.next.push(head);
        self.heads.insert(hash, id);
        (id, true)
    }

    pub fn get(&self, id: u32) -> &[u32] {
        let start = self.offsets[id as usize] as usize;
        let end = self
            .offsets
            .get(id as usize + 1)
            .map_or(self.arena.len(), |&e| e as usize);
        &self.arena[start..end]
    }

    pub fn len(&self) -> usize {
        self.next.len()
    }

    pub fn is_empty(&self) -> bool {
        self.next.is_empty()
    }
}
