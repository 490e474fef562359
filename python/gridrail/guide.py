"""The per-request matcher: the hot path in the paper's order (§6.1), over one compiled guide.

`compile(grammar, vocab, schema=, policy=, role=)` builds a Guide: the role's compiled language,
its oracle, the token trie and the shared mask cache (artifacts come from the registry, built
once per fingerprint); `guide.check` names what a finished statement may not do. A Guide makes
Matchers, one per generation. A Matcher keeps the history of configurations it went through, so
`rollback` is popping a list (configurations are immutable and share their stacks), and with an
audit log it records every step.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import operator
import sys
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property, partial
from typing import TYPE_CHECKING

import numpy as np

from gridrail.audit import AuditLog, configuration_hash
from gridrail.check.checker import SemanticChecker, Violation
from gridrail.check.sqlite_judge import SqliteJudge
from gridrail.errors import ParseError, UsageError
from gridrail.gamma.binder import Binder, GammaState, PrefixJudge, content_key
from gridrail.gamma.catalog import NameCatalog
from gridrail.gamma.tokens import FilterPlan, TokenShapes, plan_filter
from gridrail.grammar.compiled import CompiledGrammar
from gridrail.grammar.model import Grammar
from gridrail.kernels import MaskRunners, make_mask_runners, write_mask_row
from gridrail.lru import BoundedLRU, CacheStats, SameObject
from gridrail.mask.bitmask import DistinctMasks, TokenSet, bitmask_array, words_per_row
from gridrail.mask.cache import MaskCache
from gridrail.mask.compute import next_token_mask
from gridrail.mask.entry import MaskEntry, NormalFormEntry, make_entry, make_normal_form_entry
from gridrail.mask.keys import KeyMaker
from gridrail.mask.normal_form import NormalForm
from gridrail.mask.walk import WalkResult
from gridrail.parse.completion import Completer
from gridrail.parse.oracle import Configuration, Oracle
from gridrail.parse.tree import Tree, parse_tree
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.language import select_role
from gridrail.policy.role import binds_names
from gridrail.registry import (
    Registry,
    shared_compiled_grammar,
    shared_family_cache,
    shared_mask_cache,
    shared_role_language,
    shared_trie,
)
from gridrail.vocab.trie import TokenTrie, build_trie
from gridrail.vocab.vocabulary import Vocabulary, VocabularyError

if TYPE_CHECKING:
    from gridrail.policy.bundle import Policy
    from gridrail.policy.lexicon import Lexicon
    from gridrail.policy.profile import GenerationProfile
    from gridrail.policy.schema import Schema
    from gridrail.policy.view import SchemaView

# Masks a guide keeps by configuration, and as many again under Γ (by configuration and Γ's
# content: a memo of their own).
MASKS, MASK_BYTES = 4096, 64 << 20
# Plans of the Γ filter a guide keeps (`gamma.tokens.FilterPlan`: a few KB each), by language
# mask, scan part and the flags that decide which tokens are judged.
PLANS, PLAN_BYTES = 4096, 32 << 20
# Steps a guide keeps (configuration, token -> configuration), bounded by count alone: each
# holds one small configuration, whose stack it shares with the one before.
ADVANCES = 1 << 15
_INT32 = np.dtype(np.int32)
# repairs a Γ completion may try (`Guide._gamma_completion`) before it gives up
GAMMA_COMPLETION_TRIES = 64
MAX_FORCED_SPAN = 64  # jump-forward stops after this many tokens even if the mask stays singleton
# What `Matcher.accept_tokens` may call the tokens it records (replay passes "eos" back in).
TOKEN_KINDS = ("sampled", "forced", "reserve", "eos")


class Guide:
    """Everything shared by the matchers of one (language, vocabulary) pair."""

    def __init__(
        self,
        compiled: CompiledGrammar,
        vocab: Vocabulary,
        view: SchemaView | None = None,
        dialect: Grammar | None = None,
        lexicons: Sequence[Lexicon] = (),
        trie: TokenTrie | None = None,
        cache: MaskCache[MaskEntry] | None = None,
        family_cache: MaskCache[NormalFormEntry] | None = None,
        names: NameCatalog | None = None,
        signature: tuple[int, str] | None = None,
    ):
        self.compiled = compiled
        self.vocab = vocab
        self.view = view  # what the role sees of the schema (None: no schema)
        self._dialect = dialect  # the L1 grammar the role's language was cut from
        self._checker: SemanticChecker | None = None
        self._judge: SqliteJudge | None = None  # SQLite's binder, over a SQLite schema
        self.oracle = Oracle(compiled)
        self.lexicons = tuple(lexicons)  # the L3 lexicons compiled into this guide's grammar
        # `signature`: lexicon_signature(compiled, lexicons) where the caller already computed
        # it (hashing a large catalog's spellings takes milliseconds)
        self.keys = KeyMaker(self.oracle, *(signature or lexicon_signature(compiled, lexicons)))
        # T1: walks of this grammar, vocabulary and lexicons (shared when built by `compile`)
        self.cache = cache if cache is not None else MaskCache()
        # T2: walks of lexicon-inert configurations, shared by the dialect's role languages
        self.family_cache = family_cache if family_cache is not None else MaskCache()
        self.normal_form = NormalForm(self.oracle, self.keys.lexicon_terminals)
        if trie is None:
            trie = build_trie(vocab.all_token_bytes, vocab.fingerprint)
        elif trie.fingerprint != vocab.fingerprint:
            raise UsageError("the token trie was built for another vocabulary")
        self.trie = trie
        self._runners: MaskRunners | None = None
        self._eos = frozenset(vocab.eos_token_ids)
        _require_a_first_token(self)
        # Γ (issue 15): names the statement declares, and the slots they fill, resolved
        # against `names` (the tables and columns the role sees)
        self.names = names
        self.binder = Binder(self.oracle, names) if names is not None else None
        self._shapes = _token_shapes(vocab) if self.binder else None
        self._masks: BoundedLRU[tuple[MaskEntry, TokenSet]] = BoundedLRU(MASKS, MASK_BYTES)
        # under Γ, masks by (configuration, Γ's content): a memo of their own, so that the many
        # Γ states of one configuration never evict the language's masks they are filtered from
        self._gamma_masks: BoundedLRU[tuple[MaskEntry, TokenSet]] = BoundedLRU(MASKS, MASK_BYTES)
        self._gamma_plans: BoundedLRU[FilterPlan] = BoundedLRU(PLANS, PLAN_BYTES)
        self._distinct = DistinctMasks()  # masks of equal content shared by one object
        self._advances: BoundedLRU[tuple[Configuration | None]] = BoundedLRU(ADVANCES, sys.maxsize)
        self.row_words = words_per_row(vocab.size)  # int32 words of a bitmask row

    def cache_stats(self) -> dict[str, CacheStats]:
        """The live counters of the caches this guide's masks go through: "t1" (walks of its
        grammar, vocabulary and lexicons), "t2" (the dialect family's lexicon-inert walks) and
        "masks" (masks by `Configuration.mask_key` — the stack and the scan part a walk reads)
        and "gamma_masks" (under Γ, masks by configuration and Γ's state). T1 and T2 are shared
        with every guide `compile` built over the same artifacts: the same objects."""
        return {
            "t1": self.cache.stats,
            "t2": self.family_cache.stats,
            "masks": self._masks.stats,
            "gamma_masks": self._gamma_masks.stats,
        }

    def matcher(self, max_tokens: int | None = None, audit: AuditLog | None = None) -> Matcher:
        """A matcher; with `max_tokens`, one that keeps every generation inside that budget;
        with `audit`, one that records every step in that log."""
        return Matcher(self, max_tokens, audit)

    def artifacts(self) -> dict[str, str]:
        """Fingerprints of what this guide's masks are a function of (for audit seals)."""
        out = {
            "grammar": self.compiled.grammar.fingerprint,
            "vocabulary": self.vocab.fingerprint,
            "lexicons": self.keys.lexicons,
        }
        if self.names is not None:
            out["names"] = self.names.fingerprint  # Γ's catalog: the masks depend on it too
        return out

    def mask(self, cfg: Configuration, gamma: GammaState | None = None) -> TokenSet:
        """The exact set of token ids allowed at `cfg` (EOS ids only when it is a sentence):
        the context-independent walk from the cache (computed and published on a miss), the
        context-dependent verdicts against the live stack; with Γ (`gamma`, for a guide
        compiled with it), the tokens that leave L_Γ removed."""
        return self.mask_with_entry(cfg, gamma)[1]

    def mask_with_entry(
        self, cfg: Configuration, gamma: GammaState | None = None
    ) -> tuple[MaskEntry, TokenSet]:
        """The mask and the content-addressed cache entry its context-independent part came
        from (what an audit record names). Both are a function of the configuration (this
        guide's grammar, vocabulary and lexicons fixed) and, under Γ, of Γ's state (by its
        content: `content_key`) — so they are memoized by those: a step met again (the
        candidates of one question, the prefixes statements share, a warm cache, an equal Γ
        at another position) costs one lookup."""
        if gamma is None or self.binder is None:
            # a warm step ends here: no closure, no lock
            masks = self._masks
            key = cfg.mask_key
            return masks.get(key) or masks.setdefault(
                key, self._language_mask(cfg), self.row_words * 4
            )
        masks, key = self._gamma_masks, (cfg, *content_key(gamma), gamma.pending)
        found = masks.get(key)
        if found is None:
            entry, mask = self.mask_with_entry(cfg)
            found = (entry, self._within_gamma(cfg, gamma, mask))
            found = masks.setdefault(key, found, self.row_words * 4)
        return found

    def advance(self, cfg: Configuration, token_id: int) -> Configuration | None:
        """The configuration after the non-EOS token `token_id` at `cfg`, None if the language
        refuses it: a function of the two (configurations are values, stack nodes interned),
        memoized, so a step taken before (a warm cache, a shared prefix) costs one lookup."""
        found = self._advances.get((cfg, token_id))
        if found is None:
            spelling = self.vocab.token_bytes(token_id)
            after = None if spelling is None else self.oracle.try_feed(cfg, spelling)
            found = self._advances.setdefault((cfg, token_id), (after,), 0)
        return found[0]

    def _within_gamma(self, cfg: Configuration, gamma: GammaState, mask: TokenSet) -> TokenSet:
        """`mask` without the tokens after which the output leaves L_Γ. Inside a FROM clause
        that owes names, every token is judged; elsewhere only Γ's names can be refused (and,
        in a FROM clause, a `(` that would nest a parenthesized join), so only the tokens a
        vectorized scan finds touching a name slot's terminal are (and those holding a `(`) —
        most by their last lexeme's bytes alone (`gamma.tokens`), the rest read by the
        binder."""
        binder, shapes = self.binder, self._shapes
        assert binder is not None and shapes is not None
        closing = binder.closing(gamma)
        # in a FROM clause a `(` may open a parenthesized join inside another, which Γ refuses
        # (`Binder.joins`): tokens holding one are judged too
        joining = not closing and binder.joins(gamma)
        owes = not closing and binder.owes(gamma)  # a token that opens FROM may go on in it
        # bytes after the last allowed accept can be cut back there and rescanned, which the
        # scan does not follow; with no accept yet (inside a string literal), a byte that ends
        # the lexeme rejects the token, so the scan is exact from the first byte
        cut_back = bool(cfg.tail) and cfg.accept_state >= 0
        # which tokens are judged, and how, is a function of the language's mask (one object
        # per content), the scan part and these flags (of the pending bytes, whether there
        # are any and, where a FROM may open, their last four): kept per those, so a mask met
        # again under another Γ — other names declared, another position — scans no token
        pending = gamma.pending
        key = (
            SameObject(mask),
            cfg.scan_state,
            cut_back,
            closing,
            joining,
            owes,
            pending[-4:].lower() if owes else bool(pending),
        )
        plan = self._gamma_plans.get(key)
        if plan is None:
            plan = plan_filter(
                shapes, binder.slot_scan, mask.id_array(), cfg.scan_state, cut_back,
                closing=closing, joining=joining, owes=owes, pending=pending,
            )  # fmt: skip
            plan = self._gamma_plans.setdefault(key, plan, plan.nbytes)
        refused: list[int] = []
        # Tokens whose only lexemes are the pending one ending at their first byte, layout,
        # and the lexeme they leave pending: Γ after the first is shared, the last is judged
        # by its bytes — in groups of one scanner state, whose slots are found once.
        shared = {False: gamma, True: binder.after_pending(gamma, cfg)}
        judges: dict[int, object] = {}
        for closes, before in shared.items():  # the groups read from one Γ: judged at once
            group, states = plan.sides[closes]
            if before is not None and group:
                judges.update(zip(group, binder.pending_judges(before, states), strict=True))
        for key, lo, hi in zip(plan.keys, plan.bounds, plan.ends, strict=True):
            tokens, at = plan.members[lo:hi], plan.starts[lo:hi]
            if shared[bool(key & 1)] is None:
                refused.extend(tokens.tolist())
                continue
            judge = judges[key]
            if judge is None:
                continue
            if isinstance(judge, PrefixJudge):
                ok = judge.tokens(shapes, tokens, at, pending)
            else:
                ok = np.asarray(judge(shapes.pending_lexemes(tokens, at, pending)), bool)
            refused.extend(tokens[~ok].tolist())
        for token_id in plan.read:
            spelling = shapes.spellings[token_id]
            after = self.advance(cfg, token_id)
            if after is None or not binder.admits(gamma, spelling, after):  # type: ignore[arg-type]
                refused.append(token_id)
        eos = [t for t in self.vocab.eos_token_ids if t in mask]
        if eos and not binder.ends(gamma, cfg):
            refused.extend(eos)
        if not refused:
            return mask  # the language's mask, already one of the distinct ones
        return self._distinct.intern(mask.without(refused))

    def _language_mask(self, cfg: Configuration) -> tuple[MaskEntry, TokenSet]:
        # The mask and its entry are a function of exactly `cfg.mask_key`: the stack and the
        # part of the scan state the walk reads (the T1 key's fields but A, which the stack
        # fixes: every CD class is stepped from its own recorded scan part on this stack, each
        # walk below it a function of its own key, and whether EOS may end here is read from
        # the same two). `mask_with_entry` keeps them under it, so a stack met again with that
        # scan part — inside a longer lexeme, another fork — costs one lookup, neither a key
        # nor a verdict. Masks handed out are shared: nothing may change them.
        entry = self._entry(cfg, 0)

        def walk_below(after: Configuration, root: int) -> tuple[WalkResult, bytes | array]:
            if root == 0 and after is cfg:
                return entry.walk, entry.ci_tokens
            return self._walk_below(after, root)

        mask = next_token_mask(
            self.oracle, self.trie, self.vocab, cfg, walk_below, cd_residue=self.runners.residue
        )
        return entry, self._distinct.intern(mask)

    @cached_property
    def completer(self) -> Completer:
        """The planner of shortest completions (the reserve, Γ's repairs): built on first use,
        since a guide that only masks (an engine's backend, `gridrail parse`) never needs it."""
        return Completer(self.oracle)

    @property
    def runners(self) -> MaskRunners:
        """The walk and CD-residue kernels (built on first use: the kernels copy the tables)."""
        if self._runners is None:
            self._runners = make_mask_runners(self.oracle, self.trie, self.vocab.size)
        return self._runners

    def _entry(self, cfg: Configuration, root: int) -> MaskEntry:
        """The cached walk from `cfg` below trie node `root`: from T1 (this language's walks),
        else — where the lexicon-visibility guard passes — from T2 (the dialect family's, in
        canonical numbering), else computed; published to both tiers on a miss. T1 always gets
        the entry under its raw key, so audit records name the same entry whichever tier
        answered."""
        key = self.keys.key(cfg, root)
        identifier_position = self.keys.is_identifier_position(cfg)
        entry = self.cache.get(key, identifier_position)
        if entry is not None:
            return entry
        family_key = self.normal_form.key(cfg, root)
        if family_key is not None:
            visible = self.keys.lexicon_visible(cfg)  # the cache refuses T2 where it holds
            shared = self.family_cache.get(family_key, identifier_position, visible)
            if shared is not None:
                walk = self.normal_form.to_local(cfg, shared.walk)
                return self.cache.publish(make_entry(key, walk, shared.ci_tokens))
        walk, tokens = self.runners.walk(cfg, root)
        if family_key is not None:
            canonical = partial(self.normal_form.to_canonical, cfg, walk)
            self.family_cache.publish(make_normal_form_entry(family_key, canonical, walk, tokens))
        return self.cache.publish(make_entry(key, walk, tokens))

    def _walk_below(self, cfg: Configuration, root: int) -> tuple[WalkResult, bytes | array]:
        entry = self._entry(cfg, root)
        return entry.walk, entry.ci_tokens

    def is_eos(self, token_id: int) -> bool:
        return token_id in self._eos

    @cached_property
    def dialect_grammar(self) -> CompiledGrammar:
        """The dialect's grammar the role's language was cut from (this guide's own where it
        was compiled from none): what the checker parses by."""
        return shared_compiled_grammar(self._dialect) if self._dialect else self.compiled

    def parse(self, sql: str) -> Tree:
        """The statement's parse in the dialect's grammar, as the checker reads it (ParseError
        where it is no statement of the dialect)."""
        return parse_tree(self.dialect_grammar, sql)

    def check(
        self, sql: str, judge: Callable[[str], list[Violation]] | None = None
    ) -> list[Violation]:
        """Named violations of a finished statement ([] = clean): first whether it is in this
        guide's language at all (a statement from elsewhere may not be), then — with a schema —
        what no mask can enforce (Proposition 11: column policy, alias binding), judged on the
        dialect's parse so that names the role cannot even spell are reported by name. Over a
        SQLite schema, SQLite's own binder judges the statement too (`check.sqlite_judge`):
        what it reads that the role may not and the checker did not report, or that SQLite
        cannot prepare it at all, is a violation as well (listed last: it spans the whole
        statement). `judge` (a database's own: `ask.database_judge`) then vouches for what
        they passed: its violations where it finds any."""
        if not isinstance(sql, str):
            raise UsageError(
                f"check takes the statement as a str, not {type(sql).__name__}"
                + (" (decode the bytes first)" if isinstance(sql, bytes | bytearray) else "")
            )
        # (a lone surrogate encodes to bytes that are not UTF-8, which no sentence holds)
        data = sql.encode("utf-8", "surrogatepass")
        error = self.oracle.sentence_error(data)
        violations = []
        if error is not None:
            violations.append(_outside_language(self, data, error))
        if self.view is None:
            return violations or (judge(sql) if judge is not None else [])
        if self._checker is None:
            self._checker = SemanticChecker(self.dialect_grammar, self.view)
        if self._judge is None and self.view.schema.dialect == "sqlite":
            self._judge = SqliteJudge(self.view)
        judged: list[Violation] = []  # they span the whole statement: after the located ones
        # not a statement of the dialect either: the first violation already says where
        with contextlib.suppress(ParseError):
            found = self._checker.check(sql)
            violations.extend(found)
            # too complex for the checker: SQLite would take as long (exponentially) to prepare it
            if self._judge is not None and all(v.kind != "statement_too_complex" for v in found):
                judged = self._judge.violations(sql, found)
        violations = sorted(violations, key=lambda v: (v.start, v.end)) + judged
        return violations or (judge(sql) if judge is not None else [])

    def rung(self, cfg: Configuration, gamma: GammaState | None = None) -> str | None:
        """The rung of the names ladder the mask at `cfg` stands on (audit records carry it):
        None where no name terminal is in play; "gamma" where Γ allows only the names that
        bind; "open" where names are the role's lexicon words (no Γ)."""
        if not self.keys.is_identifier_position(cfg):
            return None
        if self.binder is not None and gamma is not None:
            return "gamma"
        return "open"

    def check_budget(self, max_tokens: int) -> None:
        """UsageError unless a generation of `max_tokens` tokens can hold a sentence (the
        reserve at the start: the shortest sentence and EOS)."""
        initial = None if self.binder is None else self.binder.initial
        reserve = len(self.completion(self.oracle.initial, initial))
        if max_tokens < reserve:
            raise UsageError(
                f"max_tokens={max_tokens} is below the reserve: the shortest sentence of this "
                f"grammar takes {reserve} tokens (EOS included) in this vocabulary"
            )

    def completion(self, cfg: Configuration, gamma: GammaState | None = None) -> list[int]:
        """Tokens of a shortest legal completion at `cfg`, ending with EOS (Proposition 9's
        Write(shortest completion + EOS)); its length is the token-denominated reserve. With Γ,
        the names it writes at resolved slots are ones Γ allows (the grammar's shortest,
        repaired name by name, or found a byte at a time where the repair cannot: see
        `_gamma_completion`; failing both, the grammar's, which the checker then judges)."""
        text = self.completer.complete(cfg)
        if gamma is not None and self.binder is not None:
            repaired, _ = self._gamma_completion(cfg, gamma, text, GAMMA_COMPLETION_TRIES)
            text = repaired if repaired is not None else text
        return [*self.trie.tokenize(text), self.vocab.eos_token_id]

    def _gamma_completion(
        self, cfg: Configuration, gamma: GammaState, text: bytes, tries: int
    ) -> tuple[bytes | None, int]:
        """A completion Γ allows: the grammar's `text` repaired name by name
        (`Binder.repair`), else one byte Γ admits (none the grammar's shortest takes) and a
        completion from there — where the repair of names cannot undo the way the grammar's
        shortest went (`… FROM employees in` + `NER JOIN t`, where every join makes `id`
        ambiguous and only INTERSECT goes on). Depth first, within `tries` repairs; with the
        tries left."""
        binder, complete = self.binder, self.completer.complete
        assert binder is not None
        tries -= 1
        repaired = binder.repair(gamma, cfg, text, complete)
        if repaired is not None or tries <= 0:
            return repaired, tries
        for byte in range(256):
            step = bytes((byte,))
            after = self.oracle.try_feed(cfg, step)
            state = None if after is None else binder.advance(gamma, step, after)
            if after is None or state is None:  # (try_feed keeps only viable bytes)
                continue
            rest, tries = self._gamma_completion(after, state, complete(after), tries)
            if rest is not None:
                return step + rest, tries
            if tries <= 0:
                break
        return None, tries


def compile(
    grammar: Grammar | CompiledGrammar,
    vocab: Vocabulary,
    *,
    schema: Schema | None = None,
    policy: Policy | None = None,
    role: str | None = None,
    registry: Registry | None = None,
    catalogue: ConstructCatalogue | None = None,
    profile: GenerationProfile | None = None,
    gamma: bool | None = None,
    declared_names: bool = False,
) -> Guide:
    """A Guide for `grammar` over `vocab`. With a policy (and `role`, unless the policy has
    one role) the language is the role's projection (L2); with a schema its identifiers are the
    names the role may see (L3); with a generation `profile`, it is narrowed to what that profile
    lets a model write (None: the dialect's whole language, what `gridrail parse` reads). With
    `gamma` (and a schema), names the statement declares are tracked and the slots that
    refer to them allow only names that bind (issue 15, docs/names.md) — None: as the role's
    policy chooses (`names = "bound"` or `"open"`), off where it does not; a role whose policy
    binds its names cannot be compiled with gamma=False; with `declared_names`
    as well, the table and column names also spell the names the statement declares (CTEs,
    column aliases) where they bind (experimental: see docs/names.md). A grammar given
    already compiled is used as it is.
    `catalogue` is the grammar's policy surface (statement kinds, constructs, capabilities,
    lexicon categories): a bundled grammar has its own; any other grammar needs one for a
    policy or a schema (`ConstructCatalogue.from_file(path, grammar)`).

    The role's language and its compiled grammar come from `registry` (default: the process-wide
    one), built once per fingerprint however many guides and threads ask for them (§6.3)."""
    with _collector_paused():
        return _compile(
            grammar, vocab, schema, policy, role, registry, catalogue, profile, gamma,
            declared_names,
        )  # fmt: skip


def _compile(
    grammar: Grammar | CompiledGrammar,
    vocab: Vocabulary,
    schema: Schema | None,
    policy: Policy | None,
    role: str | None,
    registry: Registry | None,
    catalogue: ConstructCatalogue | None,
    profile: GenerationProfile | None,
    gamma: bool | None = None,
    declared_names: bool = False,
) -> Guide:
    gamma = binds_names(select_role(policy, role), gamma, default=False)
    if gamma and schema is None:
        raise UsageError(
            "names bound where they are written (gamma=True, or a role whose policy says "
            'names = "bound") need a schema'
        )
    if declared_names and not gamma:
        raise UsageError("declared_names=True spells names only Γ can judge: it needs gamma=True")
    if schema is None and policy is None and role is None and profile is None:
        dialect = grammar.grammar if isinstance(grammar, CompiledGrammar) else grammar
        if not isinstance(grammar, CompiledGrammar):
            grammar = shared_compiled_grammar(grammar, registry)
        return Guide(
            grammar,
            vocab,
            trie=shared_trie(vocab, registry),
            cache=shared_mask_cache(grammar, vocab, "", registry),
            family_cache=shared_family_cache(dialect, vocab, registry, catalogue),
        )
    if isinstance(grammar, CompiledGrammar):
        raise UsageError(
            "a policy, a schema or a profile needs the source Grammar, not a CompiledGrammar"
        )
    catalogue = ConstructCatalogue.resolve(grammar, catalogue)
    language, view, lexicons = shared_role_language(
        grammar, policy, role, schema, registry, catalogue, profile, declared_names
    )
    compiled = shared_compiled_grammar(language, registry)
    signature = lexicon_signature(compiled, lexicons)
    return Guide(
        compiled,
        vocab,
        view,
        grammar,
        lexicons,
        trie=shared_trie(vocab, registry),
        cache=shared_mask_cache(compiled, vocab, signature[1], registry),
        family_cache=shared_family_cache(grammar, vocab, registry, catalogue),
        names=NameCatalog.from_view(view) if gamma and view is not None else None,
        signature=signature,
    )


# Compiling a schema allocates hundreds of thousands of small acyclic containers (names, their
# spellings, automaton rows); each allocation burst lets the cyclic collector traverse the whole
# heap, schema included, again: a third of a 10,000-table compile. It is paused while any
# compile runs and resumes (if it was on) when the last one ends; nothing is leaked, only
# collected later.
_collector_lock = threading.Lock()
_collector_holds = 0
_collector_was_enabled = False


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    global _collector_holds, _collector_was_enabled
    with _collector_lock:
        if _collector_holds == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_holds += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_holds -= 1
            if _collector_holds == 0 and _collector_was_enabled:
                gc.enable()


def lexicon_signature(compiled: CompiledGrammar, lexicons: Sequence[Lexicon]) -> tuple[int, str]:
    """The lexicon terminals as a bit mask, and a fingerprint of what they spell."""
    mask = 0
    digest = hashlib.blake2b(b"gridrail-lexicons-v1\0", digest_size=16)
    for lexicon in sorted(lexicons, key=lambda lex: lex.category.terminal):
        mask |= 1 << compiled.grammar.terminal(lexicon.category.terminal).index
        for part in (lexicon.category.terminal, "\0", lexicon.pattern, "\0"):
            digest.update(part.encode())  # in parts: no copy of a large pattern's text
    return mask, digest.hexdigest() if mask else ""


def _outside_language(guide: Guide, data: bytes, offset: int) -> Violation:
    oracle, name = guide.oracle, guide.compiled.grammar.name
    cfg = oracle.feed(oracle.initial, data[:offset])
    if offset < len(data):
        expected = ", ".join(oracle.allowed_terminals(cfg)) or "nothing"
        byte = data[offset : offset + 1].decode("utf-8", "replace")
        message = (
            f"the statement leaves the language of {name} at byte {offset} ({byte!r}); "
            f"what may come there: {expected}{oracle.bound_note(cfg)}"
        )
    else:
        stack = oracle.finalize(cfg)
        allowed = oracle.lr.allowed_mask(stack) if stack is not None else 0
        expected = ", ".join(guide.compiled.names_of(allowed)) or "nothing"
        message = f"the statement is incomplete in {name}; it could go on with: {expected}"
    return Violation("outside_language", message, offset, min(offset + 1, len(data)))


class Matcher:
    """One generation's state: vLLM's structured-output interface plus `forced_tokens`.

    `accept_tokens` returns False and leaves the matcher unchanged when a token is outside the
    mask; only misuse (an id outside the vocabulary, a bitmask of the wrong shape) raises.

    With `max_tokens` (Proposition 9, mode 1) the matcher also keeps the invariant
    `accepted + len(completion()) <= max_tokens`: `accept_tokens` refuses (returns False) tokens
    after which the shortest legal completion would no longer fit, and the caller then writes
    `completion()` — a sentence plus EOS — instead. So every stop inside the budget is a sentence.
    """

    def __init__(self, guide: Guide, max_tokens: int | None = None, audit: AuditLog | None = None):
        if max_tokens is not None:
            max_tokens = _integer_argument("max_tokens", max_tokens)
        if audit is not None and not isinstance(audit, AuditLog):
            raise UsageError(f"audit must be an AuditLog, not {type(audit).__name__}")
        self.guide = guide
        self.max_tokens = max_tokens
        self.audit = audit  # when given, every accepted token and rollback is recorded
        self._last_mask: tuple[Configuration, MaskEntry, TokenSet] | None = None
        self._history: list[Configuration] = [guide.oracle.initial]
        # Γ after each history entry (a guide compiled with gamma=True), else None
        binder = guide.binder
        self._gamma: list[GammaState] | None = None if binder is None else [binder.initial]
        # History length -> the rest of an accepted sentence-ending span from there: a rollback
        # into a reserve completion must offer that rest (it fits the budget), not a fresh
        # shortest completion, which can be a token longer.
        self._finishes: dict[int, list[int]] = {}
        self._tokens: list[int] = []  # accepted ids, one per history entry after the first
        self._terminated = False
        if max_tokens is not None:
            guide.check_budget(max_tokens)

    @property
    def num_accepted(self) -> int:
        return len(self._tokens)

    def accepted_tokens(self) -> list[int]:
        return list(self._tokens)

    def recent_tokens(self, n: int) -> list[int]:
        """The last `n` accepted tokens (fewer when fewer were accepted)."""
        return self._tokens[-n:] if n > 0 else []

    @property
    def configuration(self) -> Configuration:
        return self._history[-1]

    def _gamma_at(self, index: int) -> GammaState | None:
        return None if self._gamma is None else self._gamma[index]

    def configuration_hash(self) -> str:
        """H(κ) of the current configuration (Γ included, under Γ): what audit records name."""
        gamma = self._gamma_at(-1)
        names = b"" if gamma is None else gamma.digest + b"\0" + gamma.pending
        return configuration_hash(self.configuration, names)

    def mask_with_entry(self) -> tuple[MaskEntry, TokenSet]:
        """The current mask (Γ applied, under Γ) and the cache entry its walk came from."""
        return self._mask_at(self.configuration)

    def is_terminated(self) -> bool:
        return self._terminated

    def reset(self) -> None:
        self._finishes.clear()
        if self.audit is not None and self._tokens:
            self.rollback(len(self._tokens))
        del self._history[1:]
        if self._gamma is not None:
            del self._gamma[1:]
        self._tokens.clear()
        self._terminated = False

    # -- masks
    def allowed(self) -> TokenSet:
        """The current mask as a set; only EOS once terminated."""
        if self._terminated:
            out = TokenSet(self.guide.vocab.size)
            out.add_all(self.guide.vocab.eos_token_ids)
            return out
        return self._mask_at(self._history[-1])[1]

    def _mask_at(self, cfg: Configuration) -> tuple[MaskEntry, TokenSet]:
        """The mask at `cfg`, remembered for the current configuration so that auditing the
        token sampled from it does not compute it twice."""
        last = self._last_mask
        if last is not None and last[0] is cfg:
            return last[1], last[2]
        gamma = None if self._gamma is None else self._gamma[-1]
        entry, mask = self.guide.mask_with_entry(cfg, gamma)
        self._last_mask = (cfg, entry, mask)
        return entry, mask

    def fill_bitmask(self, bitmask: np.ndarray, row: int = 0) -> None:
        """Write the current mask into row `row` of an `allocate_bitmask` array (or a CPU torch
        int32 tensor of that shape); `gridrail.fill_next_token_bitmask` fills a batch."""
        if self._gamma is None and not self._terminated:
            # the guide's memo straight away, without the frames of `allowed` and `_mask_at`: a
            # warm step is one lookup and one foreign call (bench/RESULTS.md "Session 22")
            mask = self.guide.mask_with_entry(self._history[-1])[1]
        else:
            mask = self.allowed()
        if write_mask_row is not None and write_mask_row(bitmask, row, mask.bits):
            return  # the kernel checked what the lines below check, and copied the row
        if not (  # the common call (a writable int32 array, an int row) checked in few steps
            type(bitmask) is np.ndarray
            and bitmask.dtype is _INT32
            and type(row) is int
            and bitmask.ndim == 2
            and bitmask.shape[1] == self.guide.row_words
            and bitmask.flags.writeable
        ):
            bitmask = bitmask_array(bitmask, self.guide.vocab.size)
            row = _integer_argument("row", row)
        if not -len(bitmask) <= row < len(bitmask):
            raise UsageError(f"row {row} is outside the bitmask's {len(bitmask)} rows")
        mask.write_row(bitmask, row)

    # -- advancing
    def _checked_ids(self, token_ids: Sequence[int]) -> list[int]:
        """`token_ids` as Python ints, each a token id of the vocabulary: Python and NumPy
        integers are ids; bools, floats and strings are not (UsageError)."""
        size = self.guide.vocab.size
        if type(token_ids) is list and all(type(t) is int and 0 <= t < size for t in token_ids):
            return list(token_ids)  # the common call, checked in one pass
        if isinstance(token_ids, str | bytes | bytearray) or not isinstance(token_ids, Iterable):
            raise UsageError(
                f"token ids come as a sequence of integers, not {type(token_ids).__name__}"
            )
        ids = [_integer_argument("a token id", token_id) for token_id in token_ids]
        for token_id in ids:
            if not 0 <= token_id < size:
                raise UsageError(f"token id {token_id} is outside the vocabulary (0..{size - 1})")
        return ids

    def _advance(self, cfg: Configuration, token_id: int) -> Configuration | None:
        """The configuration after one non-EOS token, or None if it is not allowed."""
        return self.guide.advance(cfg, token_id)

    def validate_tokens(self, token_ids: Sequence[int]) -> list[int]:
        """The longest prefix of `token_ids` that would be accepted, without advancing."""
        return self._valid_prefix(self._checked_ids(token_ids))

    def _valid_prefix(self, token_ids: list[int]) -> list[int]:
        return token_ids[: len(self._configurations_after(token_ids))]

    def _configurations_after(
        self, token_ids: list[int]
    ) -> list[tuple[Configuration, GammaState | None]]:
        """The configuration (and Γ) after each token of the longest prefix of `token_ids` that
        would be accepted (an EOS leaves it unchanged): each token is fed once."""
        cfg, terminated = self.configuration, self._terminated
        gamma, binder = self._gamma_at(-1), self.guide.binder
        out: list[tuple[Configuration, GammaState | None]] = []
        for token_id in token_ids:
            if terminated:
                break
            if self.guide.is_eos(token_id):
                if not self.guide.oracle.eos_ok(cfg):
                    break
                if binder is not None and gamma is not None and not binder.ends(gamma, cfg):
                    break
                terminated = True
            else:
                nxt = self._advance(cfg, token_id)
                if nxt is None:
                    break
                if binder is not None and gamma is not None:
                    spelling = self.guide.vocab.token_bytes(token_id)
                    gamma = binder.advance(gamma, spelling, nxt)  # type: ignore[arg-type]
                    if gamma is None:
                        break
                cfg = nxt
            out.append((cfg, gamma))
        return out

    def accept_tokens(self, token_ids: Sequence[int], kind: str = "sampled") -> bool:
        """Advance over all of `token_ids`, or over none of them and return False (a token
        outside the mask, or one that would break the budget invariant). `kind` is what the
        audit log calls these tokens: "sampled", "forced" (jump-forward) or "reserve" (the
        budget trigger's completion); an EOS is always recorded as "eos"."""
        if kind not in TOKEN_KINDS:
            raise UsageError(f"kind must be one of {', '.join(TOKEN_KINDS)}, not {kind!r}")
        token_ids = self._checked_ids(token_ids)
        after = self._configurations_after(token_ids)
        if len(after) != len(token_ids):
            return False
        last = after[-1] if after else (self.configuration, self._gamma_at(-1))
        if not self._within_budget(token_ids, *last):
            return False
        if self._finishes:
            for stale in [n for n in self._finishes if n > len(self._history)]:
                del self._finishes[stale]  # from a branch that was rolled back
        ends_sentence = bool(token_ids) and self.guide.is_eos(token_ids[-1])
        for position, (token_id, (cfg, gamma)) in enumerate(zip(token_ids, after, strict=True)):
            if ends_sentence and position:
                self._finishes[len(self._history)] = list(token_ids[position:])
            if self.audit is not None:
                self._record(token_id, "eos" if self.guide.is_eos(token_id) else kind)
            if self.guide.is_eos(token_id):
                self._terminated = True
            self._history.append(cfg)
            if self._gamma is not None:
                self._gamma.append(gamma)  # type: ignore[arg-type]
            self._tokens.append(token_id)
        return True

    def _record(self, token_id: int, kind: str) -> None:
        cfg = self.configuration
        entry, mask = self._mask_at(cfg)
        self.audit.append(  # type: ignore[union-attr]  # only called with a log
            self.configuration_hash(),
            entry.entry_id,
            token_id,
            self.guide.vocab.size - mask.count(),
            kind,
            self.rung(),
        )

    def rung(self) -> str | None:
        """The names ladder's rung of the current mask (`Guide.rung`)."""
        return self.guide.rung(self.configuration, self._gamma_at(-1))

    def _within_budget(
        self, token_ids: Sequence[int], cfg: Configuration, gamma: GammaState | None
    ) -> bool:
        """Whether accepting `token_ids`, which lead to `cfg`, keeps the budget invariant."""
        if self.max_tokens is None:
            return True
        total = self.num_accepted + len(token_ids)
        if token_ids and self.guide.is_eos(token_ids[-1]):
            return total <= self.max_tokens
        return total + len(self.guide.completion(cfg, gamma)) <= self.max_tokens

    def rollback(self, num_tokens: int) -> None:
        """Undo the last `num_tokens` accepted tokens (EOS included)."""
        num_tokens = _integer_argument("num_tokens", num_tokens)
        if not 0 <= num_tokens < len(self._history):
            raise UsageError(
                f"cannot roll back {num_tokens} tokens: {len(self._history) - 1} were accepted"
            )
        if num_tokens:
            del self._history[-num_tokens:]
            if self._gamma is not None:
                del self._gamma[-num_tokens:]
            del self._tokens[-num_tokens:]
            self._terminated = False
            if self.audit is not None:
                entry, _ = self._mask_at(self.configuration)
                self.audit.append(
                    self.configuration_hash(), entry.entry_id, num_tokens, 0, "rollback"
                )

    def completion(self) -> list[int]:
        """The tokens (EOS last) that finish the output as a sentence from here; accepting them
        always succeeds. Empty once terminated."""
        if self._terminated:
            return []
        known = self._finishes.get(len(self._history))
        if known is not None:
            return list(known)
        return self.guide.completion(self.configuration, self._gamma_at(-1))

    def forced_tokens(self) -> list[int]:
        """Jump-forward: while the mask is a single non-EOS token, that token (bounded by
        MAX_FORCED_SPAN). Does not advance the matcher; accept them to use them."""
        forced: list[int] = []
        cfg, gamma, binder = self.configuration, self._gamma_at(-1), self.guide.binder
        if self._terminated:
            return forced
        while len(forced) < MAX_FORCED_SPAN:
            ids = self.guide.mask(cfg, gamma).ids()
            if len(ids) != 1 or self.guide.is_eos(ids[0]):
                break
            nxt = self._advance(cfg, ids[0])
            assert nxt is not None  # it is in the mask
            if binder is not None and gamma is not None:
                gamma = binder.advance(gamma, self.guide.vocab.token_bytes(ids[0]), nxt)  # type: ignore[arg-type]
                assert gamma is not None  # it is in the mask
            forced.append(ids[0])
            cfg = nxt
        return forced


def _integer_argument(name: str, value: object) -> int:
    """`value` as an int: Python and NumPy integers are integers; bools are not (True is no
    token id), nor are floats (10.5) or strings ("5")."""
    if not isinstance(value, bool | np.bool_):
        with contextlib.suppress(TypeError):
            return operator.index(value)  # type: ignore[arg-type]
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
    raise UsageError(f"{name} must be an integer, not {type(value).__name__} ({shown})")


_SHAPES: BoundedLRU[TokenShapes] = BoundedLRU(4, 1 << 31)


def _token_shapes(vocab: Vocabulary) -> TokenShapes:
    """The vocabulary's facts for the Γ filter, built once per vocabulary."""
    return _SHAPES.memo(vocab.fingerprint, lambda: TokenShapes(vocab))


def _require_a_first_token(guide: Guide) -> None:
    """Refuse, when the guide is made, a vocabulary that cannot start any sentence (only EOS and
    special tokens, or tokens of another alphabet): its first mask would be empty."""
    oracle = guide.oracle
    if oracle.eos_ok(oracle.initial):  # the empty sentence: EOS alone is an output
        return
    if guide.trie.first_token(oracle.initial, oracle.step) is not None:
        return
    raise VocabularyError(
        f"{guide.vocab.source}: no token of this vocabulary can begin a sentence of "
        f"{guide.compiled.grammar.name} (its {len(guide.vocab.special_ids)} ids without a "
        f"spelling aside, no token's bytes are a viable prefix); use the tokenizer of the "
        "model that will generate"
    )
