"""Statements that nest as deep as a language lets them, for the stack bound's differential
against SQLite's parser (tests/test_stack_bound.py).

`deep_statement` walks the oracle a terminal at a time, each terminal written as its shortest
lexeme: most steps take, of a few allowed terminals, the one whose shift leaves the heaviest
stack, so the walk climbs to the bound and wanders along it; then the completer finishes the
statement. `NESTINGS` are hand-written families of one construct nested n times, for the deepest
n each side accepts."""

from __future__ import annotations

import random

import gridrail as gr
from gridrail.parse.completion import Completer

# name -> n -> a statement nesting one construct n times (no ";": SQLite's form)
NESTINGS = {
    "NOT": lambda n: "SELECT " + "NOT " * n + "1",
    "minus": lambda n: "SELECT " + "- " * n + "1",
    "parentheses": lambda n: "SELECT " + "(" * n + "1" + ")" * n,
    "abs()": lambda n: "SELECT " + "abs(" * n + "1" + ")" * n,
    "max(, , )": lambda n: "SELECT " + "max(1, 2, " * n + "1" + ")" * n,
    "CAST": lambda n: "SELECT " + "CAST(" * n + "1" + " AS INT)" * n,
    "(SELECT": lambda n: "SELECT " + "(SELECT " * n + "1" + ")" * n,
    "IN (SELECT … WHERE": lambda n: (
        "SELECT a FROM t WHERE " + "a IN (SELECT a FROM t WHERE " * n + "1" + ")" * n
    ),
    "EXISTS": lambda n: "SELECT 1 WHERE " + "EXISTS (SELECT 1 WHERE " * n + "1" + ")" * n,
    "FROM (SELECT": lambda n: "SELECT * FROM " + "(SELECT * FROM " * n + "t" + ")" * n,
    "CASE WHEN": lambda n: "SELECT " + "CASE WHEN 1 THEN " * n + "1" + " END" * n,
    "CASE ELSE": lambda n: "SELECT " + "CASE 1 WHEN 1 THEN 1 ELSE " * n + "1" + " END" * n,
    "precedence": lambda n: (
        "SELECT a FROM t WHERE " + "a OR a AND NOT a = a < a & a + a * a || -(" * n + "1" + ")" * n
    ),
    "comparisons": lambda n: "SELECT " + "1 = (1 < (1 + (1 * (" * n + "1" + "))))" * n,
    "IN (": lambda n: "SELECT 1 IN (" + "1, 2 IN (" * n + "1" + ")" * n + ")",
    "BETWEEN": lambda n: "SELECT " + "1 BETWEEN 1 AND (" * n + "1" + ")" * n,
    "IS NOT": lambda n: "SELECT " + "1 IS NOT (" * n + "1" + ")" * n,
    "COLLATE": lambda n: "SELECT " + "(1 COLLATE nocase = " * n + "1" + ")" * n,
    "UNION": lambda n: "SELECT " + "(SELECT 1 UNION SELECT " * n + "1" + ")" * n,
    "ORDER BY": lambda n: "SELECT 1 ORDER BY " + "(SELECT 1 ORDER BY " * n + "1" + ")" * n,
    "GROUP BY … HAVING": lambda n: (
        "SELECT 1 GROUP BY " + "(SELECT 1 GROUP BY 1 HAVING " * n + "1" + ")" * n
    ),
    "LIMIT": lambda n: "SELECT 1 LIMIT " + "(SELECT 1 LIMIT " * n + "1" + ")" * n,
    "VALUES": lambda n: "SELECT * FROM " + "(VALUES (" * n + "1" + "))" * n,
    "OVER": lambda n: "SELECT " + "sum(1) OVER (PARTITION BY " * n + "1" + ")" * n,
    "FILTER": lambda n: "SELECT " + "count(*) FILTER (WHERE " * n + "1" + ")" * n,
    "qualified": lambda n: "SELECT " + "t.a + (" * n + "t.a" + ")" * n + " FROM t",
}


def deepest(accepts, nesting, most: int = 200) -> int:
    """The largest n <= `most` such that `accepts` holds the nesting for 1..n."""
    n = 0
    while n < most and accepts(nesting(n + 1)):
        n += 1
    return n


def deep_statement(oracle: gr.Oracle, completer: Completer, rng: random.Random) -> bytes:
    """A sentence of `oracle`'s language that climbs toward its stack bound (module doc)."""
    lr, lexeme = oracle.lr, completer.lexeme
    cfg = oracle.initial
    text = b""
    for _ in range(rng.randint(20, 300)):
        allowed = lr.allowed_mask(cfg.stack)
        terminals = [t for t in range(allowed.bit_length()) if allowed >> t & 1 and t in lexeme]
        if not terminals:
            break
        sample = rng.sample(terminals, min(6, len(terminals)))
        if rng.random() < 0.75:
            sample.sort(key=lambda t: -lr.shift(cfg.stack, t).load)
        piece = lexeme[sample[0]] + b" "
        after = oracle.try_feed(cfg, piece)
        if after is not None:
            cfg, text = after, text + piece
    return text + completer.complete(cfg)


def peak_load(oracle: gr.Oracle, sentence: bytes) -> int:
    """The heaviest stack the sentence's parse passes through."""
    cfg, peak = oracle.initial, 0
    for byte in sentence:
        cfg = oracle.step(cfg, byte)
        assert cfg is not None
        peak = max(peak, cfg.stack.load)
    return peak
