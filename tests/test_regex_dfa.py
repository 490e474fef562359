"""Regex → byte-level DFA: languages equal Python's `re` (fullmatch) and `regex` (partial)."""

from __future__ import annotations

import functools
import re
import string
import warnings

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridrail.errors import RegexError
from gridrail.grammar.dfa import ByteDFA, compile_regex, utf8_sequences
from gridrail.grammar.regex_syntax import MAX_CODE_POINT, CharSet, parse_regex

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (pattern, flags). Every pattern has strings it accepts and strings that are not even a prefix.
CORPUS = [
    (r"[A-Za-z_][A-Za-z0-9_]*", ""),
    (r"(?:[A-Za-z_]|[^\x00-\x7f])(?:[A-Za-z0-9_$]|[^\x00-\x7f])*", ""),
    (r"'(?:[^']|'')*'", ""),
    (r'"(?:[^"\\\n]|\\.)*"', ""),
    (r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", ""),
    (r"0[xX][0-9A-Fa-f]+", ""),
    (r"[xX]'(?:[0-9A-Fa-f][0-9A-Fa-f])*'", ""),
    (r"--[^\n]*", ""),
    (r"/\*(?:[^*]|\*+[^*/])*\*+/", ""),
    (r"\[[^\]]+\]", ""),
    (r"[ \t\r\n\f]+", ""),
    (r"(?i:select)", ""),
    (r"(?:count|sum|max)[ \t\n]*\(", "i"),
    (r"<=|>=|<>|!=|==|<<|>>|\|\||[-+*/%<>=~&|]", ""),
    (r"\w+", ""),
    (r"\d+", ""),
    (r"\s+", ""),
    (r"\D\S\W", ""),
    (r"[^\W\d]\w*", ""),
    (r".", ""),
    (r".{1,3}", "s"),
    (r"(?s:.){0,6}end", ""),  # `regex` partial matching is wrong with a lazy {0,6}? here
    (r"[^a-z]+", ""),
    (r"[À-ÿ]+x", ""),
    (r"[\u0400-\u04FF]+", "i"),
    (r"😀|中文|é+", ""),
    (r"\x41\u00e9\U0001F600\N{EM DASH}", ""),
    (r"(?:ab|a)*b?c", ""),
    (r"a{2,4}", ""),
    (r"(?:xy){1,}z{,2}", ""),
    (r"a{3}?b+?c??", ""),
    (r"[\x00-\x7f]*!", ""),
    (r"(?i)straße", ""),
    (r"(?i)[a-z]+", ""),
    (r"(?i:k)s", ""),
    (r"(?i:[^k])", ""),
    (r"ǅ|ǆ+", "i"),
    (r"(?i)σ+", ""),
    (r"(?P<word>ab)+c", ""),
    ("(?x) a b  # comment\n [ ]c", ""),
    (r"[\]\-^\\]+", ""),
    (r"\0\t\\\.\/\{", ""),
    (r"{|}|a{|a{1,x}", ""),
]

# A few non-ASCII characters of each UTF-8 length, with case variants and folding oddities.
# On these (and printable ASCII) `regex` and `re` agree; on others their Unicode tables differ
# (e.g. "²" and U+0301 are \w for one only, "\x1f" is \s only for `re`).
NON_ASCII = "éÉßẞſKσςΣǅǆǄЖжµ中文😀𝔘\u2014\u00a0"


def _re_flags(module, flags: str) -> int:
    letters = {"i": module.IGNORECASE, "s": module.DOTALL, "x": module.VERBOSE}
    out = 0
    for letter in flags:
        out |= letters[letter]
    return out


def _candidates(pattern: str, flags: str, any_char: bool) -> st.SearchStrategy[str]:
    """Random strings, matches, and matches cut or extended: over the pattern's own characters,
    ASCII, NON_ASCII and, with ``any_char``, every character."""
    chars = st.sampled_from("\x00" + string.printable + NON_ASCII)
    if any_char:
        chars = st.one_of(chars, st.characters(codec="utf-8"))
    noise = st.text(st.one_of(st.sampled_from(sorted(set(pattern))), chars), max_size=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = re.compile(pattern, _re_flags(re, flags))
        matches = st.from_regex(compiled, fullmatch=True, alphabet=None if any_char else chars)
    cut = matches.flatmap(lambda s: st.integers(0, len(s)).map(lambda i: s[:i]))
    extended = st.tuples(matches, noise).map("".join)
    return st.one_of(noise, matches, cut, extended)


@pytest.mark.parametrize(("pattern", "flags"), CORPUS)
def test_fullmatch_equals_re(pattern: str, flags: str) -> None:
    dfa = compile_regex(pattern, flags)
    seen = set()

    @SETTINGS
    @given(_candidates(pattern, flags, any_char=True))
    def check(text: str) -> None:
        expected = re.fullmatch(pattern, text, _re_flags(re, flags)) is not None
        assert dfa.fullmatch(text.encode()) == expected
        seen.add(expected)

    check()
    assert seen == {True, False}


@pytest.mark.parametrize(("pattern", "flags"), CORPUS)
def test_live_prefix_equals_regex_partial(pattern: str, flags: str) -> None:
    # `regex` has its own Unicode tables (e.g. "²" is \w for `re` but not for `regex`), so
    # only characters on which both agree are generated here.
    dfa = compile_regex(pattern, flags)
    seen = set()

    @SETTINGS
    @given(_candidates(pattern, flags, any_char=False))
    def check(text: str) -> None:
        found = regex.fullmatch(pattern, text, _re_flags(regex, flags), partial=True)
        # Every corpus language is non-empty, so "" is live; `regex` misses that for patterns
        # that are long literals.
        expected = found is not None or text == ""
        assert dfa.is_live_prefix(text.encode()) == expected
        seen.add(expected)

    check()
    assert seen == {True, False}


@pytest.mark.parametrize(("pattern", "flags"), CORPUS)
@SETTINGS
@given(data=st.binary(max_size=16))
def test_random_bytes(pattern: str, flags: str, data: bytes) -> None:
    dfa = compile_regex(pattern, flags)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        assert not dfa.fullmatch(data)
        dfa.is_live_prefix(data)  # must not crash; either answer is possible
        return
    assert dfa.fullmatch(data) == (re.fullmatch(pattern, text, _re_flags(re, flags)) is not None)


@pytest.mark.parametrize(("pattern", "flags"), CORPUS)
@SETTINGS
@given(text=st.text(st.sampled_from("ab'\"x*/-é中😀\n"), max_size=10), cut=st.integers(0, 40))
def test_byte_prefixes_of_live_strings_are_live(pattern: str, flags: str, text: str, cut: int):
    # A cut inside a multi-byte character is still a prefix of the same strings.
    dfa = compile_regex(pattern, flags)
    data = text.encode()
    if dfa.is_live_prefix(data):
        assert dfa.is_live_prefix(data[:cut])


# ---------------------------------------------------------------------------------------------
# One-character constructs, exhaustively over all of Unicode


@functools.cache
def _all_characters() -> str:
    return "".join(chr(c) for c in range(MAX_CODE_POINT + 1) if not 0xD800 <= c <= 0xDFFF)


def _code_points_matched_by_re(atom: str, flags: int) -> list[tuple[int, int]]:
    """Maximal runs of code points (surrogates excluded) that the one-character ``atom``
    matches, as inclusive ranges."""
    runs = re.compile(f"(?:{atom})+", flags).finditer(_all_characters())
    ranges: list[tuple[int, int]] = []
    for run in runs:
        lo, hi = (i if i < 0xD800 else i + 0x800 for i in (run.start(), run.end() - 1))
        if lo < 0xD800 <= hi:  # a run across the surrogate gap
            ranges += [(lo, 0xD7FF), (0xE000, hi)]
        else:
            ranges.append((lo, hi))
    return ranges


ATOMS = [
    (r"\w", ""), (r"\W", ""), (r"\d", ""), (r"\D", ""), (r"\s", ""), (r"\S", ""),
    (r".", ""), (r".", "s"), (r"[^a]", ""), (r"[^\W\d_]", ""), (r"[\w\-\s]", ""),
    (r"k", "i"), (r"s", "i"), (r"i", "i"), (r"[a-z]", "i"), (r"[^a-z]", "i"), (r"[K-k]", "i"),
    (r"\w", "i"), (r"[^\w]", "i"), (r"σ", "i"), (r"ß", "i"), (r"ǅ", "i"), (r"[ǅ]", "i"),
    (r"µ", "i"), (r"İ", "i"), (r"ı", "i"), (r"[\u0100-\u017f]", "i"), (r"[^\u0100-\u017f]", "i"),
    (r"\U00010400", "i"), (r"[\U00010400-\U0001044f]", "i"), (r"[^\U00010428]", "i"),
    (r"[\d_]", "i"), (r"\x7f", "i"), (r"\u212a", "i"),
]  # fmt: skip


@pytest.mark.parametrize(("atom", "flags"), ATOMS)
def test_single_character_sets_equal_re_exhaustively(atom: str, flags: str) -> None:
    node = parse_regex(atom, flags)
    assert isinstance(node, CharSet)
    assert list(node.ranges) == _code_points_matched_by_re(atom, _re_flags(re, flags))


# ---------------------------------------------------------------------------------------------
# UTF-8


@SETTINGS
@given(
    lo=st.integers(0, MAX_CODE_POINT),
    size=st.integers(0, 0x30000),
    probes=st.lists(st.integers(-2, 0x30002), max_size=30),
)
def test_utf8_sequences_encode_exactly_the_range(lo: int, size: int, probes: list[int]) -> None:
    hi = min(lo + size, MAX_CODE_POINT)
    parts = [(a, b) for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)) if a <= b]
    sequences = utf8_sequences(tuple(parts))
    for offset in [0, hi - lo, *probes]:
        code = lo + offset
        if not 0 <= code <= MAX_CODE_POINT or 0xD800 <= code <= 0xDFFF:
            continue
        encoded = chr(code).encode()
        hits = [
            s
            for s in sequences
            if len(s) == len(encoded)
            and all(a <= b <= z for (a, z), b in zip(s, encoded, strict=True))
        ]
        assert len(hits) == (1 if lo <= code <= hi else 0)


def test_invalid_utf8_is_rejected() -> None:
    dfa = compile_regex(r".+", "s")
    assert dfa.fullmatch("é中😀".encode())
    for bad in [b"\x80", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff", b"\xe4\xb8"]:
        assert not dfa.fullmatch(bad)
    assert dfa.is_live_prefix(b"\xe4\xb8")  # a prefix of "中"
    assert not dfa.is_live_prefix(b"\xed\xa0")  # would be a surrogate


# ---------------------------------------------------------------------------------------------
# Minimization


def _distinguishable_classes(dfa: ByteDFA) -> int:
    """Number of Myhill-Nerode classes among the DFA's states (naive Moore refinement)."""
    n = dfa.num_states
    table = dfa.transitions
    block = [int(a) for a in dfa.accepting]
    while True:
        signatures = [
            (block[q], *(block[t] if t >= 0 else -1 for t in table[q * 256 : (q + 1) * 256]))
            for q in range(n)
        ]
        ids: dict[tuple[int, ...], int] = {}
        refined = [ids.setdefault(sig, len(ids)) for sig in signatures]
        if len(ids) == len(set(block)):
            return len(ids)
        block = refined


def _reachable(dfa: ByteDFA) -> set[int]:
    seen = {dfa.start}
    stack = [dfa.start]
    while stack:
        q = stack.pop()
        for t in dfa.transitions[q * 256 : (q + 1) * 256]:
            if t >= 0 and t not in seen:
                seen.add(t)
                stack.append(t)
    return seen


def test_known_minimal_size() -> None:
    dfa = compile_regex(r"(a|b)*abb")
    assert dfa.num_states == 4
    assert all(dfa.live)
    assert compile_regex(r"(a|b)*abb", minimize=False).num_states >= 4


@pytest.mark.parametrize(("pattern", "flags"), CORPUS)
def test_minimized_is_minimal_and_trim(pattern: str, flags: str) -> None:
    dfa = compile_regex(pattern, flags)
    raw = compile_regex(pattern, flags, minimize=False)
    assert dfa.num_states <= raw.num_states
    assert _distinguishable_classes(dfa) == dfa.num_states
    assert _reachable(dfa) == set(range(dfa.num_states))
    assert all(dfa.live)  # no dead state


@pytest.mark.parametrize(("pattern", "flags"), CORPUS)
@SETTINGS
@given(data=st.data())
def test_minimized_language_equals_unminimized(pattern: str, flags: str, data) -> None:
    dfa = compile_regex(pattern, flags)
    raw = compile_regex(pattern, flags, minimize=False)
    text = data.draw(_candidates(pattern, flags, any_char=True))
    encoded = text.encode()
    assert dfa.fullmatch(encoded) == raw.fullmatch(encoded)
    assert dfa.is_live_prefix(encoded) == raw.is_live_prefix(encoded)


def test_empty_language() -> None:
    dfa = compile_regex(r"[^\s\S]|a[^\x00-\U0010ffff]")
    assert (dfa.start, dfa.num_states) == (-1, 0)
    assert not dfa.fullmatch(b"") and not dfa.fullmatch(b"a")
    assert not dfa.is_live_prefix(b"") and not dfa.is_live_prefix(b"a")


def test_empty_string_and_surrogates() -> None:
    assert compile_regex(r"a*").fullmatch(b"")
    assert compile_regex(r"").fullmatch(b"")
    assert compile_regex(r"[\ud800-\udfff]").num_states == 0  # no UTF-8 encoding


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    ("pattern", "construct", "position"),
    [
        (r"(a)b\1", "backreference", 4),
        (r"(?P<x>a)(?P=x)", "named backreference", 8),
        (r"a(?=b)", "lookahead", 1),
        (r"a(?!b)", "negative lookahead", 1),
        (r"(?<=a)b", "lookbehind", 0),
        (r"(?<!a)b", "negative lookbehind", 0),
        (r"^a", "anchor ^", 0),
        (r"a$", "anchor $", 1),
        (r"\Aa", "anchor \\A", 0),
        (r"a\Z", "anchor \\Z", 1),
        (r"a\b", "word boundary", 1),
        (r"x\By", "\\B", 1),
        (r"(a)?(?(1)b|c)", "conditional", 4),
        (r"a++", "possessive", 1),
        (r"a{2}+", "possessive", 1),
        (r"(?>ab)", "atomic group", 0),
        (r"(?a)\w", "inline flag 'a'", 0),
    ],
)
def test_unsupported_constructs(pattern: str, construct: str, position: int) -> None:
    with pytest.raises(RegexError) as info:
        compile_regex(pattern)
    message = str(info.value)
    assert construct in message
    assert f"at position {position}" in message
    assert "not supported" in message


@pytest.mark.parametrize(
    ("pattern", "position"),
    [("a(b", 1), ("[a-", 0), ("a**", 2), ("*a", 0), (r"\q", 0), ("a)", 1), ("[z-a]", 1)],
)
def test_malformed_patterns(pattern: str, position: int) -> None:
    with pytest.raises(RegexError, match=f"at position {position}"):
        compile_regex(pattern)


def test_unsupported_flag_and_size() -> None:
    with pytest.raises(RegexError, match="flag"):
        compile_regex("a", "a")
    with pytest.raises(RegexError, match="automaton states"):
        compile_regex(r"\w{100000}")
