"""Regex → byte-level DFA: languages equal Python's `re` (fullmatch) and `regex` (partial), both
with the ASCII flag: gridrail's regex semantics are `re.ASCII` (docs/semantics.md)."""

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
    (r"(?a)\w+|(?a:\d)", ""),
    (r"(?:select|like|key|kill|ilike|distinct)", "i"),
    (r"(?:[a-z_]|[^\x00-\x7f])(?:[a-z0-9_]|[^\x00-\x7f])*", "i"),
    (r"(?i:s)ſ(?i:[^s])", ""),
    # a leading negative lookahead: words left out of an identifier (the qualifier's form)
    (r"(?!(?i:as|and|select)\.)[a-z_][a-z0-9_]*\.", ""),
    (r"(?!ab|b)[abc]*", ""),
    (r"(?i)(?!x)[a-z]+", ""),
]

# Characters that Unicode case folding (but not ASCII folding) relates to ASCII letters or to
# each other: ſ~s, ı~i, İ~i, K (U+212A)~k, Å (U+212B)~å, ß~ẞ, µ~μ, ligatures.
FOLD_ODDITIES = "ſıİ\u212a\u212bÅåßẞµμﬅﬆǅǆǄ"
# A few non-ASCII characters of each UTF-8 length, with case variants and folding oddities.
# On these (and printable ASCII) `regex` and `re` agree.
NON_ASCII = "éÉßẞſKσςΣǅǆǄЖжµ中文😀𝔘\u2014\u00a0ıİ\u212b"


def _re_flags(module, flags: str) -> int:
    """The oracle's flags: always ASCII (gridrail's semantics), plus the flag letters."""
    letters = {"i": module.IGNORECASE, "s": module.DOTALL, "x": module.VERBOSE}
    out = module.ASCII
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
    (r"\u017f", "i"), (r"\u212b", "i"), (r"[sſ]", "i"), (r"[^ſ]", "i"), (r"[A-Z]", "i"),
    (r"[^\x00-\x7f]", "i"), (r"(?a:\w)", ""), (r"(?a:[^\W_])", "i"),
]  # fmt: skip


@pytest.mark.parametrize(("atom", "flags"), ATOMS)
def test_single_character_sets_equal_re_exhaustively(atom: str, flags: str) -> None:
    node = parse_regex(atom, flags)
    assert isinstance(node, CharSet)
    assert list(node.ranges) == _code_points_matched_by_re(atom, _re_flags(re, flags))


# ---------------------------------------------------------------------------------------------
# ASCII semantics (docs/semantics.md): the oracles above use re.ASCII too, so pin the rule itself


def _ranges(pattern: str, flags: str = "") -> tuple[tuple[int, int], ...]:
    node = parse_regex(pattern, flags)
    assert isinstance(node, CharSet)
    return node.ranges


def test_classes_and_case_folding_are_ascii() -> None:
    assert _ranges(r"\w") == ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
    assert _ranges(r"\d") == ((0x30, 0x39),)
    assert _ranges(r"\s") == ((0x09, 0x0D), (0x20, 0x20))
    beyond_ascii = ((0x80, 0xD7FF), (0xE000, MAX_CODE_POINT))
    non_word = ((0, 0x2F), (0x3A, 0x40), (0x5B, 0x5E), (0x60, 0x60), (0x7B, 0xD7FF))
    assert _ranges(r"\W") == (*non_word, beyond_ascii[1])
    # Unicode folding would add ſ (U+017F), İ/ı (U+0130/U+0131), K (U+212A), Å (U+212B).
    assert _ranges("s", "i") == ((0x53, 0x53), (0x73, 0x73))
    assert _ranges("i", "i") == ((0x49, 0x49), (0x69, 0x69))
    assert _ranges("k", "i") == ((0x4B, 0x4B), (0x6B, 0x6B))
    assert _ranges("ſ", "i") == ((0x17F, 0x17F),)
    assert _ranges("\u212a", "i") == ((0x212A, 0x212A),)
    assert _ranges("é", "i") == ((0xE9, 0xE9),)  # non-ASCII letters match only themselves
    assert _ranges("[^k]", "i") == _ranges("[^kK]")  # so [^k] takes K (U+212A) under (?i)
    # explicit non-ASCII classes are unaffected by the flag
    assert _ranges(r"[^\x00-\x7f]", "i") == _ranges(r"[^\x00-\x7f]") == beyond_ascii
    for keyword in ["select", "like", "key", "distinct", "exists"]:
        dfa = compile_regex(keyword, "i")
        assert dfa.fullmatch(keyword.upper().encode()) and dfa.fullmatch(keyword.encode())
        for ascii_letter, oddity in [("s", "ſ"), ("i", "ı"), ("i", "İ"), ("k", "\u212a")]:
            if ascii_letter in keyword:
                assert not dfa.fullmatch(keyword.replace(ascii_letter, oddity).encode())


def test_ascii_flag_is_a_no_op() -> None:
    for pattern in [r"\w", r"[^\W\d]", r"\s", "k", "[a-zſ]"]:
        for flags in ["", "i"]:
            assert parse_regex(f"(?a){pattern}", flags) == parse_regex(pattern, flags)
            assert parse_regex(f"(?a:{pattern})", flags) == parse_regex(pattern, flags)
            assert parse_regex(pattern, flags + "a") == parse_regex(pattern, flags)


# Case-insensitive patterns over ASCII letters, explicit non-ASCII and classes.
FOLD_PATTERNS = [
    r"select|like|ilike|key|kill|distinct|exists|is|as|asc",
    r"[a-z_][a-z0-9_]*",
    r"(?:[a-z_]|[^\x00-\x7f])(?:[a-z0-9_$]|[^\x00-\x7f])*",
    r"[^a-z]+",
    r"[^k]s+",
    r"\w+\W?",
    r"(?-i:s)k(?-i:[^\W\d])+",
    r"ſ+ı?İ*|å\u212b|ß|ẞ|µ",
    r"[\u0100-\u017f]+|[\u2100-\u214f]",
]


_UNICODE_PARTNER = {"s": "ſ", "i": "ı", "k": "\u212a", "a": "\u212b"}


def _spelled(word: str, how: list[int]) -> str:
    """``word`` with each letter kept (0), upper-cased (1) or swapped for a Unicode case partner
    (2: ſ ı K Å, else İ)."""
    return "".join(
        (c, c.upper(), _UNICODE_PARTNER.get(c, "İ"))[h] for c, h in zip(word, how, strict=True)
    )


_KEYWORD_SPELLINGS = st.sampled_from(["select", "like", "key", "kill", "distinct", "is"]).flatmap(
    lambda w: st.lists(st.integers(0, 2), min_size=len(w), max_size=len(w)).map(
        lambda how: _spelled(w, how)
    )
)


@pytest.mark.parametrize("pattern", FOLD_PATTERNS)
@SETTINGS
@given(
    text=st.one_of(
        st.text(st.sampled_from("sSiIkKlLeEcCtTaAxX_1 é" + FOLD_ODDITIES), max_size=10),
        _KEYWORD_SPELLINGS,
    )
)
def test_case_insensitive_matching_equals_re_ascii(pattern: str, text: str) -> None:
    dfa = compile_regex(pattern, "i")
    data = text.encode()
    expected = re.fullmatch(pattern, text, re.ASCII | re.IGNORECASE) is not None
    assert dfa.fullmatch(data) == expected
    partial = regex.fullmatch(pattern, text, regex.ASCII | regex.IGNORECASE, partial=True)
    assert dfa.is_live_prefix(data) == (partial is not None or text == "")


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
        (r"(?u)\w", "inline flag 'u'", 0),
        (r"x(?u:\w)", "inline flag 'u'", 1),
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
        compile_regex("a", "q")
    with pytest.raises(RegexError, match="ASCII semantics"):
        compile_regex("a", "u")
    with pytest.raises(RegexError, match="ASCII semantics"):
        compile_regex(r"(?u)\w")
    with pytest.raises(RegexError, match="'L' flag"):  # Python refuses it on str patterns
        compile_regex(r"(?L)\w")
    with pytest.raises(RegexError, match="automaton states"):
        compile_regex(r".{100000}")  # (ASCII \w{100000} would fit)


def test_leading_negative_lookahead_is_a_difference() -> None:
    # (?!X)Y: Y's strings that start with no X (Python's meaning under fullmatch)
    qualifier = compile_regex(r"(?!(?i:select|cast)\.)[A-Za-z_][A-Za-z0-9_]*\.")
    for refused in (b"select.", b"SeLeCt.", b"CAST."):
        assert not qualifier.fullmatch(refused)
    for kept in (b"selects.", b"sel.", b"castx.", b"t1.", b"_."):
        assert qualifier.fullmatch(kept)
    assert qualifier.is_live_prefix(b"select")  # `selectx.` is still ahead
    # an X that spells the empty string is a prefix of every string
    assert compile_regex(r"(?!a*)b").num_states == 0


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"(?!a)b|c", "guards only the first branch"),
        (r"(?!a)(?!b)c", "a second leading (?!...)"),
    ],
)
def test_leading_lookahead_forms_not_supported(pattern: str, message: str) -> None:
    with pytest.raises(RegexError, match=re.escape(message)):
        compile_regex(pattern)
