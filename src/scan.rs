//! The scanner's inner loop: follow byte transitions until the next byte would be dead.
//!
//! Mirrors `ScannerAutomaton.run` in python/gridrail/grammar/scanner.py, which is the reference:
//! the flat table holds `transitions[state * 256 + byte]`, -1 meaning "no terminal is live".

use std::fmt;

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
            Self::BadState { state, num_states } => {
                write!(f, "state {state} out of range for {num_states} states")
            }
        }
    }
}

impl std::error::Error for ScanError {}

/// A validated transition table: every entry is -1 or a state index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanTable {
    transitions: Vec<i32>,
    num_states: usize,
}

impl ScanTable {
    /// Validate a flat table of `num_states * 256` entries.
    pub fn new(transitions: Vec<i32>) -> Result<Self, ScanError> {
        let len = transitions.len();
        if len == 0 || !len.is_multiple_of(ALPHABET) {
            return Err(ScanError::BadLength {
                len,
                unit: "entries",
            });
        }
        let num_states = len / ALPHABET;
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
            transitions,
            num_states,
        })
    }

    /// Validate a table given as native-endian int32 bytes (Python's `array('i').tobytes()`).
    pub fn from_ne_bytes(bytes: &[u8]) -> Result<Self, ScanError> {
        const WIDTH: usize = std::mem::size_of::<i32>();
        if !bytes.len().is_multiple_of(WIDTH) {
            return Err(ScanError::BadLength {
                len: bytes.len(),
                unit: "bytes",
            });
        }
        let entries = bytes
            .chunks_exact(WIDTH)
            .map(|chunk| i32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
            .collect();
        Self::new(entries)
    }

    pub fn num_states(&self) -> usize {
        self.num_states
    }

    /// Consume `data` from `state` until the next byte would be dead.
    ///
    /// Returns (state reached, bytes consumed), exactly like `ScannerAutomaton.run`.
    pub fn run(&self, state: i64, data: &[u8]) -> Result<(i32, usize), ScanError> {
        let mut current = usize::try_from(state)
            .ok()
            .filter(|&s| s < self.num_states)
            .ok_or(ScanError::BadState {
                state,
                num_states: self.num_states,
            })?;
        for (consumed, &byte) in data.iter().enumerate() {
            let next = self.transitions[current * ALPHABET + usize::from(byte)];
            if next == DEAD {
                return Ok((as_state(current), consumed));
            }
            // Validated in `new`: every entry other than DEAD is a state index.
            current = next as usize;
        }
        Ok((as_state(current), data.len()))
    }
}

fn as_state(state: usize) -> i32 {
    // `new` only admits tables whose states fit in i32 entries.
    i32::try_from(state).expect("state index fits in i32")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table over `num_states` states with the given (state, byte, target) transitions.
    fn table(num_states: usize, edges: &[(usize, u8, i32)]) -> ScanTable {
        let mut flat = vec![DEAD; num_states * ALPHABET];
        for &(state, byte, target) in edges {
            flat[state * ALPHABET + usize::from(byte)] = target;
        }
        ScanTable::new(flat).expect("valid table")
    }

    /// "ab" then any number of "c": 0 -a-> 1 -b-> 2 -c-> 2.
    fn abc() -> ScanTable {
        table(3, &[(0, b'a', 1), (1, b'b', 2), (2, b'c', 2)])
    }

    #[test]
    fn consumes_until_the_next_byte_is_dead() {
        let t = abc();
        assert_eq!(t.run(0, b"abccx"), Ok((2, 4)));
        assert_eq!(t.run(0, b"abc"), Ok((2, 3)));
        assert_eq!(t.run(0, b"x"), Ok((0, 0)));
        assert_eq!(t.run(1, b"bc"), Ok((2, 2)));
    }

    #[test]
    fn empty_input_stays_put() {
        assert_eq!(abc().run(2, b""), Ok((2, 0)));
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
            ScanTable::new(vec![]),
            Err(ScanError::BadLength { .. })
        ));
        assert!(matches!(
            ScanTable::new(vec![DEAD; 255]),
            Err(ScanError::BadLength { .. })
        ));
        let mut flat = vec![DEAD; ALPHABET];
        flat[7] = 1;
        assert_eq!(
            ScanTable::new(flat.clone()),
            Err(ScanError::BadTarget { index: 7, value: 1 })
        );
        flat[7] = -2;
        assert_eq!(
            ScanTable::new(flat),
            Err(ScanError::BadTarget {
                index: 7,
                value: -2
            })
        );
    }

    #[test]
    fn reads_native_endian_bytes() {
        let mut flat = vec![DEAD; 2 * ALPHABET];
        flat[usize::from(b'z')] = 1;
        let bytes: Vec<u8> = flat.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let t = ScanTable::from_ne_bytes(&bytes).expect("valid table");
        assert_eq!(t.num_states(), 2);
        assert_eq!(t.run(0, b"zz"), Ok((1, 1)));
        assert!(matches!(
            ScanTable::from_ne_bytes(&bytes[1..]),
            Err(ScanError::BadLength { .. })
        ));
    }

    #[test]
    fn error_messages_name_the_problem() {
        let err = abc().run(9, b"").unwrap_err();
        assert_eq!(err.to_string(), "state 9 out of range for 3 states");
    }
}
