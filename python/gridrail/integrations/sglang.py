"""gridrail as a grammar backend of SGLang (issue 18; SGLang 0.5).

SGLang has what vLLM lacks: a registry of grammar backends (`register_grammar_backend`) and
general plugins (the entry point group `sglang.srt.plugins`, loaded in each of its processes).
gridrail's plugin `register` adds the backend "gridrail" to both the registry and the choices
of `--grammar-backend`; nothing of SGLang is patched. A request's `ebnf` is `gridrail:NAME`, a
spec the operator declared (`gridrail.integrations.specs`).

`GridrailGrammar` follows SGLang's grammar-object conventions (those of its llguidance
backend): `accept_token` raises on a token outside the mask, the end of the sentence finishes
the grammar, `rollback` undoes it too, `copy` gives an independent matcher in the same state
(SGLang caches one grammar per key and copies it per request), and forced tokens are offered as
jump-forward. The batch's rows are filled in one call (`gridrail.fill_next_token_bitmask`).
"""

from __future__ import annotations

import math

import torch
from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices
from sglang.srt.constrained.base_grammar_backend import (
    GRAMMAR_BACKEND_REGISTRY,
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarRow,
    InvalidGrammarObject,
    register_grammar_backend,
)

from gridrail.batch import fill_next_token_bitmask
from gridrail.decode.hf import apply_token_bitmask
from gridrail.decode.row import BudgetTrigger
from gridrail.guide import Matcher
from gridrail.integrations.specs import SpecError, SpecRegistry
from gridrail.vocab import Vocabulary

BACKEND_NAME = "gridrail"


class GridrailGrammar(BaseGrammarObject):
    """One request's matcher, as an SGLang grammar object."""

    def __init__(self, matcher: Matcher, trigger: BudgetTrigger | None = None):
        super().__init__()
        self.matcher = matcher  # without a budget: a token of the mask is never refused
        self.trigger = trigger or BudgetTrigger(None)  # the spec's budget, as vLLM's

    def accept_token(self, token: int) -> None:
        if self.finished:
            return
        if not self.matcher.accept_tokens([token]):
            raise ValueError(f"token {token} is outside gridrail's mask at this step")
        self.trigger.accepted(token)
        self.finished = self.matcher.is_terminated()

    def rollback(self, k: int) -> None:
        if k > 0:
            self.matcher.rollback(k)
            self.trigger.reset()
            self.finished = self.matcher.is_terminated()

    def is_terminated(self) -> bool:
        return self.finished

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device) -> torch.Tensor:
        return torch.full((batch_size, math.ceil(vocab_size / 32)), -1, dtype=torch.int32)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        if not self.trigger.fill(self.matcher, vocab_mask, idx):
            self.matcher.fill_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries: list[GrammarRow], vocab_mask: torch.Tensor) -> None:
        """The batch's rows in one call when every grammar is gridrail's."""
        if all(isinstance(e.grammar, GridrailGrammar) for e in entries):
            masked = [  # the rows the budget trigger does not write
                (e.grammar.matcher, e.row)  # type: ignore[attr-defined]
                for e in entries
                if not e.grammar.trigger.fill(e.grammar.matcher, vocab_mask, e.row)  # type: ignore[attr-defined]
            ]
            matchers, rows = [m for m, _ in masked], [r for _, r in masked]
            fill_next_token_bitmask(matchers, vocab_mask, rows)
            return
        BaseGrammarObject.fill_vocab_mask_batched(entries, vocab_mask)

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        logits.copy_(apply_token_bitmask(logits, vocab_mask))

    def copy(self) -> GridrailGrammar:
        guide = self.matcher.guide
        twin = guide.matcher()
        twin.accept_tokens(self.matcher.accepted_tokens())
        copied = GridrailGrammar(twin, BudgetTrigger(self.trigger.max_tokens))
        copied.finished = self.finished
        return copied

    def try_jump_forward(self, tokenizer) -> tuple[list[int], str] | None:
        forced = [] if self.finished else self.matcher.forced_tokens()
        return (forced, "") if forced else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        return "", -1

    def jump_and_retokenize(
        self, old_output_ids: list[int], new_output_ids: list[int], next_state: int
    ) -> None:
        pass


class GridrailBackend(BaseGrammarBackend):
    """SGLang's grammar backend "gridrail": `ebnf` requests naming a spec; other request kinds
    are refused as SGLang refuses what a backend does not support."""

    def __init__(
        self,
        tokenizer,
        vocab_size: int,
        eos_token_ids: set[int] | None = None,
        specs: SpecRegistry | None = None,
    ):
        super().__init__()
        eos = sorted(eos_token_ids) if eos_token_ids else None
        self.vocab = Vocabulary.from_hf(tokenizer, size=vocab_size, eos_token_ids=eos)
        self.specs = specs if specs is not None else SpecRegistry.from_environment()

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        try:
            spec = self.specs.spec(key_string)
            guide = self.specs.guide(spec, self.vocab)
        except SpecError as exc:
            return InvalidGrammarObject(str(exc))
        return GridrailGrammar(guide.matcher(), BudgetTrigger.checked(guide, spec.max_tokens))


def register() -> None:
    """SGLang's general-plugin hook: the "gridrail" grammar backend (idempotent)."""
    if BACKEND_NAME not in GRAMMAR_BACKEND_REGISTRY:
        register_grammar_backend(
            BACKEND_NAME,
            lambda server_args, tokenizer, vocab_size, eos_token_ids: GridrailBackend(
                tokenizer, vocab_size, eos_token_ids
            ),
        )
    if BACKEND_NAME not in GRAMMAR_BACKEND_CHOICES:
        add_grammar_backend_choices([BACKEND_NAME])
