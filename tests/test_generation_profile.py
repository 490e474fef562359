"""Generation profiles (issue 13, item 2): the stricter language a model may write — no comments,
bounded layout, nothing after the final ";", bare bounded invented names, single-quoted strings
— compiled as an ordinary grammar, so masks stay exact (fast ≡ spec), walks end in sentences,
and audit logs replay. Every refusal has its positive control: the dialect's own language (no
profile) accepts the same text."""

from __future__ import annotations

import random
import re
from functools import cache
from pathlib import Path

import pytest

import gridrail as gr
from assets import asset
from gridrail.archive import MissingArtifactError, save_guide
from gridrail.audit import replay
from gridrail.parse.completion import Completer
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.language import role_language
from gridrail.registry import Registry, shared_role_language
from gridrail.spec import spec_mask
from support.hr_example import hr_guide
from test_audit import audited_generation
from test_lexicon import HR_TABLES
from test_walk_arm import _small_vocab, generate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
STRICT = gr.GenerationProfile()
ALIAS_24 = "a" * 24

REFUSED = {
    "line comment": "SELECT name -- the names\nFROM employees;",
    "block comment": "SELECT name /* the names */ FROM employees;",
    "comment in an expression": "SELECT name FROM employees WHERE id = 1--1\n;",
    "comment before the statement": "-- names\nSELECT name FROM employees;",
    "blank line": "SELECT name\n\nFROM employees;",
    "two spaces": "SELECT name  FROM employees;",
    "a tab": "SELECT name\tFROM employees;",
    "deep indent": "SELECT name\n         FROM employees;",
    "space after ;": "SELECT name FROM employees; ",
    "newline after ;": "SELECT name FROM employees;\n",
    "comment after ;": "SELECT name FROM employees;-- done",
    "quoted alias": 'SELECT name FROM employees AS "the staff";',
    "backtick alias": "SELECT name FROM employees AS `staff`;",
    "bracket column alias": "SELECT name AS [who] FROM employees;",
    "25-character alias": f"SELECT name AS {ALIAS_24}b FROM employees;",
    "4-character table alias": "SELECT emps.name FROM employees AS emps;",
    "21-digit number": "SELECT name FROM employees WHERE id = 123456789012345678901;",
    "21-character decimal": "SELECT name FROM employees WHERE id = 1.2345678901234567890;",
    "65-character string": f"SELECT name FROM employees WHERE dept = '{'x' * 63}';",
    "alias with a dollar": "SELECT name FROM employees AS T$1;",
    "double-quoted string": 'SELECT name FROM employees WHERE dept = "eng";',
    "quoted free qualifier": 'SELECT "Quarterly Results".name FROM employees;',
    "long free qualifier": f"SELECT {ALIAS_24}b.name FROM employees;",
    "quoted CTE name": 'WITH "t" AS (SELECT name FROM employees) SELECT name FROM employees;',
    "two spaces before (": "SELECT count  (*) FROM orders;",
    "newline before (": "SELECT count\n(*) FROM orders;",
    "non-ASCII collation": "SELECT name FROM employees ORDER BY name COLLATE ²;",
    "25-character type name": f"SELECT CAST(id AS {ALIAS_24}b) FROM employees;",
    "select without FROM": "SELECT name;",
    "count without FROM": "SELECT count(*);",
    # Spider, under Γ: GROUP refused while FROM owed a select-list name, `GRO` became an alias
    "alias that starts GROUP": "SELECT name FROM employees GRO;",
    "alias that starts WHERE": "SELECT wh.name FROM employees AS wh;",
    # Spider, under Γ: ON refused for an unaliased second item of one table, `ON1` an alias
    "alias that is a keyword and more": "SELECT on1.name FROM employees AS on1;",
    # the demo's candidates, under Γ: WHERE refused while FROM owed a select-list name, the
    # model's `WH` went on as an alias (`FROM employees WHO INNER JOIN ...`)
    "word alias after a refused WHERE": "SELECT name FROM employees WHO;",
    "3-letter table alias": "SELECT emp.name FROM employees AS emp;",
    "alias with an underscore": "SELECT de_.name FROM employees AS de_;",
    # Spider: `COLLATE TABLERef_Locations` ran on (SQLite has BINARY, NOCASE and RTRIM only)
    "collation SQLite lacks": "SELECT name FROM employees ORDER BY name COLLATE TABLERef;",
}

ACCEPTED = {
    "plain": "SELECT name FROM employees;",
    "aliases T1": "SELECT T1.name, count(*) AS n FROM employees AS T1 GROUP BY T1.name;",
    "newline and indent": "SELECT name\nFROM employees\n        WHERE dept = 'eng';",
    "24-character column alias": f"SELECT name AS {ALIAS_24} FROM employees;",
    "3-character table alias": "SELECT t12.name FROM employees AS t12;",
    "one-letter table alias": "SELECT e.name FROM employees e;",
    "20-digit number": "SELECT name FROM employees WHERE id = 12345678901234567890;",
    "64-character string": f"SELECT name FROM employees WHERE dept = '{'x' * 62}';",
    "table qualifier": "SELECT employees.name FROM employees;",
    "quoted table qualifier": 'SELECT "employees".name FROM employees;',
    "quoted column the lexicon spells": 'SELECT "name" FROM employees;',
    "one space before (": "SELECT count (*) FROM orders;",
    "CTE": "WITH t AS (SELECT name FROM employees) SELECT name FROM employees;",
    "string with dashes": "SELECT name FROM employees WHERE dept = '--; ';",
    "collation": "SELECT name FROM employees ORDER BY name COLLATE NOCASE;",
    "collation in lower case": "SELECT name FROM employees ORDER BY name COLLATE rtrim;",
    "cast": "SELECT CAST(id AS INTEGER), CAST(name AS VARCHAR(20)) FROM employees;",
}


def _hr_guide(vocab: gr.Vocabulary, profile: gr.GenerationProfile | None) -> gr.Guide:
    return hr_guide(vocab, "analyst", profile)


@cache
def _small(profile: gr.GenerationProfile | None = STRICT) -> gr.Guide:
    return _hr_guide(_small_vocab(), profile)


@cache
def _gpt2(profile: gr.GenerationProfile | None = STRICT) -> gr.Guide:
    return _hr_guide(
        gr.Vocabulary.from_file(asset("tokenizers", "gpt2", "tokenizer.json")), profile
    )


def _accepts(guide: gr.Guide, text: str) -> bool:
    return guide.oracle.accepts(text.encode())


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_profile_refuses_what_the_dialect_accepts(case: str) -> None:
    text = REFUSED[case]
    assert _accepts(_small(None), text), "positive control: the whole language has it"
    assert not _accepts(_small(), text)


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_the_profile_accepts_ordinary_statements(case: str) -> None:
    assert _accepts(_small(), ACCEPTED[case])


def test_comments_can_be_allowed_back() -> None:
    with_comments = _small(gr.GenerationProfile(comments=True))
    assert _accepts(with_comments, REFUSED["line comment"])
    assert _accepts(with_comments, REFUSED["block comment"])
    for still_refused in ("comment after ;", "two spaces", "quoted alias"):
        assert not _accepts(with_comments, REFUSED[still_refused])


def test_word_aliases_and_those_that_start_a_keyword_can_be_allowed_back() -> None:
    words = _small(gr.GenerationProfile(alias_style="word"))
    assert _accepts(words, "SELECT emp.name FROM employees AS emp;")
    assert _accepts(words, "SELECT name FROM employees WHO;")
    assert not _accepts(words, "SELECT name FROM employees GRO;")
    lenient = _small(gr.GenerationProfile(alias_style="word", keyword_prefix_aliases=True))
    assert _accepts(lenient, "SELECT name FROM employees GRO;")
    assert _accepts(lenient, "SELECT wh.name FROM employees AS wh;")
    assert _accepts(lenient, "SELECT on1.name FROM employees AS on1;")
    assert "aliases<=3-tag" in _small().compiled.grammar.name
    assert "aliases<=3-kw" in words.compiled.grammar.name
    assert "aliases<=3," in lenient.compiled.grammar.name


def test_an_unknown_alias_style_is_refused() -> None:
    with pytest.raises(gr.UsageError, match="alias_style"):
        gr.GenerationProfile(alias_style="any")


def test_every_query_block_needs_from_and_can_be_allowed_back() -> None:
    grammar = gr.Grammar.bundled("sqlite")  # no policy: subqueries and compounds are in
    strict = gr.compile(grammar, _small_vocab(), profile=STRICT)
    optional = gr.compile(grammar, _small_vocab(), profile=gr.GenerationProfile(needs_from=False))
    for text in (
        "SELECT 1;",
        "SELECT a FROM t WHERE b IN (SELECT 1);",
        "SELECT a FROM t UNION SELECT 'x';",
        "SELECT (SELECT max(b)) FROM t;",
    ):
        assert _accepts(optional, text), text  # positive control
        assert not _accepts(strict, text), text
    for text in (
        "SELECT a FROM t WHERE b IN (SELECT c FROM u);",
        "SELECT a FROM t UNION SELECT b FROM u;",
    ):
        assert _accepts(strict, text), text
    assert _accepts(_small(gr.GenerationProfile(needs_from=False)), REFUSED["select without FROM"])


def test_the_shortest_completion_of_a_select_list_reads_a_table() -> None:
    guide = _small()
    completion = Completer(guide.oracle).complete(
        guide.oracle.feed(guide.oracle.initial, b"SELECT 1")
    )
    statement = "SELECT 1" + completion.decode()
    assert re.search(r"\bFROM\b", statement, re.IGNORECASE), statement
    assert _accepts(guide, statement)


def test_terminal_indices_are_kept_and_the_fingerprint_changes() -> None:
    dialect = _small(None).compiled.grammar
    profiled = _small().compiled.grammar
    kept = [(t.index, t.name) for t in dialect.terminals]
    assert [(t.index, t.name) for t in profiled.terminals[: len(kept)]] == kept
    assert len(profiled.terminals) > len(kept)  # the refusal twins come after
    assert profiled.fingerprint != dialect.fingerprint
    assert _small().artifacts()["grammar"] != _small(None).artifacts()["grammar"]


def test_the_profile_without_a_policy_or_schema() -> None:
    guide = gr.compile(gr.Grammar.bundled("sqlite"), _small_vocab(), profile=STRICT)
    assert _accepts(guide, "SELECT t.a FROM t;")
    for case in ("line comment", "two spaces", "space after ;", "quoted free qualifier"):
        assert not _accepts(guide, REFUSED[case])


def test_a_spaced_table_qualifies_but_no_other_quoted_name() -> None:
    schema = gr.Schema.from_tables("sqlite", {"Quarterly Results": ["quarter", "revenue"]})
    guide = gr.compile(gr.Grammar.bundled("sqlite"), _small_vocab(), schema=schema, profile=STRICT)
    assert _accepts(guide, 'SELECT "Quarterly Results".revenue FROM "Quarterly Results";')
    assert _accepts(guide, 'SELECT q.revenue FROM "Quarterly Results" AS q;')
    # the runaway: a double-quoted qualifier the model invents
    assert not _accepts(guide, 'SELECT "order_id_quarter_id".revenue FROM "Quarterly Results";')


def test_the_registry_keys_on_the_profile() -> None:
    grammar, registry = gr.Grammar.bundled("sqlite"), Registry()
    strict = shared_role_language(grammar, registry=registry, profile=STRICT)
    assert (
        shared_role_language(grammar, registry=registry, profile=gr.GenerationProfile()) is strict
    )
    others = [
        shared_role_language(grammar, registry=registry, profile=p)
        for p in (None, gr.GenerationProfile(comments=True), gr.GenerationProfile(max_indent=2))
    ]
    fingerprints = {language.fingerprint for language, _, _ in [strict, *others]}
    assert len(fingerprints) == 4


# -- masks


def _configuration(guide: gr.Guide, text: str) -> gr.Configuration:
    return guide.oracle.feed(guide.oracle.initial, text.encode())


def _comment_tokens(guide: gr.Guide, cfg: gr.Configuration) -> list[int]:
    mask = guide.mask(cfg)
    return [t for t in mask.ids() if b"--" in (guide.vocab.token_bytes(t) or b"")]


@pytest.mark.parametrize(
    "prefix", ["", "SELECT name", "SELECT name FROM employees WHERE id = 1", "SELECT count(*)"]
)
def test_no_comment_token_in_the_masks(prefix: str) -> None:
    assert _comment_tokens(_gpt2(None), _configuration(_gpt2(None), prefix)), "positive control"
    assert _comment_tokens(_gpt2(), _configuration(_gpt2(), prefix)) == []


def test_after_the_final_semicolon_only_eos() -> None:
    text = "SELECT name FROM employees;"
    whole = _gpt2(None).mask(_configuration(_gpt2(None), text))
    assert set(whole.ids()) > set(_gpt2().vocab.eos_token_ids)  # positive control: layout
    assert set(_gpt2().mask(_configuration(_gpt2(), text)).ids()) == set(
        _gpt2().vocab.eos_token_ids
    )


SPEC_STATEMENTS = [
    ACCEPTED["aliases T1"],
    ACCEPTED["newline and indent"],
    ACCEPTED["24-character column alias"],
    ACCEPTED["one space before ("],
    "SELECT CAST(total AS INTEGER) FROM orders WHERE placed_on > '2026-03-01';",
]


@pytest.mark.parametrize("role", ["analyst", "auditor"])
def test_fast_equals_spec_on_every_prefix_small_vocabulary(role: str) -> None:
    """Both roles' qualifiers spell other tables, and the dialect's walks went first: the
    cross-role (T2) cache they all share serves none of them a wrong walk."""
    _small(None).mask(_small(None).oracle.initial)
    guide = _small() if role == "analyst" else _small_auditor()
    for text in SPEC_STATEMENTS:
        for k in range(len(text) + 1):  # ASCII: a character is a byte
            cfg = _configuration(guide, text[:k])
            fast, spec = guide.mask(cfg), spec_mask(guide.oracle, guide.vocab, cfg)
            assert fast == spec, f"divergence after {text[:k]!r}"


@cache
def _small_auditor() -> gr.Guide:
    return hr_guide(_small_vocab(), "auditor", STRICT, gr.Schema.from_tables("sqlite", HR_TABLES))


def test_fast_equals_spec_on_sampled_steps_gpt2() -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(asset("tokenizers", "gpt2", "tokenizer.json")))
    guide = _gpt2()
    steps = [
        (ids, k)
        for ids in (tokenizer.encode(s).ids for s in SPEC_STATEMENTS)
        for k in range(len(ids) + 1)
    ]
    m = guide.matcher()
    for ids, k in random.Random(5).sample(steps, 16):
        m.reset()
        assert m.accept_tokens(ids[:k])
        fast, spec = (
            guide.mask(m.configuration),
            spec_mask(guide.oracle, guide.vocab, m.configuration),
        )
        assert fast == spec, f"divergence at step {k} of {ids}"
        assert ids[k] in fast if k < len(ids) else guide.vocab.eos_token_id in fast


# -- walks: generations under the profile


_QUOTED = re.compile(rb"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`(?:[^`]|``)*`|\[[^\]]*\]")


def _outside_quotes(text: bytes) -> bytes:
    return _QUOTED.sub(b"'", text)


def _profile_breaches(text: bytes) -> list[str]:
    """What of the strict profile `text` breaks, read with regexes of its own (not the grammar)."""
    bare = _outside_quotes(text)
    breaches = []
    if b"--" in bare or b"/*" in bare:
        breaches.append("comment")
    for run in re.findall(rb"[ \t\r\n\f]+", bare):
        if run != b" " and not re.fullmatch(rb"\n {0,8}", run):
            breaches.append(f"layout {run!r}")
    if not bare.endswith(b";") or bare.count(b";") != 1:
        breaches.append("not ending at its only ;")
    breaches += [f"long name {n!r}" for n in _LONG_NAME.findall(bare)]
    return breaches


_LONG_NAME = re.compile(rb"(?<![A-Za-z0-9_$])[A-Za-z_][A-Za-z0-9_$]{24,}")


def _walk_texts(guide: gr.Guide, generations: int, seed: int, finish_rate: float) -> list[bytes]:
    rng = random.Random(seed)
    reserve = len(guide.matcher().completion())
    texts = []
    for n in range(generations):
        budget = reserve if n % 5 == 0 else rng.randint(reserve, reserve + 40)
        gen = generate(guide, rng, budget, finish_rate=finish_rate)
        assert len(gen.tokens) <= budget and guide.is_eos(gen.tokens[-1])
        texts.append(b"".join(guide.vocab.token_bytes(t) for t in gen.tokens[:-1]))
    return texts


def test_walk_arm_generations_are_profile_sentences() -> None:
    guide = _small()
    texts = _walk_texts(guide, 60, seed=3, finish_rate=0.0)
    for text in texts:
        assert guide.oracle.accepts(text), f"not a sentence: {text!r}"
        assert _small(None).oracle.accepts(text), f"not in the dialect: {text!r}"
        assert _profile_breaches(text) == [], text
    # positive control: the same walks in the whole language break the profile
    whole = _walk_texts(_small(None), 20, seed=3, finish_rate=0.0)
    breaches = [b.split(" ")[0] for text in whole for b in _profile_breaches(text)]
    assert {"comment", "layout"} <= set(breaches), breaches


def test_walk_arm_gpt2_generations_end_at_the_semicolon() -> None:
    guide = _gpt2()
    for text in _walk_texts(guide, 4, seed=4, finish_rate=0.2):
        assert guide.oracle.accepts(text) and _profile_breaches(text) == [], text


@pytest.mark.parametrize("role", ["clerk", "manager", "admin"])
def test_every_role_compiles_under_the_profile(role: str) -> None:
    """Still LALR(1) (compile_grammar raises GrammarConflict otherwise), and the shortest
    sentence obeys the profile."""
    language, _, _ = role_language(
        gr.Grammar.bundled("sqlite"),
        gr.Policy.from_file(EXAMPLES / "hr_policy.toml"),
        role,
        gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite"),
        profile=STRICT,
    )
    oracle = gr.Oracle(gr.compile_grammar(language))
    shortest = Completer(oracle).complete(oracle.initial)
    assert oracle.accepts(shortest) and _profile_breaches(shortest) == [], shortest


def test_a_role_that_may_call_no_function() -> None:
    """Its function lexicons are empty (no function terminal has a lexeme): nothing to narrow."""
    policy = gr.Policy.from_text("[roles.plain]\nstatements = ['select']\nfunctions = []\n")
    schema = gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite")
    grammar = gr.Grammar.bundled("sqlite")
    language, _, _ = role_language(grammar, policy, "plain", schema, profile=STRICT)
    catalogue = gr.ConstructCatalogue.for_grammar(grammar)
    assert set(catalogue.function_terminals) <= language.declared
    oracle = gr.Oracle(gr.compile_grammar(language))
    assert oracle.accepts(b"SELECT name FROM employees;")
    assert not oracle.accepts(b"SELECT count(*) FROM employees;")


@pytest.mark.parametrize("prefix", ["WITH ", "SELECT name\n        ", "SELECT count ("])
def test_a_completion_after_pending_layout_adds_none(prefix: str) -> None:
    """One more space after a pending space (or a full indent) would be refused: the completer
    must write the rest without a leading separator."""
    guide = _small()
    rest = guide.completer.complete(_configuration(guide, prefix))
    assert guide.oracle.accepts(prefix.encode() + rest), rest


def test_the_reserve_is_a_profile_sentence() -> None:
    for guide in (_small(), _gpt2()):
        completion = guide.matcher().completion()
        text = b"".join(guide.vocab.token_bytes(t) for t in completion[:-1])
        assert guide.oracle.accepts(text) and _profile_breaches(text) == [], text


# -- audit


def test_profile_generations_replay(tmp_path: Path) -> None:
    guide = _small()
    artifacts = save_guide(guide, tmp_path / "profile")
    rng = random.Random(11)
    for budget in (len(guide.matcher().completion()), 30, 50):
        log = audited_generation(guide, rng, budget)
        assert replay(log, tmp_path / "profile") == len(log.records)
    save_guide(_small(None), tmp_path / "dialect")  # same vocabulary and lexicons, other grammar
    with pytest.raises(MissingArtifactError, match=artifacts["grammar"]):
        replay(log, tmp_path / "dialect")


# -- the catalogue's [generation] section


def _catalogue_text() -> str:
    from importlib import resources

    return resources.files("gridrail.grammars").joinpath("sqlite.constructs.toml").read_text()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('layout = "WS"', 'layout = "SPACE"'), "'SPACE' is not a terminal"),
        (('layout = "WS"', 'layout = "STRING"'), "STRING is not ignored"),
        (
            ('"COLLATION_NAME"]', '"COLLATION_NAME", "TABLE_NAME"]'),
            "TABLE_NAME is a lexicon category",
        ),
        (('["TABLE_ALIAS"]', '["COLUMN_NAME"]'), "not one of generation.invented_names"),
        (('"WINDOW_1_3",\n]', '"WINDOW_1_3", "STRING"]'), "does not end with opening_suffix"),
        (("qualifier_suffix = ", 'qualifier_suffix = "x"\n#'), "does not end with qualifier"),
        (('["literal: DQ_STRING"]', '["literal: NOPE"]'), "matches no production"),
        (('terminator = "SEMICOLON"', 'terminator = ";"'), "';' is not a terminal"),
        (('"from_clause"]', '"nope"]'), "'nope' is not a rule"),
        (('["select_core", "from_clause"]', '["select_core"]'), "must be [] or [rule, clause]"),
        (('["select_core", "from_clause"]', '["set_quantifier", "from_clause"]'), "no production"),
        (('terminator = "SEMICOLON"\n', ""), "must give exactly"),
        (("{ COLLATION_NAME =", "{ TABLE_NAME ="), "TABLE_NAME is not one of generation.invented"),
        (('["BINARY", "NOCASE", "RTRIM"]', "[]"), "must list the words"),
    ],
)
def test_generation_section_names_are_checked(edit: tuple[str, str], message: str) -> None:
    grammar = gr.Grammar.bundled("sqlite")
    text = _catalogue_text()
    assert edit[0] in text
    with pytest.raises(gr.PolicyError, match=re.escape(message)):
        ConstructCatalogue.from_text(text.replace(edit[0], edit[1], 1), grammar, "edited.toml")


def test_a_catalogue_without_a_generation_section_refuses_a_profile() -> None:
    grammar = gr.Grammar.bundled("sqlite")
    text = _catalogue_text()
    catalogue = ConstructCatalogue.from_text(
        text[: text.index("[generation]")], grammar, "no-generation.toml"
    )
    assert role_language(grammar, catalogue=catalogue)[0].productions  # fine without a profile
    with pytest.raises(gr.PolicyError, match=r"no \[generation\] section"):
        role_language(grammar, catalogue=catalogue, profile=STRICT)


TINY = r"""
start: literal item ";"
literal: DQ_STRING
item: WORD ALIAS | QUALIFIER WORD | CALL ")"
DQ_STRING: /"[^"]*"/
WORD: /w+/
ALIAS: /[A-Za-z_][A-Za-z0-9_]*/
QUALIFIER: /[A-Za-z_][A-Za-z0-9_]*\./
CALL: /f[ ]*\(/
WS: /[ \n]+/
COMMENT: /--[^\n]*/
%ignore WS
%ignore COMMENT
"""
TINY_GENERATION = r"""
dialect = "sqlite"
[generation]
layout = "WS"
comments = ["COMMENT"]
invented_names = ["ALIAS"]
table_aliases = []
numbers = []
strings = []
qualifier = "QUALIFIER"
qualifier_suffix = '\.'
openings = ["CALL"]
opening_suffix = '[ ]*\('
double_quoted_strings = ["literal: DQ_STRING"]
needs_from = []
terminator = "SEMICOLON"
"""


def test_a_profile_that_empties_the_language_is_a_policy_error() -> None:
    grammar = gr.Grammar.from_lark(TINY, "tiny.lark")
    catalogue = ConstructCatalogue.from_text(TINY_GENERATION, grammar, "tiny.toml")
    assert role_language(grammar, catalogue=catalogue)[0].productions
    with pytest.raises(gr.PolicyError, match="under the generation profile"):
        role_language(grammar, catalogue=catalogue, profile=STRICT)


def test_a_narrowing_outside_the_terminal_is_a_grammar_error() -> None:
    grammar = gr.Grammar.from_lark(
        TINY.replace("/[A-Za-z_][A-Za-z0-9_]*/", "/[a-z]+/"), "tiny.lark"
    )
    catalogue = ConstructCatalogue.from_text(TINY_GENERATION, grammar, "tiny.toml")
    # the profile's bare names have capitals and digits; this grammar's ALIAS does not
    with pytest.raises(gr.GrammarError, match="ALIAS spells 'A'"):
        role_language(grammar, catalogue=catalogue, profile=STRICT)


def test_profile_fields_are_checked() -> None:
    for bad in (
        {"max_indent": -1},
        {"max_name_length": 0},
        {"max_indent": 2.0},
        {"max_alias_length": 0},
        {"max_string_length": 1},
    ):
        with pytest.raises(gr.UsageError):
            gr.GenerationProfile(**bad)
    narrow = _hr_guide(
        _small_vocab(), gr.GenerationProfile(max_indent=2, max_name_length=3, max_alias_length=2)
    )
    assert _accepts(narrow, "SELECT t1.name AS abc\n  FROM employees AS t1;")
    assert not _accepts(narrow, "SELECT name\n   FROM employees;")
    assert not _accepts(narrow, "SELECT name AS abcd FROM employees;")
    assert not _accepts(narrow, "SELECT name FROM employees AS t12;")


def test_a_full_length_alias_a_keyword_takes_is_not_a_dead_end() -> None:
    # Found by bench/ask_example.py: `FROM ( ( ( ( [Employees]\n      AND` was allowed (AND a
    # prefix of a 3-character TABLE_ALIAS), yet no ending exists: AND cannot grow past the
    # alias bound and the keyword shadows it, so `gridrail ask` crashed in the reserve
    # (CompletionError). At full length the words keywords take are not aliases.
    guide = _small(gr.GenerationProfile(alias_style="word"))
    oracle = guide.oracle
    crashed = b"SELECT name FROM (\n  (\n  (\n    (\n      [Employees]\n      AND"
    assert oracle.try_feed(oracle.initial, crashed) is None
    for word in (b"AND", b"and", b"SET", b"ALL"):
        assert oracle.try_feed(oracle.initial, b"SELECT id FROM employees " + word) is None
    for word in (b"AN", b"ANA", b"e", b"T1"):  # other aliases stay, and every one completes
        cfg = oracle.try_feed(oracle.initial, b"SELECT id FROM employees " + word)
        assert cfg is not None
        assert guide.completer.complete(cfg)


def test_a_tag_alias_always_completes_and_no_keyword_is_one() -> None:
    guide = _small()  # the default profile: tags
    oracle = guide.oracle
    for word in (b"e", b"T1", b"t12", b"o2"):
        cfg = oracle.try_feed(oracle.initial, b"SELECT id FROM employees " + word)
        assert cfg is not None, word
        assert guide.completer.complete(cfg)
    for word in (b"AN", b"WHO", b"t123", b"e_", b"1t"):
        assert oracle.try_feed(oracle.initial, b"SELECT id FROM employees " + word) is None, word


def test_an_opening_suffix_narrower_than_the_profiles_is_refused() -> None:
    """The profile writes a word's "(" as ` ?\\(`, which stays inside the terminal only while
    the catalogue's opening_suffix spells " (" and "(": one that spells only "(" is refused
    (the per-terminal check this one check replaces would have found ' (' too)."""
    grammar = gr.Grammar.bundled("sqlite")
    text = _catalogue_text().replace(
        "opening_suffix = '[ \\t\\r\\n]*\\('", "opening_suffix = '\\('", 1
    )
    assert "opening_suffix = '\\('" in text
    catalogue = ConstructCatalogue.from_text(text, grammar, "edited.toml")
    with pytest.raises(gr.GrammarError, match="opening_suffix"):
        role_language(grammar, catalogue=catalogue, profile=STRICT)
