"""The completion planner's shortest lexeme per terminal: the level-at-a-time walk equals the
plain FIFO breadth-first walk it replaces (its specification), on the dialect, on role
languages with schema names, and under the generation profile."""

from __future__ import annotations

from collections import deque

import pytest

import gridrail as gr
from gridrail.parse.completion import _bits, _shortest_lexemes
from gridrail.policy.language import role_language
from gridrail.policy.profile import GenerationProfile
from gridrail.policy.schema import Schema
from test_lexicon import HR_TABLES, _policy, _sqlite


def _fifo_shortest(oracle: gr.Oracle) -> dict[int, bytes]:
    compiled = oracle.compiled
    scanner = compiled.scanner
    found: dict[int, bytes] = {}
    seen = {scanner.start}
    queue = deque([(scanner.start, b"")])
    while queue:
        state, path = queue.popleft()
        for byte in range(256):
            nxt = scanner.step(state, byte)
            if nxt < 0 or nxt in seen:
                continue
            seen.add(nxt)
            text = path + bytes((byte,))
            candidates = scanner.accept_mask[nxt]
            if candidates:
                top = max(compiled.classes[t] for t in _bits(candidates))
                for t in _bits(candidates):
                    if compiled.classes[t] == top:
                        found.setdefault(t, text)
            queue.append((nxt, text))
    return found


@pytest.mark.parametrize("profile", [None, GenerationProfile()], ids=["language", "profile"])
@pytest.mark.parametrize("role", [None, "analyst"])
def test_the_shortest_lexemes_are_those_of_a_fifo_walk(role, profile) -> None:
    schema = Schema.from_tables("sqlite", {**HR_TABLES, "Quarterly Results": ["Q", "rev USD"]})
    policy = _policy() if role else None
    language, _, _ = role_language(_sqlite(), policy, role, schema, profile=profile)
    oracle = gr.Oracle(gr.compile_grammar(language))
    lexemes = _shortest_lexemes(oracle)
    assert lexemes == _fifo_shortest(oracle)
    column = language.terminal("COLUMN_NAME").index
    # the shortest name the role sees, in its smallest case (the analyst sees no "Q")
    assert lexemes[column] == (b"Q" if role is None else b"ID")


def test_the_dialect_alone() -> None:
    oracle = gr.Oracle(gr.compile_grammar(_sqlite()))
    assert _shortest_lexemes(oracle) == _fifo_shortest(oracle)
