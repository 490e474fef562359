"""Test helpers for the LALR(1) builder: grammars from a tiny text format, a table-driven
driver, lark counterparts of our grammars, random sentences and an Earley recognizer.

The tiny format is one rule per line, ``lhs: alt | alt``; lowercase words are nonterminals,
UPPERCASE words terminals, an empty alternative is the empty string, and the first rule's lhs
is the start symbol.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterator, Sequence

from hypothesis import strategies as st
from lark import Lark, Token
from lark.exceptions import UnexpectedToken
from lark.lexer import Lexer

from gridrail.grammar.lalr import ACCEPT, LalrTables
from gridrail.grammar.model import Grammar, Production, TerminalDef

# --- grammars ------------------------------------------------------------------------------


def terminal_defs(names: Sequence[str]) -> tuple[TerminalDef, ...]:
    return tuple(
        TerminalDef(name, index, re.escape(name.lower()), "", 0, True)
        for index, name in enumerate(names)
    )


def tiny_grammar(text: str, terminals: Sequence[str] = (), name: str = "<tiny>") -> Grammar:
    """A grammar from the tiny format; terminals are numbered ``terminals`` first, then the
    other UPPERCASE words in order of first appearance."""
    rules = []
    for line in text.strip().splitlines():
        lhs, _, body = line.partition(":")
        rules.extend((lhs.strip(), tuple(alt.split())) for alt in body.split("|"))
    terminal_names = dict.fromkeys(terminals)
    for _, rhs in rules:
        terminal_names.update((s, None) for s in rhs if s.isupper())
    return make_grammar(list(terminal_names), rules, start=rules[0][0], name=name)


def make_grammar(
    terminals: Sequence[str],
    rules: Sequence[tuple[str, tuple[str, ...]]],
    start: str,
    name: str = "<test>",
) -> Grammar:
    productions = tuple(
        Production(index, lhs, rhs, None, lhs) for index, (lhs, rhs) in enumerate(rules)
    )
    return Grammar(terminal_defs(terminals), frozenset(), productions, start, name)


def renamed_copy(grammar: Grammar, suffix: str) -> list[tuple[str, tuple[str, ...]]]:
    """The rules of ``grammar`` with every symbol name suffixed (``expr`` -> ``expr_2``)."""
    return [(p.lhs + suffix, tuple(s + suffix for s in p.rhs)) for p in grammar.productions]


def dialects_grammar(base: Grammar, copies: int) -> Grammar:
    """``copies`` renamed copies of ``base`` behind one start rule, each selected by its own
    leading keyword: a large LALR(1) grammar with the shape of the base."""
    rules: list[tuple[str, tuple[str, ...]]] = []
    terminals: list[str] = []
    for k in range(copies):
        suffix = f"_{k}"
        rules.append(("dialects", (f"DIALECT{suffix}", base.start + suffix)))
        terminals.append(f"DIALECT{suffix}")
        terminals.extend(t.name + suffix for t in base.terminals)
    for k in range(copies):
        rules.extend(renamed_copy(base, f"_{k}"))
    return make_grammar(terminals, rules, start="dialects", name=f"{base.name}x{copies}")


def from_lark(parser: Lark) -> Grammar:
    """Our model of the BNF rules lark compiled (after its EBNF expansion and inlining)."""
    rules = [(r.origin.name, tuple(s.name for s in r.expansion)) for r in parser.rules]
    terminals = dict.fromkeys(s.name for r in parser.rules for s in r.expansion if s.is_term)
    start = parser.options.start[0]
    return make_grammar(list(terminals), rules, start=start, name="<lark>")


# --- lark counterparts ---------------------------------------------------------------------


class TokenListLexer(Lexer):
    """Lexes a list of terminal names, one token each, so that lark parses token sequences.

    A custom lexer instead of ``lexer="basic"``: lark's basic lexer refuses ``strict=True``
    unless the optional ``interegular`` package is installed.
    """

    def __init__(self, lexer_conf: object):
        pass

    def lex(self, data: Sequence[str]) -> Iterator[Token]:  # type: ignore[override]
        for name in data:
            yield Token(name, name)


def to_lark_text(grammar: Grammar) -> str:
    alternatives: dict[str, list[str]] = {}
    for p in grammar.productions:
        alternatives.setdefault(p.lhs, []).append(" ".join(p.rhs))
    lines = [f"%declare {' '.join(t.name for t in grammar.terminals)}"]
    lines += [f"{lhs}: {' | '.join(alts)}" for lhs, alts in alternatives.items()]
    return "\n".join(lines) + "\n"


def lark_lalr(grammar: Grammar) -> Lark:
    """lark's LALR(1) parser for ``grammar``; strict, so a shift/reduce conflict raises."""
    return Lark(
        to_lark_text(grammar),
        parser="lalr",
        lexer=TokenListLexer,
        strict=True,
        start=grammar.start,
    )


def lark_table_differences(tables: LalrTables, parser: Lark) -> list[str]:
    """Where ``tables`` and lark's LALR(1) table differ, pairing states by walking both from
    the start state (so state numbering does not matter); empty when they are isomorphic.

    lark has no ACCEPT action: its parser accepts on ``$END`` in its end state instead."""
    table = parser.parser.parser.parser.parse_table
    start = parser.options.start[0]
    lark_end_state = table.end_states[start]
    pairs = {tables.start_state: table.start_states[start]}
    pending = [tables.start_state]
    differences = []
    while pending:
        state = pending.pop()
        theirs = table.states[pairs[state]]
        expected: dict[str, tuple[str, object]] = {}
        for terminal, action in tables.action[state].items():
            name = tables.terminal_names[terminal]
            if action == ACCEPT:
                if pairs[state] != lark_end_state:
                    differences.append(f"state {state}: accepts but lark does not")
            elif action >= 0:
                expected[name] = ("Shift", action)
            else:
                lhs, _ = tables.productions[-1 - action]
                rhs = tables.production_rhs[-1 - action]
                expected[name] = ("Reduce", (tables.nonterminal_names[lhs], rhs))
        for nonterminal, target in tables.goto[state].items():
            expected[tables.nonterminal_names[nonterminal]] = ("Shift", target)
        if set(expected) != set(theirs):
            differences.append(f"state {state}: symbols {sorted(expected)} vs {sorted(theirs)}")
            continue
        for name, (kind, argument) in expected.items():
            their_kind, their_argument = theirs[name]
            where = f"state {state} on {name}"
            if kind != str(their_kind):
                differences.append(f"{where}: {kind} vs lark's {their_kind}")
            elif kind == "Reduce":
                rule = (their_argument.origin.name, tuple(s.name for s in their_argument.expansion))
                if argument != rule:
                    differences.append(f"{where}: reduce {argument} vs lark's {rule}")
            elif argument not in pairs:
                pairs[argument] = their_argument
                pending.append(argument)
            elif pairs[argument] != their_argument:
                differences.append(f"{where}: state {argument} pairs with two of lark's")
    if len(pairs) != len(tables.action) or len(set(pairs.values())) != len(table.states):
        differences.append(f"{len(tables.action)} states vs lark's {len(table.states)}")
    return differences


def table_digest(tables: LalrTables) -> str:
    """A digest of everything in ``tables``, rows in their stored order."""
    action = [list(row.items()) for row in tables.action]
    goto = [list(row.items()) for row in tables.goto]
    text = repr(
        (tables.terminal_names, tables.nonterminal_names, tables.productions, tables.kernels)
    )
    return hashlib.sha256((text + repr((action, goto))).encode()).hexdigest()


# --- table-driven driver -------------------------------------------------------------------

ACCEPTED = "accepted"  # a sentence: viable, and the input may end here
VIABLE = "viable"  # a proper prefix of some sentence
DEAD = "dead"  # contains a token that cannot be shifted


def shift(tables: LalrTables, stack: list[int], terminal: int) -> list[int] | None:
    """The stack after the reduce chain ``terminal`` demands and its shift, or None if
    ``terminal`` cannot be shifted. The chain runs on a copy: a failed step changes nothing.
    For ``$END``, returns the unchanged stack on ACCEPT."""
    stack = list(stack)
    while True:
        action = tables.action[stack[-1]].get(terminal)
        if action is None:
            return None
        if action == ACCEPT:
            return stack
        if action >= 0:
            stack.append(action)
            return stack
        lhs, length = tables.productions[-1 - action]
        del stack[len(stack) - length :]
        stack.append(tables.goto[stack[-1]][lhs])


def prefix_statuses(tables: LalrTables, names: Sequence[str]) -> list[str]:
    """Status of ``names[:k]`` for k = 0..len(names)."""
    ids = {name: i for i, name in enumerate(tables.terminal_names)}
    stack: list[int] | None = [tables.start_state]
    statuses = []
    for k in range(len(names) + 1):
        if stack is None:
            statuses.append(DEAD)
            continue
        statuses.append(ACCEPTED if shift(tables, stack, tables.end) is not None else VIABLE)
        if k < len(names):
            stack = shift(tables, stack, ids[names[k]])
    return statuses


def first_error(tables: LalrTables, names: Sequence[str]) -> int | None:
    """Index of the first token that cannot be shifted (``len(names)`` if the input may not
    end there), or None if ``names`` is a sentence."""
    statuses = prefix_statuses(tables, names)
    if statuses[-1] == ACCEPTED:
        return None
    return statuses.index(DEAD) - 1 if DEAD in statuses else len(names)


def lark_prefix_statuses(parser: Lark, names: Sequence[str]) -> list[str]:
    """``prefix_statuses`` as lark's interactive parser sees it."""
    interactive = parser.parse_interactive()
    statuses = []
    for k in range(len(names) + 1):
        try:
            interactive.copy().feed_eof()
            statuses.append(ACCEPTED)
        except UnexpectedToken:
            statuses.append(VIABLE)
        if k < len(names):
            try:
                interactive.feed_token(Token(names[k], names[k]))
            except UnexpectedToken:
                return statuses + [DEAD] * (len(names) - k)
    return statuses


# --- sentences -----------------------------------------------------------------------------


def derivation_heights(grammar: Grammar) -> dict[str, int]:
    """Height of the shallowest derivation tree of each productive nonterminal."""
    height: dict[str, int] = {}
    changed = True
    while changed:
        changed = False
        for p in grammar.productions:
            if all(grammar.is_terminal(s) or s in height for s in p.rhs):
                tallest = max((height[s] for s in p.rhs if s in height), default=0)
                if tallest + 1 < height.get(p.lhs, tallest + 2):
                    height[p.lhs] = tallest + 1
                    changed = True
    return height


def random_sentence(grammar: Grammar, rng: random.Random, budget: int = 30) -> list[str]:
    """A random sentence of ``grammar`` (its start symbol must be productive): productions are
    chosen at random for the first ``budget`` expansions, then always a production of least
    derivation height, whose nonterminals are strictly lower, so that the derivation ends."""
    height = derivation_heights(grammar)
    choices: dict[str, list[Production]] = {}
    for p in grammar.productions:
        if all(grammar.is_terminal(s) or s in height for s in p.rhs):
            choices.setdefault(p.lhs, []).append(p)

    def rhs_height(p: Production) -> int:
        return max((height[s] for s in p.rhs if s in height), default=0)

    sentence: list[str] = []
    pending = [grammar.start]  # symbols still to expand, last first
    expansions = 0
    while pending:
        symbol = pending.pop()
        if grammar.is_terminal(symbol):
            sentence.append(symbol)
            continue
        expansions += 1
        options = choices[symbol]
        production = min(options, key=rhs_height) if expansions > budget else rng.choice(options)
        pending.extend(reversed(production.rhs))
    return sentence


def mutate(sentence: list[str], rng: random.Random, alphabet: Sequence[str]) -> list[str]:
    """``sentence`` with one random token inserted, deleted, replaced or swapped."""
    tokens = list(sentence)
    edit = rng.choice(["insert", "delete", "replace", "swap"] if tokens else ["insert"])
    i = rng.randrange(len(tokens) + (edit == "insert"))
    if edit == "insert":
        tokens.insert(i, rng.choice(alphabet))
    elif edit == "delete":
        del tokens[i]
    elif edit == "replace":
        tokens[i] = rng.choice(alphabet)
    else:
        j = rng.randrange(len(tokens))
        tokens[i], tokens[j] = tokens[j], tokens[i]
    return tokens


def earley_accepts(grammar: Grammar, tokens: Sequence[str]) -> bool:
    """Whether ``tokens`` is a sentence of ``grammar``: an Earley recognizer, for any CFG.

    Empty rules follow Aycock and Horspool: predicting a nullable nonterminal also advances
    over it at once."""
    productions = grammar.productions
    by_lhs: dict[str, list[int]] = {}
    for p in productions:
        by_lhs.setdefault(p.lhs, []).append(p.index)
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for p in productions:
            if p.lhs not in nullable and all(s in nullable for s in p.rhs):
                nullable.add(p.lhs)
                changed = True

    # an item (production, dot, origin) in charts[i] has recognized tokens[origin:i]
    charts: list[set[tuple[int, int, int]]] = [set() for _ in range(len(tokens) + 1)]
    charts[0].update((p, 0, 0) for p in by_lhs.get(grammar.start, []))
    for i, chart in enumerate(charts):
        agenda = list(chart)
        while agenda:
            p, dot, origin = agenda.pop()
            rhs = productions[p].rhs
            derived: list[tuple[int, int, int]] = []
            if dot == len(rhs):
                lhs = productions[p].lhs
                derived = [
                    (q, d + 1, o)
                    for q, d, o in charts[origin]
                    if d < len(productions[q].rhs) and productions[q].rhs[d] == lhs
                ]
            elif grammar.is_terminal(rhs[dot]):
                if i < len(tokens) and tokens[i] == rhs[dot]:
                    charts[i + 1].add((p, dot + 1, origin))
            else:
                derived = [(q, 0, i) for q in by_lhs.get(rhs[dot], [])]
                if rhs[dot] in nullable:
                    derived.append((p, dot + 1, origin))
            for item in derived:
                if item not in chart:
                    chart.add(item)
                    agenda.append(item)
    return any(
        productions[p].lhs == grammar.start and dot == len(productions[p].rhs) and origin == 0
        for p, dot, origin in charts[-1]
    )


# --- hypothesis strategies -----------------------------------------------------------------


@st.composite
def random_grammars(
    draw: st.DrawFn,
    terminals: Sequence[str] = ("A", "B", "C"),
    max_nonterminals: int = 4,
    undefined: Sequence[str] = (),
) -> Grammar:
    """Small random grammars over nonterminals ``n0``.. (``n0`` is the start symbol).

    Names in ``undefined`` may occur in rules but have none of their own."""
    count = draw(st.integers(1, max_nonterminals))
    nonterminals = [f"n{i}" for i in range(count)]
    symbols = st.sampled_from([*nonterminals, *undefined, *terminals])
    rules = []
    for lhs in nonterminals:
        alternatives = draw(
            st.lists(st.lists(symbols, max_size=3).map(tuple), min_size=1, max_size=3, unique=True)
        )
        rules.extend((lhs, rhs) for rhs in alternatives)
    return make_grammar(list(terminals), rules, start="n0", name="<random>")


# --- grammars used by the tests ------------------------------------------------------------

EXPRESSIONS = tiny_grammar(
    """
    e: e PLUS t | t
    t: t TIMES f | f
    f: LPAREN e RPAREN | ID
    """,
    name="expressions",
)

SQL_SUBSET = tiny_grammar(
    """
    script: stmt SEMI | script stmt SEMI
    stmt: query | insert_stmt | update_stmt | delete_stmt | create_stmt | drop_stmt
    query: with_opt compound order_opt limit_opt
    with_opt: WITH cte_list |
    cte_list: cte | cte_list COMMA cte
    cte: IDENT AS LPAREN query RPAREN
    compound: select_core | compound set_op select_core
    set_op: UNION | UNION ALL | INTERSECT | EXCEPT
    select_core: SELECT distinct_opt select_list from_opt where_opt group_opt having_opt
    distinct_opt: DISTINCT | ALL |
    select_list: select_item | select_list COMMA select_item
    select_item: STAR | expr alias_opt | IDENT DOT STAR
    alias_opt: AS IDENT | IDENT |
    from_opt: FROM table_list |
    table_list: table_ref | table_list COMMA table_ref
    table_ref: table_primary | table_ref join_kind JOIN table_primary join_cond
    table_primary: table_name alias_opt | LPAREN query RPAREN alias_opt
    table_name: IDENT | IDENT DOT IDENT
    join_kind: INNER | LEFT outer_opt | RIGHT outer_opt | FULL outer_opt | CROSS |
    outer_opt: OUTER |
    join_cond: ON expr | USING LPAREN ident_list RPAREN |
    where_opt: WHERE expr |
    group_opt: GROUP BY expr_list |
    having_opt: HAVING expr |
    order_opt: ORDER BY order_list |
    order_list: order_item | order_list COMMA order_item
    order_item: expr direction_opt
    direction_opt: ASC | DESC |
    limit_opt: LIMIT INT offset_opt |
    offset_opt: OFFSET INT |
    expr_list: expr | expr_list COMMA expr
    ident_list: IDENT | ident_list COMMA IDENT
    expr: or_expr
    or_expr: and_expr | or_expr OR and_expr
    and_expr: not_expr | and_expr AND not_expr
    not_expr: NOT not_expr | predicate
    predicate: sum | sum cmp_op sum | sum IS not_opt NULL | EXISTS LPAREN query RPAREN
    predicate: sum not_opt IN LPAREN in_body RPAREN | sum not_opt LIKE sum
    predicate: sum not_opt BETWEEN sum AND sum
    not_opt: NOT |
    cmp_op: EQ | NE | LT | LE | GT | GE
    in_body: expr_list | query
    sum: term | sum PLUS term | sum MINUS term | sum CONCAT term
    term: factor | term STAR factor | term SLASH factor | term PERCENT factor
    factor: MINUS factor | PLUS factor | primary
    primary: literal | column_ref | function_call | case_expr | LPAREN expr RPAREN
    primary: LPAREN query RPAREN | CAST LPAREN expr AS type_name RPAREN
    literal: INT | FLOAT | STRING | NULL | TRUE | FALSE
    column_ref: IDENT | IDENT DOT IDENT
    function_call: IDENT LPAREN RPAREN | IDENT LPAREN STAR RPAREN
    function_call: IDENT LPAREN distinct_arg expr_list RPAREN
    distinct_arg: DISTINCT |
    case_expr: CASE when_list else_opt END | CASE expr when_list else_opt END
    when_list: when_clause | when_list when_clause
    when_clause: WHEN expr THEN expr
    else_opt: ELSE expr |
    type_name: IDENT | IDENT LPAREN INT RPAREN
    insert_stmt: INSERT INTO table_name column_list_opt insert_source
    column_list_opt: LPAREN ident_list RPAREN |
    insert_source: VALUES row_list | query | DEFAULT VALUES
    row_list: row | row_list COMMA row
    row: LPAREN expr_list RPAREN
    update_stmt: UPDATE table_name SET assignment_list where_opt
    assignment_list: assignment | assignment_list COMMA assignment
    assignment: IDENT EQ expr
    delete_stmt: DELETE FROM table_name where_opt
    create_stmt: CREATE TABLE if_not_exists_opt table_name LPAREN column_def_list RPAREN
    if_not_exists_opt: IF NOT EXISTS |
    column_def_list: column_def | column_def_list COMMA column_def
    column_def: IDENT type_name constraint_list
    constraint_list: constraint_list constraint |
    constraint: NOT NULL | NULL | PRIMARY KEY | UNIQUE | DEFAULT literal | REFERENCES table_name
    drop_stmt: DROP TABLE if_exists_opt table_name
    if_exists_opt: IF EXISTS |
    """,
    name="sql-subset",
)
