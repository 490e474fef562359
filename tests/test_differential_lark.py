"""The oracle against an independent reference built on lark's LALR parser (tests/support).

Both read the same .lark file. Verdicts compared: full sentence accepted, and the first byte after
which a prefix stops being viable (viability is prefix-closed, so equal first-error offsets mean
equal verdicts for every prefix; a sample also compares every prefix one by one).
"""

from __future__ import annotations

import random
import re
from functools import cache

import pytest

from assets import spider_gold
from gridrail.grammar.compiled import compile_grammar
from gridrail.grammar.loader import bundled_grammar_text
from gridrail.grammar.model import Grammar
from gridrail.parse.oracle import Oracle
from support.lark_reference import Reference
from support.long_tier import long_size

MUTATIONS = 2000
PER_PREFIX_SAMPLE = 150
_TOKEN = re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|\w+|\s+|.", re.S)


@cache
def _engines() -> tuple[Oracle, Reference]:
    text = bundled_grammar_text("sqlite")
    return Oracle(compile_grammar(Grammar.from_lark(text))), Reference(text)


def _spider_statements() -> list[str]:
    out = []
    with open(spider_gold(), encoding="utf-8") as f:
        for line in f:
            sql = line.rstrip("\n").split("\t", 1)[0].strip()
            if sql:
                out.append(sql if sql.endswith(";") else sql + ";")
    return out


def _mutate(statement: str, rng: random.Random, pool: list[str]) -> str:
    tokens = _TOKEN.findall(statement)
    kind = rng.choice(["delete", "insert", "swap", "truncate"])
    i = rng.randrange(len(tokens))
    if kind == "delete":
        del tokens[i]
    elif kind == "insert":
        tokens.insert(i, rng.choice(pool))
    elif kind == "swap" and len(tokens) > 1:
        j = min(i + 1, len(tokens) - 1) if i + 1 < len(tokens) else i - 1
        tokens[i], tokens[j] = tokens[j], tokens[i]
    else:
        text = "".join(tokens)
        return text[: rng.randrange(len(text) + 1)]
    return "".join(tokens)


def _mutated_corpus(count: int, seed: int) -> list[str]:
    statements = _spider_statements()
    rng = random.Random(seed)
    pool = sorted({t for s in statements[:2000] for t in _TOKEN.findall(s) if not t.isspace()})
    pool += [" ", "  ", "\n", "(", ")", ",", ";", ".", "'", '"', "--", "/*", "*/", "é", "0x1F"]
    return [_mutate(rng.choice(statements), rng, pool) for _ in range(count)]


def _compare(statements: list[str]) -> list[str]:
    oracle, ref = _engines()
    problems = []
    for s in statements:
        data = s.encode("utf-8")
        ours = (oracle.accepts(data), oracle.first_error(data))
        theirs = (ref.accepts_sentence(s), ref.first_error(s))
        if ours != theirs:
            problems.append(f"{s!r}: ours (sentence, first error) = {ours}, lark = {theirs}")
        # the one-pass verdict `guide.check` uses is the two passes' (and so lark's)
        one_pass = ours[1] if ours[1] is not None else (None if ours[0] else len(data))
        if oracle.sentence_error(data) != one_pass:
            problems.append(f"{s!r}: sentence_error {oracle.sentence_error(data)} != {one_pass}")
    return problems


def test_spider_training_queries_agree_with_lark() -> None:
    statements = _spider_statements()
    problems = _compare(statements)
    assert not problems, f"{len(problems)} disagreements, first: {problems[:5]}"


def test_mutated_statements_agree_with_lark() -> None:
    corpus = _mutated_corpus(MUTATIONS, seed=20261129)
    oracle, _ = _engines()
    rejected = sum(not oracle.accepts(s.encode()) for s in corpus)
    assert 0 < rejected < len(corpus)  # both verdicts occur: the comparison is not vacuous
    problems = _compare(corpus)
    assert not problems, f"{len(problems)} disagreements, first: {problems[:5]}"


# Characters that Python's Unicode case folding (not ASCII's) relates to an ASCII letter.
_ODDITIES = {"s": "ſ", "S": "ſ", "i": "ı", "I": "İ", "k": "\u212a", "K": "\u212a"}


def _case_oddity_corpus(count: int, seed: int) -> list[str]:
    """Spider statements with one to three of their s/i/k (keywords or names) swapped for a
    Unicode case partner, which ASCII semantics do not fold (docs/semantics.md)."""
    rng = random.Random(seed)
    out = []
    for statement in rng.sample(_spider_statements(), count):
        chars = list(statement)
        positions = [i for i, c in enumerate(chars) if c in _ODDITIES]
        for i in rng.sample(positions, min(len(positions), rng.randint(1, 3))):
            chars[i] = _ODDITIES[chars[i]]
        out.append("".join(chars))
    return out


def test_unicode_case_variants_agree_with_lark() -> None:
    corpus = _case_oddity_corpus(400, seed=212)
    oracle, _ = _engines()
    rejected = sum(not oracle.accepts(s.encode()) for s in corpus)
    assert 0 < rejected < len(corpus)  # both verdicts occur: the comparison is not vacuous
    problems = _compare(corpus)
    assert not problems, f"{len(problems)} disagreements, first: {problems[:5]}"
    # keyword spellings that Unicode folding would take for keywords are rejected outright
    for sql in ["ſelect 1;", "select 1 where 1 lıke 1;", "SELECT 1 WHERE 1 LİKE 1;"]:
        assert _compare([sql]) == [] and not oracle.accepts(sql.encode())


def test_every_prefix_agrees_on_a_sample() -> None:
    oracle, ref = _engines()
    corpus = _mutated_corpus(PER_PREFIX_SAMPLE, seed=7)
    for s in corpus:
        data = s.encode("utf-8")
        for k in range(len(data) + 1):
            prefix = data[:k]
            ours = oracle.first_error(prefix) is None
            theirs = (
                ref.first_error(prefix.decode("utf-8", errors="strict")) is None
                if _is_text(prefix)
                else ours
            )
            assert ours == theirs, f"prefix {prefix!r}: ours viable={ours}, lark viable={theirs}"


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize(
    ("prefix", "viable", "eos"),
    [
        ("select a from t", True, False),
        ("select a from t;", True, True),
        ("SELECT count(*) FROM singer", True, False),
        ("SELECT count(*) FROM singer;", True, True),
        ("SELECT T1.name FROM singer AS T1 WHERE T1.age > 3;", True, True),
        ('SELECT name FROM singer WHERE name = "Bob";', True, True),
        ("selectname from t;", False, False),
        ("SELECT a FROM t WHERE", True, False),
    ],
)
def test_mid_lexeme_and_eos_cases(prefix: str, viable: bool, eos: bool) -> None:
    oracle, ref = _engines()
    data = prefix.encode()
    assert (oracle.first_error(data) is None) == viable == (ref.first_error(prefix) is None)
    if viable:
        assert oracle.eos_ok(oracle.feed(oracle.initial, data)) == eos == ref.eos_ok(prefix)


@pytest.mark.long
def test_every_prefix_agrees_long() -> None:
    oracle, ref = _engines()
    spider = _spider_statements()
    mutated = _mutated_corpus(long_size(full=MUTATIONS, reduced=200), seed=11)
    for s in mutated + random.Random(12).sample(spider, long_size(full=len(spider), reduced=200)):
        data = s.encode("utf-8")
        for k in range(len(data) + 1):
            if _is_text(data[:k]):
                ours = oracle.first_error(data[:k]) is None
                assert ours == (ref.first_error(data[:k].decode()) is None), data[:k]
