"""Robustness (security review, findings D1–D5 and the raw-exception list): every input a user
controls — a grammar, a regex, SQL, token ids, a tokenizer file, an audit log, an archive, the
command line — ends in a `GridrailError` subclass with an actionable message, in bounded time
and memory; nesting depth costs time, never Python's call stack.

Work that could hang or exhaust memory on a regression runs in a child process under a time
limit and an address-space limit (`isolated`), so it fails the test instead of the machine;
work that is only slow runs here under an alarm (`deadline`)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import struct
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import gridrail as gr
from gridrail.archive import AlteredArtifactError, artifact_path, load_guide, save_guide
from gridrail.audit import AuditError, AuditLog, replay
from gridrail.cli import main
from gridrail.grammar.dfa import compile_regex
from gridrail.parse.tree import parse_tree
from gridrail.vocab import ByteCompletenessWarning, VocabularyError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SQLITE = gr.Grammar.bundled("sqlite")

CHILD_TIMEOUT_S = 120  # what a child gets before the bound it tests counts as broken
CHILD_MEMORY = 3 << 30  # address space of a child: a regression fails there, not the machine

_CHILD = """
import json, resource, sys, warnings
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
warnings.simplefilter("ignore")
import gridrail as gr
try:
    exec(sys.argv[1], {"gr": gr})
    outcome = {"returned": True}
except gr.GridrailError as exc:
    outcome = {"error": type(exc).__name__, "message": str(exc)}
except BaseException as exc:
    outcome = {"raw": type(exc).__name__, "message": str(exc)[:300]}
print(json.dumps(outcome))
"""


def isolated(code: str) -> dict:
    """Run `code` (with `gr` imported) in a child; what it raised, as {"error", "message"}."""
    try:
        run = subprocess.run(
            [sys.executable, "-c", _CHILD, code, str(CHILD_MEMORY)],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {CHILD_TIMEOUT_S} s: {code[:200]}")
    if run.returncode != 0:
        pytest.fail(f"the child died (exit {run.returncode}): {run.stderr[-1000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def expect_error(outcome: dict, kind: str, *fragments: str) -> str:
    assert outcome.get("error") == kind, outcome
    for fragment in fragments:
        assert fragment in outcome["message"], outcome
    return outcome["message"]


class _Overtime(Exception):
    pass


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (rather than hang) if the block runs longer than `seconds`."""

    def expire(signum: int, frame: object) -> None:
        raise _Overtime(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _byte_vocab() -> gr.Vocabulary:
    """Every single byte, and an EOS."""
    return gr.Vocabulary([bytes((b,)) for b in range(256)] + [None], eos_token_ids=256)


def _run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


# -- D1: automata that blow up --------------------------------------------------------------


def test_a_dfa_blowup_is_a_regex_error_naming_the_terminal() -> None:
    code = 'gr.compile_grammar(gr.Grammar.from_lark("start: A\\nA: /(a|b)*a(a|b){20}/\\n"))'
    message = expect_error(isolated(code), "RegexError", "terminal A", "DFA")
    assert len(message) < 400


def test_terminals_that_multiply_in_the_scanner_are_refused() -> None:
    periods = (2, 3, 5, 7, 11, 13, 17, 19, 23)  # alone tiny; their union has 223092870 states
    text = "start: " + " | ".join(f"T{p}" for p in periods) + "\n"
    text += "".join(f"T{p}: /(a{{{p}}})+/\n" for p in periods)
    code = f"gr.compile_grammar(gr.Grammar.from_lark({text!r}))"
    expect_error(isolated(code), "GrammarError", "scanner")


def test_messages_quote_an_excerpt_of_a_long_pattern() -> None:
    pattern = "a" * 200_000 + ")"  # unbalanced at the very end
    with pytest.raises(gr.RegexError, match="at position 200000") as caught:
        compile_regex(pattern)
    assert len(str(caught.value)) < 400
    assert "of 200001" in str(caught.value)  # it says which characters it shows


# -- D2: nesting depth in statements --------------------------------------------------------


def _deep_statements(depth: int) -> list[bytes]:
    return [
        b"SELECT name FROM employees WHERE " + b"NOT " * depth + b"1;",
        b"SELECT " + b"(" * depth + b"1" + b")" * depth + b";",
    ]


# The engine's own robustness: the dialect's stack bound (sqlite.stack.toml) refuses these past
# depth ~90, as SQLite does (tests/test_stack_bound.py), so they run on the grammar without it —
# as a grammar loaded from a file has none.
UNBOUNDED = replace(SQLITE, stack_bound=None)
SQLITE_FILE = str(resources.files("gridrail.grammars").joinpath("sqlite.lark"))


@pytest.mark.parametrize("depth", [1_000, 10_000])
def test_deep_nesting_costs_time_not_the_call_stack(depth: int) -> None:
    guide = gr.compile(UNBOUNDED, _byte_vocab())
    oracle = guide.oracle
    with deadline(120):
        for statement in _deep_statements(depth):
            cfg = oracle.feed(oracle.initial, statement)
            assert oracle.eos_ok(cfg)
            tree = parse_tree(guide.compiled, statement)
            assert sum(1 for _ in tree.tokens()) > depth
            assert guide.check(statement.decode()) == []
            half = oracle.feed(oracle.initial, statement[: len(statement) // 2])
            assert oracle.accepts(statement[: len(statement) // 2] + guide.completer.complete(half))


def test_deep_nesting_through_the_matcher_and_the_command_line(tmp_path: Path) -> None:
    guide = gr.compile(UNBOUNDED, _byte_vocab())
    statement = b"SELECT name FROM employees WHERE " + b"NOT " * 3_000 + b"1;"
    with deadline(120):
        matcher = guide.matcher(max_tokens=len(statement) + 8)  # keeps a completion in reach
        assert matcher.accept_tokens(list(statement[:-2]))
        assert matcher.completion()[-1] == guide.vocab.eos_token_id
        assert matcher.accept_tokens([*statement[-2:], guide.vocab.eos_token_id])
        lines = tmp_path / "deep.sql"
        lines.write_bytes(statement + b"\n")
        assert _run_cli("parse", "--grammar", SQLITE_FILE, str(lines)) == (
            0,
            "1 accepted, 0 rejected\n",
        )
        code, text = _run_cli("explain", "--grammar", SQLITE_FILE, statement.decode())
        assert code == 0 and "EOS legal: yes" in text


# -- D3: nesting depth in grammars and regexes ----------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "start: " + "(" * 3_000 + '"a"' + ")" * 3_000 + "\n",
        'start: "b" ' + "[" * 3_000 + '"a"' + "]" * 3_000 + "\n",
        "start: A\nA: " + "(" * 3_000 + '"a"' + ")" * 3_000 + "\n",
    ],
    ids=["groups", "optionals", "terminal groups"],
)
def test_deeply_nested_grammar_expressions_are_refused(text: str) -> None:
    with pytest.raises(gr.GrammarError, match="nest more than 100 deep"):
        gr.Grammar.from_lark(text)


def test_deeply_nested_regex_groups_are_refused() -> None:
    text = "start: A\nA: /" + "(" * 2_000 + "a" + ")" * 2_000 + "/\n"
    with pytest.raises(gr.RegexError, match=r"terminal A: groups nest 2000 deep; at most 100"):
        gr.compile_grammar(gr.Grammar.from_lark(text))
    with pytest.raises(gr.RegexError, match="nest"):
        compile_regex("(?:" * 2_000 + "a" + ")" * 2_000)


def test_a_long_chain_of_terminal_references_is_refused() -> None:
    text = "start: T0\n" + "".join(f"T{i}: T{i + 1}\n" for i in range(3_000)) + 'T3000: "a"\n'
    with pytest.raises(gr.GrammarError, match="terminal T0 nests groups and terminal references"):
        gr.Grammar.from_lark(text)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            'start: A40\nA0: "a"\n' + "".join(f"A{i + 1}: A{i} A{i}\n" for i in range(40)),
            "regex of more than",
        ),
        ("start: " + " ".join(f'["a{i}"]' for i in range(40)) + ' "z"\n', "alternatives"),
        ('start: ("a" | "b") ~ 0..50\n', "alternatives"),
    ],
    ids=["doubling terminals", "optionals", "bounded repeat"],
)
def test_grammars_whose_expansion_explodes_are_refused(text: str, fragment: str) -> None:
    expect_error(isolated(f"gr.Grammar.from_lark({text!r})"), "GrammarError", fragment)


# -- D4: deeply nested JSON -----------------------------------------------------------------

DEEP_JSON = "[" * 100_000 + "]" * 100_000


def test_a_deeply_nested_audit_line_is_an_audit_error() -> None:
    with pytest.raises(AuditError, match="line 2 nests JSON too deeply"):
        AuditLog.parse(['{"type": "record"}', DEEP_JSON])


@pytest.fixture
def archive(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    guide = gr.compile(gr.Grammar.from_lark('start: "a"+ ";"\n'), _byte_vocab())
    return tmp_path, save_guide(guide, tmp_path)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("grammar", DEEP_JSON),
        ("grammar", "[1, 2]"),
        ("grammar", '"a string"'),
        ("vocabulary", DEEP_JSON),
    ],
    ids=["deep grammar", "grammar list", "grammar string", "deep vocabulary"],
)
def test_a_malformed_archive_file_is_an_archive_error_naming_it(
    archive: tuple[Path, dict[str, str]], name: str, content: str
) -> None:
    directory, artifacts = archive
    path = artifact_path(directory, name, artifacts[name])
    path.write_text(content, encoding="utf-8")
    log = AuditLog()
    log.seal("eos", artifacts)
    with pytest.raises(AlteredArtifactError, match=re.escape(str(path))):
        replay(log, directory)  # an AttributeError for a JSON list, once
    with pytest.raises(AlteredArtifactError, match=re.escape(str(path))):
        load_guide(directory, artifacts)


def test_a_canonical_grammar_of_another_shape_is_a_grammar_error() -> None:
    canonical = json.loads(SQLITE.canonical_form())
    for broken in ([], {**canonical, "terminals": [[0, 1, 2, 3, 4, 5]]}, {**canonical, "start": 5}):
        with pytest.raises(gr.GrammarError, match="not a canonical grammar"):
            gr.Grammar.from_canonical(json.dumps(broken))


def _tokenizer_json(vocab: dict[str, object], added: list[dict] | None = None) -> dict:
    return {
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": added or [],
    }


def _write_json(path: Path, doc: object) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def test_deeply_nested_tokenizer_files_are_vocabulary_errors(tmp_path: Path) -> None:
    tokenizer = _write_json(tmp_path / "tokenizer.json", DEEP_JSON)
    with pytest.raises(VocabularyError, match=f"{re.escape(str(tokenizer))}.*nests too deeply"):
        gr.Vocabulary.from_file(tokenizer)
    _write_json(tokenizer, _tokenizer_json({"a": 0, "b": 1}, [{"id": 2, "content": "<e>"}]))
    config = _write_json(tmp_path / "tokenizer_config.json", DEEP_JSON)
    with pytest.raises(VocabularyError, match=f"{re.escape(str(config))}.*nests too deeply"):
        gr.Vocabulary.from_file(tokenizer)


def _gguf(entries: list[bytes]) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(entries)


def _gguf_key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


def test_deeply_nested_gguf_arrays_are_a_vocabulary_error(tmp_path: Path) -> None:
    depth = 5_000
    nested = struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * depth + struct.pack("<IQ", 4, 0)
    path = tmp_path / "deep.gguf"
    path.write_bytes(_gguf([_gguf_key("general.nested") + nested]))
    with pytest.raises(VocabularyError, match="nests arrays more than"):
        gr.Vocabulary.from_gguf(path)


# -- D5: token ids a file gets wrong ---------------------------------------------------------


def test_a_huge_token_id_is_a_vocabulary_error(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "tokenizer.json", _tokenizer_json({"a": 0, "b": 10**9}))
    code = f"gr.Vocabulary.from_file({str(path)!r}, eos_token_ids=[0])"
    expect_error(isolated(code), "VocabularyError", "token id 1000000000", "unassigned")
    code = "gr.Vocabulary([b'a'], eos_token_ids=[0], size=10**9)"
    expect_error(isolated(code), "VocabularyError", "size=1000000000")
    code = """
class Encoding:
    name = "huge"
    _special_tokens = {"<|endoftext|>": 0}
    _mergeable_ranks = {b"a": 1, b"b": 10**9}
gr.Vocabulary.from_tiktoken(Encoding())
"""
    expect_error(isolated(code), "VocabularyError", "token id 1000000000")


@pytest.mark.parametrize(
    ("vocab", "added", "fragment"),
    [
        ({"a": 0, "b": 1.0}, None, "id 1.0"),
        ({"a": 0, "b": 1.5}, None, "id 1.5"),
        ({"a": 0, "b": "1"}, None, "id '1'"),
        ({"a": 0, "b": True}, None, "id True"),
        ({"a": 0, "b": -1}, None, "negative id -1"),
        ({"a": 0, "b": 0}, None, "token id 0 is given to two tokens, 'a' and 'b'"),
        ({"a": 0}, [{"id": 1.0, "content": "<e>"}], "id 1.0"),
        ({"a": 0}, [{"id": 1, "content": "<e>"}, {"id": 1, "content": "<f>"}], "added twice"),
        ({"a": 0}, [{"id": 1, "content": 5}], "string 'content'"),
    ],
)
def test_token_ids_must_be_distinct_integers(
    tmp_path: Path, vocab: dict, added: list | None, fragment: str
) -> None:
    path = _write_json(tmp_path / "tokenizer.json", _tokenizer_json(vocab, added))
    with pytest.raises(VocabularyError, match=f"^{re.escape(str(path))}: .*{re.escape(fragment)}"):
        gr.Vocabulary.from_file(path, eos_token_ids=[0])


def test_tiktoken_ranks_must_be_distinct_integers() -> None:
    class Encoding:
        name = "duplicated"
        _special_tokens = {"<|endoftext|>": 2}  # noqa: RUF012
        _mergeable_ranks = {b"a": 0, b"b": 0}  # noqa: RUF012

    with pytest.raises(VocabularyError, match="rank 0 is given to two tokens"):
        gr.Vocabulary.from_tiktoken(Encoding())
    Encoding._mergeable_ranks = {b"a": 0, b"b": 1.0}
    with pytest.raises(VocabularyError, match=r"id 1\.0"):
        gr.Vocabulary.from_tiktoken(Encoding())


def test_a_gguf_eos_id_of_another_type_is_refused(tmp_path: Path) -> None:
    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text.encode())) + text.encode()

    tokens = ["a", "b", "</s>"]
    entries = [
        _gguf_key("tokenizer.ggml.model") + struct.pack("<I", 8) + string("gpt2"),
        _gguf_key("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", 9, 8, len(tokens))
        + b"".join(map(string, tokens)),
        _gguf_key("tokenizer.ggml.eos_token_id") + struct.pack("<I?", 7, True),  # a bool
    ]
    path = tmp_path / "bool.gguf"
    path.write_bytes(_gguf(entries))
    with pytest.raises(VocabularyError, match="eos_token_id = True is not a token id"):
        gr.Vocabulary.from_gguf(path)


# -- raw exceptions that were not gridrail errors -------------------------------------------


def test_non_utf8_files_and_arguments(tmp_path: Path) -> None:
    grammar = tmp_path / "latin1.lark"
    grammar.write_bytes(b'start: "caf\xe9"\n')
    with pytest.raises(gr.GrammarError, match=r"latin1.lark:1:12: .*not UTF-8 .* at byte 11"):
        gr.Grammar.from_file(grammar)
    lines = tmp_path / "lines.sql"
    lines.write_bytes(b"SELECT 1;\n")
    code, _ = _run_cli("parse", "--grammar", str(grammar), str(lines))
    assert code == 2  # a one-line error, not a traceback

    policy = tmp_path / "policy.toml"
    policy.write_bytes(b'[roles.caf\xe9]\nstatements = ["select"]\n')
    with pytest.raises(gr.PolicyError, match="not UTF-8"):
        gr.Policy.from_file(policy)

    lines.write_bytes(b"SELECT name FROM employees;\nSELECT 'caf\xff';\n")
    code, text = _run_cli("parse", str(lines))
    assert code == 1 and text.endswith("1 accepted, 1 rejected\n")
    assert "line 2: rejected at byte 11" in text

    raw_argument = b"SELECT '\xff".decode("utf-8", "surrogateescape")  # as argv holds it
    assert _run_cli("explain", raw_argument)[1].startswith("viable: no (first error at byte 8)")


def test_a_code_point_beyond_unicode_is_a_grammar_error() -> None:
    with pytest.raises(gr.GrammarError, match="beyond U\\+10FFFF"):
        gr.Grammar.from_lark('start: "\\U00110000"\n')


def test_a_lone_surrogate_token_is_a_vocabulary_error(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(_tokenizer_json({"a": 0, "\ud800": 1})), encoding="utf-8")
    with pytest.raises(VocabularyError, match=r"token 1 .*lone surrogate U\+D800"):
        gr.Vocabulary.from_file(path, eos_token_ids=[0])
    added = [{"id": 2, "content": "x\udfff"}]
    path.write_text(json.dumps(_tokenizer_json({"a": 0}, added)), encoding="utf-8")
    with pytest.raises(VocabularyError, match=r"token 2 .*lone surrogate U\+DFFF"):
        gr.Vocabulary.from_file(path, eos_token_ids=[0])


def test_a_vocabulary_that_cannot_begin_a_sentence_is_refused_at_compile() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ByteCompletenessWarning)
        eos_only = gr.Vocabulary([None], eos_token_ids=0)
        no_beginning = gr.Vocabulary([b")", b",", None], eos_token_ids=2)
    for vocab in (eos_only, no_beginning):
        with pytest.raises(VocabularyError, match=r"can begin a sentence of sqlite\.lark"):
            gr.compile(SQLITE, vocab)
    # EOS alone is an output where the empty statement is a sentence
    gr.compile(gr.Grammar.from_lark('start: "a"*\n'), eos_only)


def test_an_unknown_dialect_is_a_schema_error() -> None:
    with pytest.raises(gr.SchemaError, match=r"'oracle' \(known: duckdb, postgres, sqlite\)"):
        gr.Schema.from_tables("oracle", {"t": ["a"]})


@pytest.fixture(scope="module")
def guide() -> gr.Guide:
    return gr.compile(SQLITE, _byte_vocab())


@pytest.mark.parametrize("sql", [b"SELECT 1;", None, 5])
def test_check_takes_text(guide: gr.Guide, sql: object) -> None:
    with pytest.raises(gr.UsageError, match="check takes the statement as a str") as caught:
        guide.check(sql)  # type: ignore[arg-type]
    assert isinstance(caught.value, TypeError)  # what a caller written for TypeError catches


def test_a_lone_surrogate_in_sql_is_outside_the_language(guide: gr.Guide) -> None:
    [violation] = guide.check("SELECT '\ud800';")  # ED A0 80: no UTF-8 lead byte ED takes A0
    assert violation.kind == "outside_language" and violation.start == 9


@pytest.mark.parametrize(
    "ids", [[1.5], ["5"], [True], [np.bool_(True)], "5", 5, [10**6], [-1]], ids=repr
)
def test_token_ids_are_integers_of_the_vocabulary(guide: gr.Guide, ids: object) -> None:
    matcher = guide.matcher()
    with pytest.raises(gr.UsageError):
        matcher.accept_tokens(ids)  # type: ignore[arg-type]
    with pytest.raises(gr.UsageError):
        matcher.validate_tokens(ids)  # type: ignore[arg-type]
    assert matcher.num_accepted == 0


def test_numpy_token_ids_are_accepted(guide: gr.Guide) -> None:
    matcher = guide.matcher(max_tokens=np.int64(32))
    ids = np.frombuffer(b"SELECT 1;", dtype=np.uint8).astype(np.int64)
    assert matcher.validate_tokens(ids) == list(b"SELECT 1;")
    assert matcher.accept_tokens(ids)
    assert matcher.accept_tokens([np.int32(guide.vocab.eos_token_id)])
    assert all(type(token) is int for token in matcher.accepted_tokens())


@pytest.mark.parametrize("max_tokens", [10.5, "10", True])
def test_max_tokens_is_an_integer(guide: gr.Guide, max_tokens: object) -> None:
    with pytest.raises(gr.UsageError, match="max_tokens must be an integer"):
        guide.matcher(max_tokens=max_tokens)  # type: ignore[arg-type]


def test_other_matcher_arguments(guide: gr.Guide) -> None:
    matcher = guide.matcher()
    with pytest.raises(gr.UsageError, match="kind must be one of"):
        matcher.accept_tokens([83], kind="rollback")
    with pytest.raises(gr.UsageError, match="num_tokens must be an integer"):
        matcher.rollback(0.5)  # type: ignore[arg-type]
    with pytest.raises(gr.UsageError, match="NumPy int32 array"):
        matcher.fill_bitmask([[0]])  # type: ignore[arg-type]
    with pytest.raises(gr.UsageError, match="outside the bitmask"):
        matcher.fill_bitmask(gr.allocate_bitmask(1, guide.vocab.size), 3)
    with pytest.raises(gr.UsageError, match="a spelling is bytes or None"):
        gr.Vocabulary(["a", None], eos_token_ids=1)  # type: ignore[list-item]


# -- one hierarchy ---------------------------------------------------------------------------


def test_every_gridrail_error_is_exported() -> None:
    """Every subclass of GridrailError that gridrail's modules define is importable from the
    package (apart from the two that only a gridrail bug raises)."""
    internal = {"CacheKeyConflict", "IdentifierCompositionError"}
    pending = [gr.GridrailError]
    found = set()
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub.__module__.startswith("gridrail."):
                found.add(sub)
                pending.append(sub)
    for cls in found:
        if cls.__name__ not in internal:
            assert getattr(gr, cls.__name__, None) is cls, f"{cls.__name__} is not exported"
            assert cls.__name__ in gr.__all__


def test_deeply_nested_toml_is_a_policy_error() -> None:
    nested = "x = " + "[" * 5000 + "]" * 5000
    with pytest.raises(gr.PolicyError, match="nested too deeply"):
        gr.Policy.from_text(nested)
    with pytest.raises(gr.PolicyError, match="nested too deeply"):
        gr.ConstructCatalogue.from_text(nested, gr.Grammar.bundled("sqlite"), "deep.toml")


@pytest.mark.parametrize("depth", [300, 1_000])
def test_deeply_nested_queries_are_refused_by_the_checker_not_the_call_stack(depth: int) -> None:
    guide = gr.compile(
        UNBOUNDED,  # the checker's own bound, past the language's (tests/test_stack_bound.py)
        _byte_vocab(),
        schema=gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite"),
        policy=gr.Policy.from_file(EXAMPLES / "hr_policy.toml"),
        role="auditor",
        catalogue=gr.ConstructCatalogue.bundled("sqlite", UNBOUNDED),
    )
    n = depth
    statements = [
        "SELECT " + "(SELECT " * n + "1" + ")" * n + " FROM employees;",
        "SELECT * FROM " + "(SELECT * FROM " * n + "employees" + ")" * n + ";",
        "SELECT * FROM " + "(" * n + "employees" + ")" * n + ";",
        "SELECT id FROM employees WHERE id IN "
        + "(SELECT id FROM employees WHERE id IN " * n
        + "(1)"
        + ")" * n
        + ";",
    ]
    with deadline(120):
        for statement in statements:
            kinds = {v.kind for v in guide.check(statement)}
            assert "statement_too_complex" in kinds, statement[:80]
    # a statement within the bound is bound as usual (SQLite's parser overflows near 20)
    shallow = "SELECT " + "(SELECT " * 5 + "salary" + ")" * 5 + " FROM employees;"
    assert [v.kind for v in guide.check(shallow)] == []
