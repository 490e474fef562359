//! The union scanner of regex terminals: Python's `_union_scanner` in
//! python/gridrail/grammar/scanner.py is the reference — the subset construction over the
//! terminals' DFAs with bytes grouped into classes, minimized, numbered breadth first from the
//! start in class order — and the result is bit for bit its own (tests/test_kernels.py).

use std::fmt;

use crate::dfa::Dfa;
use crate::interner::SliceInterner;
use crate::scan::{ALPHABET, DEAD};

/// The subset construction went past its bounds (as the reference's `GrammarError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge;

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the union scanner needs more states or steps than its bounds"
        )
    }
}

impl std::error::Error for TooLarge {}

/// A minimal union automaton: `transitions` (256 per state, -1 dead) and per state the
/// terminals it accepts and those still live, each sorted. No state at all when nothing can
/// match (the caller's lone dead start).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnionScanner {
    pub transitions: Vec<i32>,
    pub accepts: Vec<Vec<u32>>,
    pub live: Vec<Vec<u32>>,
}

/// The union of `parts` (terminal index, its DFA with a live start): at most `max_states`
/// subset states and `max_work` part states stepped per class, checked as the reference does.
pub fn union_scanner(
    parts: &[(u32, Dfa)],
    max_states: usize,
    max_work: u64,
) -> Result<UnionScanner, TooLarge> {
    let (class_of, representatives) = byte_classes(parts);
    let classes = representatives.len();
    // Subset states as flat (part, state) pairs, numbered as discovered.
    let mut keys = SliceInterner::default();
    let start: Vec<u32> = parts
        .iter()
        .enumerate()
        .flat_map(|(i, (_, dfa))| [i as u32, dfa.start as u32])
        .collect();
    keys.id(&start);
    let mut table: Vec<i32> = Vec::new();
    let mut work: u64 = 0;
    let mut next: Vec<u32> = Vec::new();
    let mut head = 0;
    while head < keys.len() {
        let pairs = keys.get(head as u32).len() / 2;
        work += (pairs * classes) as u64;
        if keys.len() > max_states || work > max_work {
            return Err(TooLarge);
        }
        for &byte in &representatives {
            next.clear();
            for pair in keys.get(head as u32).chunks_exact(2) {
                let target = parts[pair[0] as usize].1.step(pair[1] as i32, byte);
                if target >= 0 {
                    next.extend([pair[0], target as u32]);
                }
            }
            table.push(if next.is_empty() {
                DEAD
            } else {
                keys.id(&next).0 as i32
            });
        }
        head += 1;
    }
    let key_terminals = |key: u32, accepting: bool| -> Vec<u32> {
        let mut out: Vec<u32> = keys
            .get(key)
            .chunks_exact(2)
            .filter(|pair| !accepting || parts[pair[0] as usize].1.accepts(pair[1] as i32))
            .map(|pair| parts[pair[0] as usize].0)
            .collect();
        out.sort_unstable();
        out
    };
    let mut labels = SliceInterner::default();
    let dead_label = labels.id(&[]).0;
    let label_of: Vec<u32> = (0..keys.len() as u32)
        .map(|key| labels.id(&key_terminals(key, true)).0)
        .collect();
    let (block_of, dead_block) = coarsest_partition(&table, classes, &label_of, dead_label);
    // Breadth first from the start over blocks, classes in order (`minimize_table`).
    let mut number = vec![DEAD; block_of.len()];
    let mut kept: Vec<usize> = Vec::new();
    if block_of[0] != dead_block {
        number[block_of[0] as usize] = 0;
        kept.push(0);
        let mut at = 0;
        while at < kept.len() {
            let old = kept[at];
            for &target in &table[old * classes..(old + 1) * classes] {
                if target < 0 {
                    continue;
                }
                let block = block_of[target as usize] as usize;
                if block != dead_block as usize && number[block] == DEAD {
                    number[block] = kept.len() as i32;
                    kept.push(target as usize);
                }
            }
            at += 1;
        }
    }
    let mut out = UnionScanner {
        transitions: Vec::with_capacity(kept.len() * ALPHABET),
        ..UnionScanner::default()
    };
    for &old in &kept {
        let row = &table[old * classes..(old + 1) * classes];
        out.transitions
            .extend(class_of.iter().map(|&k| match row[k] {
                DEAD => DEAD,
                target => number[block_of[target as usize] as usize],
            }));
        out.accepts.push(labels.get(label_of[old]).to_vec());
        // every part state is live (parts are minimal): a state's live set is its parts
        out.live.push(key_terminals(old as u32, false));
    }
    Ok(out)
}

/// Bytes that no part tells apart share a class (`_union_byte_classes`): per byte its class,
/// and the first byte of each class, classes numbered in byte order.
fn byte_classes(parts: &[(u32, Dfa)]) -> (Vec<usize>, Vec<u8>) {
    let column = |byte: usize| {
        parts.iter().flat_map(move |(_, dfa)| {
            (0..dfa.accepting.len()).map(move |q| dfa.transitions[q * ALPHABET + byte])
        })
    };
    let hash = |byte: usize| {
        let mut hasher = rustc_hash::FxHasher::default();
        column(byte).for_each(|q| std::hash::Hasher::write_i32(&mut hasher, q));
        std::hash::Hasher::finish(&hasher)
    };
    let hashes: Vec<u64> = (0..ALPHABET).map(hash).collect();
    let mut class_of = vec![0usize; ALPHABET];
    let mut representatives: Vec<u8> = Vec::new();
    for byte in 0..ALPHABET {
        let found = representatives.iter().position(|&first| {
            hashes[first as usize] == hashes[byte] && column(first as usize).eq(column(byte))
        });
        class_of[byte] = found.unwrap_or_else(|| {
            representatives.push(byte as u8);
            representatives.len() - 1
        });
    }
    (class_of, representatives)
}

/// The coarsest partition of the states of `table` (`classes` targets per state, -1 dead)
/// that respects `label_of` and the transitions, with an explicit sink for -1 labelled
/// `dead_label`, by Moore's refinement: per state its block and the sink's block (states in
/// it are equivalent to death). The same partition as the reference's Hopcroft refinement:
/// the coarsest one is unique.
fn coarsest_partition(
    table: &[i32],
    classes: usize,
    label_of: &[u32],
    dead_label: u32,
) -> (Vec<u32>, u32) {
    let states = label_of.len();
    let sink = states;
    let mut block_of: Vec<u32> = label_of.iter().copied().chain([dead_label]).collect();
    let mut blocks = usize::MAX;
    let mut signature: Vec<u32> = Vec::with_capacity(classes + 1);
    loop {
        let mut interner = SliceInterner::default();
        let refined: Vec<u32> = (0..=states)
            .map(|state| {
                signature.clear();
                signature.push(block_of[state]);
                for k in 0..classes {
                    let target = if state == sink {
                        sink
                    } else {
                        match table[state * classes + k] {
                            DEAD => sink,
                            target => target as usize,
                        }
                    };
                    signature.push(block_of[target]);
                }
                interner.id(&signature).0
            })
            .collect();
        let count = interner.len();
        block_of = refined;
        if count == blocks {
            break;
        }
        blocks = count;
    }
    let dead_block = block_of[sink];
    block_of.truncate(states);
    (block_of, dead_block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_share_states_and_labels_say_who_accepts() {
        // "ab" (terminal 3) and "ac" (terminal 5): start, after "a", after "ab", after "ac"
        let union = union_scanner(
            &[(3, Dfa::literal(b"ab")), (5, Dfa::literal(b"ac"))],
            100,
            1000,
        )
        .unwrap();
        assert_eq!(union.accepts, vec![vec![], vec![], vec![3], vec![5]]);
        assert_eq!(union.live, vec![vec![3, 5], vec![3, 5], vec![3], vec![5]]);
        assert_eq!(union.transitions[b'a' as usize], 1);
        assert_eq!(union.transitions[ALPHABET + b'b' as usize], 2);
        assert_eq!(union.transitions[ALPHABET + b'c' as usize], 3);
    }

    #[test]
    fn equivalent_states_are_merged() {
        // "xa" and "ya" for one terminal: after "x" and after "y" are one state
        let mut dfa = Dfa::literal(b"xa");
        dfa.transitions[b'y' as usize] = 1;
        let union = union_scanner(&[(0, dfa)], 100, 1000).unwrap();
        assert_eq!(union.accepts.len(), 3);
        assert_eq!(
            union.transitions[b'x' as usize],
            union.transitions[b'y' as usize]
        );
    }

    #[test]
    fn no_part_is_no_state_and_bounds_are_errors() {
        assert_eq!(union_scanner(&[], 10, 10).unwrap().accepts.len(), 0);
        let parts = [(0, Dfa::literal(b"abcdef"))];
        assert_eq!(union_scanner(&parts, 2, 1_000_000), Err(TooLarge));
        assert_eq!(union_scanner(&parts, 100, 3), Err(TooLarge));
    }
}
