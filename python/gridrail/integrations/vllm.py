"""gridrail as a structured-output backend of vLLM's V1 engine (issue 18; vLLM 0.34).

`GridrailBackend` and `GridrailGrammar` implement vLLM's `StructuredOutputBackend` and
`StructuredOutputGrammar` over gridrail's matcher: a request's grammar text is `gridrail:NAME`,
a spec the operator declared (`gridrail.integrations.specs`); the mask of every step is the
matcher's exact mask, speculative tokens are validated and rolled back exactly. Where the spec
sets `max_tokens`, vLLM samples on its own, so the budget is kept as under a logits processor
(`gridrail.decode.row`): once the shortest completion just fits, the mask is its next token; a
single sampled token can still lengthen the completion past the budget (then vLLM's own
`max_tokens` cuts the statement).

vLLM chooses its backend by name from a fixed list and offers no backend registry. gridrail is
made selectable by a vLLM *general plugin* — the entry point `gridrail` of the group
`vllm.general_plugins`, which vLLM loads in each of its processes — whose `register` wraps two
vLLM functions, and nothing else:

- `SamplingParams._validate_structured_outputs`: a request whose `structured_outputs.grammar`
  starts with `gridrail:` has its spec looked up (an unknown name is refused at the front end)
  and is marked for the "gridrail" backend; every other request is validated by vLLM as before;
- `StructuredOutputManager.grammar_init`: for such a request, the engine's backend is created
  as gridrail's on first use; then vLLM's own code runs (grammars compiled on its thread pool,
  a request waiting for its grammar while the batch goes on, bitmasks filled, speculative
  rounds validated and rolled back).

The statement must end where vLLM stops: vLLM's manager gives a terminated grammar's rows every
token and accepts whatever follows, so an end of sentence that does not stop the request (an
end-of-generation token of the vocabulary that is not among the request's stop ids, or any end
under `ignore_eos`) would let the model write past the statement. So `ignore_eos` is refused at
the front end, the ends that do not stop the request stay masked, and a request that the
sentence's primary end does not stop is refused.

vLLM runs one structured-output backend per engine: an engine that has served a gridrail request
refuses requests for another backend (vLLM's own error), and the reverse. The wrapped functions
are private to vLLM, so the extra `gridrail[vllm]` pins the minor version they were read from.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field

import numpy as np
import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from gridrail.decode.row import BudgetTrigger
from gridrail.guide import Matcher
from gridrail.integrations.specs import PREFIX, SpecError, SpecRegistry
from gridrail.vocab import Vocabulary

BACKEND_NAME = "gridrail"


@dataclass
class GridrailGrammar(StructuredOutputGrammar):
    """One request's matcher, with vLLM's conventions: tokens after the end are ignored, and
    stop tokens other than the end of the sentence stay masked."""

    matcher: Matcher  # without a budget: a token of the mask is never refused
    # masked in every row: the request's stop ids that do not end a sentence, and the ends of a
    # sentence that do not stop the request (vLLM would go on after them, unconstrained)
    masked_stops: tuple[int, ...] = ()
    trigger: BudgetTrigger = field(default_factory=lambda: BudgetTrigger(None))  # the budget

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        if self.matcher.is_terminated():
            return True
        guide = self.matcher.guide
        end = next((n + 1 for n, t in enumerate(tokens) if guide.is_eos(t)), len(tokens))
        last = tokens[end - 1] if end else None
        if last is not None and guide.is_eos(last) and last in self.masked_stops:
            return False  # an end that does not stop vLLM (its mask never offered it)
        if not self.matcher.accept_tokens(tokens[:end]):  # all or nothing, state unchanged
            return False
        for token in tokens[:end]:
            self.trigger.accepted(token)
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        return self.matcher.validate_tokens(tokens)

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)
        self.trigger.reset()

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        if self.trigger.fill(self.matcher, bitmask, batch_index):
            return
        self.matcher.fill_bitmask(bitmask, batch_index)
        if self.masked_stops:
            row = bitmask[batch_index].numpy().view(np.uint32)
            for token in self.masked_stops:
                row[token >> 5] &= np.uint32(~(1 << (token & 31)) & 0xFFFFFFFF)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()
        self.trigger.reset()


@dataclass
class GridrailBackend(StructuredOutputBackend):
    """The engine's gridrail backend: the model's vocabulary read once from its tokenizer, the
    specs from `GRIDRAIL_SPECS` (or `specs`)."""

    specs: SpecRegistry | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        self.vocab = Vocabulary.from_hf(self.tokenizer, size=self.vocab_size)
        if self.specs is None:
            self.specs = SpecRegistry.from_environment()

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> GridrailGrammar:
        if request_type != StructuredOutputOptions.GRAMMAR:
            raise SpecError(f"the gridrail backend takes {PREFIX}NAME grammars, not {request_type}")
        assert self.specs is not None
        spec = self.specs.spec(grammar_spec)
        guide = self.specs.guide(spec, self.vocab)
        ends = set(guide.vocab.eos_token_ids)
        # None: the request's stop ids are not known (a direct call): take every end as one
        stops = ends if stop_token_ids is None else set(stop_token_ids)
        if guide.vocab.eos_token_id not in stops:  # the budget's completion writes that one
            raise SpecError(
                f"the end of a sentence, token {guide.vocab.eos_token_id}, does not stop this "
                "request: vLLM would go on after the statement"
            )
        return GridrailGrammar(
            guide.matcher(),
            tuple(sorted(stops ^ ends)),  # stops that do not end, ends that do not stop
            BudgetTrigger.checked(guide, spec.max_tokens),
        )

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        return torch.full((max_num_seqs, math.ceil(self.vocab_size / 32)), -1, dtype=torch.int32)

    def destroy(self) -> None:
        pass


_registered = threading.Lock()
_specs: SpecRegistry | None = None


def _front_end_specs() -> SpecRegistry:
    global _specs
    with _registered:
        if _specs is None:
            _specs = SpecRegistry.from_environment()
        return _specs


def register() -> None:
    """vLLM's general-plugin hook: make `gridrail:NAME` requests go to `GridrailBackend`.
    Idempotent (vLLM calls it in every process, and may call it twice in one)."""
    if getattr(SamplingParams._validate_structured_outputs, "gridrail", False):
        return
    validate = SamplingParams._validate_structured_outputs
    grammar_init = StructuredOutputManager.grammar_init

    @functools.wraps(validate)
    def validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer):
        wanted = self.structured_outputs
        grammar = getattr(wanted, "grammar", None) if wanted is not None else None
        if not (isinstance(grammar, str) and grammar.startswith(PREFIX)):
            return validate(self, model_config, structured_outputs_config, tokenizer)
        from vllm.exceptions import VLLMValidationError

        try:
            _front_end_specs().spec(grammar)
        except SpecError as exc:
            raise VLLMValidationError(str(exc)) from None
        if self.ignore_eos:  # vLLM would go on after the statement's end, unconstrained
            raise VLLMValidationError(
                f"{PREFIX}NAME requests cannot set ignore_eos: the statement ends the request"
            )
        # vLLM refuses a request-level backend unless the engine's is "auto" and the request's
        # was chosen by "auto": gridrail's is chosen by the grammar text, as "auto" would
        if structured_outputs_config is not None and structured_outputs_config.backend != "auto":
            raise VLLMValidationError(
                f"{PREFIX}NAME requests need the engine's structured-output backend left at "
                f"'auto', not {structured_outputs_config.backend!r}"
            )
        wanted._backend = BACKEND_NAME
        wanted._backend_was_auto = True

    @functools.wraps(grammar_init)
    def init_grammar(self, request) -> None:
        structured = request.sampling_params.structured_outputs if request.sampling_params else None
        if (
            request.structured_output_request is not None
            and structured is not None
            and structured._backend == BACKEND_NAME
            and self.backend is None
        ):
            self.backend = GridrailBackend(
                self.vllm_config,
                tokenizer=self.tokenizer,
                vocab_size=self.vllm_config.model_config.get_vocab_size(),
            )
            self.backend_name = BACKEND_NAME
        grammar_init(self, request)

    validate_structured_outputs.gridrail = True  # type: ignore[attr-defined]
    SamplingParams._validate_structured_outputs = validate_structured_outputs
    StructuredOutputManager.grammar_init = init_grammar
