//! Terminals spelled from a finite set of names (the schema lexicons) added to a scanner.
//!
//! Mirrors `NameAutomaton` in python/gridrail/grammar/names.py and `_name_rows` in
//! python/gridrail/grammar/scanner.py, which are the reference: the same positions, numbered
//! the same way, so the product's state ids and the witness of `NameAutomaton::outside` are
//! bit for bit those of the Python path (tests/test_names.py binds them).

use std::collections::hash_map::Entry;
use std::fmt;

use rustc_hash::FxHashMap as HashMap;

use crate::dfa::Dfa;
use crate::scan::{ALPHABET, DEAD};

/// Why a name automaton or a product was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamesError {
    /// The scanner table's length is not `num_states * 256`, or an entry is not -1 or a state.
    BadTable,
    /// More name slots than a 64-bit mask holds.
    TooManySlots { slots: usize },
    /// The product needs more new states than the bound.
    TooManyStates { bound: usize },
}

impl fmt::Display for NamesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadTable => write!(f, "malformed scanner table"),
            Self::TooManySlots { slots } => {
                write!(f, "{slots} terminals spelled from names; at most 64")
            }
            Self::TooManyStates { bound } => {
                write!(f, "the names need more than {bound} scanner states")
            }
        }
    }
}

impl std::error::Error for NamesError {}

/// The spellings of one name set and its suffix as positions of a small NFA (Python's
/// `NameAutomaton`): trie nodes with equal endings merged, then the suffix DFA's states.
/// A position's closure adds the suffix's start after a whole spelling.
#[derive(Debug, Clone)]
pub struct NameAutomaton {
    /// Per position its byte moves, in the order the Python reference iterates them.
    moves: Vec<Vec<(u8, u32)>>,
    closure: Vec<Vec<u32>>,
    accepting: Vec<bool>,
    /// Sorted.
    start: Vec<u32>,
}

impl NameAutomaton {
    /// `exact` spellings byte for byte, `folded` ones (lower-case) with ASCII case ignored,
    /// each list sorted and distinct (as `NameSet` stores them), then `suffix` (None: none).
    pub fn new(exact: &[&[u8]], folded: &[&[u8]], suffix: Option<&Dfa>) -> Self {
        let mut moves: Vec<Vec<(u8, u32)>> = Vec::new();
        let mut ends: Vec<bool> = Vec::new();
        let mut roots: Vec<u32> = Vec::new();
        for (spellings, fold) in [(exact, false), (folded, true)] {
            if spellings.is_empty() {
                continue;
            }
            let root = moves.len();
            roots.push(root as u32);
            moves.push(Vec::new());
            ends.push(false);
            for spelling in spellings {
                let mut node = root;
                for &byte in *spelling {
                    let child = match moves[node].iter().find(|&&(b, _)| b == byte) {
                        Some(&(_, child)) => child as usize,
                        None => {
                            let child = moves.len();
                            moves.push(Vec::new());
                            ends.push(false);
                            moves[node].push((byte, child as u32));
                            if fold && byte.is_ascii_lowercase() {
                                moves[node].push((byte - 0x20, child as u32));
                            }
                            child
                        }
                    };
                    node = child;
                }
                ends[node] = true;
            }
        }
        let (mut moves, ends, roots) = merged(moves, ends, roots);
        let trie_size = moves.len();
        let mut accepting = vec![false; trie_size];
        let mut closure: Vec<Vec<u32>> = (0..trie_size as u32).map(|p| vec![p]).collect();
        match suffix {
            None => accepting = ends,
            Some(dfa) if dfa.start >= 0 => {
                for q in 0..dfa.accepting.len() {
                    let row = &dfa.transitions[q * ALPHABET..(q + 1) * ALPHABET];
                    moves.push(
                        (0..=255u8)
                            .filter_map(|b| {
                                let t = row[b as usize];
                                (t >= 0).then(|| (b, (trie_size + t as usize) as u32))
                            })
                            .collect(),
                    );
                    accepting.push(dfa.accepting[q]);
                    closure.push(vec![(trie_size + q) as u32]);
                }
                let begin = (trie_size + dfa.start as usize) as u32;
                for (p, &end) in ends.iter().enumerate() {
                    if end {
                        closure[p] = vec![p as u32, begin];
                    }
                }
            }
            Some(_) => {} // an empty suffix language: no spelling is accepted
        }
        let mut start: Vec<u32> = roots
            .iter()
            .flat_map(|&r| closure[r as usize].iter().copied())
            .collect();
        start.sort_unstable();
        start.dedup();
        Self {
            moves,
            closure,
            accepting,
            start,
        }
    }

    /// Positions in all.
    pub fn len(&self) -> usize {
        self.moves.len()
    }

    pub fn is_empty(&self) -> bool {
        self.moves.is_empty()
    }

    fn accepts(&self, positions: &[u32]) -> bool {
        positions.iter().any(|&p| self.accepting[p as usize])
    }

    /// Per byte that moves some position, the positions after it (sorted), in byte order.
    fn successors(&self, positions: &[u32]) -> Vec<(u8, Vec<u32>)> {
        let mut after: Vec<Vec<u32>> = vec![Vec::new(); ALPHABET];
        let mut touched = [false; ALPHABET];
        for &p in positions {
            for &(byte, target) in &self.moves[p as usize] {
                touched[byte as usize] = true;
                after[byte as usize].extend_from_slice(&self.closure[target as usize]);
            }
        }
        (0..ALPHABET)
            .filter(|&b| touched[b])
            .map(|b| {
                let mut set = std::mem::take(&mut after[b]);
                set.sort_unstable();
                set.dedup();
                (b as u8, set)
            })
            .collect()
    }

    /// A shortest accepted string that `dfa` rejects (None: inclusion holds): breadth first
    /// over (position, DFA state) pairs from the sorted start positions, moves in the
    /// reference's order, so the witness is the reference's (`dfa.shortest_outside`).
    pub fn outside(&self, dfa: &Dfa) -> Option<Vec<u8>> {
        let mut seen: HashMap<(u32, i32), usize> = HashMap::default();
        // per visited pair: (position, DFA state, parent pair, byte from the parent)
        let mut visits: Vec<(u32, i32, usize, u8)> = Vec::new();
        for &p in &self.start {
            if let Entry::Vacant(slot) = seen.entry((p, dfa.start)) {
                slot.insert(visits.len());
                visits.push((p, dfa.start, usize::MAX, 0));
            }
        }
        let mut head = 0;
        while head < visits.len() {
            let (p, q, _, _) = visits[head];
            if self.accepting[p as usize] && !dfa.accepts(q) {
                let mut path = Vec::new();
                let mut at = head;
                while visits[at].2 != usize::MAX {
                    path.push(visits[at].3);
                    at = visits[at].2;
                }
                path.reverse();
                return Some(path);
            }
            for &(byte, target) in &self.moves[p as usize] {
                for &p2 in &self.closure[target as usize] {
                    let q2 = dfa.step(q, byte);
                    if let Entry::Vacant(slot) = seen.entry((p2, q2)) {
                        slot.insert(visits.len());
                        visits.push((p2, q2, head, byte));
                    }
                }
            }
            head += 1;
        }
        None
    }
}

/// A position's (byte, next position) moves.
type Moves = Vec<(u8, u32)>;

/// The trie with equivalent nodes merged (Python's `_merged`): the same end flag and the same
/// moves to merged nodes. Children are numbered after their parents, so one pass from the last
/// node up finds every class; classes are numbered in the order their first node appears.
fn merged(
    moves: Vec<Moves>,
    ends: Vec<bool>,
    roots: Vec<u32>,
) -> (Vec<Moves>, Vec<bool>, Vec<u32>) {
    let mut classes: HashMap<(bool, Vec<(u8, u32)>), u32> = HashMap::default();
    let mut class_of = vec![0u32; moves.len()];
    for node in (0..moves.len()).rev() {
        let signature: Vec<(u8, u32)> = moves[node]
            .iter()
            .map(|&(b, c)| (b, class_of[c as usize]))
            .collect();
        let next = classes.len() as u32;
        class_of[node] = *classes.entry((ends[node], signature)).or_insert(next);
    }
    let mut number = vec![u32::MAX; classes.len()];
    let mut first: Vec<usize> = Vec::new();
    for (node, &class) in class_of.iter().enumerate() {
        if number[class as usize] == u32::MAX {
            number[class as usize] = first.len() as u32;
            first.push(node);
        }
    }
    let renumber = |c: u32| number[class_of[c as usize] as usize];
    let new_moves = first
        .iter()
        .map(|&node| moves[node].iter().map(|&(b, c)| (b, renumber(c))).collect())
        .collect();
    let new_ends = first.iter().map(|&node| ends[node]).collect();
    let new_roots = roots.iter().map(|&r| renumber(r)).collect();
    (new_moves, new_ends, new_roots)
}

/// The states a product adds to its base scanner (Python's `_name_rows`), in id order from
/// `base_states` on: each one's 256 transitions, its base state (-1: none), and as slot bit
/// masks the name slots that accept there and those still live.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NameRows {
    pub transitions: Vec<i32>,
    pub base_of: Vec<i32>,
    pub accepted: Vec<u64>,
    pub alive: Vec<u64>,
}

/// The base scanner (flat table of `base_states` rows, start `base_start`) times the slots'
/// name automata: a state is (base state or -1, per slot a set of positions), numbered from
/// `base_states` breadth first from the start, successors in byte order; a row is the base
/// state's row with the bytes that move some position overridden. At most `bound` states.
pub fn name_rows(
    base: &[i32],
    base_start: i32,
    slots: &[NameAutomaton],
    bound: usize,
) -> Result<NameRows, NamesError> {
    let width = slots.len();
    if width > 64 {
        return Err(NamesError::TooManySlots { slots: width });
    }
    let base_states = base.len() / ALPHABET;
    let in_range = |q: i32| q == DEAD || (q >= 0 && (q as usize) < base_states);
    if !base.len().is_multiple_of(ALPHABET)
        || !in_range(base_start)
        || !base.iter().all(|&q| in_range(q))
    {
        return Err(NamesError::BadTable);
    }
    // Position sets are interned per slot (0: the empty set), their successors memoized. A
    // state's key is [base state as u32, one set id per slot].
    let mut sets: Vec<Interner> = slots.iter().map(|_| Interner::default()).collect();
    let mut successors: Vec<HashMap<u32, Vec<(u8, u32)>>> = vec![HashMap::default(); width];
    let mut start: Vec<u32> = vec![base_start as u32];
    for (automaton, interner) in slots.iter().zip(sets.iter_mut()) {
        start.push(interner.id(&automaton.start));
    }
    let start: Box<[u32]> = start.into();
    let mut keys: Vec<Box<[u32]>> = vec![start.clone()];
    let mut ids: HashMap<Box<[u32]>, u32> = HashMap::default();
    ids.insert(start, 0);
    let mut out = NameRows::default();
    // per byte: the key its move leads to (base part filled in last)
    let mut moved: Vec<u32> = vec![0; ALPHABET * (width + 1)];
    let mut touched: Vec<usize> = Vec::new();
    let mut head = 0;
    while head < keys.len() {
        if keys.len() > bound {
            return Err(NamesError::TooManyStates { bound });
        }
        let b = keys[head][0] as i32;
        let row_start = out.transitions.len();
        if b == DEAD {
            out.transitions.extend(std::iter::repeat_n(DEAD, ALPHABET));
        } else {
            let at = b as usize * ALPHABET;
            out.transitions.extend_from_slice(&base[at..at + ALPHABET]);
        }
        let (mut accepted, mut alive) = (0u64, 0u64);
        for k in 0..width {
            let set = keys[head][k + 1];
            if set == 0 {
                continue;
            }
            alive |= 1 << k;
            if slots[k].accepts(sets[k].get(set)) {
                accepted |= 1 << k;
            }
            let after = successors[k].entry(set).or_insert_with(|| {
                let found = slots[k].successors(sets[k].get(set));
                found
                    .into_iter()
                    .map(|(byte, after)| (byte, sets[k].id(&after)))
                    .collect()
            });
            for &(byte, next) in after.iter() {
                let byte = byte as usize;
                let key = &mut moved[byte * (width + 1)..(byte + 1) * (width + 1)];
                if key.iter().all(|&id| id == 0) {
                    touched.push(byte);
                }
                key[k + 1] = next;
            }
        }
        touched.sort_unstable();
        for &byte in &touched {
            let key = &mut moved[byte * (width + 1)..(byte + 1) * (width + 1)];
            key[0] = if b == DEAD {
                DEAD as u32
            } else {
                base[b as usize * ALPHABET + byte] as u32
            };
            let target = match ids.get(&*key) {
                Some(&id) => id,
                None => {
                    let id = keys.len() as u32;
                    let owned: Box<[u32]> = (&*key).into();
                    ids.insert(owned.clone(), id);
                    keys.push(owned);
                    id
                }
            };
            key.fill(0);
            out.transitions[row_start + byte] = (base_states as u32 + target) as i32;
        }
        touched.clear();
        out.base_of.push(b);
        out.accepted.push(accepted);
        out.alive.push(alive);
        head += 1;
    }
    Ok(out)
}

/// Distinct sorted position sets of one slot, numbered from 1 (0: the empty set).
#[derive(Debug, Default)]
struct Interner {
    ids: HashMap<Vec<u32>, u32>,
    sets: Vec<Vec<u32>>,
}

impl Interner {
    fn id(&mut self, set: &[u32]) -> u32 {
        if set.is_empty() {
            return 0;
        }
        if let Some(&id) = self.ids.get(set) {
            return id;
        }
        self.sets.push(set.to_vec());
        let id = self.sets.len() as u32;
        self.ids.insert(set.to_vec(), id);
        id
    }

    fn get(&self, id: u32) -> &[u32] {
        &self.sets[id as usize - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The DFA of one byte string (accepting at its end).
    fn literal(text: &[u8]) -> Dfa {
        let n = text.len() + 1;
        let mut transitions = vec![DEAD; n * ALPHABET];
        for (q, &b) in text.iter().enumerate() {
            transitions[q * ALPHABET + b as usize] = q as i32 + 1;
        }
        let mut accepting = vec![false; n];
        accepting[text.len()] = true;
        Dfa::new(0, transitions, accepting).unwrap()
    }

    /// A one-state scanner with no transitions (no regex terminal).
    fn empty_base() -> Vec<i32> {
        vec![DEAD; ALPHABET]
    }

    /// Every string the product accepts for slot `k`, by depth-first search (finite languages).
    fn accepted_strings(rows: &NameRows, base_states: usize, k: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut stack = vec![(base_states, Vec::new())];
        while let Some((state, path)) = stack.pop() {
            let i = state - base_states;
            if rows.accepted[i] >> k & 1 == 1 {
                out.push(path.clone());
            }
            for b in 0..ALPHABET {
                let t = rows.transitions[i * ALPHABET + b];
                if t >= base_states as i32 {
                    let mut next = path.clone();
                    next.push(b as u8);
                    stack.push((t as usize, next));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn shared_endings_are_merged() {
        // price_1, stock_1: the root, p-r-i-c and s-t-o-c apart, then one node each for
        // "e"/"k" (both lead to the shared "_1"), "_" and "1"
        let automaton = NameAutomaton::new(&[b"price_1", b"stock_1"], &[], None);
        assert_eq!(automaton.len(), 1 + 4 + 4 + 3);
    }

    #[test]
    fn folded_spellings_take_either_case_and_exact_ones_do_not() {
        let automaton = NameAutomaton::new(&[b"Ab"], &[b"cd"], None);
        let rows = name_rows(&empty_base(), 0, &[automaton], 1000).unwrap();
        let words = accepted_strings(&rows, 1, 0);
        let expected: Vec<Vec<u8>> = ["Ab", "CD", "Cd", "cD", "cd"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(words, expected);
    }

    #[test]
    fn suffix_follows_every_spelling() {
        let suffix = literal(b"(");
        let automaton = NameAutomaton::new(&[], &[b"max", b"min"], Some(&suffix));
        let rows = name_rows(&empty_base(), 0, &[automaton], 1000).unwrap();
        let words = accepted_strings(&rows, 1, 0);
        assert_eq!(words.len(), 16); // 8 casings each
        assert!(words.iter().all(|w| w.ends_with(b"(")));
        assert!(words.contains(&b"mAx(".to_vec()));
    }

    #[test]
    fn outside_finds_a_shortest_spelling_the_dfa_rejects() {
        let automaton = NameAutomaton::new(&[b"abc", b"ab"], &[], None);
        assert_eq!(automaton.outside(&literal(b"abc")), Some(b"ab".to_vec()));
        let both = NameAutomaton::new(&[b"ab"], &[], None);
        assert_eq!(both.outside(&literal(b"ab")), None);
    }

    #[test]
    fn base_rows_come_first_and_unmoved_bytes_keep_the_base_row() {
        // base: one terminal "x" (state 0 --x--> state 1)
        let mut base = vec![DEAD; 2 * ALPHABET];
        base[b'x' as usize] = 1;
        let automaton = NameAutomaton::new(&[b"ab"], &[], None);
        let rows = name_rows(&base, 0, &[automaton], 1000).unwrap();
        // the start (id 2) keeps "x" -> 1 and moves "a" to a new state
        assert_eq!(rows.transitions[b'x' as usize], 1);
        assert_eq!(rows.transitions[b'a' as usize], 3);
        assert_eq!(rows.base_of, vec![0, DEAD, DEAD]);
        assert_eq!(rows.alive, vec![1, 1, 1]);
        assert_eq!(rows.accepted, vec![0, 0, 1]);
    }

    #[test]
    fn the_bound_is_an_error() {
        let automaton = NameAutomaton::new(&[b"abcdef"], &[], None);
        assert_eq!(
            name_rows(&empty_base(), 0, &[automaton], 3),
            Err(NamesError::TooManyStates { bound: 3 })
        );
    }

    #[test]
    fn malformed_scanner_tables_are_refused() {
        assert!(name_rows(&[0; 10], 0, &[], 10).is_err());
        assert!(name_rows(&[7; ALPHABET], 0, &[], 10).is_err());
    }
}
