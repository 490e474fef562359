"""The genN scanner normal form: the cross-family (T2) cache key of a walk, and the walk with its
scanner states numbered canonically (paper §4.3, "The cross-family tier").

T1 keys name scanner states by id, and ids are private to one scanner: every lexicon gives its
own scanner (the role's base scanner times its names, `gridrail.grammar.scanner`), and T1 caches
are per language, so role languages over different tables or schemas share no T1 entry — not
even inside a number or a string. T2 keys name the states by what they are
(`ScannerAutomaton.identity`), so that all role languages of one dialect share entries wherever
no lexicon can be consulted.

**What the walk reads.** `walk_context_independent` from κ = (σ, q, ℓ, p, r) below trie node
`root` reads exactly:
  (R1) `trans`, `live` and `accept` at states reachable from q (it only steps from q);
  (R2) p only through `accept[p]` (the winner of an emission at p) and whether p exists — it
       never steps from p;
  (R3) V = A(σ) ∪ ignored only as `live[x] & V` and `winner(accept[y], V)`, y being p or a state
       reachable from q; the winner reads the shadowing classes (priority, is_literal) of the
       members of `accept[y]` and V's bits on those members only;
  (R4) whether ℓ > 0, the tail r (when p exists), and the trie below `root`.
So every terminal in (R1)–(R3) lies in T = (the live and accept sets of the states reachable
from q) ∪ accept[p]; live sets only shrink along transitions (a dead terminal stays dead), so
T = live[q] ∪ accept[p]. The output names trie nodes, and, per CD class, a `ScanPart(x, ℓ', y,
r')` with x reachable from q, y reachable from q or p itself, ℓ' = min(ℓ, 1) + the path's
length and r' a suffix of r + path.

**The key.** `NormalFormKey(state, pending, accept, tail, viable, root)` where `state` hashes q's
identity (its labelled reachable sub-automaton) with the classes of its terminals, `accept`
hashes `accept[p]` with the classes of its members, and `viable` = V ∩ T. If κ₁ in scanner S₁
and κ₂ in S₂ have equal keys, let φ map canonical number i of q₁'s identity to that of q₂'s, and
p₁ to p₂. By induction along the walk's depth-first order over the (same) trie, the frames
(state, length, last accept) of the two walks correspond under φ: the same byte leads to
corresponding states or to death in both (R1, equal encodings); `live & V` and "accepts
something" agree (equal labels, and the labels lie in T, on which V agrees); every winner agrees
(equal accept sets, equal classes, equal V on their members). So both walks take every branch
alike: equal CI nodes, and CD classes equal up to φ. **Equal keys mean equal walks, for any two
configurations over one trie** (up to a BLAKE2b-128 collision): soundness never rests on the
guard below, nor on how caches are shared beyond one vocabulary (registry.shared_family_cache),
only on the key holding everything the walk reads.

**The lexicon-visibility guard** decides where T2 is used at all:
(live[q] ∪ accept[p]) ∩ LEX = ∅, LEX being the guide's lexicon terminals (the paper's guard;
`KeyMaker.lexicon_visible` is its negation). A is not part of it — A is part of the key, on T.
  - It makes keys coincide across lexicons. The non-lexicon terminals are the same in every role
    language of a dialect (projections drop productions; lexicons replace only the category
    terminals' definitions, by name sets; terminal numbering is frozen at L1). A scanner state
    is the set of (terminal, terminal-automaton state) pairs still alive, and its future is
    theirs; with no lexicon terminal live at q, those are non-lexicon pairs, the same in every
    scanner of the family, so the sub-automata reachable from q accept the same labelled
    language. Where q is a state of the base scanner (minimal; the product with the names adds
    states only where some name is live) its reachable part is minimal, minimal automata of one
    language are isomorphic, and so they have one canonical encoding. (Elsewhere — a state
    where only a non-lexicon terminal spelled from names is live, the profile's qualifier after
    a table's dot — the product is not minimized, so two scanners may encode one language
    differently: fewer shared entries, never a wrong one, since equal keys mean equal walks.)
    p's accept set and V ∩ T avoid lexicon terminals too (T ∩ LEX = ∅ is exactly the guard): no
    field of the key sees a lexicon, and neither does the walk — whatever A holds, its lexicon
    terminals lie outside T, and (R1)–(R4) read V on T only.
  - It is the composition rule (Proposition 6) for T2. A T2 entry may be served where A meets
    LEX — an identifier position in T1's terms (`KeyMaker.is_identifier_position`), e.g. inside
    a number or a string literal in an expression, where a column could also have stood. That
    is sound because the walk never crosses a lexeme boundary: it steps only while the next
    state is live in V, and every byte after which the pending lexeme would end (an emission,
    then a fresh lexeme that a lexicon may decide) starts a CD class. CD verdicts are never
    cached: the reader steps the class's first byte on the live stack with its own oracle and
    scanner (the class's states translated to its own numbering), and takes the walk below it
    from its own `_entry`, under its own keys — an `IdentifierKey` in T1 where that is an
    identifier position, never T2 where the guard fails. So every verdict a lexicon decides
    comes from the reader's lexicons. The cache holds T2 keys to exactly this: it refuses a
    genN key where `KeyMaker.lexicon_visible` holds (`MaskCache.get`), in every build.
  - At a fresh lexeme (pending = false) q is the start state, whose live set holds every
    terminal of the scanner, the lexicon ones included, so the guard fails there: a fresh
    lexeme's walk would step through the lexicon terminals' automata — inside a lexeme, a
    lexicon decides which names can still be this terminal, and so where maximal munch ends.
    Only states where no lexicon terminal is live are lexicon-inert. (The oracle scans the
    byte that ends a lexeme as the next one's first, so a decoder meets pending = false only
    at the initial configuration; a scanner where no lexicon terminal is live at the start —
    every lexicon empty — has no lexicon automaton to consult anywhere.)
  - An accept state y reached *during* the walk is reachable from q, so accept[y] ⊆ live[y] ⊆
    live[q] (an accepted lexeme is a prefix of itself; live sets shrink): the guard on q covers
    every winner the walk computes except the one at p, which is why accept[p] is in it
    (accept[p] need not lie in live[q]: p's terminals may have died since).
A configuration failing the guard uses the T1 (raw) key only.

**Canonical CD classes.** An entry shared across scanners stores x as its canonical number, and y
as a canonical number when the walk reached an accepting state on the class's path, as
`KEPT_ACCEPT` when y is κ's own p, or `NO_ACCEPT`. Which case holds is read off the class: the
walk's tail is r + path when p is kept and path[a:] (a ≥ 1) after an accept on the path, the path
having ℓ' − min(ℓ, 1) bytes. Comparing y with p would not do: p may also be reachable from q, and
a reader's own walk would then name its own p, not the state its scanner reaches — so its T1 entry
would differ from the translated one.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from gridrail.grammar.scanner import ScannerAutomaton
from gridrail.mask.keys import NormalFormKey
from gridrail.mask.walk import WalkResult
from gridrail.parse.oracle import Configuration, Oracle

NO_ACCEPT = -1  # a CD class's scan part has no accepting position
KEPT_ACCEPT = -2  # a CD class's last accept is the configuration's own p


class NormalFormError(AssertionError):
    """A walk did not have the shape the canonical translation relies on (a CD class whose
    states are not where the walk can reach). Always a bug; never silenced: a mistranslated
    entry would be served to every role of the dialect."""


@dataclass(frozen=True)
class CanonicalWalk:
    """A walk result in canonical state numbering: its CD classes' scan states are canonical
    numbers of the key state's identity, their accept states canonical numbers, `KEPT_ACCEPT`
    or `NO_ACCEPT`. The CI nodes are trie nodes, the same in every scanner."""

    walk: WalkResult


class NormalForm:
    """T2 keys and canonical walks for one guide: its oracle (scanner, classes, ignored set) and
    its lexicon terminals (bit mask)."""

    def __init__(self, oracle: Oracle, lexicon_terminals: int):
        self.oracle = oracle
        self.lexicon_terminals = lexicon_terminals
        self._scanner: ScannerAutomaton = oracle.compiled.scanner
        self._classes = oracle.compiled.classes
        # Memos; racing threads compute equal values, so plain dicts suffice.
        self._state_ids: dict[int, bytes] = {}
        self._accept_ids: dict[int, bytes] = {}

    def key(self, cfg: Configuration, root: int = 0) -> NormalFormKey | None:
        """The T2 key of the walk from `cfg` below `root`; None where the guard fails."""
        _, live, accept = self.oracle.scanner_tables()
        q, p = cfg.scan_state, cfg.accept_state
        accepted = accept[p] if p >= 0 else 0
        if (live[q] | accepted) & self.lexicon_terminals:
            return None  # the walk could consult a lexicon (A is not asked: see the docstring)
        allowed = self.oracle.allowed_mask(cfg)
        consulted = self._scanner.identity(q).terminals | accepted
        return NormalFormKey(
            self._state_id(q),
            cfg.lexeme_length > 0,
            self._accept_id(accepted) if p >= 0 else b"",
            cfg.tail if p >= 0 else b"",
            (allowed | self.oracle.ignored_mask) & consulted,
            root,
        )

    def to_canonical(self, cfg: Configuration, walk: WalkResult) -> CanonicalWalk:
        """`walk` (from `cfg`, in this scanner's numbering) in canonical numbering."""
        numbers = self._scanner.identity(cfg.scan_state).numbers
        pending = min(cfg.lexeme_length, 1)
        tail = cfg.tail if cfg.accept_state >= 0 else b""  # as the walk normalizes it
        classes = []
        for node, scan_state, lexeme_length, accept_state, before_tail in walk.cd_classes:
            path = lexeme_length - pending
            if accept_state < 0:
                accept = NO_ACCEPT
            elif len(before_tail) == len(tail) + path:
                if accept_state != cfg.accept_state:
                    raise NormalFormError(f"CD class at node {node}: the tail says p is kept")
                accept = KEPT_ACCEPT
            else:
                accept = self._number(numbers, accept_state, node)
            number = self._number(numbers, scan_state, node)
            classes.append((node, number, lexeme_length, accept, before_tail))
        return CanonicalWalk(WalkResult(walk.ci_nodes, tuple(classes)))

    def to_local(self, cfg: Configuration, canonical: CanonicalWalk) -> WalkResult:
        """The walk from `cfg` in this scanner's numbering, from a canonical walk under `cfg`'s
        T2 key — equal to the walk computed here (see the module docstring)."""
        states = self._scanner.identity(cfg.scan_state).states
        classes = []
        for node, number, lexeme_length, accept, tail in canonical.walk.cd_classes:
            if accept == KEPT_ACCEPT:
                accept = cfg.accept_state
            elif accept == NO_ACCEPT:
                accept = -1
            else:
                accept = states[accept]
            classes.append((node, states[number], lexeme_length, accept, tail))
        return WalkResult(canonical.walk.ci_nodes, tuple(classes))

    def _state_id(self, state: int) -> bytes:
        """q's identity with the classes of its terminals (what the winners inside it read)."""
        found = self._state_ids.get(state)
        if found is None:
            identity = self._scanner.identity(state)
            digest = hashlib.blake2b(b"gridrail-genN-state-v1\0", digest_size=16)
            digest.update(identity.digest)
            digest.update(self._labels(identity.terminals))
            found = self._state_ids.setdefault(state, digest.digest())
        return found

    def _accept_id(self, accepted: int) -> bytes:
        """p's identity: its accept set with the members' classes (all the walk reads of p)."""
        found = self._accept_ids.get(accepted)
        if found is None:
            digest = hashlib.blake2b(b"gridrail-genN-accept-v1\0", digest_size=16)
            digest.update(self._labels(accepted))
            found = self._accept_ids.setdefault(accepted, digest.digest())
        return found

    def _labels(self, terminals: int) -> bytes:
        """Index, priority and literal flag of every terminal in the mask, in index order."""
        parts = []
        index = 0
        while terminals:
            if terminals & 1:
                priority, is_literal = self._classes[index]
                parts.append(struct.pack("<Ii?", index, priority, is_literal))
            terminals >>= 1
            index += 1
        return b"".join(parts)

    @staticmethod
    def _number(numbers: Mapping[int, int], state: int, node: int) -> int:
        number = numbers.get(state)
        if number is None:
            raise NormalFormError(f"CD class at node {node}: state {state} is not reachable")
        return number
