//! The scanner's inner loop: follow byte transitions until the next byte would be dead, noting
//! the last accepting state passed on the way.
//!
//! Mirrors `ScannerAutomaton.run` in python/gridrail/grammar/scanner.py, which is the reference:
//! the flat table holds `transitions[state * 256 + byte]`, -1 meaning "no terminal is live", and
//! `accepting[state]` says whether some terminal accepts the bytes that lead to `state`.

use std::fmt;
use std::sync::Arc;

/// Marks a transition after which no terminal is live.
pub const DEAD: i32 = -1;
/// Transitions per state: one per byte value.
pub const ALPHABET: usize = 256;

/// Why a table or a start state was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanError {
    /// The table length (in entries, or bytes for a byte buffer) does not fit whole states.
    BadLength { len: usize, unit: &'static str },
    /// An entry is neither -1 nor a state of the table.
    BadTarget { index: usize, value: i32 },
    /// The accepting flags are not one per state.
    BadAcceptingLength { len: usize, num_states: usize },
    /// An accepting flag is neither 0 nor 1.
    BadAcceptingFlag { state: usize, value: u8 },
    /// The state handed to `run` is not a state of the table.
    BadState { state: i64, num_states: usize },
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadLength { len, unit } => write!(
                f,
                "transition table of {len} {unit} is not a positive multiple of {ALPHABET} int32 entries"
            ),
            Self::BadTarget { index, value } => {
                write!(f, "transition table entry {index} is {value}, not -1 or a state")
            }
            Self::BadAcceptingLength { len, num_states } => write!(
                f,
                "accepting flags have length {len}, expected {num_states} (one per state)"
            ),
            Self::BadAcceptingFlag { state, value } => {
                write!(f, "accepting flag of state {state} is {value}, not 0 or 1")
            }
            Self::BadState { state, num_states } => {
                write!(f, "state {state} out of range for {num_states} states")
            }
        }
    }
}

impl std::error::Error for ScanError {}

/// What `ScanTable::run` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    /// The state reached.
    pub state: i32,
    /// Bytes consumed: the run stopped before a dead byte or at the end of the data.
    pub consumed: usize,
    /// The last accepting state passed after at least one consumed byte, as
    /// (bytes consumed to reach it, state); the start state is never counted.
    pub accept: Option<(usize, i32)>,
}

impl Scan {
    /// `(state, consumed, accept_end, accept_state)`, with -1 for both accept fields when there
    /// is no accept: the shape `ScannerAutomaton.run` returns.
    pub fn to_tuple(self) -> (i32, usize, isize, i32) {
        match self.accept {
            // A slice is at most isize::MAX bytes long, so `end` fits.
            Some((end, state)) => (
                self.state,
                self.consumed,
                isize::try_from(end).expect("a slice length fits in isize"),
                state,
            ),
            None => (self.state, self.consumed, -1, -1),
        }
    }
}

/// A validated transition table: every entry is -1 or a state index, and every state has an
/// accepting flag. The transitions are shared (`shared_transitions`): the walk kernel reads the
/// same table without a second copy or a second validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanTable {
    transitions: Arc<Vec<i32>>,
    accepting: Vec<bool>,
    num_states: usize,
}

impl ScanTable {
    /// Validate a flat table of `num_states * 256` entries and `num_states` accepting flags
    /// (1 = accepting, 0 = not).
    pub fn new(transitions: Vec<i32>, accepting: &[u8]) -> Result<Self, ScanError> {
        let len = transitions.len();
        if len == 0 || !len.is_multiple_of(ALPHABET) {
            return Err(ScanError::BadLength {
                len,
                unit: "entries",
            });
        }
        let num_states = len / ALPHABET;
        if accepting.len() != num_states {
            return Err(ScanError::BadAcceptingLength {
                len: accepting.len(),
                num_states,
            });
        }
        let accepting = zero_one_flags(accepting)
            .map_err(|(state, value)| ScanError::BadAcceptingFlag { state, value })?;
        // Targets are i32, so states beyond i32::MAX could never be reached or returned.
        let limit = i64::try_from(num_states).unwrap_or(i64::MAX);
        if let Some((index, &value)) = transitions
            .iter()
            .enumerate()
            .find(|&(_, &v)| v < DEAD || i64::from(v) >= limit)
        {
            return Err(ScanError::BadTarget { index, value });
        }
        Ok(Self {
            transitions: Arc::new(transitions),
            accepting,
            num_states,
        })
    }

    /// Validate a table given as native-endian int32 bytes (Python's `array('i').tobytes()`).
    pub fn from_ne_bytes(bytes: &[u8], accepting: &[u8]) -> Result<Self, ScanError> {
        let entries = ne_i32s(bytes).ok_or(ScanError::BadLength {
            len: bytes.len(),
            unit: "bytes",
        })?;
        Self::new(entries, accepting)
    }

    /// A table whose entries the caller built valid (`NameRows::scan_table`): not checked
    /// again, since a catalog's product is millions of entries.
    pub(crate) fn from_valid(transitions: Vec<i32>, accepting: Vec<bool>) -> Self {
        let num_states = accepting.len();
        debug_assert_eq!(transitions.len(), num_states * ALPHABET);
        debug_assert!(transitions
            .iter()
            .all(|&q| q == DEAD || (q >= 0 && (q as usize) < num_states)));
        Self {
            transitions: Arc::new(transitions),
            accepting,
            num_states,
        }
    }

    pub fn num_states(&self) -> usize {
        self.num_states
    }

    /// The validated transitions, 256 per state.
    pub fn transitions(&self) -> &[i32] {
        &self.transitions
    }

    /// Per state: does some terminal accept the bytes that lead to it?
    pub fn accepting(&self) -> &[bool] {
        &self.accepting
    }

    /// The validated transitions, shared: every entry is -1 or a state below `num_states`.
    pub fn shared_transitions(&self) -> Arc<Vec<i32>> {
        Arc::clone(&self.transitions)
    }

    /// `state` as an index of this table, or `BadState`.
    fn state_index(&self, state: i64) -> Result<usize, ScanError> {
        usize::try_from(state)
            .ok()
            .filter(|&s| s < self.num_states)
            .ok_or(ScanError::BadState {
                state,
                num_states: self.num_states,
            })
    }

    /// The states reachable from `state`, breadth first, each state's successors in the order
    /// of the first byte that reaches them: `ScannerAutomaton._canonical_identity`'s numbering
    /// (a state's canonical number is its index here).
    pub fn canonical_order(&self, state: i64) -> Result<Vec<u32>, ScanError> {
        let root = self.state_index(state)?;
        let mut seen = vec![false; self.num_states];
        seen[root] = true;
        let mut order = vec![root];
        let mut next = 0;
        while let Some(&current) = order.get(next) {
            next += 1;
            let row = &self.transitions[current * ALPHABET..(current + 1) * ALPHABET];
            for &target in row {
                // Validated in `new`: every entry other than DEAD is a state index.
                if target != DEAD && !seen[target as usize] {
                    seen[target as usize] = true;
                    order.push(target as usize);
                }
            }
        }
        Ok(order.into_iter().map(|s| s as u32).collect())
    }

    /// Consume `data` from `state` until the next byte would be dead, remembering the last
    /// accepting state reached after at least one byte.
    ///
    /// Exactly `ScannerAutomaton.run` (see `Scan::to_tuple` for its tuple shape).
    pub fn run(&self, state: i64, data: &[u8]) -> Result<Scan, ScanError> {
        let mut current = self.state_index(state)?;
        let mut consumed = data.len();
        let mut accept: Option<(usize, usize)> = None;
        for (index, &byte) in data.iter().enumerate() {
            let next = self.transitions[current * ALPHABET + usize::from(byte)];
            if next == DEAD {
                consumed = index;
                break;
            }
            // Validated in `new`: every entry other than DEAD is a state index.
            current = next as usize;
            if self.accepting[current] {
                accept = Some((index + 1, current));
            }
        }
        Ok(Scan {
            state: as_state(current),
            consumed,
            accept: accept.map(|(end, state)| (end, as_state(state))),
        })
    }
}

/// Native-endian int32 bytes (Python's `array('i').tobytes()`) as integers; None when the
/// length is not a whole number of them.
/// Flags given as bytes of 0 or 1, or the first other byte as (index, value).
pub fn zero_one_flags(raw: &[u8]) -> Result<Vec<bool>, (usize, u8)> {
    raw.iter()
        .enumerate()
        .map(|(index, &value)| match value {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err((index, value)),
        })
        .collect()
}

pub fn ne_i32s(bytes: &[u8]) -> Option<Vec<i32>> {
    const WIDTH: usize = std::mem::size_of::<i32>();
    bytes.len().is_multiple_of(WIDTH).then(|| {
        bytes
            .chunks_exact(WIDTH)
            .map(|chunk| i32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
            .collect()
    })
}

fn as_state(state: usize) -> i32 {
    // `new` only admits tables whose states fit in i32 entries.
    i32::try_from(state).expect("state index fits in i32")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table over `accepting.len()` states with the given (state, byte, target) transitions;
    /// `accepting[q]` is 1 for accepting states.
    fn table(accepting: &[u8], edges: &[(usize, u8, i32)]) -> ScanTable {
        let mut flat = vec![DEAD; accepting.len() * ALPHABET];
        for &(state, byte, target) in edges {
            flat[state * ALPHABET + usize::from(byte)] = target;
        }
        ScanTable::new(flat, accepting).expect("valid table")
    }

    /// "ab" then any number of "c": 0 -a-> 1 -b-> 2 -c-> 2, accepting in 2.
    fn abc() -> ScanTable {
        table(&[0, 0, 1], &[(0, b'a', 1), (1, b'b', 2), (2, b'c', 2)])
    }

    /// "ab" or "abxy": 0 -a-> 1 -b-> 2 -x-> 3 -y-> 4, accepting in 2 and 4.
    fn ab_abxy() -> ScanTable {
        table(
            &[0, 0, 1, 0, 1],
            &[(0, b'a', 1), (1, b'b', 2), (2, b'x', 3), (3, b'y', 4)],
        )
    }

    fn scan(state: i32, consumed: usize, accept: Option<(usize, i32)>) -> Result<Scan, ScanError> {
        Ok(Scan {
            state,
            consumed,
            accept,
        })
    }

    #[test]
    fn canonical_order_is_breadth_first_by_first_byte() {
        // 0 -b-> 2, 0 -c-> 1, 1 -a-> 3, 2 -a-> 1; 4 unreachable
        let t = table(
            &[0, 0, 0, 1, 0],
            &[(0, b'b', 2), (0, b'c', 1), (1, b'a', 3), (2, b'a', 1)],
        );
        assert_eq!(t.canonical_order(0).unwrap(), vec![0, 2, 1, 3]);
        assert_eq!(t.canonical_order(2).unwrap(), vec![2, 1, 3]);
        assert_eq!(t.canonical_order(4).unwrap(), vec![4]);
        assert!(t.canonical_order(5).is_err());
        assert!(t.canonical_order(-1).is_err());
    }

    #[test]
    fn consumes_until_the_next_byte_is_dead() {
        let t = abc();
        assert_eq!(t.run(0, b"abccx"), scan(2, 4, Some((4, 2))));
        assert_eq!(t.run(0, b"abc"), scan(2, 3, Some((3, 2))));
        assert_eq!(t.run(0, b"x"), scan(0, 0, None));
        assert_eq!(t.run(1, b"bc"), scan(2, 2, Some((2, 2))));
    }

    #[test]
    fn tracks_the_last_accept_before_a_non_accepting_tail() {
        let t = ab_abxy();
        // Stops in non-accepting 3; the lexeme "ab" ended after 2 bytes.
        assert_eq!(t.run(0, b"abxz"), scan(3, 3, Some((2, 2))));
        assert_eq!(t.run(0, b"abx"), scan(3, 3, Some((2, 2))));
        // A later accept replaces the earlier one.
        assert_eq!(t.run(0, b"abxyz"), scan(4, 4, Some((4, 4))));
    }

    #[test]
    fn accept_at_the_last_byte() {
        let t = ab_abxy();
        assert_eq!(t.run(0, b"ab"), scan(2, 2, Some((2, 2))));
        assert_eq!(t.run(0, b"abxy"), scan(4, 4, Some((4, 4))));
        assert_eq!(t.run(2, b"xy"), scan(4, 2, Some((2, 4))));
    }

    #[test]
    fn no_accept() {
        let t = ab_abxy();
        assert_eq!(t.run(0, b"a"), scan(1, 1, None));
        assert_eq!(t.run(0, b"az"), scan(1, 1, None));
        assert_eq!(t.run(0, b""), scan(0, 0, None));
        assert_eq!(t.run(2, b"x"), scan(3, 1, None));
    }

    #[test]
    fn accepting_start_state_is_not_counted() {
        // 0 -a-> 1 -b-> 0 with the start 0 accepting.
        let t = table(&[1, 0], &[(0, b'a', 1), (1, b'b', 0)]);
        assert_eq!(t.run(0, b""), scan(0, 0, None));
        assert_eq!(t.run(0, b"z"), scan(0, 0, None));
        assert_eq!(t.run(0, b"a"), scan(1, 1, None));
        // Coming back to it after consumed bytes does count.
        assert_eq!(t.run(0, b"aba"), scan(1, 3, Some((2, 0))));
        assert_eq!(abc().run(2, b""), scan(2, 0, None));
    }

    #[test]
    fn tuple_shape_uses_minus_one_for_no_accept() {
        let t = ab_abxy();
        assert_eq!(t.run(0, b"abxz").map(Scan::to_tuple), Ok((3, 3, 2, 2)));
        assert_eq!(t.run(0, b"a").map(Scan::to_tuple), Ok((1, 1, -1, -1)));
    }

    #[test]
    fn empty_input_stays_put() {
        assert_eq!(abc().run(1, b""), scan(1, 0, None));
    }

    #[test]
    fn rejects_out_of_range_states() {
        let t = abc();
        assert_eq!(
            t.run(3, b"a"),
            Err(ScanError::BadState {
                state: 3,
                num_states: 3
            })
        );
        assert_eq!(
            t.run(-1, b"a"),
            Err(ScanError::BadState {
                state: -1,
                num_states: 3
            })
        );
    }

    #[test]
    fn rejects_malformed_tables() {
        assert!(matches!(
            ScanTable::new(vec![], &[]),
            Err(ScanError::BadLength { .. })
        ));
        assert!(matches!(
            ScanTable::new(vec![DEAD; 255], &[0]),
            Err(ScanError::BadLength { .. })
        ));
        let mut flat = vec![DEAD; ALPHABET];
        flat[7] = 1;
        assert_eq!(
            ScanTable::new(flat.clone(), &[0]),
            Err(ScanError::BadTarget { index: 7, value: 1 })
        );
        flat[7] = -2;
        assert_eq!(
            ScanTable::new(flat, &[0]),
            Err(ScanError::BadTarget {
                index: 7,
                value: -2
            })
        );
    }

    #[test]
    fn rejects_malformed_accepting_flags() {
        let flat = vec![DEAD; 2 * ALPHABET];
        for flags in [&[][..], &[0], &[0, 1, 0]] {
            assert_eq!(
                ScanTable::new(flat.clone(), flags),
                Err(ScanError::BadAcceptingLength {
                    len: flags.len(),
                    num_states: 2
                })
            );
        }
        assert_eq!(
            ScanTable::new(flat, &[0, 2]),
            Err(ScanError::BadAcceptingFlag { state: 1, value: 2 })
        );
    }

    #[test]
    fn reads_native_endian_bytes() {
        let mut flat = vec![DEAD; 2 * ALPHABET];
        flat[usize::from(b'z')] = 1;
        let bytes: Vec<u8> = flat.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let t = ScanTable::from_ne_bytes(&bytes, &[0, 1]).expect("valid table");
        assert_eq!(t.num_states(), 2);
        assert_eq!(t.run(0, b"zz"), scan(1, 1, Some((1, 1))));
        assert!(matches!(
            ScanTable::from_ne_bytes(&bytes[1..], &[0, 1]),
            Err(ScanError::BadLength { .. })
        ));
        assert!(matches!(
            ScanTable::from_ne_bytes(&bytes, &[0]),
            Err(ScanError::BadAcceptingLength { .. })
        ));
    }

    #[test]
    fn error_messages_name_the_problem() {
        let err = abc().run(9, b"").unwrap_err();
        assert_eq!(err.to_string(), "state 9 out of range for 3 states");
        let err = ScanTable::new(vec![DEAD; ALPHABET], &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "accepting flags have length 0, expected 1 (one per state)"
        );
        let err = ScanTable::new(vec![DEAD; ALPHABET], &[7]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "accepting flag of state 0 is 7, not 0 or 1"
        );
    }
}
