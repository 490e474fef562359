"""RBAC at mask level, proven by an exhaustive model-free speller (paper §7.1, §8.6).

For every role × every identifier position reached by a corpus of the role's own sentences (and
by random walks through its masks) × every forbidden target — a statement verb the role lacks, a
table it cannot see, a column it sees in no table, a function it may not call — no token
sequence through the masks writes the target as that kind of name. Positive controls: every
allowed name of the position's category, and every verb the role has, *is* writable, so the test
cannot pass by masking everything.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

import gridrail as gr
from assets import asset, spider_gold
from gridrail.parse.oracle import Configuration
from gridrail.policy.bundle import Policy
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView
from support.speller import Speller
from test_walk_arm import generate

ROOT = Path(__file__).resolve().parent
EXAMPLES = ROOT.parent / "examples"
VERBS = {
    "select": b"select ",
    "insert": b"insert into ",
    "update": b"update ",
    "delete": b"delete from ",
}
WALKS_PER_ROLE = 20


@cache
def _sqlite() -> gr.Grammar:
    return gr.Grammar.bundled("sqlite")


def _forms(word: str, function: bool = False) -> list[str]:
    """Ways a name might be written, whatever the dialect allows (the mask decides); a
    function call is `name(` in either case."""
    if function:
        return list(dict.fromkeys([word + "(", word.upper() + "("]))
    out = [word, word.lower(), word.upper(), f'"{word}"', f"`{word}`", f"[{word}]"]
    return list(dict.fromkeys(out))


def _probe_vocabulary(forms: list[str]) -> gr.Vocabulary:
    """Every byte, plus each form whole, with a leading or trailing space, and cut into a
    prefix and a suffix at every point: the adversary's tokens for spelling names."""
    spellings = {bytes((b,)) for b in range(256)}
    for form in forms:
        data = form.encode()
        spellings.update({data, b" " + data, data + b" "})
        for cut in range(1, len(data)):
            spellings.update({data[:cut], data[cut:], b" " + data[:cut]})
    for verb in VERBS.values():
        spellings.update({verb, verb.strip(), verb.upper()})
    ordered = sorted(spellings)
    return gr.Vocabulary([*ordered, None], eos_token_ids=len(ordered))


@dataclass
class Report:
    positions: int = 0
    probes: int = 0
    bypasses: list[str] = field(default_factory=list)
    controls: int = 0
    controls_missed: list[str] = field(default_factory=list)


def _targets(view: SchemaView, catalogue: ConstructCatalogue, functions: frozenset[str]):
    """(allowed, forbidden) words per lexicon terminal."""
    schema = view.schema
    key = schema.rules.catalog_key
    visible_tables = [t.name for t in view.tables]
    visible_columns = {key(c.name): c.name for t in view.tables for c in view.columns(t)}
    words = {}
    for category in catalogue.lexicons:
        if category.words == "tables":
            hidden = [t.name for t in schema.tables if t.name not in visible_tables]
            words[category.terminal] = (visible_tables, hidden)
        elif category.words == "columns":
            every = {key(c.name): c.name for t in schema.tables for c in t.columns}
            hidden = [n for k, n in every.items() if k not in visible_columns]
            words[category.terminal] = (list(visible_columns.values()), hidden)
        else:
            # what the role may call of what the database's engine has (3.40 has no concat),
            # of the names of this terminal's call shape; every other function is hidden here
            spelled = catalogue.function_terminals[category.terminal]
            offered = spelled if schema.functions is None else spelled & schema.functions
            allowed = sorted(f for f in offered if view.may_call(f))
            words[category.terminal] = (allowed, sorted(functions - set(allowed)))
    return words


def _positions(guide: gr.Guide, texts: list[bytes], categories: set[int]):
    """Configurations just before a new lexeme where some lexicon terminal may come next, one
    per allowed set A after closing the pending lexeme. Whether a name followed by a space is
    shifted as a terminal depends on nothing else: the name is scanned against A ∪ ignored
    and the space is ignored, so one configuration per A covers every position."""
    oracle = guide.oracle
    found: dict[int, tuple[Configuration, int]] = {}
    for text in texts:
        cfg = oracle.initial
        for k, byte in enumerate(text):
            if k and text[k - 1 : k] in (b" ", b"(", b",", b"."):
                stack = oracle.finalize(cfg)
                if stack is not None:
                    allowed = oracle.lr.allowed_mask(stack)
                    wanted = {c for c in categories if (allowed >> c) & 1}
                    if wanted:
                        found.setdefault(allowed, (cfg, allowed))
            cfg = oracle.step(cfg, byte)
            assert cfg is not None, text
    return list(found.values())


def _probe(schema: Schema, policy: Policy, role: str, corpus: list[str], seed: int) -> Report:
    grammar = _sqlite()
    catalogue = ConstructCatalogue.for_grammar(grammar)
    view = SchemaView(schema, policy.role(role))
    targets = _targets(view, catalogue, catalogue.functions)
    forms = {
        terminal: (
            [_forms(w, terminal in catalogue.function_terminals) for w in allowed],
            [_forms(w, terminal in catalogue.function_terminals) for w in hidden],
        )
        for terminal, (allowed, hidden) in targets.items()
    }
    every_form = [f for a, h in forms.values() for group in (*a, *h) for f in group]
    guide = gr.compile(
        grammar, _probe_vocabulary(every_form), schema=schema, policy=policy, role=role
    )
    oracle, speller = guide.oracle, Speller(guide)
    index = {t.name: t.index for t in guide.compiled.grammar.terminals}
    report = Report()
    texts = [s.encode() for s in corpus if oracle.accepts(s.encode())]
    assert texts, f"no corpus statement is in role {role}'s language"
    rng = random.Random(seed)
    for _ in range(WALKS_PER_ROLE):
        gen = generate(guide, rng, budget=rng.randint(12, 30))
        texts.append(b"".join(guide.vocab.token_bytes(t) for t in gen.tokens[:-1]))
    positions = _positions(guide, texts, {index[t] for t in targets})
    report.positions = len(positions)
    for cfg, allowed in positions:
        for terminal, (allowed_forms, hidden_forms) in forms.items():
            if not (allowed >> index[terminal]) & 1:
                continue
            for word_forms in hidden_forms:
                for form in word_forms:
                    report.probes += 1
                    if speller.spells_as(cfg, form.encode(), index[terminal]):
                        report.bypasses.append(f"{role}: {terminal} {form!r}")
            for word_forms in allowed_forms:  # some form of every allowed word works
                report.controls += 1
                if not any(
                    speller.spells_as(cfg, form.encode(), index[terminal]) for form in word_forms
                ):
                    report.controls_missed.append(f"{role}: {terminal} {word_forms[0]!r}")
    # statement verbs, at the statement head
    role_def = policy.role(role)
    for kind, verb in VERBS.items():
        for form in (verb, verb.upper()):
            if kind in role_def.statements:
                report.controls += 1
                if not speller.writes(oracle.initial, form):
                    report.controls_missed.append(f"{role}: verb {form!r}")
            else:
                report.probes += 1
                if speller.writes(oracle.initial, form):
                    report.bypasses.append(f"{role}: verb {form!r}")
    return report


def _assert_clean(report: Report) -> None:
    assert report.positions >= 3
    assert not report.bypasses, report.bypasses
    assert not report.controls_missed, report.controls_missed
    assert report.probes > 0 and report.controls > 0


# -- a real SQLite database: Spider's hr_1 ------------------------------------------------------


@cache
def _hr_1() -> tuple[Schema, Policy, list[str]]:
    schema = Schema.from_sqlite(asset("data", "spider", "database", "hr_1", "hr_1.sqlite"))
    policy = Policy.from_file(ROOT / "fixtures" / "policies" / "hr_1.toml")
    with open(spider_gold(), encoding="utf-8") as f:
        gold = [line.split("\t") for line in f.read().splitlines()]
    corpus = [sql.strip().rstrip(";") + ";" for sql, db in gold if db == "hr_1"]
    corpus += [
        "insert into employees (EMPLOYEE_ID, FIRST_NAME) values (1, 'a');",
        "update employees set FIRST_NAME = 'b' where EMPLOYEE_ID = 1;",
        "insert into job_history select * from job_history;",
    ]
    return schema, policy, corpus


@pytest.mark.parametrize("role", ["analyst", "hr_clerk", "auditor"])
def test_speller_on_spider_hr_1(role: str) -> None:
    schema, policy, corpus = _hr_1()
    _assert_clean(_probe(schema, policy, role, corpus, seed=1))


# -- a real PostgreSQL database: the HR example -------------------------------------------------

HR_CORPUS = [
    "select name, dept from employees where id = 1;",
    "select count(*), max(total) from orders group by employee_id;",
    "select e.name, o.total from employees as e join orders as o on e.id = o.employee_id;",
    "select name from employees_public order by name;",
    "select amount from salaries;",
    "insert into orders (id, employee_id, total) values (3, 1, 9.5);",
    "update orders set total = 1 where id = 3;",
    "select * from orders where total > (select avg(total) from orders);",
]


@pytest.mark.parametrize("role", ["analyst", "clerk", "auditor"])
def test_speller_on_postgres_hr(role: str, postgres_hr_schema: Schema) -> None:
    policy = Policy.from_file(EXAMPLES / "hr_policy.toml")
    _assert_clean(_probe(postgres_hr_schema, policy, role, HR_CORPUS, seed=2))
