//! The CD residue of a mask: the tokens of the walk's CD classes that the live stack admits
//! (paper §4.2), each class's first byte stepped on the live configuration and the rest of its
//! subtree walked from the configuration after it.
//!
//! Mirrors `_cd_residue` / `evaluate_cd_class` in python/gridrail/mask/, and the oracle's
//! byte step they call (`Oracle.step`: `_scan_byte`, `_close_at_last_accept`, `_rescan`,
//! `_emit`, `is_viable`) and the LR machine's simulation (`LRMachine._shiftable`, `shift`) in
//! python/gridrail/parse/, which are the reference. A stack is its states, bottom to top; the
//! Python side's interned nodes and memos become per-call memos here.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::below::{same_bytes, walk_key, SharedWalks, Tail, WalkStore};
use crate::scan::ALPHABET;
use crate::walk::{walk, CdClass, ScannerTable, Start, Tokens, TrieTable, Walk, WalkError};

/// The action that accepts (`gridrail.grammar.lalr.ACCEPT`).
pub const ACCEPT: i32 = -(1 << 30);
/// The most terminals an LR table may have: its terminal sets are allocated per state.
pub const MAX_TERMINALS: usize = 1 << 16;

/// LALR(1) tables (`LalrTables`): per state its actions (terminal -> shift state, -1 - p to
/// reduce by production p, or ACCEPT) and gotos, and per production (lhs, rhs length).
pub struct LrTables {
    action: Vec<HashMap<u32, i32>>,
    goto: Vec<HashMap<u32, u32>>,
    productions: Vec<(u32, u32)>,
    words: usize,
    shift_mask: Vec<Vec<u64>>,
    reductions: Vec<Vec<(u32, Vec<u64>)>>,
    /// The stack bound (`StackLimit`): per state the weight of its entry, and the load above
    /// which a shift is left to the reference (`LRMachine._shiftable`'s `near_load`); None:
    /// unbounded.
    bound: Option<(Vec<u64>, u64)>,
}

impl LrTables {
    /// `end` is the id of $END: the terminals are 0..end, in `words` 64-bit words.
    pub fn new(
        action: Vec<HashMap<u32, i32>>,
        goto: Vec<HashMap<u32, u32>>,
        productions: Vec<(u32, u32)>,
        end: u32,
        words: usize,
    ) -> Result<Self, WalkError> {
        let fits = (end as usize) <= MAX_TERMINALS && (end as usize).div_ceil(64) == words;
        if goto.len() != action.len() || !fits {
            return Err(WalkError::Shape(format!(
                "{} action rows and {} goto rows for {end} terminals in {words} words (at \
                 most {MAX_TERMINALS} terminals, in as many words as they take)",
                action.len(),
                goto.len()
            )));
        }
        let states = action.len() as i64;
        if let Some(bad) = goto
            .iter()
            .flat_map(|row| row.values())
            .find(|&&q| q as i64 >= states)
        {
            return Err(WalkError::OutOfRange(format!("goto to state {bad}")));
        }
        let mut shift_mask = Vec::with_capacity(action.len());
        let mut reductions = Vec::with_capacity(action.len());
        for row in &action {
            let mut shifts = vec![0u64; words];
            let mut groups: HashMap<u32, Vec<u64>> = HashMap::new();
            for (&terminal, &mv) in row {
                if terminal > end {
                    return Err(WalkError::OutOfRange(format!(
                        "action on terminal {terminal}"
                    )));
                }
                if mv >= 0 {
                    if mv as i64 >= states {
                        return Err(WalkError::OutOfRange(format!("shift to state {mv}")));
                    }
                    if terminal < end {
                        shifts[terminal as usize / 64] |= 1 << (terminal % 64);
                    }
                } else if mv != ACCEPT {
                    let p = (-1 - mv) as u32;
                    if p as usize >= productions.len() {
                        return Err(WalkError::OutOfRange(format!("reduce by production {p}")));
                    }
                    if terminal < end {
                        let group = groups.entry(p).or_insert_with(|| vec![0u64; words]);
                        group[terminal as usize / 64] |= 1 << (terminal % 64);
                    }
                }
            }
            let mut sorted: Vec<(u32, Vec<u64>)> = groups.into_iter().collect();
            // the reference sorts its groups by move (-1 - p): descending production
            sorted.sort_by_key(|(p, _)| std::cmp::Reverse(*p));
            shift_mask.push(shifts);
            reductions.push(sorted);
        }
        Ok(Self {
            action,
            goto,
            productions,
            words,
            shift_mask,
            reductions,
            bound: None,
        })
    }

    /// These tables under a stack bound: `weights` per state; a shift onto a stack (its
    /// reduce chain done) that weighs more than `near` is refused with
    /// `WalkError::NearStackBound` (`near` leaves room for the heaviest terminal).
    pub fn with_bound(mut self, weights: Vec<u64>, near: u64) -> Result<Self, WalkError> {
        if weights.len() != self.action.len() {
            return Err(WalkError::Shape(format!(
                "{} stack weights for {} states",
                weights.len(),
                self.action.len()
            )));
        }
        self.bound = Some((weights, near));
        Ok(self)
    }

    pub fn words(&self) -> usize {
        self.words
    }

    pub fn num_states(&self) -> usize {
        self.action.len()
    }

    fn goto(&self, state: u32, lhs: u32) -> Result<u32, WalkError> {
        self.goto[state as usize]
            .get(&lhs)
            .copied()
            .ok_or_else(|| WalkError::OutOfRange(format!("no goto from state {state} on {lhs}")))
    }

    /// `LRMachine._shiftable`: the terminals shiftable after the reduce chains, simulated for
    /// all terminals at once.
    fn shiftable(&self, stack: &[u32]) -> Result<Vec<u64>, WalkError> {
        let mut mask = vec![0u64; self.words];
        // the reference's `_all_terminals`, every terminal but $END: no row holds a bit of
        // $END or past it (`new` leaves them out), so all ones is the same set
        let all = vec![u64::MAX; self.words];
        // under a stack bound, the load of each part of the stack, bottom up
        let loads: Option<Vec<u64>> = self.bound.as_ref().map(|(weights, _)| {
            let mut total = 0;
            stack
                .iter()
                .map(|&q| {
                    total += weights[q as usize];
                    total
                })
                .collect()
        });
        let mut pending: Vec<(usize, Vec<u32>, Vec<u64>)> = vec![(stack.len(), Vec::new(), all)];
        while let Some((below_len, overlay, wanted)) = pending.pop() {
            let state = *overlay.last().unwrap_or(&stack[below_len - 1]);
            let mut shifts = false;
            for (m, (s, w)) in mask
                .iter_mut()
                .zip(self.shift_mask[state as usize].iter().zip(&wanted))
            {
                *m |= s & w;
                shifts |= s & w != 0;
            }
            if let (Some((weights, near)), Some(loads)) = (&self.bound, &loads) {
                let above: u64 = overlay.iter().map(|&q| weights[q as usize]).sum();
                if shifts && loads[below_len - 1] + above > *near {
                    return Err(WalkError::NearStackBound);
                }
            }
            for (p, group) in &self.reductions[state as usize] {
                let group: Vec<u64> = group.iter().zip(&wanted).map(|(g, w)| g & w).collect();
                if group.iter().all(|&g| g == 0) {
                    continue;
                }
                let (lhs, length) = self.productions[*p as usize];
                let keep = overlay.len().saturating_sub(length as usize);
                let from_stack = length as usize - (overlay.len() - keep);
                if from_stack >= below_len {
                    return Err(WalkError::OutOfRange(
                        "a reduction pops the whole stack".into(),
                    ));
                }
                let below = below_len - from_stack;
                let top = if keep > 0 {
                    overlay[keep - 1]
                } else {
                    stack[below - 1]
                };
                let mut next = overlay[..keep].to_vec();
                next.push(self.goto(top, lhs)?);
                pending.push((below, next, group));
            }
        }
        Ok(mask)
    }

    /// `LRMachine.shift`: the reduce chain for `terminal`, then its push.
    fn shift(&self, stack: &[u32], terminal: u32) -> Result<Stack, WalkError> {
        let mut stack = stack.to_vec();
        loop {
            let state = *stack.last().expect("a stack has its root");
            let mv = *self.action[state as usize].get(&terminal).ok_or_else(|| {
                WalkError::OutOfRange(format!("state {state} cannot shift terminal {terminal}"))
            })?;
            if mv >= 0 {
                stack.push(mv as u32);
                return Ok(stack.into());
            }
            let (lhs, length) = self.productions[(-1 - mv) as usize];
            if length as usize >= stack.len() {
                return Err(WalkError::OutOfRange(
                    "a reduction pops the whole stack".into(),
                ));
            }
            stack.truncate(stack.len() - length as usize);
            let top = *stack.last().expect("a stack has its root");
            stack.push(self.goto(top, lhs)?);
        }
    }
}

/// A stack's states, bottom to top, shared: configurations that only move the pending lexeme
/// hold the same stack (the reference shares its interned nodes).
pub type Stack = Arc<[u32]>;

/// A terminal set as 64-bit words, shared: the allowed set of a stack is read at every step.
type Terminals = Arc<[u64]>;

/// A configuration (`Configuration`): the stack's states and the pending lexeme.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Config {
    pub stack: Stack,
    pub scan_state: i32,
    pub lexeme_length: u32,
    pub accept_state: i32,
    pub tail: Vec<u8>,
}

/// The facts the reference keeps on stack nodes and in the oracle, each a function of its key
/// (for one scanner and LR table), kept across residues; a table is emptied when it reaches
/// `capacity` entries, so memory stays bounded.
pub struct StepMemo {
    allowed: FxHashMap<Stack, Terminals>,
    closings: FxHashMap<(Stack, i32, Tail), Option<Config>>,
    after_kill: FxHashMap<(i32, i32), (Vec<u64>, Vec<u8>)>,
    capacity: usize,
}

impl StepMemo {
    pub fn new(capacity: usize) -> Self {
        Self {
            allowed: FxHashMap::default(),
            closings: FxHashMap::default(),
            after_kill: FxHashMap::default(),
            capacity,
        }
    }
}

fn bounded_insert<K: std::hash::Hash + Eq, V>(
    map: &mut FxHashMap<K, V>,
    capacity: usize,
    key: K,
    value: V,
) {
    if map.len() >= capacity {
        map.clear();
    }
    map.insert(key, value);
}

/// The oracle's byte step over one scanner and LR table.
pub struct Stepper<'a> {
    scanner: &'a ScannerTable,
    lr: &'a LrTables,
    ignored: &'a [u64],
    start_scan: i32,
    memo: &'a mut StepMemo,
}

impl<'a> Stepper<'a> {
    pub fn new(
        scanner: &'a ScannerTable,
        lr: &'a LrTables,
        ignored: &'a [u64],
        start_scan: i32,
        memo: &'a mut StepMemo,
    ) -> Self {
        Self {
            scanner,
            lr,
            ignored,
            start_scan,
            memo,
        }
    }

    /// A(σ) ∪ ignored: `allowed_mask(stack) | ignored`.
    fn v(&mut self, stack: &Stack) -> Result<Terminals, WalkError> {
        if let Some(found) = self.memo.allowed.get(&**stack) {
            return Ok(found.clone());
        }
        let mut mask = self.lr.shiftable(stack)?;
        for (m, i) in mask.iter_mut().zip(self.ignored) {
            *m |= i;
        }
        let mask: Terminals = mask.into();
        bounded_insert(
            &mut self.memo.allowed,
            self.memo.capacity,
            stack.clone(),
            mask.clone(),
        );
        Ok(mask)
    }

    fn winner(&self, accept_state: i32, v: &[u64]) -> Option<u32> {
        let row = self.scanner.top_row(accept_state);
        row.iter().zip(v).enumerate().find_map(|(k, (t, w))| {
            let both = t & w;
            (both != 0).then(|| (k * 64) as u32 + both.trailing_zeros())
        })
    }

    fn is_ignored(&self, terminal: u32) -> bool {
        self.ignored[terminal as usize / 64] >> (terminal % 64) & 1 == 1
    }

    fn emit(&mut self, stack: &Stack, accept_state: i32) -> Result<Option<Stack>, WalkError> {
        let v = self.v(stack)?;
        let Some(terminal) = self.winner(accept_state, &v) else {
            return Ok(None);
        };
        if self.is_ignored(terminal) {
            return Ok(Some(stack.clone()));
        }
        self.lr.shift(stack, terminal).map(Some)
    }

    fn extended(&self, cfg: &Config, q: i32, byte: u8) -> Config {
        if self.scanner.is_accepting(q) {
            return Config {
                stack: cfg.stack.clone(),
                scan_state: q,
                lexeme_length: cfg.lexeme_length + 1,
                accept_state: q,
                tail: Vec::new(),
            };
        }
        let mut tail = cfg.tail.clone();
        tail.push(byte);
        Config {
            stack: cfg.stack.clone(),
            scan_state: q,
            lexeme_length: cfg.lexeme_length + 1,
            accept_state: cfg.accept_state,
            tail,
        }
    }

    fn rescan(&mut self, stack: Stack, data: &[u8]) -> Result<Option<Config>, WalkError> {
        let mut cfg = Config {
            stack,
            scan_state: self.start_scan,
            lexeme_length: 0,
            accept_state: -1,
            tail: Vec::new(),
        };
        let mut pending = data.to_vec();
        let mut position = 0;
        while position < pending.len() {
            let byte = pending[position];
            let q = self.scanner.step(cfg.scan_state, byte);
            if q >= 0 {
                cfg = self.extended(&cfg, q, byte);
                position += 1;
                continue;
            }
            if cfg.accept_state < 0 {
                return Ok(None);
            }
            let Some(emitted) = self.emit(&cfg.stack, cfg.accept_state)? else {
                return Ok(None);
            };
            pending = [&cfg.tail[..], &pending[position..]].concat();
            position = 0;
            cfg = Config {
                stack: emitted,
                scan_state: self.start_scan,
                lexeme_length: 0,
                accept_state: -1,
                tail: Vec::new(),
            };
        }
        Ok(Some(cfg))
    }

    fn close_at_last_accept(&mut self, cfg: &Config) -> Result<Option<Config>, WalkError> {
        let key = (cfg.stack.clone(), cfg.accept_state, Tail(cfg.tail.clone()));
        if let Some(found) = self.memo.closings.get(&key) {
            return Ok(found.clone());
        }
        let closed = match self.emit(&cfg.stack, cfg.accept_state)? {
            None => None,
            Some(stack) => self.rescan(stack, &cfg.tail)?,
        };
        bounded_insert(
            &mut self.memo.closings,
            self.memo.capacity,
            key,
            closed.clone(),
        );
        Ok(closed)
    }

    fn scan_byte(&mut self, cfg: &Config, byte: u8) -> Result<Option<Config>, WalkError> {
        let mut closings = Closings::new(cfg.clone());
        Ok(self
            .scan_in(&mut closings, byte)?
            .map(|(k, q)| self.extended(&closings.levels[k].cfg, q, byte)))
    }

    fn passes_rule_i(&mut self, cfg: &Config) -> Result<bool, WalkError> {
        if cfg.lexeme_length == 0 {
            return Ok(true);
        }
        let v = self.v(&cfg.stack)?;
        Ok(self.scanner.meets_live(cfg.scan_state, &v))
    }

    fn after_kill(&mut self, killed: i32, rescanned: i32) -> (Vec<u64>, Vec<u8>) {
        if let Some(found) = self.memo.after_kill.get(&(killed, rescanned)) {
            return found.clone();
        }
        let mut reach = vec![0u64; self.scanner.words()];
        let mut dying = Vec::new();
        for byte in 0..ALPHABET {
            let byte = byte as u8;
            if self.scanner.step(killed, byte) >= 0 {
                continue;
            }
            let q = self.scanner.step(rescanned, byte);
            if q >= 0 {
                for (r, l) in reach.iter_mut().zip(self.scanner.live_row(q)) {
                    *r |= l;
                }
            } else {
                dying.push(byte);
            }
        }
        let capacity = self.memo.capacity;
        bounded_insert(
            &mut self.memo.after_kill,
            capacity,
            (killed, rescanned),
            (reach.clone(), dying.clone()),
        );
        (reach, dying)
    }

    /// `Oracle.is_viable`'s rule (ii) (`step_from` asks rule (i) first): the pending lexeme
    /// closed at its last accept, one byte the lexeme cannot take then starts a live one.
    fn passes_rule_ii(&mut self, cfg: &Config) -> Result<bool, WalkError> {
        if cfg.accept_state < 0 {
            return Ok(false);
        }
        let Some(after_tail) = self.close_at_last_accept(cfg)? else {
            return Ok(false);
        };
        let (reach, dying) = self.after_kill(cfg.scan_state, after_tail.scan_state);
        let v = self.v(&after_tail.stack)?;
        if reach.iter().zip(v.iter()).any(|(r, w)| r & w != 0) {
            return Ok(true);
        }
        if after_tail.accept_state < 0 {
            return Ok(false);
        }
        for byte in dying {
            if let Some(nxt) = self.scan_byte(&after_tail, byte)? {
                if self.passes_rule_i(&nxt)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// `Oracle.step`: one byte, or None when the prefix stops being viable.
    pub fn step(&mut self, cfg: &Config, byte: u8) -> Result<Option<Config>, WalkError> {
        self.step_from(&mut Closings::new(cfg.clone()), byte)
    }

    /// `step(closings.levels[0], byte)`, reading the lexeme closings its byte goes through
    /// (`scan_byte`'s loop) from `closings` and adding those made.
    fn step_from(
        &mut self,
        closings: &mut Closings,
        byte: u8,
    ) -> Result<Option<Config>, WalkError> {
        let Some((k, q)) = self.scan_in(closings, byte)? else {
            return Ok(None);
        };
        // rule (i) on the extended configuration reads its stack's allowed set: the level's
        let v = match &closings.levels[k].allowed {
            Some(v) => v.clone(),
            None => {
                let v = self.v(&closings.levels[k].cfg.stack)?;
                closings.levels[k].allowed = Some(v.clone());
                v
            }
        };
        let nxt = self.extended(&closings.levels[k].cfg, q, byte);
        // rule (ii) closes the lexeme on the same stack: not when its terminal cannot come
        // there (`emit` finds no winner), which the allowed set in hand tells
        let viable = self.scanner.meets_live(q, &v)
            || (nxt.accept_state >= 0
                && self.winner(nxt.accept_state, &v).is_some()
                && self.passes_rule_ii(&nxt)?);
        Ok(viable.then_some(nxt))
    }

    /// `scan_byte`'s loop over `closings`: the level whose pending lexeme takes `byte` and the
    /// scanner state it goes to, each closing it passes read from `closings` or added to
    /// them; None when the byte is rejected.
    fn scan_in(
        &mut self,
        closings: &mut Closings,
        byte: u8,
    ) -> Result<Option<(usize, i32)>, WalkError> {
        let mut k = 0;
        loop {
            if k == closings.levels.len() {
                if closings.ended {
                    return Ok(None);
                }
                match self.close_at_last_accept(&closings.levels[k - 1].cfg)? {
                    Some(closed) => closings.levels.push(Level::new(closed)),
                    None => {
                        closings.ended = true;
                        return Ok(None);
                    }
                }
            }
            let cfg = &closings.levels[k].cfg;
            let q = self.scanner.step(cfg.scan_state, byte);
            if q >= 0 {
                return Ok(Some((k, q)));
            }
            if cfg.accept_state < 0 {
                return Ok(None);
            }
            k += 1;
        }
    }
}

/// A configuration, as one step from it reads it: it and the allowed set of its stack.
struct Level {
    cfg: Config,
    allowed: Option<Terminals>,
}

impl Level {
    fn new(cfg: Config) -> Self {
        Self { cfg, allowed: None }
    }
}

/// The configurations a byte's step from `levels[0]` may go through: each next one the one
/// before with its pending lexeme closed at its last accept (`_close_at_last_accept`), made
/// when a byte first needs it. CD classes of one scan part on one stack share them: a class's
/// step is then a few table reads, not memo lookups.
struct Closings {
    levels: Vec<Level>,
    ended: bool, // the last level's lexeme does not close
}

impl Closings {
    fn new(cfg: Config) -> Self {
        Self {
            levels: vec![Level::new(cfg)],
            ended: false,
        }
    }

    /// Whether `cls`'s scan part is the first configuration's (on the same stack).
    fn starts_at(&self, cls: &CdClass) -> bool {
        let cfg = &self.levels[0].cfg;
        (cfg.scan_state, cfg.lexeme_length, cfg.accept_state)
            == (cls.scan_state, cls.lexeme_length, cls.accept_state)
            && same_bytes(&cfg.tail, &cls.tail)
    }
}

/// The walks below CD nodes and the step facts (`StepMemo`), kept across residues (the
/// reference reads the walks from the guide's T1 cache): each is a function of its key, so a
/// kept one is the one that would be computed. Walks from base states go to the `shared`
/// store where there is one, the others stay here.
pub struct WalkMemo {
    walks: WalkStore,
    steps: StepMemo,
    shared: Option<Arc<SharedWalks>>,
}

impl WalkMemo {
    pub fn new(capacity: usize, max_bytes: usize) -> Self {
        Self::sharing(capacity, max_bytes, None)
    }

    pub fn sharing(capacity: usize, max_bytes: usize, shared: Option<Arc<SharedWalks>>) -> Self {
        Self {
            walks: WalkStore::new(capacity, max_bytes),
            steps: StepMemo::new(capacity),
            shared,
        }
    }

    /// A memo of the same bounds and shared store, empty.
    pub fn emptied(&self) -> Self {
        Self::sharing(self.capacity(), self.max_bytes(), self.shared.clone())
    }

    pub fn len(&self) -> usize {
        self.walks.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.walks.map.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.walks.capacity
    }

    /// (walks asked for, walks computed) since the memo was made: by this memo's residues,
    /// in its own store and in the shared one.
    pub fn counts(&self) -> (u64, u64) {
        (self.walks.lookups, self.walks.misses)
    }

    pub fn max_bytes(&self) -> usize {
        self.walks.max_bytes
    }
}

/// `_cd_residue`: the tokens of `classes` (the CD classes of the walk from `live`, below the
/// root) that `live`'s stack admits, as little-endian bits over `vocab_size` ids.
#[allow(clippy::too_many_arguments)]
pub fn cd_residue(
    scanner: &ScannerTable,
    lr: &LrTables,
    ignored: &[u64],
    start_scan: i32,
    memo: &mut WalkMemo,
    trie: &TrieTable,
    live: &Config,
    classes: &[CdClass],
    vocab_size: usize,
) -> Result<Vec<u8>, WalkError> {
    trie.check_vocab_size(vocab_size)?;
    let walks = &mut memo.walks;
    let base_walks = memo.shared.clone();
    let mut stepper = Stepper::new(scanner, lr, ignored, start_scan, &mut memo.steps);
    let stepper = &mut stepper;
    let mut bits = vec![0u8; vocab_size.div_ceil(32) * 4];
    let add = |id: u32, bits: &mut Vec<u8>| bits[(id >> 3) as usize] |= 1 << (id & 7);
    // (a stack, the walk whose CD classes are stepped on it — None: `classes`): classes are
    // read where they are kept, not copied
    let mut pending: Vec<(Stack, Option<Arc<Walk>>)> = vec![(live.stack.clone(), None)];
    // the reference pops classes from the end of its list: the order does not change the set
    while let Some((stack, walked)) = pending.pop() {
        let listed = match &walked {
            Some(below) => &below.cd_classes[..],
            None => classes,
        };
        // the classes of one scan part (siblings in the trie, listed together) share the
        // closings their bytes go through
        let mut shared: Option<Closings> = None;
        for cls in listed {
            if !shared.as_ref().is_some_and(|c| c.starts_at(cls)) {
                shared = Some(Closings::new(Config {
                    stack: stack.clone(),
                    scan_state: cls.scan_state,
                    lexeme_length: cls.lexeme_length,
                    accept_state: cls.accept_state,
                    tail: cls.tail.clone(),
                }));
            }
            let closings = shared.as_mut().expect("made for this class's scan part");
            let node = cls.node as usize;
            let Some(nxt) = stepper.step_from(closings, trie.edge_byte(node))? else {
                continue;
            };
            trie.for_each_id(cls.node, |id| add(id, &mut bits));
            if trie.subtree_size(node) > 1 {
                let accepted = nxt.accept_state >= 0;
                let start = Start {
                    scan_state: nxt.scan_state,
                    lexeme_length: nxt.lexeme_length.min(1),
                    accept_state: nxt.accept_state,
                    tail: if accepted { &nxt.tail } else { &[] },
                };
                let allowed = stepper.v(&nxt.stack)?;
                walks.lookups += 1;
                let below = match base_walks.as_deref().filter(|s| s.holds(&start)) {
                    Some(shared) => {
                        let (walked, computed) = shared.walk_below(
                            stepper.scanner,
                            trie,
                            &start,
                            &allowed,
                            node,
                            vocab_size,
                        )?;
                        walks.misses += u64::from(computed);
                        walked
                    }
                    None => {
                        let key = walk_key(stepper.scanner, &start, &allowed, node);
                        match walks.map.get(&key) {
                            Some(found) => found.clone(),
                            None => {
                                walks.misses += 1;
                                let made = Arc::new(walk(
                                    stepper.scanner,
                                    trie,
                                    &start,
                                    &key.4,
                                    node,
                                    vocab_size,
                                    None,
                                )?);
                                walks.keep(key, made.clone());
                                made
                            }
                        }
                    }
                };
                match &below.tokens {
                    Tokens::Sparse(ids) => ids.iter().for_each(|&id| add(id, &mut bits)),
                    Tokens::Dense(dense) => bits.iter_mut().zip(dense).for_each(|(b, d)| *b |= d),
                }
                if !below.cd_classes.is_empty() {
                    pending.push((nxt.stack.clone(), Some(below.clone())));
                }
            }
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::ScanTable;

    /// S -> a (production 0), $START -> S (1); terminals a = 0, $END = 1. State 0 shifts a to
    /// 1 and goes to 2 on S; state 1 reduces S -> a on $END; state 2 accepts.
    fn lr() -> LrTables {
        let action = vec![
            HashMap::from([(0, 1)]),
            HashMap::from([(1, -1)]),
            HashMap::from([(1, ACCEPT)]),
        ];
        let goto = vec![HashMap::from([(0, 2)]), HashMap::new(), HashMap::new()];
        LrTables::new(action, goto, vec![(0, 1), (1, 1)], 1, 1).unwrap()
    }

    /// One terminal `a` (bit 0): state 0 start, 1 after `a` (accepts).
    fn scanner() -> ScannerTable {
        let mut trans = vec![-1; 2 * ALPHABET];
        trans[b'a' as usize] = 1;
        let scan = ScanTable::new(trans, &[0, 1]).unwrap();
        ScannerTable::new(&scan, 1, vec![0b1, 0b1], vec![0, 0b1]).unwrap()
    }

    #[test]
    fn terminal_sets_must_have_the_width_of_the_terminals() {
        let rows = || vec![HashMap::new()];
        assert!(LrTables::new(rows(), vec![HashMap::new()], vec![], 1, 2).is_err());
        assert!(LrTables::new(rows(), vec![HashMap::new()], vec![], 65, 1).is_err());
        let huge = MAX_TERMINALS as u32 + 1;
        assert!(LrTables::new(rows(), vec![HashMap::new()], vec![], huge, 1025).is_err());
        assert!(LrTables::new(rows(), vec![HashMap::new()], vec![], 65, 2).is_ok());
    }

    #[test]
    fn a_shift_near_the_stack_bound_is_left_to_the_reference() {
        // state 2 weighs 1, state 0 (the root's) nothing: the stack [2, 0] weighs 1, and
        // state 0 shifts `a` onto it
        let near = |near| lr().with_bound(vec![0, 3, 1], near).unwrap();
        assert_eq!(near(1).shiftable(&[2, 0]).unwrap(), vec![0b1]);
        assert_eq!(near(0).shiftable(&[2, 0]), Err(WalkError::NearStackBound));
        // no terminal shifts after `a`: no shift lands near the bound, however low
        assert_eq!(near(0).shiftable(&[0, 1]).unwrap(), vec![0]);
        assert!(lr().with_bound(vec![0, 3], 2).is_err()); // a weight per state
    }

    #[test]
    fn the_simulation_reads_through_reduce_chains() {
        let lr = lr();
        assert_eq!(lr.shiftable(&[0]).unwrap(), vec![0b1]);
        // after `a` only $END may come (reduce S -> a, then accept): no terminal is shiftable
        assert_eq!(lr.shiftable(&[0, 1]).unwrap(), vec![0]);
        assert_eq!(&*lr.shift(&[0], 0).unwrap(), &[0, 1]);
        assert!(lr.shift(&[0, 1], 0).is_err());
    }

    #[test]
    fn a_byte_that_would_start_a_second_statement_is_not_viable() {
        let (scanner, lr, ignored) = (scanner(), lr(), [0u64]);
        let mut memo = StepMemo::new(16);
        let mut stepper = Stepper::new(&scanner, &lr, &ignored, 0, &mut memo);
        let start = Config {
            stack: vec![0].into(),
            scan_state: 0,
            lexeme_length: 0,
            accept_state: -1,
            tail: vec![],
        };
        let after_a = stepper.step(&start, b'a').unwrap().unwrap();
        assert_eq!(
            (
                after_a.scan_state,
                after_a.lexeme_length,
                after_a.accept_state
            ),
            (1, 1, 1)
        );
        // `aa`: `a` is emitted, then a second `a` can follow nothing
        assert_eq!(stepper.step(&after_a, b'a').unwrap(), None);
    }

    #[test]
    fn the_residue_admits_what_the_live_stack_can_take() {
        // tokens `a` (0) and `aa` (1): from the start, `aa`'s second byte is a CD class
        let trie = TrieTable::new(
            vec![-1, b'a' as i32, b'a' as i32],
            vec![0, 1, 2],
            vec![3, 2, 1],
            vec![-1, 0, 1],
            HashMap::new(),
        )
        .unwrap();
        let (scanner, lr, ignored) = (scanner(), lr(), [0u64]);
        let start = Config {
            stack: vec![0].into(),
            scan_state: 0,
            lexeme_length: 0,
            accept_state: -1,
            tail: vec![],
        };
        let begin = Start {
            scan_state: 0,
            lexeme_length: 0,
            accept_state: -1,
            tail: b"",
        };
        let walked = walk(&scanner, &trie, &begin, &[0b1], 0, 8, None).unwrap();
        assert_eq!(walked.ci_nodes, vec![1]);
        assert_eq!(walked.cd_classes.len(), 1);
        let mut memo = WalkMemo::new(16, 1 << 20);
        let bits = cd_residue(
            &scanner,
            &lr,
            &ignored,
            0,
            &mut memo,
            &trie,
            &start,
            &walked.cd_classes,
            8,
        )
        .unwrap();
        assert_eq!(bits, vec![0, 0, 0, 0]); // `aa` would need a second statement
    }
}
