//! Γ's token scan: which tokens of a mask touch a lexeme that can be a name at a slot, so that
//! only those are read by the binder.
//!
//! Mirrors `SlotScan.scan` in python/gridrail/gamma/tokens.py, which is the reference, bit for
//! bit: each token's first `width` bytes are run through the union scanner from the pending
//! lexeme's state with maximal munch (a byte that kills the lexeme ends it and restarts at the
//! start state), and the token is *marked* when some lexeme it touches has a slot terminal in
//! the accept or live set it reaches — or when the scan cannot follow it exactly (a lexeme cut
//! back to an earlier accept, a token longer than the scan, a byte no lexeme starts with).

use std::fmt;
use std::sync::Arc;

use crate::scan::{zero_one_flags, ScanTable, ALPHABET, DEAD};

/// Why a scanner or a scan was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotScanError {
    /// A per-state flag vector is not one flag (0 or 1) per state of the table.
    BadFlags {
        what: &'static str,
        len: usize,
        num_states: usize,
    },
    /// The start state or the scan state is not a state of the table.
    BadState { state: i64, num_states: usize },
    /// The token bytes are not `width` bytes per token length given.
    BadTokens {
        bytes: usize,
        tokens: usize,
        width: usize,
    },
    /// A token id is not a token of the vocabulary.
    BadToken { token: i64, size: usize },
}

impl fmt::Display for SlotScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadFlags {
                what,
                len,
                num_states,
            } => write!(
                f,
                "{what} has {len} flags for {num_states} scanner states (one 0/1 flag per state)"
            ),
            Self::BadState { state, num_states } => {
                write!(f, "state {state} out of range for {num_states} states")
            }
            Self::BadTokens {
                bytes,
                tokens,
                width,
            } => write!(
                f,
                "{bytes} token bytes for {tokens} tokens of {width} bytes each"
            ),
            Self::BadToken { token, size } => {
                write!(f, "token {token} out of range for a vocabulary of {size}")
            }
        }
    }
}

impl std::error::Error for SlotScanError {}

/// What the scan found, per token of the ids it was given (`Scan` in tokens.py).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlotScan {
    /// May a lexeme of it be a slot terminal (or could the scan not tell)?
    pub marked: Vec<bool>,
    /// Its lexemes: at most the pending one ended at its first byte, then only ignored ones
    /// (layout), then the one it leaves pending.
    pub simple: Vec<bool>,
    /// Its first byte ends the pending lexeme.
    pub closes: Vec<bool>,
    /// The scanner state of the lexeme it leaves pending.
    pub final_state: Vec<i64>,
    /// Where that lexeme starts in the token (-1: the pending one grows).
    pub final_start: Vec<i64>,
}

/// The union scanner with its per-state flags, and the vocabulary's first `width` bytes per
/// token (`SlotScan` and `TokenShapes` in tokens.py).
#[derive(Debug, Clone)]
pub struct SlotScanner {
    transitions: Arc<Vec<i32>>,
    accepting: Vec<bool>,
    layout: Vec<bool>,
    slot_accept: Vec<bool>,
    slot_live: Vec<bool>,
    start: usize,
    width: usize,
    token_bytes: Vec<u8>,
    lengths: Vec<u32>,
}

fn flags(what: &'static str, raw: &[u8], num_states: usize) -> Result<Vec<bool>, SlotScanError> {
    let bad = SlotScanError::BadFlags {
        what,
        len: raw.len(),
        num_states,
    };
    match zero_one_flags(raw) {
        Ok(flags) if flags.len() == num_states => Ok(flags),
        _ => Err(bad),
    }
}

fn state_index(state: i64, num_states: usize) -> Result<usize, SlotScanError> {
    usize::try_from(state)
        .ok()
        .filter(|&s| s < num_states)
        .ok_or(SlotScanError::BadState { state, num_states })
}

impl SlotScanner {
    /// The scanner of `table` with per-state `layout` (a lexeme ending there is ignored),
    /// `slot_accept` and `slot_live` flags (a slot terminal accepts / is live there), its
    /// `start` state, and per token its first `width` bytes (zero-padded, `token_bytes`) and
    /// its full length.
    #[allow(clippy::too_many_arguments)] // each is one of the reference's inputs
    pub fn new(
        table: &ScanTable,
        layout: &[u8],
        slot_accept: &[u8],
        slot_live: &[u8],
        start: i64,
        width: usize,
        token_bytes: Vec<u8>,
        lengths: Vec<u32>,
    ) -> Result<Self, SlotScanError> {
        let num_states = table.num_states();
        if token_bytes.len() != lengths.len() * width {
            return Err(SlotScanError::BadTokens {
                bytes: token_bytes.len(),
                tokens: lengths.len(),
                width,
            });
        }
        Ok(Self {
            transitions: table.shared_transitions(),
            accepting: table.accepting().to_vec(),
            layout: flags("layout", layout, num_states)?,
            slot_accept: flags("slot_accept", slot_accept, num_states)?,
            slot_live: flags("slot_live", slot_live, num_states)?,
            start: state_index(start, num_states)?,
            width,
            token_bytes,
            lengths,
        })
    }

    fn step(&self, state: usize, byte: u8) -> i32 {
        self.transitions[state * ALPHABET + usize::from(byte)]
    }

    /// Each token of `ids` scanned from `scan_state` (the pending lexeme's state);
    /// `may_cut_back`: the pending lexeme has bytes after an earlier accept (every token is
    /// then marked).
    pub fn scan(
        &self,
        ids: &[i64],
        scan_state: i64,
        may_cut_back: bool,
    ) -> Result<SlotScan, SlotScanError> {
        let first = state_index(scan_state, self.accepting.len())?;
        let size = self.lengths.len();
        let mut out = SlotScan::default();
        for &token in ids {
            let t = usize::try_from(token)
                .ok()
                .filter(|&t| t < size)
                .ok_or(SlotScanError::BadToken { token, size })?;
            let length = self.lengths[t] as usize;
            let data = &self.token_bytes[t * self.width..(t + 1) * self.width];
            let mut state = first;
            let mut start_at: i64 = -1;
            // has the lexeme in progress passed a state where a slot terminal ends?
            let mut seen = self.slot_accept[first] || self.slot_live[first];
            let mut marked = length > self.width || may_cut_back;
            let mut simple = !marked;
            let mut closes = false;
            // the pending lexeme's last accept is where the token starts, and none of its
            // bytes has reached another one yet
            let mut rewinds = self.accepting[first] && !may_cut_back;
            let mut i = 0;
            while i < length.min(self.width) {
                let mut next = self.step(state, data[i]);
                if next == DEAD && i > 0 && start_at == -1 && rewinds && !self.accepting[state] {
                    // the pending lexeme grew into the token and died before another accept:
                    // it is cut back to where the token starts, as if its first byte ended it
                    (state, i, next) = (first, 0, DEAD);
                }
                let byte = data[i];
                if next == DEAD {
                    // the lexeme ends here: cut back (not followed) unless its state accepts
                    let cut_back = !self.accepting[state];
                    marked |= cut_back || self.slot_accept[state];
                    if i == 0 {
                        closes = true;
                        simple &= !cut_back;
                    } else {
                        simple &= self.layout[state];
                    }
                    let restart = self.step(self.start, byte);
                    if restart == DEAD {
                        marked = true;
                        simple = false;
                    }
                    start_at = i as i64;
                    seen = false;
                    next = restart;
                }
                if next != DEAD {
                    // validated by `ScanTable::new`: every entry other than DEAD is a state
                    state = next as usize;
                }
                rewinds &= start_at != -1 || !self.accepting[state];
                seen |= self.slot_accept[state];
                i += 1;
            }
            marked |= (self.slot_live[state] || seen) && length > 0;
            out.marked.push(marked);
            out.simple.push(simple);
            out.closes.push(closes);
            out.final_state.push(state as i64);
            out.final_start.push(start_at);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two terminals over the bytes a-z and ' ': NAME = [a-z]+ (a slot terminal, state 1) and
    /// WS = ' '+ (layout, state 2); state 0 is the start.
    fn scanner(tokens: &[&[u8]]) -> SlotScanner {
        let mut transitions = vec![DEAD; 3 * ALPHABET];
        for byte in b'a'..=b'z' {
            transitions[usize::from(byte)] = 1;
            transitions[ALPHABET + usize::from(byte)] = 1;
        }
        transitions[usize::from(b' ')] = 2;
        transitions[2 * ALPHABET + usize::from(b' ')] = 2;
        let table = ScanTable::new(transitions, &[0, 1, 1]).unwrap();
        let (bytes, lengths) = rows(tokens);
        let (layout, slot) = ([0, 0, 1], [0, 1, 0]);
        SlotScanner::new(&table, &layout, &slot, &slot, 0, WIDTH, bytes, lengths).unwrap()
    }

    const WIDTH: usize = 4;

    /// The tokens' first WIDTH bytes (zero-padded) and lengths, as `SlotScanner::new` takes them.
    fn rows(tokens: &[&[u8]]) -> (Vec<u8>, Vec<u32>) {
        let mut bytes = Vec::new();
        for token in tokens {
            let mut row = token.to_vec();
            row.resize(WIDTH, 0);
            bytes.extend(row);
        }
        (bytes, tokens.iter().map(|t| t.len() as u32).collect())
    }

    #[test]
    fn names_are_marked_layout_is_simple() {
        let s = scanner(&[b"ab", b"  ", b" ab", b"ab ", b"abcdef", b"a!"]);
        let out = s.scan(&[0, 1, 2, 3, 4, 5], 2, false).unwrap(); // after layout
        assert_eq!(out.marked, [true, false, true, true, true, true]);
        // " ab": the pending layout ends at the first byte, then the name is left pending
        assert_eq!(out.simple, [true, true, true, false, false, false]);
        assert_eq!(out.closes, [true, false, false, true, true, true]);
        assert_eq!(out.final_state[..3], [1, 2, 1]);
        assert_eq!(out.final_start[..3], [0, -1, 1]);
    }

    /// NAME = [a-z]+ (state 1, a slot terminal), WS = ' '+ (state 2, layout) and OPEN =
    /// [a-z]+ ' '* '(' (state 4), whose ' ' after a name is state 3 (no accept), as a function
    /// call's terminal reads `count (`.
    fn scanner_with_open(tokens: &[&[u8]]) -> SlotScanner {
        let mut transitions = vec![DEAD; 5 * ALPHABET];
        let at = |state: usize, byte: u8| state * ALPHABET + usize::from(byte);
        for byte in b'a'..=b'z' {
            transitions[at(0, byte)] = 1;
            transitions[at(1, byte)] = 1;
        }
        for (from, to) in [(0, 2), (2, 2), (1, 3), (3, 3)] {
            transitions[at(from, b' ')] = to;
        }
        transitions[at(1, b'(')] = 4;
        transitions[at(3, b'(')] = 4;
        let table = ScanTable::new(transitions, &[0, 1, 1, 0, 1]).unwrap();
        let (bytes, lengths) = rows(tokens);
        let (layout, slot) = ([0, 0, 1, 0, 0], [0, 1, 0, 0, 0]);
        SlotScanner::new(&table, &layout, &slot, &slot, 0, WIDTH, bytes, lengths).unwrap()
    }

    #[test]
    fn a_lexeme_cut_back_to_the_tokens_start_is_closed_at_its_first_byte() {
        // after a name (state 1): " c" grows it to state 3, where 'c' kills it, so it is cut
        // back to where the token starts: the name, then layout, then "c" pending
        let s = scanner_with_open(&[b" c", b" (", b" !", b"  "]);
        let out = s.scan(&[0, 1, 2, 3], 1, false).unwrap();
        assert_eq!(out.closes, [true, false, true, false]);
        assert_eq!(out.simple, [true, true, false, true]);
        assert_eq!(out.final_start, [1, -1, 1, -1]);
        assert_eq!(out.final_state[..2], [1, 4]);
        // with bytes after an earlier accept the scan does not follow it
        assert_eq!(s.scan(&[0], 1, true).unwrap().simple, [false]);
    }

    #[test]
    fn a_cut_back_marks_every_token() {
        let s = scanner(&[b"  "]);
        assert_eq!(s.scan(&[0], 2, true).unwrap().marked, [true]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let s = scanner(&[b"a"]);
        assert_eq!(
            s.scan(&[1], 0, false),
            Err(SlotScanError::BadToken { token: 1, size: 1 })
        );
        assert_eq!(
            s.scan(&[0], 3, false),
            Err(SlotScanError::BadState {
                state: 3,
                num_states: 3
            })
        );
    }
}
