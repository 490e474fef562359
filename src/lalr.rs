//! LALR(1) tables: `gridrail.grammar.lalr.build_lalr`'s automaton and lookaheads over an
//! integer-coded augmented grammar (its Python path is the specification; a parity test binds
//! the two). The LR(0) item sets are numbered breadth-first, successors in increasing symbol
//! order; lookaheads come from DeRemer and Pennello's relations, each closed by their Digraph
//! algorithm over terminal bitsets. A conflict returns `None`: the Python path then builds the
//! error message.

use rustc_hash::FxHashMap;

/// The action of `$END` in the state that holds `$START -> start •`.
pub const ACCEPT: i64 = -(1 << 30);

/// The augmented grammar: terminal codes `0..terminals` (the last is `$END`), nonterminal `a`
/// coded `terminals + a`; production `p` is `lhs[p] -> rhs[p]`, the last one `$START -> start`.
pub struct Grammar<'a> {
    pub terminals: usize,
    pub nonterminals: usize,
    pub lhs: &'a [u32],
    pub rhs: &'a [Vec<u32>],
    pub start: u32,
}

/// Per state: kernel items as (production, dot), transitions (symbol, target) and actions
/// (terminal, shift target / `-1 - production` / `ACCEPT`), both in increasing symbol order.
pub struct Tables {
    pub kernels: Vec<Vec<(u32, u32)>>,
    pub transitions: Vec<Vec<(u32, u32)>>,
    pub actions: Vec<Vec<(u32, i64)>>,
}

struct Items {
    base: Vec<u32>,
    production: Vec<u32>,
    dot: Vec<u32>,
    next: Vec<i64>, // the symbol after the dot, -1 for a complete item
}

impl Grammar<'_> {
    /// Is it coded as `build` reads it: symbols in range, the augmented production last?
    pub fn check(&self) -> Result<(), String> {
        let symbols = self.terminals + self.nonterminals;
        if self.terminals == 0 || self.nonterminals == 0 || self.lhs.len() != self.rhs.len() {
            return Err("terminals, nonterminals and one lhs per rhs are needed".into());
        }
        if !(self.terminals..symbols).contains(&(self.start as usize)) {
            return Err(format!("the start symbol {} is no nonterminal", self.start));
        }
        if self.lhs.last() != Some(&(self.nonterminals as u32 - 1))
            || self.rhs.last().map(Vec::as_slice) != Some(&[self.start][..])
        {
            return Err("the last production must be $START -> start".into());
        }
        if self.lhs.iter().any(|&a| a as usize >= self.nonterminals)
            || self.rhs.iter().flatten().any(|&s| s as usize >= symbols)
        {
            return Err("a symbol is out of range".into());
        }
        Ok(())
    }
}

/// The tables of `g` (`Grammar::check` passed), or None when it is not LALR(1).
pub fn build(g: &Grammar) -> Option<Tables> {
    let nt = g.terminals;
    let augmented = g.lhs.len() - 1;
    let mut of: Vec<Vec<usize>> = vec![Vec::new(); g.nonterminals];
    for (p, &a) in g.lhs.iter().enumerate() {
        of[a as usize].push(p);
    }
    let nullable = nullable(g);
    let is_nullable = |s: u32| s as usize >= nt && nullable[s as usize - nt];
    let nullable_from: Vec<usize> = g
        .rhs
        .iter()
        .map(|rhs| {
            let mut i = rhs.len();
            while i > 0 && is_nullable(rhs[i - 1]) {
                i -= 1;
            }
            i
        })
        .collect();
    let mut items = Items {
        base: vec![],
        production: vec![],
        dot: vec![],
        next: vec![],
    };
    for (p, rhs) in g.rhs.iter().enumerate() {
        items.base.push(items.production.len() as u32);
        for dot in 0..=rhs.len() {
            items.production.push(p as u32);
            items.dot.push(dot as u32);
            items.next.push(rhs.get(dot).map_or(-1, |&s| s as i64));
        }
    }
    let predicted = predictions(g, &of, &items);
    let (kernels, closures, transitions) = lr0(g, &items, &predicted, augmented);
    let lookaheads = lookaheads(g, &of, &nullable, &nullable_from, &transitions);
    let words = nt.div_ceil(64);
    let end = nt - 1;
    let mut actions = Vec::with_capacity(closures.len());
    for (state, closure) in closures.iter().enumerate() {
        let mut row: Vec<(u32, i64)> = transitions[state]
            .iter()
            .filter(|&&(s, _)| (s as usize) < nt)
            .map(|&(s, t)| (s, t as i64))
            .collect();
        let shifted = row.len();
        for &item in closure {
            if items.next[item as usize] != -1 {
                continue;
            }
            let p = items.production[item as usize] as usize;
            let mut set = vec![0u64; words];
            if p == augmented {
                set[end / 64] |= 1 << (end % 64);
            } else if let Some(found) = lookaheads.get(&(state as u32, p as u32)) {
                set.copy_from_slice(found);
            }
            let value = if p == augmented {
                ACCEPT
            } else {
                -1 - p as i64
            };
            for terminal in bits(&set) {
                if row.iter().any(|&(t, _)| t == terminal) {
                    return None; // shift/reduce or reduce/reduce
                }
                row.push((terminal, value));
            }
        }
        if row.len() > shifted {
            row.sort_unstable_by_key(|&(t, _)| t);
        }
        actions.push(row);
    }
    let kernels = kernels
        .iter()
        .map(|k| {
            k.iter()
                .map(|&i| (items.production[i as usize], items.dot[i as usize]))
                .collect()
        })
        .collect();
    Some(Tables {
        kernels,
        transitions,
        actions,
    })
}

fn nullable(g: &Grammar) -> Vec<bool> {
    let nt = g.terminals;
    let mut nullable = vec![false; g.nonterminals];
    let mut changed = true;
    while changed {
        changed = false;
        for (p, rhs) in g.rhs.iter().enumerate() {
            let a = g.lhs[p] as usize;
            if !nullable[a]
                && rhs
                    .iter()
                    .all(|&s| s as usize >= nt && nullable[s as usize - nt])
            {
                nullable[a] = true;
                changed = true;
            }
        }
    }
    nullable
}

/// Per nonterminal A: the initial items a dot before A adds to a closure (sorted).
fn predictions(g: &Grammar, of: &[Vec<usize>], items: &Items) -> Vec<Vec<u32>> {
    let nt = g.terminals;
    (0..g.nonterminals)
        .map(|a| {
            let mut corner = vec![false; g.nonterminals];
            corner[a] = true;
            let mut pending = vec![a];
            while let Some(b) = pending.pop() {
                for &p in &of[b] {
                    if let Some(&first) = g.rhs[p].first() {
                        if first as usize >= nt && !corner[first as usize - nt] {
                            corner[first as usize - nt] = true;
                            pending.push(first as usize - nt);
                        }
                    }
                }
            }
            let mut out: Vec<u32> = (0..g.nonterminals)
                .filter(|&b| corner[b])
                .flat_map(|b| of[b].iter().map(|&p| items.base[p]))
                .collect();
            out.sort_unstable();
            out
        })
        .collect()
}

type Lr0 = (Vec<Vec<u32>>, Vec<Vec<u32>>, Vec<Vec<(u32, u32)>>);

/// The canonical LR(0) item sets: kernels, closures and transitions, numbered breadth-first.
fn lr0(g: &Grammar, items: &Items, predicted: &[Vec<u32>], augmented: usize) -> Lr0 {
    let nt = g.terminals as i64;
    let mut kernels: Vec<Vec<u32>> = vec![vec![items.base[augmented]]];
    let mut state_of: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
    state_of.insert(kernels[0].clone(), 0);
    let mut closures = Vec::new();
    let mut transitions = Vec::new();
    let mut added = vec![false; items.production.len()];
    while closures.len() < kernels.len() {
        let kernel = &kernels[closures.len()];
        let mut extra: Vec<u32> = Vec::new();
        for &item in kernel {
            let next = items.next[item as usize];
            if next >= nt {
                for &predicted_item in &predicted[(next - nt) as usize] {
                    if !added[predicted_item as usize] {
                        added[predicted_item as usize] = true;
                        extra.push(predicted_item);
                    }
                }
            }
        }
        extra.sort_unstable();
        for &item in &extra {
            added[item as usize] = false;
        }
        let mut closure = kernel.clone();
        closure.extend(extra);
        let mut successors: Vec<(i64, u32)> = closure
            .iter()
            .filter(|&&i| items.next[i as usize] >= 0)
            .map(|&i| (items.next[i as usize], i + 1))
            .collect();
        successors.sort_unstable();
        let mut row = Vec::new();
        for group in successors.chunk_by(|a, b| a.0 == b.0) {
            let successor: Vec<u32> = group.iter().map(|&(_, i)| i).collect();
            let target = match state_of.get(&successor) {
                Some(&t) => t,
                None => {
                    let t = kernels.len() as u32;
                    state_of.insert(successor.clone(), t);
                    kernels.push(successor);
                    t
                }
            };
            row.push((group[0].0 as u32, target));
        }
        closures.push(closure);
        transitions.push(row);
    }
    (kernels, closures, transitions)
}

/// LA(q, p) as a terminal bitset for each state q holding the complete item of production p:
/// Read(x) = DR(x) ∪ Read(y) for x reads y; Follow(x) = Read(x) ∪ Follow(y) for x includes y;
/// LA(q, p) = ∪ Follow(x) for (q, p) lookback x, over the nonterminal transitions x.
fn lookaheads(
    g: &Grammar,
    of: &[Vec<usize>],
    nullable: &[bool],
    nullable_from: &[usize],
    transitions: &[Vec<(u32, u32)>],
) -> FxHashMap<(u32, u32), Vec<u64>> {
    let nt = g.terminals;
    let words = nt.div_ceil(64);
    let goto = |state: u32, symbol: u32| -> u32 {
        let row = &transitions[state as usize];
        row[row
            .binary_search_by_key(&symbol, |&(s, _)| s)
            .expect("an LR(0) transition")]
        .1
    };
    let mut id: FxHashMap<(u32, u32), usize> = FxHashMap::default();
    let mut edges: Vec<(u32, u32, u32)> = Vec::new(); // (source, symbol, target)
    for (state, row) in transitions.iter().enumerate() {
        for &(symbol, target) in row {
            if symbol as usize >= nt {
                id.insert((state as u32, symbol), edges.len());
                edges.push((state as u32, symbol, target));
            }
        }
    }
    let mut sets = vec![0u64; edges.len() * words];
    let mut reads: Vec<Vec<usize>> = vec![Vec::new(); edges.len()];
    for (x, &(_, _, target)) in edges.iter().enumerate() {
        for &(symbol, _) in &transitions[target as usize] {
            if (symbol as usize) < nt {
                sets[x * words + symbol as usize / 64] |= 1 << (symbol % 64);
            } else if nullable[symbol as usize - nt] {
                reads[x].push(id[&(target, symbol)]);
            }
        }
    }
    let end = nt - 1;
    sets[id[&(0, g.start)] * words + end / 64] |= 1 << (end % 64);
    digraph(&reads, &mut sets, words);
    let mut includes: Vec<Vec<usize>> = vec![Vec::new(); edges.len()];
    let mut lookback: FxHashMap<(u32, u32), Vec<usize>> = FxHashMap::default();
    for (x, &(source, symbol, _)) in edges.iter().enumerate() {
        for &p in &of[symbol as usize - nt] {
            let mut state = source;
            for (i, &s) in g.rhs[p].iter().enumerate() {
                if s as usize >= nt && i + 1 >= nullable_from[p] {
                    includes[id[&(state, s)]].push(x);
                }
                state = goto(state, s);
            }
            lookback.entry((state, p as u32)).or_default().push(x);
        }
    }
    digraph(&includes, &mut sets, words);
    lookback
        .into_iter()
        .map(|(key, xs)| {
            let mut set = vec![0u64; words];
            for x in xs {
                for (w, word) in set.iter_mut().enumerate() {
                    *word |= sets[x * words + w];
                }
            }
            (key, set)
        })
        .collect()
}

/// F(x) = F0(x) ∪ ⋃ {F(y) | x R y} in place (`sets`: `words` words per x), by DeRemer and
/// Pennello's Digraph algorithm: an iterative Tarjan traversal, one set per strongly connected
/// component.
fn digraph(relation: &[Vec<usize>], sets: &mut [u64], words: usize) {
    let n = relation.len();
    let done = n + 1;
    let mut depth = vec![0usize; n];
    let mut low = vec![0usize; n];
    let mut stack: Vec<usize> = Vec::new();
    let union = |sets: &mut [u64], into: usize, from: usize| {
        if into != from {
            for w in 0..words {
                sets[into * words + w] |= sets[from * words + w];
            }
        }
    };
    for root in 0..n {
        if depth[root] != 0 {
            continue;
        }
        stack.push(root);
        depth[root] = stack.len();
        low[root] = stack.len();
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some(top) = work.last_mut() {
            let x = top.0;
            if top.1 < relation[x].len() {
                let y = relation[x][top.1];
                top.1 += 1;
                if depth[y] == 0 {
                    stack.push(y);
                    depth[y] = stack.len();
                    low[y] = stack.len();
                    work.push((y, 0));
                } else {
                    low[x] = low[x].min(low[y]);
                    union(sets, x, y);
                }
                continue;
            }
            work.pop();
            if low[x] == depth[x] {
                loop {
                    let member = stack.pop().expect("x is on the stack");
                    depth[member] = done;
                    low[member] = done;
                    if member != x {
                        let (from, into) = (x * words, member * words);
                        for w in 0..words {
                            sets[into + w] = sets[from + w];
                        }
                    }
                    if member == x {
                        break;
                    }
                }
            }
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[x]);
                union(sets, parent, x);
            }
        }
    }
}

fn bits(set: &[u64]) -> impl Iterator<Item = u32> + '_ {
    set.iter().enumerate().flat_map(|(w, &word)| {
        let mut rest = word;
        std::iter::from_fn(move || {
            (rest != 0).then(|| {
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                (w * 64) as u32 + bit
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_recursive_sums_are_lalr() {
        // E -> E + n | n, $START -> E; symbols: + = 0, n = 1, $END = 2, E = 3, $START = 4
        let lhs = vec![0, 0, 1];
        let rhs = vec![vec![3, 0, 1], vec![1], vec![3]];
        let g = Grammar {
            terminals: 3,
            nonterminals: 2,
            lhs: &lhs,
            rhs: &rhs,
            start: 3,
        };
        let t = build(&g).expect("LALR(1)");
        assert_eq!(t.kernels[0], vec![(2, 0)]);
        // state 0: shift n, goto E; E then accepts on $END or shifts +
        assert_eq!(t.transitions[0], vec![(1, 1), (3, 2)]);
        assert_eq!(t.actions[2], vec![(0, 3), (2, ACCEPT)]);
        assert_eq!(t.actions[1], vec![(0, -2), (2, -2)]);
    }

    #[test]
    fn an_ambiguous_grammar_is_refused() {
        // E -> E E | n: shift/reduce on n
        let lhs = vec![0, 0, 1];
        let rhs = vec![vec![2, 2], vec![0], vec![2]];
        let g = Grammar {
            terminals: 2,
            nonterminals: 2,
            lhs: &lhs,
            rhs: &rhs,
            start: 2,
        };
        assert!(build(&g).is_none());
    }
}
