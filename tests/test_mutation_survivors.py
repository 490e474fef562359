"""Behaviour that the mutation run (bench/mutation.py) found unchecked: each test here fails on
a one-line mutant of the code that survived the module's tests (named in each docstring)."""

from __future__ import annotations

from pathlib import Path

import pytest

import gridrail as gr
from gridrail.check import SemanticChecker
from gridrail.check.sqlite_judge import SqliteJudge
from gridrail.grammar.compiled import compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.parse.oracle import Oracle
from gridrail.policy.role import ColumnRule, Role
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView
from test_oracle import TINY_SQL

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def tiny() -> Oracle:
    return Oracle(compile_grammar(Grammar.from_lark(TINY_SQL)))


@pytest.mark.parametrize("shape", [(0, 64), (1, 0), (-1, 64), (1, -5)])
def test_a_bitmask_needs_a_positive_batch_and_vocabulary(shape: tuple[int, int]) -> None:
    """mask/bitmask.py: `batch_size < 1 or vocab_size < 1` → `and` let one bad size through."""
    with pytest.raises(ValueError, match="must be positive"):
        gr.allocate_bitmask(*shape)
    assert gr.allocate_bitmask(1, 1).shape == (1, 1)  # the smallest valid one


def test_nothing_is_pending_at_a_lexeme_boundary(tiny: Oracle) -> None:
    """parse/oracle.py pending_terminals: `lexeme_length == 0` → `== -1` reported what the
    scanner's start state can become as if a lexeme were under way."""
    assert tiny.initial.lexeme_length == 0
    assert tiny.pending_terminals(tiny.initial) == ()
    sel = tiny.feed(tiny.initial, b"sel")
    assert tiny.pending_terminals(sel) == ("SELECT",)  # the control: mid-lexeme it is not empty


@pytest.mark.parametrize(
    ("text", "terminal"),
    [
        (b"sel", None),  # not yet a keyword
        (b"select a", "COLUMN_NAME"),
        (b"select count(", "FUNCTION_NAME"),
        (b"select a from", "FROM"),  # a keyword beats an identifier of the same length
    ],
)
def test_complete_as_names_the_terminal_the_lexeme_would_be(
    tiny: Oracle, text: bytes, terminal: str | None
) -> None:
    """parse/oracle.py complete_as: `winner < 0` → `not winner < 0` swapped None and the name."""
    assert tiny.complete_as(tiny.feed(tiny.initial, text)) == terminal


def test_a_lexeme_that_dies_after_a_longer_tail_requeues_all_of_it() -> None:
    """parse/oracle.py _rescan: `continue` → `break` rescanned only the first byte of the tail
    after the last accept. Here `abc` is a prefix of ABCD whose last accept is A (`a`): the
    byte that kills ABCD must emit A and rescan both `b` and `c`."""
    text = 'start: A B C ";" | ABCD\nA: "a"\nB: "b"\nC: "c"\nABCD: "abcd"\n'
    oracle = Oracle(compile_grammar(Grammar.from_lark(text)))
    assert oracle.accepts(b"abc;")
    assert oracle.accepts(b"abcd")  # the control: the longer lexeme still wins where it can
    assert oracle.first_error(b"abce") == 3
    assert oracle.first_error(b"ab;") == 2


def test_a_prefix_saved_only_by_a_second_emission_is_viable() -> None:
    """parse/oracle.py is_viable, rule (ii): `if after_tail.accept_state < 0` → `if not ...`
    skipped, and `nxt is not None and passes (i)` → `or` short-circuited, the bytes that kill
    the rescanned lexeme too. `ab` can only become X, which is not allowed here; it lives
    because `c` ends it at A, ends the rescanned `b` at B, and starts C."""
    text = 'start: A B C | "#" X\nA: "a"\nB: "b"\nC: "c"\nX: "abxz"\n'
    oracle = Oracle(compile_grammar(Grammar.from_lark(text)))
    assert oracle.first_error(b"ab") is None
    assert oracle.accepts(b"abc")
    assert oracle.first_error(b"abd") == 2  # the control: a byte that starts nothing allowed
    assert oracle.accepts(b"#abxz")


def _eos_after(grammar: str, prefixes: list[bytes]) -> list[bool]:
    oracle = Oracle(compile_grammar(Grammar.from_lark(grammar)))
    assert all(oracle.first_error(p) is None for p in prefixes)
    return [oracle.eos_ok(oracle.feed(oracle.initial, p)) for p in prefixes]


def test_eos_follows_the_reduce_chain_not_a_merged_lookahead() -> None:
    """parse/lr.py can_shift: `move >= 0` → `move <= 0` (or `>= -1`) took a reduce on $END —
    which LALR merging can list where the chain then fails — as acceptance. `(x` reduces
    `start: "x"` on $END in the row it shares with `x`, then meets no `)`."""
    grammar = 'start: "x" | "(" start ")"\n'
    assert _eos_after(grammar, [b"x", b"(x", b"(x)", b"((x)"]) == [True, False, True, False]


def test_eos_after_stacked_virtual_reductions() -> None:
    """parse/lr.py can_shift: `overlay[-1]` → `overlay[0]` read the state under the newest
    virtual push. After `a`, $END reduces x (one push), then the empty `opt` (a second)."""
    assert _eos_after('start: x opt\nx: "a"\nopt: "b" |\n', [b"a", b"ab"]) == [True, True]


@pytest.mark.parametrize("cte", ["a", "zz"])  # named before and after the table it reads
def test_the_judge_hears_a_table_read_inside_a_recursive_cte(cte: str) -> None:
    """check/sqlite_judge.py _hear: the test that skips the recursive CTE's read of itself,
    `first == inner` → `first >= inner`, also skipped reads of tables named after the CTE's
    context. `count(*)` reads `employees` with no column; the judge must still hear it."""
    judge = SqliteJudge(SchemaView(Schema.from_sqlite(EXAMPLES / "hr.sqlite"), None))
    sql = (
        f"WITH RECURSIVE {cte}(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM {cte}, employees"
        f" WHERE n < 3) SELECT count(*) FROM {cte};"
    )
    reads = {(a.table, a.name) for a in judge.prepare(sql).accesses if a.action == "read"}
    assert ("employees", "") in reads


def test_a_star_read_by_a_role_that_may_not_read_names_every_column() -> None:
    """check/checker.py read_every_column: its default `reads=True` → False (the INSERT-without-
    columns case) kept the table's read but lost each column `*` reads."""
    hr = Schema.from_sqlite(EXAMPLES / "hr.sqlite")
    writer = SchemaView(hr, Role("w", frozenset({"insert"}), writes=frozenset({"orders"})))
    assert not writer.may_read
    checker = SemanticChecker(compile_grammar(Grammar.bundled("sqlite")), writer)
    found = checker.check("INSERT INTO orders SELECT * FROM orders;")
    columns = {v.column for v in found if v.kind == "read_not_allowed" and v.table == "orders"}
    assert columns == {None, *(c.name for c in hr.table("orders").columns)}


def test_a_row_key_binds_in_the_nearest_scope_that_has_one() -> None:
    """check/scopes.py row_key_candidates: `if row_keys_bind and len(sure) == 1` → `if not
    row_keys_bind ...` passed over the subquery's own table and bound `rowid` outwards."""
    hr = Schema.from_sqlite(EXAMPLES / "hr.sqlite")
    rule = {"employees": ColumnRule(deny=frozenset({"id"}))}  # id is employees' rowid alias
    view = SchemaView(hr, Role("r", frozenset({"select"}), columns=rule))
    checker = SemanticChecker(compile_grammar(Grammar.bundled("sqlite")), view)
    assert checker.check("SELECT name, (SELECT max(rowid) FROM orders) FROM employees;") == []
    (control,) = checker.check("SELECT rowid FROM employees;")  # the control: its own rowid
    assert (control.kind, control.table) == ("column_not_visible", "employees")
