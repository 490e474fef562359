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
use crate::interner::SliceInterner;
use crate::scan::{ScanTable, ALPHABET, DEAD};

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
/// A position's closure adds the suffix's start after a whole spelling. Moves are kept flat
/// (position p's are `moves[offsets[p]..offsets[p + 1]]`): a catalog's names make hundreds of
/// thousands of trie nodes, and a vector per node made the allocator the bottleneck.
#[derive(Debug, Clone)]
pub struct NameAutomaton {
    /// Per position its byte moves, in the order the Python reference iterates them.
    moves: Rows,
    /// Per position whether it ends a spelling (its closure then adds `begin`).
    ends: Vec<bool>,
    /// The suffix's start position (NONE: no suffix, or one with an empty language).
    begin: u32,
    accepting: Vec<bool>,
    /// Sorted.
    start: Vec<u32>,
}

const NONE: u32 = u32::MAX;

/// Per node or position its (byte, target) moves, flat: node p's are
/// `moves[offsets[p]..offsets[p + 1]]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Rows {
    offsets: Vec<u32>,
    moves: Vec<(u8, u32)>,
}

impl Rows {
    fn row(&self, p: usize) -> &[(u8, u32)] {
        &self.moves[self.offsets[p] as usize..self.offsets[p + 1] as usize]
    }

    /// Ends the row being filled.
    fn close_row(&mut self) {
        self.offsets.push(self.moves.len() as u32);
    }
}

/// A trie under construction: nodes in creation order, each with a linked list of its moves
/// in creation order (what a Python dict's insertion order gives the reference).
#[derive(Default)]
struct Trie {
    ends: Vec<bool>,
    first: Vec<u32>,
    last: Vec<u32>,
    byte: Vec<u8>,
    child: Vec<u32>,
    next: Vec<u32>,
}

impl Trie {
    fn node(&mut self) -> u32 {
        self.ends.push(false);
        self.first.push(NONE);
        self.last.push(NONE);
        (self.ends.len() - 1) as u32
    }

    fn find(&self, node: u32, byte: u8) -> Option<u32> {
        let mut edge = self.first[node as usize];
        while edge != NONE {
            if self.byte[edge as usize] == byte {
                return Some(self.child[edge as usize]);
            }
            edge = self.next[edge as usize];
        }
        None
    }

    fn push_move(&mut self, node: u32, byte: u8, child: u32) {
        let edge = self.byte.len() as u32;
        self.byte.push(byte);
        self.child.push(child);
        self.next.push(NONE);
        match self.last[node as usize] {
            NONE => self.first[node as usize] = edge,
            last => self.next[last as usize] = edge,
        }
        self.last[node as usize] = edge;
    }

    /// Adds `spellings` under a new root (returned). Each spelling starts from the nodes of
    /// the one before along their common prefix, so sorted spellings (as `NameSet` stores
    /// them) search for one child each; any order gives the reference's trie.
    fn insert_all(&mut self, spellings: &[&[u8]], fold: bool) -> u32 {
        let root = self.node();
        let mut path: Vec<u32> = vec![root]; // the previous spelling's nodes
        let mut previous: &[u8] = &[];
        for &spelling in spellings {
            let shared = previous
                .iter()
                .zip(spelling)
                .take_while(|(a, b)| a == b)
                .count();
            path.truncate(shared + 1);
            let mut node = path[shared];
            let mut fresh = false; // a node made for this spelling has no moves yet
            for &byte in &spelling[shared..] {
                let found = if fresh { None } else { self.find(node, byte) };
                node = match found {
                    Some(child) => child,
                    None => {
                        let child = self.node();
                        self.push_move(node, byte, child);
                        if fold && byte.is_ascii_lowercase() {
                            self.push_move(node, byte - 0x20, child);
                        }
                        fresh = true;
                        child
                    }
                };
                path.push(node);
            }
            self.ends[node as usize] = true;
            previous = spelling;
        }
        root
    }

    /// The moves as flat rows in node order.
    fn rows(&self) -> Rows {
        let mut rows = Rows {
            offsets: vec![0],
            moves: Vec::with_capacity(self.byte.len()),
        };
        for node in 0..self.ends.len() {
            let mut edge = self.first[node];
            while edge != NONE {
                rows.moves
                    .push((self.byte[edge as usize], self.child[edge as usize]));
                edge = self.next[edge as usize];
            }
            rows.close_row();
        }
        rows
    }
}

impl NameAutomaton {
    /// `exact` spellings byte for byte, `folded` ones (lower-case) with ASCII case ignored,
    /// then `suffix` (None: none). Sorted lists (as `NameSet` stores them) build fastest.
    pub fn new(exact: &[&[u8]], folded: &[&[u8]], suffix: Option<&Dfa>) -> Self {
        let mut trie = Trie::default();
        let mut roots: Vec<u32> = Vec::new();
        for (spellings, fold) in [(exact, false), (folded, true)] {
            if !spellings.is_empty() {
                roots.push(trie.insert_all(spellings, fold));
            }
        }
        let (mut moves, ends, roots) = merged(&trie.rows(), &trie.ends, &roots);
        let trie_size = ends.len();
        let mut accepting = vec![false; trie_size];
        let mut begin = NONE;
        match suffix {
            None => accepting.clone_from(&ends),
            Some(dfa) if dfa.start >= 0 => {
                for q in 0..dfa.accepting.len() {
                    let row = &dfa.transitions[q * ALPHABET..(q + 1) * ALPHABET];
                    moves.moves.extend((0..=255u8).filter_map(|b| {
                        let t = row[b as usize];
                        (t >= 0).then(|| (b, (trie_size + t as usize) as u32))
                    }));
                    moves.close_row();
                    accepting.push(dfa.accepting[q]);
                }
                begin = (trie_size + dfa.start as usize) as u32;
            }
            Some(_) => {} // an empty suffix language: no spelling is accepted
        }
        let mut automaton = Self {
            moves,
            ends,
            begin,
            accepting,
            start: Vec::new(),
        };
        let mut start: Vec<u32> = roots.iter().flat_map(|&r| automaton.closure(r)).collect();
        start.sort_unstable();
        start.dedup();
        automaton.start = start;
        automaton
    }

    /// Positions in all.
    pub fn len(&self) -> usize {
        self.accepting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.accepting.is_empty()
    }

    fn moves(&self, p: u32) -> &[(u8, u32)] {
        self.moves.row(p as usize)
    }

    /// The position and, after a whole spelling, the suffix's start (the reference's order).
    fn closure(&self, p: u32) -> impl Iterator<Item = u32> {
        let ends = self.begin != NONE && self.ends.get(p as usize).copied().unwrap_or(false);
        std::iter::once(p).chain(ends.then_some(self.begin))
    }

    fn accepts(&self, positions: &[u32]) -> bool {
        positions.iter().any(|&p| self.accepting[p as usize])
    }

    /// Per byte that moves some position, the positions after it: `after` is cleared and
    /// filled with the (byte, position) pairs sorted and distinct, so each byte's positions
    /// form one sorted run, the bytes in order.
    fn successors(&self, positions: &[u32], after: &mut Vec<(u8, u32)>) {
        after.clear();
        for &p in positions {
            for &(byte, target) in self.moves(p) {
                after.extend(self.closure(target).map(|q| (byte, q)));
            }
        }
        after.sort_unstable();
        after.dedup();
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
            for &(byte, target) in self.moves(p) {
                for p2 in self.closure(target) {
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

/// The trie with equivalent nodes merged (Python's `_merged`): the same end flag and the same
/// moves to merged nodes. Children are numbered after their parents, so one pass from the last
/// node up finds every class; classes are numbered in the order their first node appears.
/// Returns the merged rows, end flags and roots.
fn merged(rows: &Rows, ends: &[bool], roots: &[u32]) -> (Rows, Vec<bool>, Vec<u32>) {
    let nodes = ends.len();
    let row = |node: usize| rows.row(node);
    // Classes are the distinct signatures: the end flag, then per move its byte and the
    // child's class.
    let mut classes = SliceInterner::default();
    let mut class_of = vec![0u32; nodes];
    let mut signature: Vec<u32> = Vec::new();
    for node in (0..nodes).rev() {
        signature.clear();
        signature.push(u32::from(ends[node]));
        for &(b, c) in row(node) {
            signature.extend([u32::from(b), class_of[c as usize]]);
        }
        class_of[node] = classes.id(&signature).0;
    }
    let mut number = vec![NONE; classes.len()];
    let mut first: Vec<usize> = Vec::with_capacity(classes.len());
    for (node, &class) in class_of.iter().enumerate() {
        if number[class as usize] == NONE {
            number[class as usize] = first.len() as u32;
            first.push(node);
        }
    }
    let renumber = |c: u32| number[class_of[c as usize] as usize];
    let mut new_rows = Rows {
        offsets: vec![0],
        moves: Vec::new(),
    };
    for &node in &first {
        new_rows
            .moves
            .extend(row(node).iter().map(|&(b, c)| (b, renumber(c))));
        new_rows.close_row();
    }
    let new_ends = first.iter().map(|&node| ends[node]).collect();
    let new_roots = roots.iter().map(|&r| renumber(r)).collect();
    (new_rows, new_ends, new_roots)
}

/// The order of a name set's canonical spellings (`NameSet.__post_init__`): the indices of
/// `keys` sorted by byte order (UTF-8's is code point order, Python's for str), the first of
/// each run of equal keys only. The sort is stable and finds sorted runs, so spellings made
/// in a few sorted batches cost little more than one pass.
pub fn distinct_order(keys: &[&[u8]]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(keys[b]));
    order.dedup_by(|later, kept| keys[*later] == keys[*kept]);
    order
}

/// The regex text of spellings as alternatives matching each exactly, the `exact` ones byte
/// for byte, then the `folded` ones with ASCII case ignored (Python's `NameSet.literal_options`
/// joined by `|`, the reference): ASCII punctuation and controls as `\xNN` escapes, folded
/// letters as `[xX]`; digits, exact letters and non-ASCII characters as themselves.
pub fn literal_alternation(exact: &[&str], folded: &[&str]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let size: usize = exact.iter().chain(folded).map(|s| s.len() * 4 + 1).sum();
    let mut out: Vec<u8> = Vec::with_capacity(size);
    let spellings = exact.iter().map(|s| (s, false));
    for (i, (spelling, fold)) in spellings
        .chain(folded.iter().map(|s| (s, true)))
        .enumerate()
    {
        if i > 0 {
            out.push(b'|');
        }
        for b in spelling.bytes() {
            match b {
                b'a'..=b'z' | b'A'..=b'Z' if fold => {
                    out.extend([b'[', b.to_ascii_lowercase(), b.to_ascii_uppercase(), b']'])
                }
                // letters, digits, and each byte of a non-ASCII character, as they are
                b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | 0x80.. => out.push(b),
                _ => out.extend([
                    b'\\',
                    b'x',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ]),
            }
        }
    }
    String::from_utf8(out).expect("whole characters of UTF-8 text, and ASCII")
}

/// Each word's form in one quote style — `open`, the word with `close` doubled inside, `close`
/// (`close` empty: the word as it is), or none when the word holds `close` and the style
/// cannot double it (`doubles` false: `[...]`) — kept where `takes` matches the whole form and
/// no `shadow` does. Returns per word 1 (kept) or 0, and the kept forms in word order (Python's
/// `_spelled` in policy/lexicon.py is the reference).
pub fn spell_forms(
    words: &[&str],
    open: &str,
    close: &str,
    doubles: bool,
    takes: &Dfa,
    shadows: &[Dfa],
) -> (Vec<u8>, Vec<String>) {
    let mut flags = Vec::with_capacity(words.len());
    let mut kept = Vec::new();
    let mut form = String::new();
    let doubled = close.repeat(2);
    for word in words {
        form.clear();
        let holds_close = !close.is_empty() && word.contains(close);
        let fits = !holds_close || doubles;
        if fits {
            form.push_str(open);
            if holds_close {
                form.push_str(&word.replace(close, &doubled));
            } else {
                form.push_str(word);
            }
            form.push_str(close);
        }
        let ok = fits
            && takes.fullmatch(form.as_bytes())
            && !shadows.iter().any(|s| s.fullmatch(form.as_bytes()));
        flags.push(u8::from(ok));
        if ok {
            kept.push(form.clone());
        }
    }
    (flags, kept)
}

/// The states a product adds to its base scanner (Python's `_name_rows`), in id order from
/// `base_states` on: per state its base state (-1 for none), its moves that differ from the
/// base state's row (`overrides`, per state in byte order), and as slot bit masks the name
/// slots that accept there and those still live. Kept sparse until `table` writes the dense
/// rows once, where the scanner keeps them (a catalog's names add megabytes of rows, and each
/// copy of them costs more than computing them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NameRows {
    overrides: Rows,
    pub base_of: Vec<i32>,
    pub accepted: Vec<u64>,
    pub alive: Vec<u64>,
}

impl NameRows {
    /// States added.
    pub fn len(&self) -> usize {
        self.base_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.base_of.is_empty()
    }

    /// The whole table: the base's rows unchanged, then each new state's row — its base
    /// state's row (all -1 for none) with its overrides.
    pub fn table(&self, base: &[i32]) -> Vec<i32> {
        let mut out = Vec::with_capacity(base.len() + self.len() * ALPHABET);
        huge_pages(&out);
        out.extend_from_slice(base);
        for (state, &b) in self.base_of.iter().enumerate() {
            let at = out.len();
            if b == DEAD {
                out.resize(at + ALPHABET, DEAD);
            } else {
                let from = b as usize * ALPHABET;
                out.extend_from_slice(&base[from..from + ALPHABET]);
            }
            for &(byte, target) in self.overrides.row(state) {
                out[at + byte as usize] = target as i32;
            }
        }
        out
    }

    /// The whole table as a scanner table: `table`, and a state accepts where its base state
    /// does (`base_accepting`) or some slot does. `base` must be the table `name_rows` read.
    pub fn scan_table(&self, base: &[i32], base_accepting: &[bool]) -> ScanTable {
        let mut accepting = base_accepting.to_vec();
        accepting.extend(
            self.base_of
                .iter()
                .zip(&self.accepted)
                .map(|(&b, &slots)| slots != 0 || (b != DEAD && base_accepting[b as usize])),
        );
        ScanTable::from_valid(self.table(base), accepting)
    }
}

/// Asks the kernel to back `table`'s spare capacity with transparent huge pages where it may
/// (Linux, THP in `madvise` mode): a large catalog's table is tens of megabytes written once,
/// and faulting it in 4 KiB pages took two thirds as long as computing it. Advice only: nothing
/// changes where it is refused.
fn huge_pages(table: &Vec<i32>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = table.as_ptr() as usize;
        let end = start + table.capacity() * std::mem::size_of::<i32>();
        let (from, to) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if from < to {
            // SAFETY: the range lies inside the vector's own allocation; MADV_HUGEPAGE changes
            // how its pages are backed, never their contents.
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
            }
        }
    }
}

/// The base scanner (flat table of `base_states` rows, start `base_start`) times the slots'
/// name automata: a state is (base state or -1, per slot a set of positions), numbered from
/// `base_states` breadth first from the start, successors in byte order; a row is the base
/// state's row with the bytes that move some position overridden. At most `bound` states.
pub fn name_rows(
    base: &[i32],
    base_start: i32,
    slots: &[&NameAutomaton],
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
    // Position sets are interned per slot (id 0: the empty set, interned first), their
    // successors memoized per set id. A state's key is [base state as u32, one set id per
    // slot]; states are numbered as their keys are interned.
    let mut sets: Vec<SliceInterner> = slots
        .iter()
        .map(|_| {
            let mut interner = SliceInterner::default();
            interner.id(&[]);
            interner
        })
        .collect();
    // per slot and position set id: its moves, (byte, id of the set after it), as a range of
    // `memo` (NO_MOVES: not computed yet)
    let mut memo_range: Vec<Vec<(u32, u32)>> = vec![Vec::new(); width];
    let mut memo: Vec<(u8, u32)> = Vec::new();
    let mut positions: Vec<u32> = Vec::new();
    let mut start: Vec<u32> = vec![base_start as u32];
    for (automaton, interner) in slots.iter().zip(sets.iter_mut()) {
        start.push(interner.id(&automaton.start).0);
    }
    // a product has about as many states as its slots have positions
    let positions_in_all: usize = slots.iter().map(|a| a.len()).sum();
    let mut keys = SliceInterner::with_capacity(positions_in_all, width + 1);
    keys.id(&start);
    let mut out = NameRows {
        overrides: Rows {
            offsets: vec![0],
            moves: Vec::new(),
        },
        ..NameRows::default()
    };
    // per byte: the key its move leads to (base part filled in last)
    let mut moved: Vec<u32> = vec![0; ALPHABET * (width + 1)];
    let mut touched: Vec<usize> = Vec::new();
    let mut after: Vec<(u8, u32)> = Vec::new();
    let mut head = 0;
    while head < keys.len() {
        if keys.len() > bound {
            return Err(NamesError::TooManyStates { bound });
        }
        let b = keys.get(head as u32)[0] as i32;
        let (mut accepted, mut alive) = (0u64, 0u64);
        for k in 0..width {
            let set = keys.get(head as u32)[k + 1];
            if set == 0 {
                continue;
            }
            alive |= 1 << k;
            if slots[k].accepts(sets[k].get(set)) {
                accepted |= 1 << k;
            }
            let ranges = &mut memo_range[k];
            if ranges.len() <= set as usize {
                ranges.resize(set as usize + 1, NO_MOVES);
            }
            if ranges[set as usize] == NO_MOVES {
                slots[k].successors(sets[k].get(set), &mut after);
                let from = memo.len() as u32;
                for run in after.chunk_by(|x, y| x.0 == y.0) {
                    positions.clear();
                    positions.extend(run.iter().map(|&(_, q)| q));
                    memo.push((run[0].0, sets[k].id(&positions).0));
                }
                ranges[set as usize] = (from, memo.len() as u32);
            }
            let (from, to) = memo_range[k][set as usize];
            for &(byte, next) in &memo[from as usize..to as usize] {
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
            let target = keys.id(key).0;
            key.fill(0);
            out.overrides
                .moves
                .push((byte as u8, base_states as u32 + target));
        }
        out.overrides.close_row();
        touched.clear();
        out.base_of.push(b);
        out.accepted.push(accepted);
        out.alive.push(alive);
        head += 1;
    }
    Ok(out)
}

/// A position set whose moves are not computed yet.
const NO_MOVES: (u32, u32) = (u32::MAX, u32::MAX);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_order_sorts_by_bytes_and_keeps_the_first_of_equals() {
        let keys: Vec<&[u8]> = vec![b"b", b"a_b", b"a", b"b", "\u{e9}".as_bytes(), b"a", b"Z"];
        assert_eq!(distinct_order(&keys), vec![6, 2, 1, 0, 4]);
        assert_eq!(distinct_order(&[]), Vec::<usize>::new());
    }

    /// A one-state scanner with no transitions (no regex terminal).
    fn empty_base() -> Vec<i32> {
        vec![DEAD; ALPHABET]
    }

    /// Every string the product accepts for slot `k`, by depth-first search (finite languages).
    fn accepted_strings(rows: &NameRows, base_states: usize, k: usize) -> Vec<Vec<u8>> {
        let table = rows.table(&vec![DEAD; base_states * ALPHABET]);
        let mut out = Vec::new();
        let mut stack = vec![(base_states, Vec::new())];
        while let Some((state, path)) = stack.pop() {
            let i = state - base_states;
            if rows.accepted[i] >> k & 1 == 1 {
                out.push(path.clone());
            }
            for b in 0..ALPHABET {
                let t = table[state * ALPHABET + b];
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
        let rows = name_rows(&empty_base(), 0, &[&automaton], 1000).unwrap();
        let words = accepted_strings(&rows, 1, 0);
        let expected: Vec<Vec<u8>> = ["Ab", "CD", "Cd", "cD", "cd"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(words, expected);
    }

    #[test]
    fn suffix_follows_every_spelling() {
        let suffix = Dfa::literal(b"(");
        let automaton = NameAutomaton::new(&[], &[b"max", b"min"], Some(&suffix));
        let rows = name_rows(&empty_base(), 0, &[&automaton], 1000).unwrap();
        let words = accepted_strings(&rows, 1, 0);
        assert_eq!(words.len(), 16); // 8 casings each
        assert!(words.iter().all(|w| w.ends_with(b"(")));
        assert!(words.contains(&b"mAx(".to_vec()));
    }

    #[test]
    fn outside_finds_a_shortest_spelling_the_dfa_rejects() {
        let automaton = NameAutomaton::new(&[b"abc", b"ab"], &[], None);
        assert_eq!(
            automaton.outside(&Dfa::literal(b"abc")),
            Some(b"ab".to_vec())
        );
        let both = NameAutomaton::new(&[b"ab"], &[], None);
        assert_eq!(both.outside(&Dfa::literal(b"ab")), None);
    }

    #[test]
    fn base_rows_come_first_and_unmoved_bytes_keep_the_base_row() {
        // base: one terminal "x" (state 0 --x--> state 1)
        let mut base = vec![DEAD; 2 * ALPHABET];
        base[b'x' as usize] = 1;
        let automaton = NameAutomaton::new(&[b"ab"], &[], None);
        let rows = name_rows(&base, 0, &[&automaton], 1000).unwrap();
        // the start (id 2) keeps "x" -> 1 and moves "a" to a new state
        let table = rows.table(&base);
        assert_eq!(&table[..2 * ALPHABET], &base[..]);
        assert_eq!(table[2 * ALPHABET + b'x' as usize], 1);
        assert_eq!(table[2 * ALPHABET + b'a' as usize], 3);
        assert_eq!(rows.base_of, vec![0, DEAD, DEAD]);
        assert_eq!(rows.alive, vec![1, 1, 1]);
        assert_eq!(rows.accepted, vec![0, 0, 1]);
    }

    #[test]
    fn forms_are_quoted_doubled_or_refused_and_checked() {
        let takes = Dfa::literal(b"\"a\"\"b\"");
        let (flags, kept) = spell_forms(&["a\"b", "c"], "\"", "\"", true, &takes, &[]);
        assert_eq!((flags, kept), (vec![1, 0], vec!["\"a\"\"b\"".to_string()]));
        let brackets = Dfa::literal(b"[x]");
        let (flags, _) = spell_forms(&["x", "x]"], "[", "]", false, &brackets, &[]);
        assert_eq!(flags, vec![1, 0]);
        let bare = Dfa::literal(b"x");
        let (flags, _) = spell_forms(&["x"], "", "", true, &bare, &[Dfa::literal(b"x")]);
        assert_eq!(flags, vec![0]); // shadowed
    }

    #[test]
    fn literals_escape_punctuation_and_fold_letters() {
        let exact = literal_alternation(&["a_1", "\"Q\u{e9}\""], &[]);
        assert_eq!(exact, "a\\x5f1|\\x22Q\u{e9}\\x22");
        assert_eq!(literal_alternation(&[], &["ab.c"]), "[aA][bB]\\x2e[cC]");
    }

    #[test]
    fn the_bound_is_an_error() {
        let automaton = NameAutomaton::new(&[b"abcdef"], &[], None);
        assert_eq!(
            name_rows(&empty_base(), 0, &[&automaton], 3),
            Err(NamesError::TooManyStates { bound: 3 })
        );
    }

    #[test]
    fn malformed_scanner_tables_are_refused() {
        assert!(name_rows(&[0; 10], 0, &[], 10).is_err());
        assert!(name_rows(&[7; ALPHABET], 0, &[], 10).is_err());
    }

    #[test]
    fn a_state_accepts_where_its_base_state_or_a_name_does() {
        // base: "ab" (states 0 -a-> 1 -b-> 2, 2 accepting); the name "abc"
        let mut base = vec![DEAD; 3 * ALPHABET];
        base[usize::from(b'a')] = 1;
        base[ALPHABET + usize::from(b'b')] = 2;
        let automaton = NameAutomaton::new(&[b"abc"], &[], None);
        let rows = name_rows(&base, 0, &[&automaton], 100).unwrap();
        let table = rows.scan_table(&base, &[false, false, true]);
        // new states 3.. : the start, after "a", after "ab" (the base accepts), after "abc"
        assert_eq!(
            table.accepting(),
            &[false, false, true, false, false, true, true]
        );
        assert_eq!(table.transitions(), rows.table(&base).as_slice());
        let scan = table.run(3, b"abc").unwrap();
        assert_eq!(
            (scan.state, scan.consumed, scan.accept),
            (6, 3, Some((3, 6)))
        );
    }
}
