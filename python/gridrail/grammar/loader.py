"""From Lark syntax to the grammar model: imports, terminal regexes, EBNF → BNF, numbering.

EBNF is expanded the way Lark expands it (optionals and groups by distributing alternatives,
``+``/``*`` by a shared left-recursive helper rule), so a grammar that is LALR(1) for Lark is
LALR(1) here with the same productions.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from gridrail.errors import GrammarError
from gridrail.grammar.lark_syntax import (
    CharRange,
    Choice,
    Declare,
    Definition,
    GrammarText,
    Ignore,
    Import,
    Literal,
    Node,
    Pattern,
    Ref,
    Repeat,
    Sequence,
    parse_lark,
)
from gridrail.grammar.model import Grammar, Production, StackBound, TerminalDef
from gridrail.grammar.reduce import reduce_grammar
from gridrail.grammar.regex_syntax import MAX_GROUP_NESTING

# Readable names for anonymous punctuation terminals (the names Lark users know).
_PUNCTUATION_NAMES = {
    ".": "DOT", ",": "COMMA", ":": "COLON", ";": "SEMICOLON", "+": "PLUS", "-": "MINUS",
    "*": "STAR", "/": "SLASH", "\\": "BACKSLASH", "|": "VBAR", "?": "QMARK", "!": "BANG",
    "@": "AT", "#": "HASH", "$": "DOLLAR", "%": "PERCENT", "^": "CIRCUMFLEX", "&": "AMPERSAND",
    "_": "UNDERSCORE", "<": "LESSTHAN", ">": "MORETHAN", "=": "EQUAL", '"': "DBLQUOTE",
    "'": "QUOTE", "`": "BACKQUOTE", "~": "TILDE", "(": "LPAR", ")": "RPAR", "{": "LBRACE",
    "}": "RBRACE", "[": "LSQB", "]": "RSQB", "\n": "NEWLINE", "\t": "TAB", " ": "SPACE",
}  # fmt: skip

_MAX_REPEAT = 50  # `x ~ n..m` is expanded naively; larger counts are refused, not approximated
# Lark's expansion multiplies (each `[x]` in a sequence doubles a rule's alternatives), so one
# rule may expand to at most this many; the bundled grammar's largest has 130.
_MAX_ALTERNATIVES = 10_000
# A terminal's definition is turned into one regex recursively, through the terminals it
# names: at most this many levels of groups and references (past them the regex could not
# nest its groups anyway: MAX_GROUP_NESTING).
_MAX_TERMINAL_DEPTH = 2 * MAX_GROUP_NESTING
_MAX_TERMINAL_PATTERN = 1_000_000  # characters of one terminal's composed regex

BUNDLED_MODULES = ("common",)  # importable with %import; not grammars of their own


def bundled_names() -> tuple[str, ...]:
    """Dialect grammars shipped in gridrail/grammars (every .lark file but the modules)."""
    files = resources.files("gridrail.grammars").iterdir()
    names = (f.name[: -len(".lark")] for f in files if f.name.endswith(".lark"))
    return tuple(sorted(n for n in names if n not in BUNDLED_MODULES))


def bundled_grammar_text(name: str) -> str:
    if name not in bundled_names():
        raise GrammarError(
            f"no bundled grammar named {name!r} (bundled: {', '.join(bundled_names())})"
        )
    return resources.files("gridrail.grammars").joinpath(f"{name}.lark").read_text("utf-8")


def bundled_stack_bound(name: str) -> StackBound | None:
    """The stack bound of a bundled dialect (`<name>.stack.toml` beside its grammar), if any."""
    path = resources.files("gridrail.grammars").joinpath(f"{name}.stack.toml")
    if not path.is_file():
        return None
    data = tomllib.loads(path.read_text("utf-8"))
    return StackBound(data["limit"], tuple(data.get("weights", {}).items()))


def load_grammar(text: str, source: str = "<grammar>", start: str = "start") -> Grammar:
    """Load Lark grammar text; raises GrammarError naming the line and column of a problem."""
    return _Loader(parse_lark(text, source), start).load()


@dataclass(frozen=True)
class _TerminalSpec:
    pattern: str
    flags: str
    is_literal: bool
    priority: int


def _scoped(pattern: str, flags: str) -> str:
    """A regex fragment that carries its own flags, for composing terminals."""
    return f"(?{flags}:{pattern})" if flags else f"(?:{pattern})"


def _class_char(ch: str) -> str:
    return "\\" + ch if ch in "\\]^-[" else ch


@dataclass
class _Rules:
    """BNF productions under construction, plus Lark's shared EBNF helper rules."""

    productions: list[tuple[str, tuple[str, ...], str | None, str]]
    helper_cache: dict[Node, str]
    helper_count: int = 0


class _Loader:
    def __init__(self, text: GrammarText, start: str):
        self.text = text
        self.source = text.source
        self.start = start
        self.terminal_defs: dict[str, Definition] = {}
        self.rule_defs: dict[str, Definition] = {}
        self.declared: list[str] = []
        self.ignores: list[Ignore] = []
        self.specs: dict[str, _TerminalSpec] = {}
        self.first_seen: dict[str, None] = {}  # terminal names in order of first appearance
        self.anon_count = 0
        self.ignore_count = 0

    def error(self, message: str, line: int = 0, column: int = 0) -> GrammarError:
        return GrammarError(message, line, column, self.source)

    # -- top level
    def load(self) -> Grammar:
        for st in self.text.statements:
            if isinstance(st, Import):
                self._import(st)
            elif isinstance(st, Definition):
                self._define(st)
            elif isinstance(st, Ignore):
                self.ignores.append(st)
            elif isinstance(st, Declare):
                for name in st.names:
                    if not name.lstrip("_")[:1].isupper():
                        raise self.error(f"%declare takes terminal names: {name}", st.line)
                    self.declared.append(name)
        if self.start not in self.rule_defs:
            raise self.error(f"the grammar has no start rule {self.start!r}")

        # Walk in file order so that terminals are numbered by first appearance.
        rules = _Rules(productions=[], helper_cache={})
        ignored: list[str] = []
        for st in self.text.statements:
            if isinstance(st, Definition) and st.is_terminal:
                self.first_seen.setdefault(st.name, None)
            elif isinstance(st, Import):
                for _, local in st.names:
                    self.first_seen.setdefault(local, None)
            elif isinstance(st, Definition):
                self._expand_rule(st, rules)
            elif isinstance(st, Ignore):
                ignored.append(self._ignored_terminal(st))
            elif isinstance(st, Declare):
                for name in st.names:
                    self.first_seen.setdefault(name, None)

        productions = self._finish_productions(rules)
        # Terminals only used by rules the start cannot reach are not part of the grammar.
        used = {s for p in productions for s in p.rhs if s not in self.rule_defs}
        used |= set(ignored) | set(self.declared)
        order = [n for n in self.first_seen if n in used]
        terminals = tuple(
            TerminalDef(
                name=name,
                index=i,
                pattern=self._spec(name).pattern,
                flags=self._spec(name).flags,
                priority=self._spec(name).priority,
                is_literal=self._spec(name).is_literal,
            )
            for i, name in enumerate(order)
        )
        grammar = Grammar(
            terminals=terminals,
            ignored=frozenset(ignored),
            productions=productions,
            start=self.start,
            name=self.source,
            declared=frozenset(self.declared),
        )
        self._check_nonempty(grammar)
        return grammar

    def _define(self, d: Definition) -> None:
        table = self.terminal_defs if d.is_terminal else self.rule_defs
        if d.name in table:
            first = table[d.name]
            raise self.error(
                f"{d.name} is defined twice (first at line {first.line})", d.line, d.column
            )
        table[d.name] = d

    def _import(self, st: Import) -> None:
        if st.module not in BUNDLED_MODULES:
            raise self.error(
                f"cannot import from {st.module!r}: only the bundled modules "
                f"{', '.join(BUNDLED_MODULES)} can be imported",
                st.line,
                st.column,
            )
        library = _bundled_definitions(st.module)
        for name, local in st.names:
            if name not in library:
                raise self.error(f"module {st.module!r} has no definition {name}", st.line)
            self._import_with_dependencies(library, name, local, st)

    def _import_with_dependencies(
        self, library: dict[str, Definition], name: str, local: str, st: Import
    ) -> None:
        d = library[name]
        if not d.is_terminal:
            raise self.error(f"only terminals can be imported, {name} is a rule", st.line)
        if local in self.terminal_defs:
            return
        self.terminal_defs[local] = Definition(local, True, d.body, d.priority, st.line, st.column)
        for dep in _refs(d.body):
            # dependencies keep their names inside a private namespace
            self._import_with_dependencies(library, dep.name, dep.name, st)

    def _check_nonempty(self, grammar: Grammar) -> None:
        try:
            reduce_grammar(grammar)
        except GrammarError as exc:
            d = self.rule_defs[self.start]
            raise self.error(
                f"the language is empty: rule {self.start!r} derives no finite string "
                f"({exc.message})",
                d.line,
                d.column,
            ) from None

    # -- terminals
    def _spec(self, name: str) -> _TerminalSpec:
        spec = self.specs.get(name)
        if spec is None:
            if name in self.declared and name not in self.terminal_defs:
                return _TerminalSpec("", "", False, 0)
            d = self.terminal_defs[name]
            spec = self._compile_terminal(d, visiting=(), depth=0)
            self.specs[name] = spec
        return spec

    def _compile_terminal(
        self, d: Definition, visiting: tuple[str, ...], depth: int
    ) -> _TerminalSpec:
        if d.name in visiting:
            cycle = " -> ".join((*visiting, d.name))
            raise self.error(f"terminal definitions are recursive: {cycle}", d.line, d.column)
        body = d.body
        only = body.options[0].items[0] if _is_single_atom(body) else None
        if isinstance(only, Literal):
            return _TerminalSpec(re.escape(only.value), only.flags, True, d.priority)
        if isinstance(only, Pattern):
            return _TerminalSpec(only.source, only.flags, False, d.priority)
        pattern = self._terminal_regex(body, (*visiting, d.name), depth)
        return _TerminalSpec(pattern, "", False, d.priority)

    def _terminal_regex(self, node: Node, visiting: tuple[str, ...], depth: int) -> str:
        if depth > _MAX_TERMINAL_DEPTH:
            d = self.terminal_defs.get(visiting[0])
            raise self.error(
                f"terminal {visiting[0]} nests groups and terminal references more than "
                f"{_MAX_TERMINAL_DEPTH} deep (through {len(visiting)} terminals)",
                d.line if d else 0,
                d.column if d else 0,
            )
        depth += 1
        if isinstance(node, Literal):
            return _scoped(re.escape(node.value), node.flags)
        if isinstance(node, Pattern):
            return _scoped(node.source, node.flags)
        if isinstance(node, CharRange):
            return f"[{_class_char(node.low)}-{_class_char(node.high)}]"
        if isinstance(node, Ref):
            d = self.terminal_defs.get(node.name)
            if d is None:
                kind = "a rule" if node.name in self.rule_defs else "undefined"
                raise self.error(
                    f"terminal {visiting[-1]} refers to {node.name}, which is {kind}",
                    node.line,
                    node.column,
                )
            spec = self.specs.get(node.name)  # shared, not recomputed per reference
            if spec is None:
                spec = self.specs[node.name] = self._compile_terminal(d, visiting, depth)
            return _scoped(spec.pattern, spec.flags)
        if isinstance(node, Repeat):
            inner = f"(?:{self._terminal_regex(node.item, visiting, depth)})"
            if (node.min, node.max) == (0, 1):
                return inner + "?"
            if (node.min, node.max) == (0, None):
                return inner + "*"
            if (node.min, node.max) == (1, None):
                return inner + "+"
            high = "" if node.max is None else str(node.max)
            return f"{inner}{{{node.min},{high}}}"
        if isinstance(node, Sequence):
            if node.alias:
                raise self.error(f"terminal {visiting[-1]} cannot have an alias")
            items = [self._terminal_regex(item, visiting, depth) for item in node.items]
            return self._joined("", items, visiting)
        assert isinstance(node, Choice)
        options = [self._terminal_regex(o, visiting, depth) for o in node.options]
        return "(?:" + self._joined("|", options, visiting) + ")"

    def _joined(self, separator: str, parts: list[str], visiting: tuple[str, ...]) -> str:
        """`separator.join(parts)`, refused past _MAX_TERMINAL_PATTERN characters: a terminal
        copies the regexes of those it names, so `A1: A0 A0`, `A2: A1 A1`, ... doubles them."""
        length = sum(map(len, parts)) + len(separator) * len(parts)
        if length > _MAX_TERMINAL_PATTERN:
            d = self.terminal_defs.get(visiting[-1])
            raise self.error(
                f"terminal {visiting[-1]} expands to a regex of more than "
                f"{_MAX_TERMINAL_PATTERN} characters (a terminal copies the regexes of the "
                "terminals it names)",
                d.line if d else 0,
                d.column if d else 0,
            )
        return separator.join(parts)

    def _anonymous_terminal(self, node: Literal | Pattern) -> str:
        """The terminal an inline string or regex in a rule stands for (named if one matches)."""
        if isinstance(node, Literal):
            spec = _TerminalSpec(re.escape(node.value), node.flags, True, 0)
        else:
            spec = _TerminalSpec(node.source, node.flags, False, 0)
        for name, d in self.terminal_defs.items():
            if not _is_single_atom(d.body):
                continue
            named = self._spec(name)
            if (named.pattern, named.flags, named.is_literal) == (
                spec.pattern,
                spec.flags,
                spec.is_literal,
            ):
                return name
        for name, existing in self.specs.items():
            if name not in self.terminal_defs and existing == spec:
                return name
        name = None
        if isinstance(node, Literal):
            v = node.value
            if v.isidentifier() and v.upper() not in self.terminal_defs and v.isascii():
                name = v.upper()
            elif v in _PUNCTUATION_NAMES:
                name = _PUNCTUATION_NAMES[v]
            elif all(ch in _PUNCTUATION_NAMES for ch in v):
                name = "_".join(_PUNCTUATION_NAMES[ch] for ch in v)
        if name is None or name in self.specs or name in self.terminal_defs:
            name = f"__ANON_{self.anon_count}"
            self.anon_count += 1
        self.specs[name] = spec
        return name

    def _ignored_terminal(self, st: Ignore) -> str:
        body = st.body
        only = body.options[0].items[0] if _is_single_atom(body) else None
        if isinstance(only, Ref):
            name = self._terminal_ref(only)
        else:
            name = f"__IGNORE_{self.ignore_count}"
            self.ignore_count += 1
            if isinstance(only, Literal):
                self.specs[name] = _TerminalSpec(re.escape(only.value), only.flags, True, 0)
            elif isinstance(only, Pattern):
                self.specs[name] = _TerminalSpec(only.source, only.flags, False, 0)
            else:
                pattern = self._terminal_regex(body, ("%ignore",), 0)
                self.specs[name] = _TerminalSpec(pattern, "", False, 0)
        self.first_seen.setdefault(name, None)
        return name

    def _terminal_ref(self, ref: Ref) -> str:
        if ref.name not in self.terminal_defs and ref.name not in self.declared:
            raise self.error(f"undefined terminal {ref.name}", ref.line, ref.column)
        return ref.name

    # -- rules
    def _expand_rule(self, d: Definition, rules: _Rules) -> None:
        for option in d.body.options:
            for rhs in self._alternatives(option, d.name, rules):
                rules.productions.append((d.name, rhs, option.alias, d.name))

    def _alternatives(self, node: Node, rule: str, rules: _Rules) -> list[tuple[str, ...]]:
        """All BNF right-hand sides a piece of EBNF stands for (Lark's expansion)."""
        if isinstance(node, Ref):
            if node.name.lstrip("_")[:1].isupper():
                name = self._terminal_ref(node)
                self.first_seen.setdefault(name, None)
                return [(name,)]
            if node.name not in self.rule_defs:
                raise self.error(f"undefined rule {node.name}", node.line, node.column)
            return [(node.name,)]
        if isinstance(node, Literal | Pattern):
            name = self._anonymous_terminal(node)
            self.first_seen.setdefault(name, None)
            return [(name,)]
        if isinstance(node, CharRange):
            raise self.error(f"a literal range can only appear in a terminal (rule {rule})")
        if isinstance(node, Sequence):
            parts = [self._alternatives(item, rule, rules) for item in node.items]
            self._check_expansion(math.prod(map(len, parts)), rule)
            return _dedup(
                tuple(itertools.chain.from_iterable(p)) for p in itertools.product(*parts)
            )
        if isinstance(node, Choice):
            options = [self._alternatives(option, rule, rules) for option in node.options]
            self._check_expansion(sum(map(len, options)), rule)
            return _dedup(rhs for alternatives in options for rhs in alternatives)
        assert isinstance(node, Repeat)
        inner = self._alternatives(node.item, rule, rules)
        if (node.min, node.max) == (1, None):
            return [(self._helper_rule("plus", node.item, inner, rule, rules),)]
        if (node.min, node.max) == (0, None):
            return [(self._helper_rule("star", node.item, inner, rule, rules),), ()]
        assert node.max is not None
        if node.max > _MAX_REPEAT:
            raise self.error(f"repetition ~{node.min}..{node.max} is too large (max {_MAX_REPEAT})")
        self._check_expansion(sum(len(inner) ** n for n in range(node.min, node.max + 1)), rule)
        out: list[tuple[str, ...]] = []
        for count in range(node.min, node.max + 1):
            for combo in itertools.product(inner, repeat=count):
                out.append(tuple(itertools.chain.from_iterable(combo)))
        return _dedup(out)

    def _check_expansion(self, count: int, rule: str) -> None:
        if count > _MAX_ALTERNATIVES:
            d = self.rule_defs[rule]
            raise self.error(
                f"rule {rule} expands to {count} alternatives, more than {_MAX_ALTERNATIVES} "
                "(optionals and groups multiply: each [x] in a sequence doubles them); "
                "factor parts of it into rules of their own",
                d.line,
                d.column,
            )

    def _helper_rule(
        self, kind: str, item: Node, inner: list[tuple[str, ...]], rule: str, rules: _Rules
    ) -> str:
        """A left-recursive rule for `item+`, shared by every identical item (as Lark does:
        `x*` reuses the rule of an earlier `x+` and vice versa)."""
        key = item
        name = rules.helper_cache.get(key)
        if name is None:
            name = f"__{rule}_{kind}_{rules.helper_count}"
            rules.helper_count += 1
            rules.helper_cache[key] = name
            for rhs in inner:
                rules.productions.append((name, rhs, None, rule))
            for rhs in inner:
                rules.productions.append((name, (name, *rhs), None, rule))
        return name

    def _finish_productions(self, rules: _Rules) -> tuple[Production, ...]:
        # Duplicates: empty ones are merged, others are an error (as in Lark).
        seen: dict[tuple[str, tuple[str, ...]], None] = {}
        unique = []
        for lhs, rhs, alias, origin in rules.productions:
            if (lhs, rhs) in seen:
                if rhs:
                    d = self.rule_defs.get(origin)
                    raise self.error(
                        f"rule {lhs} has the alternative {' '.join(rhs)!r} twice "
                        "(this can come from overlapping optionals: [] or ?)",
                        d.line if d else 0,
                    )
                continue
            seen[(lhs, rhs)] = None
            unique.append((lhs, rhs, alias, origin))
        # Rules the start symbol cannot reach are dropped, as Lark does.
        reachable = {self.start}
        frontier = [self.start]
        by_lhs: dict[str, list[tuple[str, ...]]] = {}
        for lhs, rhs, _, _ in unique:
            by_lhs.setdefault(lhs, []).append(rhs)
        while frontier:
            for rhs in by_lhs.get(frontier.pop(), []):
                for sym in rhs:
                    if sym in by_lhs and sym not in reachable:
                        reachable.add(sym)
                        frontier.append(sym)
        kept = [p for p in unique if p[0] in reachable]
        expand = {name for name, d in self.rule_defs.items() if d.expand_single}
        return tuple(
            Production(
                index=i,
                lhs=lhs,
                rhs=rhs,
                alias=alias,
                origin=origin,
                expand_single=lhs in expand,
            )
            for i, (lhs, rhs, alias, origin) in enumerate(kept)
        )


def _is_single_atom(body: Choice) -> bool:
    return len(body.options) == 1 and len(body.options[0].items) == 1


def _refs(node: Node) -> list[Ref]:
    if isinstance(node, Ref):
        return [node]
    if isinstance(node, Repeat):
        return _refs(node.item)
    if isinstance(node, Sequence):
        return [r for item in node.items for r in _refs(item)]
    if isinstance(node, Choice):
        return [r for option in node.options for r in _refs(option)]
    return []


def _dedup(items) -> list:
    return list(dict.fromkeys(items))


_BUNDLED_CACHE: dict[str, dict[str, Definition]] = {}


def _bundled_definitions(module: str) -> dict[str, Definition]:
    if module not in _BUNDLED_CACHE:
        text = resources.files("gridrail.grammars").joinpath(f"{module}.lark").read_text()
        parsed = parse_lark(text, f"{module}.lark")
        _BUNDLED_CACHE[module] = {
            st.name: st for st in parsed.statements if isinstance(st, Definition)
        }
    return _BUNDLED_CACHE[module]
