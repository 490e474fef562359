//! Walks below a trie node, kept by what they read: the residue's memo (per guide) and the
//! store that every schema of a role shares (`SharedWalks`), which the residue and the walk
//! itself (at the frontier where a lexeme leaves the schema's names) read from.
//!
//! A walk below a node is a function of its key (`MaskKey`'s fields: the normalized scan part,
//! the part of the allowed set the walk can read, the root) for one scanner and trie, so a kept
//! one is the one that would be computed.

use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::FxHashMap;

use crate::walk::{
    walk, ScannerTable, Splice, Start, Tokens, TrieTable, Walk, WalkError, SPLICE_BELOW,
};

/// Bytes pending since a lexeme's last accept, as part of a memo's key.
#[derive(Clone, Debug, Eq)]
pub struct Tail(pub Vec<u8>);

impl PartialEq for Tail {
    fn eq(&self, other: &Self) -> bool {
        same_bytes(&self.0, &other.0)
    }
}

impl std::hash::Hash for Tail {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

/// `a == b`, without comparing two empty strings: `==` on byte slices calls `memcmp` even for
/// length 0, and glibc's AVX-512 `memcmp` then makes a masked load at the empty `Vec`'s
/// dangling address, a microcode assist each time — tails are often empty, and their
/// comparisons took over a quarter of the residue's time (bench/RESULTS.md, session 26).
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// What a walk below a node is keyed by (`MaskKey`: the normalized scan part, the allowed
/// set, the root).
pub type WalkKey = (i32, u32, i32, Tail, Vec<u64>, usize);

/// The key of the walk below `node` from `start` (normalized: its lexeme length 0 or 1, a tail
/// only after an accept) under `allowed`: keyed by the part of the allowed set the walk reads,
/// so stacks that differ elsewhere share the walk (exact: `ScannerTable::read_by_walk`).
pub fn walk_key(scanner: &ScannerTable, start: &Start, allowed: &[u64], node: usize) -> WalkKey {
    let mut v = scanner.read_by_walk(start.scan_state, start.accept_state);
    v.iter_mut().zip(allowed).for_each(|(r, w)| *r &= w);
    (
        start.scan_state,
        start.lexeme_length,
        start.accept_state,
        Tail(start.tail.to_vec()),
        v,
        node,
    )
}

/// Walks below nodes, by key: emptied when they reach `capacity` entries or `max_bytes` (a
/// walk's token ids or bits, CI nodes and CD classes), so memory stays bounded.
pub struct WalkStore {
    pub(crate) map: FxHashMap<WalkKey, Arc<Walk>>,
    pub(crate) capacity: usize,
    bytes: usize,
    pub(crate) max_bytes: usize,
    pub(crate) lookups: u64, // walks asked for since the store was made
    pub(crate) misses: u64,  // of those, walks computed
}

impl WalkStore {
    pub fn new(capacity: usize, max_bytes: usize) -> Self {
        Self {
            map: FxHashMap::default(),
            capacity,
            bytes: 0,
            max_bytes,
            lookups: 0,
            misses: 0,
        }
    }

    pub fn keep(&mut self, key: WalkKey, walk: Arc<Walk>) {
        let tokens = match &walk.tokens {
            Tokens::Sparse(ids) => ids.len() * 4,
            Tokens::Dense(bits) => bits.len(),
        };
        let classes: usize = walk.cd_classes.iter().map(|cd| 24 + cd.tail.len()).sum();
        let size = tokens + walk.ci_nodes.len() * 4 + classes;
        if self.map.len() >= self.capacity || self.bytes + size > self.max_bytes {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += size;
        self.map.insert(key, walk);
    }
}

/// Walks below nodes that start in a state of a *base* scanner (the regex terminals a scanner
/// with names extends: `_with_names`), shared by every scanner built on it — every schema of a
/// dialect and role. A product's base states keep the base's numbers, rows and terminal sets,
/// and a walk never crosses a lexeme boundary, so a walk from a base state (with its last
/// accept, if any, at a base state) reads no name: it is the same walk in each of them. The
/// caller shares one only between scanners whose base states read alike (the same base, the
/// same terminal sets per state) over one trie.
pub struct SharedWalks {
    base_states: i32,
    store: Mutex<WalkStore>,
}

impl SharedWalks {
    pub fn new(base_states: i32, capacity: usize, max_bytes: usize) -> Self {
        Self {
            base_states,
            store: Mutex::new(WalkStore::new(capacity, max_bytes)),
        }
    }

    /// Whether the walk from `start` reads no name (its state and last accept are the base's).
    pub fn holds(&self, start: &Start) -> bool {
        start.scan_state < self.base_states && start.accept_state < self.base_states
    }

    // a poisoned store (a panic elsewhere) is only a cache: start it over
    pub(crate) fn store(&self) -> MutexGuard<'_, WalkStore> {
        self.store.lock().unwrap_or_else(|poisoned| {
            let mut store = poisoned.into_inner();
            *store = WalkStore::new(store.capacity, store.max_bytes);
            store
        })
    }

    /// The walk below `node` from `start` (which `holds`) under `allowed`: kept, or computed
    /// (outside the lock) and kept; and whether it was computed.
    pub fn walk_below(
        &self,
        scanner: &ScannerTable,
        trie: &TrieTable,
        start: &Start,
        allowed: &[u64],
        node: usize,
        vocab_size: usize,
    ) -> Result<(Arc<Walk>, bool), WalkError> {
        let key = walk_key(scanner, start, allowed, node);
        {
            let mut store = self.store();
            store.lookups += 1;
            if let Some(found) = store.map.get(&key) {
                return Ok((found.clone(), false));
            }
        }
        let made = Arc::new(walk(scanner, trie, start, &key.4, node, vocab_size, None)?);
        let mut store = self.store();
        store.misses += 1;
        store.keep(key, made.clone());
        Ok((made, true))
    }

    /// What a walk from a state with names takes from this store: the walks below the nodes
    /// where its lexeme leaves them (`walk::Splice`).
    pub fn splice<'a>(
        &'a self,
        scanner: &'a ScannerTable,
        trie: &'a TrieTable,
        vocab_size: usize,
    ) -> Splice<'a> {
        Splice {
            base_states: self.base_states,
            min_size: SPLICE_BELOW,
            below: Box::new(move |start, allowed, node| {
                self.walk_below(scanner, trie, start, allowed, node, vocab_size)
                    .map(|(walked, _)| walked)
            }),
        }
    }

    /// (walks asked for, walks computed) through this store, by every walk and memo sharing it.
    pub fn counts(&self) -> (u64, u64) {
        let store = self.store();
        (store.lookups, store.misses)
    }

    pub fn len(&self) -> usize {
        self.store().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::{ScanTable, ALPHABET};
    use std::collections::HashMap;

    /// Terminals A (bit 0: `b…`, `ab…`, `aa` then more), a name `ab` (bit 1) and B (bit 2:
    /// `aac`): states 0 (in A, accepting), 1 (after `aa`, nothing accepted yet) and 2 (B
    /// accepted) are the base's; 3 is the start, 4 after `a` and 5 after `ab` (the name
    /// accepted) still read the name.
    fn scanner() -> ScannerTable {
        let mut trans = vec![-1; 6 * ALPHABET];
        let mut go = |from: usize, byte: u8, to: i32| trans[from * ALPHABET + byte as usize] = to;
        for state in [0, 1, 5] {
            go(state, b'a', 0);
            go(state, b'b', 0);
        }
        go(1, b'c', 2);
        go(3, b'a', 4);
        go(3, b'b', 0);
        go(4, b'a', 1);
        go(4, b'b', 5);
        let live = vec![0b001, 0b101, 0b100, 0b111, 0b111, 0b011];
        let top = vec![0b001, 0, 0b100, 0, 0, 0b010];
        let scan = ScanTable::new(trans, &[1, 0, 1, 0, 0, 1]).unwrap();
        ScannerTable::new(&scan, 1, live, top).unwrap()
    }

    /// Every string over `a`, `b`, `c` of up to three bytes, one token each.
    fn trie() -> TrieTable {
        fn add(depth: i32, t: &mut (Vec<i32>, Vec<i32>, Vec<i32>, Vec<i32>)) {
            for byte in [b'a', b'b', b'c'] {
                let at = t.0.len();
                t.0.push(byte as i32);
                t.1.push(depth);
                t.2.push(0);
                t.3.push(at as i32 - 1);
                if depth < 3 {
                    add(depth + 1, t);
                }
                t.2[at] = (t.0.len() - at) as i32;
            }
        }
        let mut t = (vec![-1], vec![0], vec![0], vec![-1]);
        add(1, &mut t);
        t.2[0] = t.0.len() as i32;
        TrieTable::new(t.0, t.1, t.2, t.3, HashMap::new()).unwrap()
    }

    #[test]
    fn a_walk_that_takes_the_walks_below_the_names_frontier_is_the_same_walk() {
        let (scanner, trie) = (scanner(), trie());
        let shared = SharedWalks::new(3, 64, 1 << 20);
        let mut splice = shared.splice(&scanner, &trie, 64);
        splice.min_size = 0;
        for (length, accept, tail) in [(0, -1, &b""[..]), (1, 5, &b"x"[..]), (1, -1, &b""[..])] {
            let start = Start {
                scan_state: 3,
                lexeme_length: length,
                accept_state: accept,
                tail,
            };
            let plain = walk(&scanner, &trie, &start, &[0b011], 0, 64, None).unwrap();
            let spliced = walk(&scanner, &trie, &start, &[0b011], 0, 64, Some(&splice)).unwrap();
            assert_eq!(plain, spliced);
            // `aac` (node 5, below the frontier `aa`): B is not allowed, so a class whose tail
            // runs from the start's last accept, or from the start where there is none
            let aac = plain.cd_classes.iter().find(|c| c.node == 5).unwrap();
            assert_eq!((aac.accept_state, aac.lexeme_length), (accept, length + 2));
            assert_eq!(aac.tail, [tail, b"aa"].concat());
        }
        // below `b`, `aa` and `aba`…: computed once, then found
        let (asked, computed) = shared.counts();
        assert!(asked > computed && computed > 0, "{asked} {computed}");
    }

    #[test]
    fn only_walks_from_base_states_are_shared() {
        let shared = SharedWalks::new(3, 4, 1 << 10);
        let start = |scan_state, accept_state| Start {
            scan_state,
            lexeme_length: 1,
            accept_state,
            tail: b"",
        };
        assert!(shared.holds(&start(2, -1)) && shared.holds(&start(0, 2)));
        // a state with names, or a last accept at one (its accepted set names a lexicon)
        assert!(!shared.holds(&start(3, -1)) && !shared.holds(&start(1, 3)));
        assert!(shared.is_empty() && shared.counts() == (0, 0));
    }

    #[test]
    fn tails_compare_by_their_bytes() {
        use std::hash::BuildHasher;
        assert!(same_bytes(b"", b"") && same_bytes(b"ab", b"ab"));
        assert!(!same_bytes(b"", b"a") && !same_bytes(b"ab", b"ba") && !same_bytes(b"a", b""));
        let hash = |t: &Tail| rustc_hash::FxBuildHasher.hash_one(t);
        let (empty, also) = (Tail(Vec::new()), Tail(Vec::with_capacity(8)));
        assert!(empty == also && hash(&empty) == hash(&also));
        assert!(Tail(b"x".to_vec()) != empty);
    }
}
