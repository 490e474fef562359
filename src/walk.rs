//! The context-independent half of a mask: the token-trie walk split into CI tokens and CD
//! classes (paper §4.1–4.2).
//!
//! Mirrors `walk_context_independent` and `ci_tokens` in python/gridrail/mask/walk.py, which are
//! the reference: the same nodes in the same order, the same CD classes with the same scan parts,
//! the same token ids in the same encoding. The caller normalizes the configuration first (the
//! pending length as 0 or 1, no tail without an accept), exactly as the reference does.

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use std::fmt;
use std::sync::Arc;

/// The largest vocabulary a mask is built for (the largest tokenizers have ~260,000 ids).
pub const MAX_VOCAB_SIZE: usize = 1 << 24;

use crate::scan::{ScanTable, ALPHABET};

/// Why a table or a walk's arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkError {
    /// Per-node or per-state arrays of different lengths, or a table not of whole states.
    Shape(String),
    /// A state, node or transition outside its table.
    OutOfRange(String),
    /// A shift would land near the grammar's stack bound, where only the reference decides
    /// (python/gridrail/parse/depth.py): the caller computes the residue there instead.
    NearStackBound,
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape(what) | Self::OutOfRange(what) => f.write_str(what),
            Self::NearStackBound => f.write_str("a shift lands near the stack bound"),
        }
    }
}

impl std::error::Error for WalkError {}

/// The token trie of a vocabulary (`gridrail.vocab.trie.TokenTrie`): DFS-ordered nodes, each
/// with its edge byte, depth, subtree size and first token id (-1: none), and the nodes whose
/// spelling several ids share (`aliases`, every id in the reference's order).
pub struct TrieTable {
    edge: Vec<i32>,
    depth: Vec<i32>,
    size: Vec<i32>,
    token_id: Vec<i32>,
    // Per node, whether `aliases` has it: a walk lists the ids of up to every node, and most
    // nodes have none or one, so the map is asked only where it answers.
    aliased: Vec<bool>,
    aliases: FxHashMap<u32, Vec<u32>>,
    // one past the largest token id the trie holds: a mask over fewer ids cannot hold them
    ids_end: usize,
}

impl TrieTable {
    pub fn new(
        edge: Vec<i32>,
        depth: Vec<i32>,
        size: Vec<i32>,
        token_id: Vec<i32>,
        aliases: HashMap<u32, Vec<u32>>,
    ) -> Result<Self, WalkError> {
        let n = edge.len();
        if n == 0 || depth.len() != n || size.len() != n || token_id.len() != n {
            return Err(WalkError::Shape(format!(
                "trie arrays of lengths {}, {}, {}, {}: one entry per node, root included",
                n,
                depth.len(),
                size.len(),
                token_id.len()
            )));
        }
        for (node, &s) in size.iter().enumerate() {
            if s < 1 || node + s as usize > n {
                return Err(WalkError::OutOfRange(format!(
                    "subtree of node {node} has size {s}, past the {n} nodes"
                )));
            }
        }
        for (node, &byte) in edge.iter().enumerate().skip(1) {
            if !(0..ALPHABET as i32).contains(&byte) || depth[node] < 1 {
                return Err(WalkError::OutOfRange(format!(
                    "node {node} has edge byte {byte} at depth {}",
                    depth[node]
                )));
            }
        }
        if let Some(node) = aliases.keys().find(|&&node| node as usize >= n) {
            return Err(WalkError::OutOfRange(format!(
                "aliases name node {node}, past the {n} nodes"
            )));
        }
        let mut aliased = vec![false; n];
        for &node in aliases.keys() {
            aliased[node as usize] = true;
        }
        let ids = token_id
            .iter()
            .filter(|&&id| id >= 0)
            .map(|&id| id as usize);
        let alias_ids = aliases.values().flatten().map(|&id| id as usize);
        let ids_end = ids.chain(alias_ids).max().map_or(0, |id| id + 1);
        Ok(Self {
            edge,
            depth,
            size,
            token_id,
            aliased,
            aliases: aliases.into_iter().collect(),
            ids_end,
        })
    }

    pub fn num_nodes(&self) -> usize {
        self.edge.len()
    }

    /// Whether a mask over `vocab_size` ids can hold every id of the trie (and is not larger
    /// than any vocabulary: masks are allocated at that size).
    pub(crate) fn check_vocab_size(&self, vocab_size: usize) -> Result<(), WalkError> {
        if vocab_size > MAX_VOCAB_SIZE {
            return Err(WalkError::OutOfRange(format!(
                "a vocabulary of {vocab_size} ids: at most {MAX_VOCAB_SIZE}"
            )));
        }
        if vocab_size < self.ids_end {
            return Err(WalkError::OutOfRange(format!(
                "a vocabulary of {vocab_size} ids, but the trie holds id {}",
                self.ids_end - 1
            )));
        }
        Ok(())
    }

    pub(crate) fn edge_byte(&self, node: usize) -> u8 {
        self.edge[node] as u8
    }

    pub(crate) fn subtree_size(&self, node: usize) -> usize {
        self.size[node] as usize
    }

    /// `f` on every id spelled exactly by the path to `node` (`TokenTrie.ids_at`), in its
    /// order.
    pub(crate) fn for_each_id(&self, node: u32, mut f: impl FnMut(u32)) {
        if self.aliased[node as usize] {
            self.aliases[&node].iter().for_each(|&id| f(id));
        } else if let Ok(id) = u32::try_from(self.token_id[node as usize]) {
            f(id);
        }
    }

    fn push_ids(&self, node: u32, out: &mut Vec<u32>) {
        self.for_each_id(node, |id| out.push(id));
    }
}

/// The union scanner as the walk reads it: transitions, and per state the terminals still live
/// and the top shadowing class of those that accept (`CompiledGrammar.winner`'s candidates), as
/// bit sets of `words` 64-bit words each.
pub struct ScannerTable {
    trans: Arc<Vec<i32>>,
    words: usize,
    live: Vec<u64>,
    top: Vec<u64>,
    accepting: Vec<bool>,
}

impl ScannerTable {
    /// The walk's view of `scan`: its transitions (shared, already validated) with `words`
    /// words of live and top sets per state.
    pub fn new(
        scan: &ScanTable,
        words: usize,
        live: Vec<u64>,
        top: Vec<u64>,
    ) -> Result<Self, WalkError> {
        let trans = scan.shared_transitions();
        let states = scan.num_states();
        if words == 0 || live.len() != states * words || top.len() != states * words {
            return Err(WalkError::Shape(format!(
                "scanner of {states} states with {} live and {} top words at {words} words a \
                 state: not whole states",
                live.len(),
                top.len()
            )));
        }
        let accepting = top
            .chunks_exact(words)
            .map(|row| row.iter().any(|&w| w != 0))
            .collect();
        Ok(Self {
            trans,
            words,
            live,
            top,
            accepting,
        })
    }

    pub fn num_states(&self) -> usize {
        self.trans.len() / ALPHABET
    }

    pub fn words(&self) -> usize {
        self.words
    }

    pub(crate) fn step(&self, state: i32, byte: u8) -> i32 {
        self.trans[state as usize * ALPHABET + byte as usize]
    }

    pub(crate) fn is_accepting(&self, state: i32) -> bool {
        self.accepting[state as usize]
    }

    pub(crate) fn live_row(&self, state: i32) -> &[u64] {
        &self.live[state as usize * self.words..(state as usize + 1) * self.words]
    }

    pub(crate) fn top_row(&self, state: i32) -> &[u64] {
        &self.top[state as usize * self.words..(state as usize + 1) * self.words]
    }

    /// The terminals a walk from `scan_state` (last accept `accept_state`, -1: none) can read
    /// of an allowed set: those live there and those its last accept's top class holds. The
    /// walk reads the set only through the live sets of states it reaches, which shrink along
    /// transitions, and the top classes of accepting states among them or of `accept_state`
    /// (each within its state's live set), so a set and its part here walk alike.
    pub(crate) fn read_by_walk(&self, scan_state: i32, accept_state: i32) -> Vec<u64> {
        let mut read = self.live_row(scan_state).to_vec();
        if accept_state >= 0 {
            for (r, t) in read.iter_mut().zip(self.top_row(accept_state)) {
                *r |= t;
            }
        }
        read
    }

    pub(crate) fn meets_live(&self, state: i32, v: &[u64]) -> bool {
        Self::meets(&self.live, state, self.words, v)
    }

    fn meets(set: &[u64], state: i32, words: usize, v: &[u64]) -> bool {
        let row = &set[state as usize * words..(state as usize + 1) * words];
        row.iter().zip(v).any(|(a, b)| a & b != 0)
    }
}

/// Where a walk starts: the normalized scan part of a configuration.
pub struct Start<'a> {
    pub scan_state: i32,
    pub lexeme_length: u32,
    pub accept_state: i32,
    pub tail: &'a [u8],
}

/// A CD class (`gridrail.mask.walk.CDClass`): the subtree at `node`, with the scan part reached
/// just before its edge byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdClass {
    pub node: u32,
    pub scan_state: i32,
    pub lexeme_length: u32,
    pub accept_state: i32,
    pub tail: Vec<u8>,
}

/// The token ids of a walk's CI nodes in `ci_tokens`'s encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tokens {
    /// The ids, node by node (aliases in their order): fewer bytes than the bits.
    Sparse(Vec<u32>),
    /// The ids as little-endian bits, `words_per_row(vocab_size) * 4` bytes.
    Dense(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    pub ci_nodes: Vec<u32>,
    pub cd_classes: Vec<CdClass>,
    pub tokens: Tokens,
}

/// Where a walk takes the walks below some nodes from elsewhere (`below::SharedWalks`): below
/// a node where the lexeme leaves the schema's names — its parent's state is one of the names'
/// (numbered from `base_states`), its own state and last accept are the base scanner's — the
/// walk reads no name, so every schema of the role has the same walk there. Only subtrees of
/// more than `min_size` nodes are taken: a smaller one costs less to walk than to look up.
pub struct Splice<'a> {
    pub base_states: i32,
    pub min_size: usize, // subtrees of at most this many nodes are walked here
    #[allow(clippy::type_complexity)]
    pub below: Box<dyn Fn(&Start, &[u64], usize) -> Result<Arc<Walk>, WalkError> + 'a>,
}

/// `Splice::min_size` of the store every schema of a role shares.
pub const SPLICE_BELOW: usize = 16;

/// The walk's state at one depth of the current path.
#[derive(Clone, Copy)]
struct Frame {
    state: i32,
    length: u32,
    accept_state: i32,
    accept_depth: i64,
}

/// `walk_context_independent` then `ci_tokens`: below trie node `root`, from `start`, with the
/// allowed terminals (ignored ones included) `v` as `scanner.words()` words.
pub fn walk(
    scanner: &ScannerTable,
    trie: &TrieTable,
    start: &Start,
    v: &[u64],
    root: usize,
    vocab_size: usize,
    splice: Option<&Splice>,
) -> Result<Walk, WalkError> {
    let words = scanner.words;
    if v.len() != words {
        return Err(WalkError::Shape(format!(
            "allowed set of {} words, not {words}",
            v.len()
        )));
    }
    if root >= trie.num_nodes() {
        return Err(WalkError::OutOfRange(format!(
            "root {root} is not a trie node"
        )));
    }
    trie.check_vocab_size(vocab_size)?;
    let states = scanner.num_states() as i64;
    for state in [start.scan_state, start.accept_state] {
        if state < -1 || state as i64 >= states || start.scan_state < 0 {
            return Err(WalkError::OutOfRange(format!(
                "scan state {state} of {states} states"
            )));
        }
    }
    // Per depth of the current path (as in the reference): scanner state, lexeme length, last
    // accept state and the depth it was reached at (-1: before the walk, so the tail starts
    // with the start's tail).
    let mut frames = vec![Frame {
        state: start.scan_state,
        length: start.lexeme_length,
        accept_state: start.accept_state,
        accept_depth: -1,
    }];
    let mut path: Vec<u8> = Vec::new();
    let mut ci_nodes = Vec::new();
    let mut cd_classes = Vec::new();
    // per scanner state, whether a terminal of `v` is live there (0: not asked yet, 1 yes,
    // 2 no): the live rows are read once a state instead of once a node
    let mut live_in_v = vec![0u8; scanner.num_states()];
    let base = trie.depth[root];
    let (mut node, end) = (root + 1, root + trie.size[root] as usize);
    while node < end {
        let d = (trie.depth[node] - base) as usize;
        if d == 0 || d > frames.len() {
            return Err(WalkError::OutOfRange(format!(
                "node {node} at depth {} is not below its parent in root {root}'s subtree",
                trie.depth[node]
            )));
        }
        frames.truncate(d);
        path.truncate(d - 1);
        let parent = frames[d - 1];
        let byte = trie.edge[node] as u8;
        let q = scanner.trans[parent.state as usize * ALPHABET + byte as usize];
        let live = q >= 0 && {
            let known = &mut live_in_v[q as usize];
            if *known == 0 {
                *known = if ScannerTable::meets(&scanner.live, q, words, v) {
                    1
                } else {
                    2
                };
            }
            *known == 1
        };
        if live {
            path.push(byte);
            frames.push(if scanner.accepting[q as usize] {
                Frame {
                    state: q,
                    length: parent.length + 1,
                    accept_state: q,
                    accept_depth: d as i64,
                }
            } else {
                Frame {
                    state: q,
                    length: parent.length + 1,
                    ..parent
                }
            });
            if trie.token_id[node] >= 0 {
                ci_nodes.push(node as u32);
            }
            let here = frames[d];
            if let Some(splice) = splice.filter(|s| {
                parent.state >= s.base_states
                    && q < s.base_states
                    && here.accept_state < s.base_states
                    && trie.size[node] as usize > s.min_size
            }) {
                let before_walk: Vec<u8>;
                let tail: &[u8] = if here.accept_state < 0 {
                    &[]
                } else if here.accept_depth >= 0 {
                    &path[here.accept_depth as usize..]
                } else {
                    before_walk = [start.tail, &path].concat();
                    &before_walk
                };
                let below = (splice.below)(
                    &Start {
                        scan_state: q,
                        lexeme_length: 1,
                        accept_state: here.accept_state,
                        tail,
                    },
                    v,
                    node,
                )?;
                // the walk below, as this walk would have made it: its lexeme lengths count
                // from this node's, and a tail with no accept yet starts where this walk did
                ci_nodes.extend_from_slice(&below.ci_nodes);
                cd_classes.extend(below.cd_classes.iter().map(|cls| CdClass {
                    lexeme_length: cls.lexeme_length + here.length - 1,
                    tail: if cls.accept_state < 0 {
                        [start.tail, &path, &cls.tail].concat()
                    } else {
                        cls.tail.clone()
                    },
                    ..*cls
                }));
                node += trie.size[node] as usize;
                continue;
            }
            node += 1;
            continue;
        }
        let last_accept = parent.accept_state;
        let rejected =
            q < 0 && (last_accept < 0 || !ScannerTable::meets(&scanner.top, last_accept, words, v));
        if !rejected {
            let a_depth = parent.accept_depth;
            let tail = if a_depth >= 0 {
                path[a_depth as usize..].to_vec()
            } else {
                [start.tail, &path].concat()
            };
            cd_classes.push(CdClass {
                node: node as u32,
                scan_state: parent.state,
                lexeme_length: parent.length,
                accept_state: last_accept,
                tail,
            });
        }
        node += trie.size[node] as usize;
    }
    let tokens = ci_tokens(trie, &ci_nodes, vocab_size);
    Ok(Walk {
        ci_nodes,
        cd_classes,
        tokens,
    })
}

/// `ci_tokens`: the ids of the CI nodes, as ids when they take fewer bytes than the bits.
fn ci_tokens(trie: &TrieTable, ci_nodes: &[u32], vocab_size: usize) -> Tokens {
    let mut ids = Vec::with_capacity(ci_nodes.len());
    for &node in ci_nodes {
        trie.push_ids(node, &mut ids);
    }
    let dense_len = vocab_size.div_ceil(32) * 4;
    if ids.len() * 4 < dense_len {
        return Tokens::Sparse(ids);
    }
    let mut bits = vec![0u8; dense_len];
    for id in ids {
        bits[(id >> 3) as usize] |= 1 << (id & 7);
    }
    Tokens::Dense(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scanner over one terminal `ab` (bit 0) and one `a+` (bit 1, lower class): states
    /// 0 start, 1 after `a` (a+ accepts), 2 after `ab` (ab accepts), 3 after `aa`.
    fn scanner() -> ScannerTable {
        let mut trans = vec![-1; 4 * ALPHABET];
        trans[b'a' as usize] = 1;
        trans[ALPHABET + b'b' as usize] = 2;
        trans[ALPHABET + b'a' as usize] = 3;
        trans[3 * ALPHABET + b'a' as usize] = 3;
        let live = vec![0b11, 0b11, 0b01, 0b10];
        let top = vec![0, 0b10, 0b01, 0b10];
        let scan = ScanTable::new(trans, &[0, 1, 1, 1]).unwrap();
        ScannerTable::new(&scan, 1, live, top).unwrap()
    }

    /// Tokens `a` (0), `ab` (1), `b` (2), `aa` (3 and its alias 4).
    fn trie() -> TrieTable {
        // root; a; aa; ab; b
        let edge = vec![-1, b'a' as i32, b'a' as i32, b'b' as i32, b'b' as i32];
        let depth = vec![0, 1, 2, 2, 1];
        let size = vec![5, 3, 1, 1, 1];
        let token_id = vec![-1, 0, 3, 1, 2];
        let aliases = HashMap::from([(2, vec![3, 4])]);
        TrieTable::new(edge, depth, size, token_id, aliases).unwrap()
    }

    fn start() -> Start<'static> {
        Start {
            scan_state: 0,
            lexeme_length: 0,
            accept_state: -1,
            tail: b"",
        }
    }

    #[test]
    fn tokens_inside_a_viable_lexeme_are_ci_and_a_dead_byte_after_an_accept_is_cd() {
        let w = super::walk(&scanner(), &trie(), &start(), &[0b11], 0, 1024, None).unwrap();
        assert_eq!(w.ci_nodes, vec![1, 2, 3]);
        assert_eq!(w.tokens, Tokens::Sparse(vec![0, 3, 4, 1]));
        // `b` from the start: dead, and nothing accepted before it: rejected whatever the stack
        assert!(w.cd_classes.is_empty());
    }

    /// The CD class at `node`, reached after `a` was read (and accepted as a+).
    fn after_a(node: u32) -> CdClass {
        CdClass {
            node,
            scan_state: 1,
            lexeme_length: 1,
            accept_state: 1,
            tail: vec![],
        }
    }

    #[test]
    fn a_terminal_outside_the_allowed_set_prunes_or_defers() {
        // only `ab` allowed: `a` stays viable (ab is live); `aa` is not by rule (i) (only a+ is
        // live there), but it may be by rule (ii) after the accept of `a`: the stack decides
        let w = super::walk(&scanner(), &trie(), &start(), &[0b01], 0, 1024, None).unwrap();
        assert_eq!(w.ci_nodes, vec![1, 3]);
        assert_eq!(w.cd_classes, vec![after_a(2)]);
        // only a+ allowed: after `a` the byte `b` kills the lexeme at an accept of a+: CD
        let w = super::walk(&scanner(), &trie(), &start(), &[0b10], 0, 1024, None).unwrap();
        assert_eq!(w.ci_nodes, vec![1, 2]);
        assert_eq!(w.cd_classes, vec![after_a(3)]);
    }

    #[test]
    fn many_ids_come_as_bits() {
        let w = super::walk(&scanner(), &trie(), &start(), &[0b11], 0, 8, None).unwrap();
        assert_eq!(w.tokens, Tokens::Dense(vec![0b11011, 0, 0, 0]));
    }

    #[test]
    fn a_walk_below_a_node_reads_only_its_subtree() {
        let after_a = Start {
            scan_state: 1,
            lexeme_length: 1,
            accept_state: 1,
            tail: b"",
        };
        let w = super::walk(&scanner(), &trie(), &after_a, &[0b11], 1, 1024, None).unwrap();
        assert_eq!(w.ci_nodes, vec![2, 3]);
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(super::walk(&scanner(), &trie(), &start(), &[0b11, 0], 0, 64, None).is_err());
        assert!(super::walk(&scanner(), &trie(), &start(), &[0b11], 9, 64, None).is_err());
        let bad = Start {
            scan_state: 7,
            lexeme_length: 0,
            accept_state: -1,
            tail: b"",
        };
        assert!(super::walk(&scanner(), &trie(), &bad, &[0b11], 0, 64, None).is_err());
        let one_state = ScanTable::new(vec![-1; ALPHABET], &[0]).unwrap();
        assert!(ScannerTable::new(&one_state, 1, vec![0], vec![0]).is_ok());
        assert!(ScannerTable::new(&one_state, 2, vec![0], vec![0]).is_err());
        assert!(ScannerTable::new(&one_state, 1, vec![0, 0], vec![0]).is_err());
        assert!(TrieTable::new(vec![-1], vec![0], vec![2], vec![-1], HashMap::new()).is_err());
        // a mask too narrow for the trie's ids (the largest is 4), or wider than any vocabulary
        assert!(super::walk(&scanner(), &trie(), &start(), &[0b11], 0, 4, None).is_err());
        assert!(super::walk(&scanner(), &trie(), &start(), &[0b11], 0, 5, None).is_ok());
        let huge = MAX_VOCAB_SIZE + 1;
        assert!(super::walk(&scanner(), &trie(), &start(), &[0b11], 0, huge, None).is_err());
    }
}
