"""The viable-prefix oracle on small grammars with hand-checked answers."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridrail import ParseError
from gridrail.grammar.compiled import compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.parse.oracle import Oracle

TINY_SQL = r"""
start: "select"i items "from"i TABLE_NAME [alias] ";"
items: item ("," item)*
item: COLUMN_NAME [COLUMN_ALIAS] | FUNCTION_NAME "*" ")"
alias: TABLE_ALIAS
FUNCTION_NAME: /count[ \t]*\(/i
TABLE_NAME: IDENT
COLUMN_NAME: IDENT
COLUMN_ALIAS: IDENT
TABLE_ALIAS: IDENT
IDENT: /[A-Za-z_][A-Za-z0-9_]*/
%ignore /[ \t\n]+/
"""


@pytest.fixture(scope="module")
def tiny() -> Oracle:
    return Oracle(compile_grammar(Grammar.from_lark(TINY_SQL)))


def _viable(oracle: Oracle, text: str) -> bool:
    return oracle.first_error(text.encode()) is None


def _eos(oracle: Oracle, text: str) -> bool:
    return oracle.eos_ok(oracle.feed(oracle.initial, text.encode()))


def test_mid_lexeme_eos_gate(tiny: Oracle) -> None:
    assert _viable(tiny, "select a from t")
    assert not _eos(tiny, "select a from t")  # `;` is required
    assert _eos(tiny, "select a from t;")
    assert _eos(tiny, "select a from t;  ")  # trailing ignored bytes finalize
    assert not _eos(tiny, "select a from")


def test_keyword_vs_identifier_by_longest_match(tiny: Oracle) -> None:
    # `selecte` can only be an identifier, never SELECT + `e` (as SQLite's tokenizer reads it)
    assert tiny.first_error(b"selected") == 6
    assert not _viable(tiny, "selectx from t;")
    assert _eos(tiny, "select fromage from t;")  # `fromage` is a column, not FROM + age
    assert _eos(tiny, "SELECT a FROM t;")


def test_literal_beats_identifier_on_a_tie(tiny: Oracle) -> None:
    # After a column, both COLUMN_ALIAS and FROM match `from`; the literal wins.
    assert _eos(tiny, "select a from t;")
    assert _eos(tiny, "select a b from t;")
    assert _viable(tiny, "select a from from")  # the table name may still grow: `fromage`
    assert not _viable(tiny, "select a from from ")  # FROM is reserved against TABLE_NAME


def test_pending_lexeme_can_finalize_at_an_earlier_accept(tiny: Oracle) -> None:
    # `count ` is still live as FUNCTION_NAME (`count (`), and `count` alone is an alias.
    assert _viable(tiny, "select a count ")
    assert _eos(tiny, "select a count from t;")
    assert _eos(tiny, "select count (*) from t;")
    assert _eos(tiny, "select count from t;")  # a column named count


def test_error_offsets_and_expected_terminals(tiny: Oracle) -> None:
    with pytest.raises(ParseError) as info:
        tiny.feed(tiny.initial, b"select a frm t")
    # `frm` is an alias; then `t` is an identifier where only `,`/FROM may come
    assert info.value.offset == len("select a frm t") - 1
    assert "FROM" in info.value.expected
    assert tiny.first_error(b"delete") == 0


def test_configurations_are_immutable_forks(tiny: Oracle) -> None:
    base = tiny.feed(tiny.initial, b"select a ")
    left = tiny.feed(base, b"from t;")
    right = tiny.feed(base, b", b from u;")
    assert tiny.eos_ok(left) and tiny.eos_ok(right)
    assert not tiny.eos_ok(base)
    assert tiny.feed(base, b"from t;").stack.states() == left.stack.states()


LALR_SPURIOUS = r"""
start: "a" x "c" | "b" x "d"
x: "x"
%ignore " "
"""


def test_allowed_set_is_simulated_not_read_from_a_merged_row() -> None:
    oracle = Oracle(compile_grammar(Grammar.from_lark(LALR_SPURIOUS)))
    after_a = oracle.feed(oracle.initial, b"a x ")
    after_b = oracle.feed(oracle.initial, b"b x ")
    assert oracle.allowed_terminals(after_a) == ("C",)
    assert oracle.allowed_terminals(after_b) == ("D",)
    assert oracle.first_error(b"a x d") == 4


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="selctfromab ,;(*)unt", max_size=30))
def test_viability_is_prefix_closed(text: str) -> None:
    oracle = Oracle(compile_grammar(Grammar.from_lark(TINY_SQL)))
    data = text.encode()
    first = oracle.first_error(data)
    for k in range(len(data) + 1):
        viable = oracle.first_error(data[:k]) is None
        assert viable == (first is None or k <= first)


def test_configuration_hash_is_rolling_and_path_independent(tiny: Oracle) -> None:
    a = tiny.feed(tiny.initial, b"select a , b from ")
    b = tiny.feed(tiny.initial, b"SELECT a,b  FROM\n")
    c = tiny.feed(tiny.initial, b"select a , ")
    assert a.stack.states() == b.stack.states()
    assert a.stack.hash == b.stack.hash != c.stack.hash
    assert tiny.initial.stack.hash == 0
    # one push mixes only the parent's hash: the stack is never rehashed
    assert a.stack.depth == len(a.stack.states()) - 1


def test_nothing_in_a_configuration_grows_with_the_output(tiny: Oracle) -> None:
    cfg = tiny.feed(tiny.initial, b"select a")
    for _ in range(500):
        cfg = tiny.feed(cfg, b", a")
    # the stack is left-recursive here, so its depth stays bounded; the scan state is one lexeme
    assert cfg.stack.depth < 10
    assert cfg.lexeme_length == 1 and cfg.tail == b""


def test_viability_is_prefix_closed_by_definition() -> None:
    # docs/semantics.md: `ax` fails the check ((ii) looks one byte ahead), so `axy;` is not in
    # the language even though `axy` alone would pass the check.
    text = 'start: A XY ";" | "#" LONG\nA: "a"\nXY: "xy"\nLONG: /a[xy]*z/\n'
    oracle = Oracle(compile_grammar(Grammar.from_lark(text)))
    assert oracle.first_error(b"axy;") == 1
    assert not oracle.accepts(b"axy;")
    assert oracle.accepts(b"#axz")


# ---------------------------------------------------------------------------------------------
# ASCII case folding (docs/semantics.md): keywords match ASCII case variants only, as in SQLite.
# Python's Unicode folding would take ſ (U+017F) for s, ı/İ (U+0131/U+0130) for i and K (U+212A)
# for k, so that `ſelect` or `LıkE` passed the mask and SQLite then rejected the statement.

_ODDITY_COLUMNS = ("a", "ſelect", "lıke", "\u212aey", "é", "dıstinct", "İd")


@pytest.fixture(scope="module")
def sqlite_grammar() -> Oracle:
    return Oracle(compile_grammar(Grammar.bundled("sqlite")))


def _sqlite_error(sql: str) -> str | None:
    """SQLite's error preparing and running ``sql`` on a table ``t`` with the odd column names,
    or None."""
    db = sqlite3.connect(":memory:")
    try:
        columns = ", ".join(f'"{c}"' for c in _ODDITY_COLUMNS)
        db.execute(f"create table t({columns})")
        db.execute(sql).fetchall()
    except sqlite3.Error as err:
        return str(err)
    finally:
        db.close()
    return None


@pytest.mark.parametrize(
    "sql",
    [
        "ſelect 1;",
        "select 1 where 1 lıke 1;",
        "SELECT 1 WHERE 1 LİKE 1;",
        "select 1 where 1 LıkE 1;",
        "select 1 where 1 li\u212ae 1;",
        "select a from t order by a deſc;",
        "select * from t where a ıs null;",
        "select a from t group by a havıng a > 1;",
        "select a from t where a between 1 and 2 or a ın (1);",
        "select a from t where exiſts (select 1);",
        "select count(*) from t where a not lıke 'x';",
        "select a from t limıt 1;",
    ],
)
def test_keywords_with_unicode_case_variants_are_rejected_as_by_sqlite(
    sqlite_grammar: Oracle, sql: str
) -> None:
    assert not sqlite_grammar.accepts(sql.encode())
    error = _sqlite_error(sql)
    assert error is not None and "syntax error" in error, error


@pytest.mark.parametrize(
    "sql",
    [
        # the same spellings are identifiers where an identifier fits; [^\x00-\x7f] admits them
        "select ſelect, lıke, \u212aey, é, dıstinct, İd from t;",
        "select dıstinct a from t;",  # a column `dıstinct` aliased `a`, not DISTINCT a
        "select a as ſ from t;",
        "select a from t as ſ where ſ.a > 1;",
        'select "ſelect" from t;',
        "select 'ſelect', 'LıkE' as x;",
        "select a from t where a like 'ſ';",
        "SELECT 1 \u212aEY;",  # an alias
        "SeLeCt a FrOm t WhErE a LiKe 'x' EsCaPe 'y';",  # ASCII case variants are still folded
    ],
)
def test_non_ascii_identifiers_and_ascii_case_variants_are_accepted_as_by_sqlite(
    sqlite_grammar: Oracle, sql: str
) -> None:
    assert sqlite_grammar.accepts(sql.encode())
    assert _sqlite_error(sql) is None


@pytest.mark.parametrize(
    ("sql", "accepted"),
    [
        # SQLite's qualified-table-name: an UPDATE/DELETE target's alias needs AS
        ("delete from t x;", False),
        ("update t x set a = 1;", False),
        ("delete from t as x where x.a = 1;", True),
        ("update t as x set a = 1 where x.a = 2;", True),
        # RETURNING takes result columns but no `t.*` wildcard
        ("delete from t returning t.*;", False),
        ("insert into t (a) values (1) returning *, a + 1 as b;", True),
        ("update t set a = 1 returning a;", True),
    ],
)
def test_dml_targets_and_returning_agree_with_sqlite(
    sqlite_grammar: Oracle, sql: str, accepted: bool
) -> None:
    """Grammar gaps found by executing constrained outputs (bench/spider_eval.py): the grammar
    accepted these and SQLite did not."""
    assert sqlite_grammar.accepts(sql.encode()) is accepted
    assert (_sqlite_error(sql) is None) is accepted


_FOLD_BASES = [
    "select distinct a, é from t where a like 'x' and a is not null order by a desc limit 1 "
    "offset 2;",
    "select a from t where exists (select 1 from t as s where s.a in (1, 2)) group by a "
    "having count(*) > 1;",
    "select case when a is null then 1 else 2 end as kind from t where a between 1 and 2;",
    "with s as (select a from t) select * from s except select a from t;",
    "select a from t left join t as k on k.a = t.a where k.a is not null and a not like 'i';",
]
# Characters that Python's Unicode case folding relates to an ASCII letter.
_ODDITIES = {"s": "ſ", "S": "ſ", "i": "ı", "I": "İ", "k": "\u212a", "K": "\u212a"}


def test_unicode_case_variants_agree_with_sqlite(sqlite_grammar: Oracle) -> None:
    """Swap a few s/i/k (in keywords or names) for their Unicode case partners: the grammar
    accepts exactly when SQLite finds no syntax error (a name that no longer exists is a
    semantic error, not a syntax one)."""
    seen = set()

    @settings(max_examples=150, deadline=None)
    @given(
        base=st.sampled_from(_FOLD_BASES),
        picks=st.lists(st.integers(0, 200), min_size=1, max_size=3),
        upper=st.booleans(),
    )
    def check(base: str, picks: list[int], upper: bool) -> None:
        sql = base.upper() if upper else base
        positions = [i for i, c in enumerate(sql) if c in _ODDITIES]
        chars = list(sql)
        for pick in picks:
            where = positions[pick % len(positions)]
            chars[where] = _ODDITIES.get(chars[where], chars[where])  # a pick may repeat
        sql = "".join(chars)
        error = _sqlite_error(sql)
        syntax_ok = error is None or not ("syntax error" in error or "unrecognized" in error)
        assert sqlite_grammar.accepts(sql.encode()) == syntax_ok, (sql, error)
        seen.add(syntax_ok)

    check()
    assert seen == {True, False}  # both verdicts occur: the comparison is not vacuous


def test_a_configurations_mask_key_is_derived_from_its_fields(tiny: Oracle) -> None:
    """`mask_key` is what the mask depends on: the stack and the scan part a walk reads — the
    pending length only as zero or not, the bytes after the last accept only after one. It is
    derived again wherever a configuration is made (`_replace`, `_make`, a copy)."""
    import copy

    from gridrail.parse.oracle import Configuration

    inside = tiny.feed(tiny.initial, b"select abc")
    longer = tiny.feed(tiny.initial, b"select abcd")
    assert inside != longer and inside.stack is longer.stack
    assert inside.mask_key == longer.mask_key  # one lexeme, its length aside
    stack = inside.stack
    unaccepted = Configuration(stack, 3, 2, -1, b"ab")
    assert unaccepted.mask_key == (stack, 3, True, -1, b"")  # bytes without an accept
    assert Configuration(stack, 3, 2, 5, b"ab").mask_key == (stack, 3, True, 5, b"ab")
    assert Configuration(stack, 3, 0, -1, b"").mask_key == (stack, 3, False, -1, b"")
    moved = unaccepted._replace(accept_state=7)
    assert moved.mask_key == (stack, 3, True, 7, b"ab") and moved == Configuration(*moved[:5])
    assert Configuration._make(moved[:5]) == moved
    copied = copy.copy(inside)
    assert copied == inside and copied.mask_key == inside.mask_key
