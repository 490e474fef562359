//! A byte DFA in the flat layout of python/gridrail/grammar/dfa.py's `ByteDFA` (the reference).

use std::fmt;

use crate::scan::{ALPHABET, DEAD};

/// A table that is not `accepting.len()` rows of 256 entries, each -1 or a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DfaError;

impl fmt::Display for DfaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed DFA table")
    }
}

impl std::error::Error for DfaError {}

/// A deterministic automaton over bytes in the flat layout of `ByteDFA` (`start` -1: the
/// empty language).
#[derive(Debug, Clone)]
pub struct Dfa {
    pub start: i32,
    pub transitions: Vec<i32>,
    pub accepting: Vec<bool>,
}

#[cfg(test)]
impl Dfa {
    /// The DFA of one byte string, accepting at its end: a fixture of the kernels' tests.
    pub fn literal(text: &[u8]) -> Self {
        let n = text.len() + 1;
        let mut transitions = vec![DEAD; n * ALPHABET];
        for (q, &b) in text.iter().enumerate() {
            transitions[q * ALPHABET + b as usize] = q as i32 + 1;
        }
        let mut accepting = vec![false; n];
        accepting[text.len()] = true;
        Self::new(0, transitions, accepting).expect("a literal's table is well formed")
    }
}

impl Dfa {
    /// Checks that the table has one row per accepting flag and only -1 or states in it.
    pub fn new(start: i32, transitions: Vec<i32>, accepting: Vec<bool>) -> Result<Self, DfaError> {
        let n = accepting.len();
        let in_range = |q: i32| q == DEAD || (q >= 0 && (q as usize) < n);
        if transitions.len() != n * ALPHABET
            || !in_range(start)
            || !transitions.iter().all(|&q| in_range(q))
        {
            return Err(DfaError);
        }
        Ok(Self {
            start,
            transitions,
            accepting,
        })
    }

    pub fn step(&self, state: i32, byte: u8) -> i32 {
        if state < 0 {
            DEAD
        } else {
            self.transitions[(state as usize) * ALPHABET + byte as usize]
        }
    }

    pub fn accepts(&self, state: i32) -> bool {
        state >= 0 && self.accepting[state as usize]
    }

    /// Whether `data` is in the language (`ByteDFA.fullmatch`).
    pub fn fullmatch(&self, data: &[u8]) -> bool {
        let mut q = self.start;
        for &byte in data {
            if q < 0 {
                return false;
            }
            q = self.step(q, byte);
        }
        self.accepts(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fullmatch_reads_the_whole_input() {
        // a+ : 0 --a--> 1 --a--> 1
        let mut transitions = vec![DEAD; 2 * ALPHABET];
        transitions[b'a' as usize] = 1;
        transitions[ALPHABET + b'a' as usize] = 1;
        let dfa = Dfa::new(0, transitions, vec![false, true]).unwrap();
        assert!(dfa.fullmatch(b"aaa"));
        assert!(!dfa.fullmatch(b""));
        assert!(!dfa.fullmatch(b"aab"));
        assert!(!dfa.fullmatch(b"ba"));
        let empty = Dfa::new(DEAD, Vec::new(), Vec::new()).unwrap();
        assert!(!empty.fullmatch(b"a"));
    }

    #[test]
    fn malformed_tables_are_refused() {
        assert_eq!(
            Dfa::new(0, vec![5; ALPHABET], vec![false]).unwrap_err(),
            DfaError
        );
        assert!(Dfa::new(0, vec![DEAD; 3], vec![false]).is_err());
    }
}
