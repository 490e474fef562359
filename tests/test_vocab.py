"""Vocabulary adapters: every token id's byte spelling, EOS ids, alias classes, completeness.

The key property, on the four shared tokenizers: encoding a text with the real `tokenizers`
library and concatenating our `token_bytes` of the ids gives back the text's UTF-8 bytes
(`b" " + text` for llama2, whose SentencePiece normalizer prepends the dummy-prefix space).
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import warnings
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from assets import asset
from gridrail.errors import GridrailError
from gridrail.vocab import ByteCompletenessWarning, Vocabulary, VocabularyError

NAMES = ("gpt2", "qwen2", "llama3", "llama2")

EXPECTED = {
    # name: (size, eos_token_id, eos_token_ids, special ids, dummy prefix)
    "gpt2": (50257, 50256, (50256,), frozenset({50256}), False),
    "qwen2": (151936, 151643, (151643, 151645), frozenset({151643, 151644, 151645}), False),
    "llama3": (128256, 128001, (128001, 128009), frozenset(range(128000, 128256)), False),
    "llama2": (32000, 2, (2,), frozenset({0, 1, 2}), True),
}

# Golden fingerprints: they change only if a spelling convention (or the asset) changes.
FINGERPRINTS = {
    "gpt2": "621fcce87bf5",
    "qwen2": "5fa6126321eb",
    "llama3": "f25cf8f0a2d4",
    "llama2": "040d19dfe9f4",
}

SQL = [
    # the five SQL strings of shared/tokenizers/make_tokenizers.py
    "SELECT name FROM employees;",
    "select e.id, COUNT(*) AS n FROM emp e JOIN dept d ON e.dept_id = d.id WHERE d.name <> 'HR' "
    "GROUP BY e.id HAVING COUNT(*) > 2 ORDER BY n DESC LIMIT 10;",
    "INSERT INTO t (a, b) VALUES (1, 'x''y'), (-2.5e3, NULL);",
    "UPDATE accounts SET balance = balance - 100 WHERE id IN (SELECT id FROM flagged);",
    "  DELETE FROM logs\n\tWHERE ts < 1700000000 AND (level = 'debug' OR level = 'trace');",
    # statements in the style of bench/peers/corpus.sql
    "SELECT * FROM employees",
    "SELECT id, name, salary FROM employees WHERE salary > 1000 ORDER BY salary DESC;",
    "SELECT e.name, d.name FROM employees AS e JOIN departments AS d ON e.dept_id = d.id;",
    "SELECT e.name FROM employees e LEFT OUTER JOIN managers m ON m.id = e.manager_id "
    "WHERE m.id IS NULL;",
    "SELECT dept_id, AVG(salary) AS avg_salary\nFROM employees\nGROUP BY dept_id\n"
    "HAVING AVG(salary) >= 50000;",
    "SELECT name FROM employees WHERE name LIKE 'O''Brien%' ESCAPE '\\';",
    'SELECT "first name", "Official_ratings_(millions)" FROM "weird table";',
    "SELECT  name ,  salary  FROM  employees  WHERE  id = 1 ;",
    "   SELECT 1;",
    "\tSELECT\n\t\tname\n\tFROM\n\t\temployees\n;",
    "SELECT CASE WHEN salary < 1000 THEN 'low' WHEN salary < 5000 THEN 'mid' ELSE 'high' END "
    "FROM employees;",
    "WITH recent AS (SELECT * FROM orders WHERE created_at > DATE('now', '-7 days')) "
    "SELECT COUNT(*) FROM recent;",
    "SELECT COUNT(DISTINCT customer_id) FROM orders WHERE total BETWEEN 10.5 AND 99.99;",
    "SELECT name FROM singer WHERE age > (SELECT AVG(age) FROM singer);",
    "SELECT T1.name FROM stadium AS T1 JOIN concert AS T2 ON T1.stadium_id = T2.stadium_id "
    "WHERE T2.year = 2014 INTERSECT SELECT T1.name FROM stadium AS T1 JOIN concert AS T2 "
    "ON T1.stadium_id = T2.stadium_id WHERE T2.year = 2015",
    "SELECT a FROM t UNION ALL SELECT b FROM u EXCEPT SELECT c FROM v;",
    "SELECT x FROM t WHERE y IN (1, 2, 3) AND z NOT IN ('a', 'b') OR w IS NOT NULL;",
    "SELECT 0x1F, 1e-9, .5, 3., -0, +7 FROM dual;",
    "SELECT name || ' <' || email || '>' AS contact FROM users LIMIT 5 OFFSET 10;",
    "SELECT * FROM t -- trailing comment\nWHERE a = 1 /* block\n comment */ AND b = 2;",
    "SELECT [bracketed col], `backticked` FROM [dbo].[Table];",
    "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT '', x REAL);",
    "DROP TABLE IF EXISTS temp_results;",
    "SELECT name FROM employees WHERE note = 'line one\nline two\ttabbed'  ;",
    "SELECT\r\n  id\r\nFROM t\r\n",
    "select lower(name), upper(city), substr(phone, 1, 3) from customers where rowid % 2 = 0;",
    "SELECT   count(*)   FROM   t   WHERE   a   =   'two  spaces'",
    "SELECT 'trailing spaces'   ",
    "\n\nSELECT 1;\n\n",
    " ",
    "  ",
    "\t",
    "\n",
]

NON_ASCII = [
    "SELECT nom FROM employés WHERE ville = 'Genève';",
    "SELECT * FROM 用户 WHERE 名字 = '张三';",
    "中文字符和标点，还有全角：ＳＱＬ。",
    "SELECT '🙂🚀👩‍💻' AS emoji, '🏳️‍🌈' AS flag;",
    "Привет, мир! SELECT имя FROM сотрудники;",
    "café naïve résumé Ærøskøbing straße",
    "日本語のテキスト と 한국어 텍스트",
    "Ελληνικά: αβγ ΔΕΖ; עברית; العربية",
    "zero\u200bwidth\u00a0nbsp\u2028sep",
    "math: ∑ ∫ √ ≤ ≥ ≠ ∞ — “quotes” ‘single’ …",
    "\U0001d54a\U0001d53c\U0001d543 astral and \U00010348 gothic",
]

CORPUS = SQL + NON_ASCII


# ----- helpers -------------------------------------------------------------------------------


def tokenizer_json(name: str) -> Path:
    return asset("tokenizers", name, "tokenizer.json")


@functools.cache
def _vocab_cached(path: str) -> tuple[Vocabulary, tuple[warnings.WarningMessage, ...]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = Vocabulary.from_file(path)
    return loaded, tuple(caught)


def vocab(name: str) -> Vocabulary:
    return _vocab_cached(str(tokenizer_json(name)))[0]


def load_warnings(name: str) -> list[str]:
    """The warnings `Vocabulary.from_file` gave when `vocab(name)` was loaded."""
    return [str(w.message) for w in _vocab_cached(str(tokenizer_json(name)))[1]]


@functools.cache
def _tokenizer_cached(path: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def hf_tokenizer(name: str):
    pytest.importorskip("tokenizers")
    return _tokenizer_cached(str(tokenizer_json(name)))


def spelled(v: Vocabulary, ids) -> bytes:
    parts = [v.token_bytes(i) for i in ids]
    assert None not in parts, f"an encoded id has no spelling: {ids}"
    return b"".join(parts)


def expected_bytes(name: str, text: str) -> bytes:
    """What the token bytes of `encode(text)` spell: llama2 adds SentencePiece's dummy prefix."""
    prefix = b" " if EXPECTED[name][4] and text else b""
    return prefix + text.encode("utf-8")


def gpt2_byte_table() -> dict[str, int]:
    """GPT-2's unicode character -> byte table, written out here independently of gridrail."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = list(printable)
    extra = 0
    for value in range(256):
        if value not in printable:
            printable.append(value)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ----- the Vocabulary object -----------------------------------------------------------------


ALL_BYTES = [bytes((value,)) for value in range(256)]


def test_direct_construction_and_fields():
    spellings = [*ALL_BYTES, b"ab", b"a", None, b"", b"SELECT"]
    v = Vocabulary(spellings, [258], size=300)
    assert v.size == len(v) == 300
    assert v.token_bytes(256) == b"ab"
    assert v.token_bytes(258) is None  # EOS
    assert v.token_bytes(259) is None  # empty spelling: masked
    assert v.token_bytes(299) is None  # padding up to size
    assert v.all_token_bytes[260] == b"SELECT"
    assert len(v.all_token_bytes) == 300
    assert v.eos_token_id == 258 and v.eos_token_ids == (258,)
    assert v.special_ids == frozenset({258, 259, *range(261, 300)})
    assert v.aliases(b"a") == (97, 257)
    assert v.aliases(b"zz") == ()
    assert v.alias_classes == ((97, 257),)
    assert v.byte_complete and v.missing_bytes == frozenset()
    assert not v.dummy_prefix
    with pytest.raises(IndexError):
        v.token_bytes(300)
    with pytest.raises(IndexError):
        v.token_bytes(-1)


def test_eos_ids_lose_their_spelling_and_first_is_primary():
    v = Vocabulary([*ALL_BYTES, b"</s>", b"<eot>"], [257, 256])
    assert v.eos_token_id == 257
    assert v.eos_token_ids == (256, 257)
    assert v.token_bytes(256) is None and v.token_bytes(257) is None
    assert Vocabulary([*ALL_BYTES, None], 256).eos_token_ids == (256,)


def test_construction_errors():
    assert issubclass(VocabularyError, GridrailError)
    assert issubclass(ByteCompletenessWarning, UserWarning)
    with pytest.raises(VocabularyError, match="no end-of-sequence"):
        Vocabulary([*ALL_BYTES], [])
    with pytest.raises(VocabularyError, match="not a token id"):
        Vocabulary([*ALL_BYTES], [256])
    with pytest.raises(VocabularyError, match="smaller than the vocabulary"):
        Vocabulary([*ALL_BYTES, None], [256], size=10)
    with pytest.raises(VocabularyError, match="must be integers"):
        Vocabulary([*ALL_BYTES, None], ["256"])
    with pytest.raises(VocabularyError, match="must be integers"):
        Vocabulary([*ALL_BYTES, None], 256.0)
    with pytest.raises(TypeError, match="bytes or None"):
        Vocabulary([*ALL_BYTES, "text", None], [257])


def test_missing_bytes_warn_and_name_them():
    spellings = [bytes((value,)) for value in range(256) if value not in (0x00, 0x01, 0xFF)]
    with pytest.warns(ByteCompletenessWarning, match=r"0x00-0x01, 0xFF") as record:
        v = Vocabulary([*spellings, None], [len(spellings)])
    assert "completeness" in str(record[0].message) and "sound" in str(record[0].message)
    assert "never occur in UTF-8 text" in str(record[0].message)
    assert record[0].filename == __file__  # points at the caller, not at gridrail
    assert v.missing_bytes == frozenset({0x00, 0x01, 0xFF})
    assert not v.byte_complete
    # a multi-byte token does not make its bytes reachable: only full single-byte spellings do
    with pytest.warns(ByteCompletenessWarning):
        v = Vocabulary([*spellings, b"\x00\x01\xff", None], [len(spellings) + 1])
    assert v.missing_bytes == frozenset({0x00, 0x01, 0xFF})


def test_fingerprint_is_blake2b_128_of_the_canonical_encoding():
    spellings = [*ALL_BYTES, b"ab", None]
    v = Vocabulary(spellings, [257], size=260)
    parts = [b"gridrail.vocab.v1\x00", struct.pack("<Q", 260)]
    for spelling in [*spellings, None, None]:
        if spelling is None:
            parts.append(struct.pack("<I", 0xFFFFFFFF))
        else:
            parts.append(struct.pack("<I", len(spelling)) + spelling)
    parts.append(struct.pack("<II", 1, 257))
    assert v.fingerprint == hashlib.blake2b(b"".join(parts), digest_size=16).hexdigest()
    assert len(v.fingerprint) == 32
    # sensitive to spellings, size and EOS ids; not to the order EOS ids are given in
    assert Vocabulary(spellings, [257], size=261).fingerprint != v.fingerprint
    assert Vocabulary([*ALL_BYTES, b"ba", None], [257], size=260).fingerprint != v.fingerprint
    assert Vocabulary(spellings, [257, 259], size=260).fingerprint != v.fingerprint
    assert (
        Vocabulary(spellings, [259, 257], size=260).fingerprint
        == Vocabulary(spellings, [257, 259], size=260).fingerprint
    )
    assert v == Vocabulary(list(spellings), 257, size=260)
    assert hash(v) == hash(Vocabulary(list(spellings), 257, size=260))


# ----- tokenizer.json: the four shared tokenizers --------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_sizes_eos_and_specials(name):
    size, eos, eos_ids, specials, dummy_prefix = EXPECTED[name]
    v = vocab(name)
    assert v.size == size
    assert v.eos_token_id == eos
    assert v.eos_token_ids == eos_ids
    assert v.special_ids == specials
    assert all(v.token_bytes(i) is None for i in specials)
    assert v.dummy_prefix is dummy_prefix
    assert v.fingerprint.startswith(FINGERPRINTS[name])


@pytest.mark.parametrize("name", NAMES)
def test_byte_complete_without_warning(name):
    v = vocab(name)
    assert load_warnings(name) == []
    assert v.byte_complete
    assert v.missing_bytes == frozenset()
    assert all(v.aliases(bytes((b,))) for b in range(256))


def test_alias_classes_where_they_exist():
    # byte-level BPE vocabularies spell every token differently
    for name in ("gpt2", "qwen2", "llama3"):
        assert vocab(name).alias_classes == ()
    # llama2: each byte-fallback token <0xNN> aliases the normal token spelled that one byte
    v = vocab("llama2")
    tok = hf_tokenizer("llama2")
    assert len(v.alias_classes) == 96
    for klass in v.alias_classes:
        assert len(klass) == 2
        spelling = v.token_bytes(klass[0])
        assert len(spelling) == 1
        assert klass[0] == tok.token_to_id(f"<0x{spelling[0]:02X}>")
        assert v.token_bytes(klass[1]) == spelling
    assert v.aliases(b" ") == (tok.token_to_id("<0x20>"), tok.token_to_id("▁"))
    assert v.aliases(b"A") == (tok.token_to_id("<0x41>"), tok.token_to_id("A"))


def test_sentencepiece_spellings():
    """llama2: `▁` is a space (kept: `▁foo` spells b" foo"), `<0xNN>` is that byte."""
    v = vocab("llama2")
    tok = hf_tokenizer("llama2")
    assert v.token_bytes(tok.token_to_id("▁SELECT")) == b" SELECT"
    assert v.token_bytes(tok.token_to_id("▁▁▁▁")) == b"    "
    assert v.token_bytes(tok.token_to_id("<0x0A>")) == b"\n"
    assert v.token_bytes(tok.token_to_id("<0xE4>")) == b"\xe4"
    assert v.token_bytes(tok.token_to_id("é")) == "é".encode()
    # the dummy prefix: the tokenizer prepends `▁`, so " SELECT" and "SELECT" differ
    ids = tok.encode("SELECT", add_special_tokens=False).ids
    assert spelled(v, ids) == b" SELECT"
    ids = tok.encode(" SELECT", add_special_tokens=False).ids
    assert spelled(v, ids) == b"  SELECT"
    assert tok.decode(ids) == " SELECT"  # the decoder strips exactly one leading space


def test_byte_level_spellings():
    v = vocab("gpt2")
    tok = hf_tokenizer("gpt2")
    assert v.token_bytes(tok.token_to_id("Ġ")) == b" "
    assert v.token_bytes(tok.token_to_id("ĠSELECT")) == b" SELECT"
    assert v.token_bytes(tok.token_to_id("Ċ")) == b"\n"
    assert v.token_bytes(tok.token_to_id("ĉ")) == b"\t"
    assert v.token_bytes(tok.token_to_id("Ã")) == b"\xc3"
    table = gpt2_byte_table()
    pieces = json.loads(tokenizer_json("gpt2").read_text(encoding="utf-8"))["model"]["vocab"]
    for piece, token_id in list(pieces.items())[::97]:
        if token_id != 50256:
            assert v.token_bytes(token_id) == bytes(table[c] for c in piece)


def test_qwen2_padding_tokens_spell_their_text():
    """qwen2's 290 `[PADnnnnnn]` are non-special added tokens: they decode to their text and
    the encoder matches that text back to them, so that text is their spelling."""
    v = vocab("qwen2")
    tok = hf_tokenizer("qwen2")
    for token_id in (151646, 151700, 151935):
        text = f"[PAD{token_id}]"
        assert v.token_bytes(token_id) == text.encode()
        assert tok.decode([token_id]) == text
        assert tok.encode(f"a{text}b", add_special_tokens=False).ids[1] == token_id
    assert v.token_bytes(151645) is None  # <|im_end|> is special, and ends generation
    assert 151645 in v.eos_token_ids


@pytest.mark.parametrize("name", NAMES)
def test_encoding_then_spelling_gives_back_the_text(name):
    v = vocab(name)
    tok = hf_tokenizer(name)
    for text in CORPUS:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert spelled(v, ids) == expected_bytes(name, text), text


@pytest.mark.parametrize("name", NAMES)
def test_every_spelling_matches_the_tokenizers_decoder(name):
    """Each token decoded alone by the `tokenizers` library (where its bytes are UTF-8)."""
    v = vocab(name)
    tok = hf_tokenizer(name)
    ids = [i for i in range(v.size) if v.token_bytes(i) is not None]
    decoded = tok.decode_batch([[i] for i in ids], skip_special_tokens=False)
    checked = 0
    for token_id, text in zip(ids, decoded, strict=True):
        try:
            expected = v.token_bytes(token_id).decode("utf-8")
        except UnicodeDecodeError:
            continue  # a partial UTF-8 sequence: the decoder shows U+FFFD
        if v.dummy_prefix and expected.startswith(" "):
            expected = expected[1:]  # Strip: the decoder drops the first token's leading space
        assert text == expected, token_id
        checked += 1
    assert checked > 0.5 * len(ids)


# text the tokenizers can round-trip: llama2 reads a literal "▁" in the input as a space
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\u2581"))


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None)
@given(text=_TEXT)
def test_encoding_random_text_spells_it(name, text):
    v = vocab(name)
    tok = hf_tokenizer(name)
    # the text of a special token is matched as that token, which spells nothing
    assume(not any(tok.id_to_token(i) in text for i in v.special_ids))
    ids = tok.encode(text, add_special_tokens=False).ids
    assert spelled(v, ids) == expected_bytes(name, text)


def test_from_file_accepts_a_folder():
    folder = tokenizer_json("gpt2").parent
    assert Vocabulary.from_file(folder) == vocab("gpt2")


# ----- tokenizer.json: conventions on small files ---------------------------------------------


def _bpe_json(vocab_map, *, added=(), decoder=None, pre=None, normalizer=None, **model):
    return {
        "version": "1.0",
        "added_tokens": list(added),
        "normalizer": normalizer,
        "pre_tokenizer": pre,
        "post_processor": None,
        "decoder": decoder,
        "model": {"type": "BPE", "vocab": vocab_map, "merges": [], **model},
    }


def _special(token_id, content, special=True):
    return {"id": token_id, "content": content, "special": special}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False}


def test_eos_from_tokenizer_config_and_generation_config(tmp_path):
    data = _bpe_json(
        {"a": 0, "b": 1, "<stop>": 2, "<|endoftext|>": 3, "<x>": 5},
        added=[_special(2, "<stop>"), _special(3, "<|endoftext|>"), _special(5, "<x>")],
        decoder=BYTE_LEVEL,
    )
    path = write_json(tmp_path / "tokenizer.json", data)
    with pytest.warns(ByteCompletenessWarning):
        v = Vocabulary.from_file(path)
    assert v.eos_token_id == 3 and v.eos_token_ids == (3,)  # named like end-of-text
    assert v.size == 6 and v.token_bytes(4) is None  # a gap
    write_json(tmp_path / "tokenizer_config.json", {"eos_token": {"content": "<stop>"}})
    with pytest.warns(ByteCompletenessWarning):
        v = Vocabulary.from_file(path)
    assert v.eos_token_id == 2 and v.eos_token_ids == (2, 3)
    write_json(tmp_path / "generation_config.json", {"eos_token_id": [5, 2]})
    with pytest.warns(ByteCompletenessWarning):
        v = Vocabulary.from_file(path)
    assert v.eos_token_id == 2 and v.eos_token_ids == (2, 3, 5)
    with pytest.warns(ByteCompletenessWarning):
        v = Vocabulary.from_file(path, eos_token_ids=[5], size=10)
    assert v.eos_token_ids == (5,) and v.size == 10
    write_json(tmp_path / "tokenizer_config.json", {"eos_token": "<missing>"})
    with pytest.raises(VocabularyError, match="'<missing>' is not a token"):
        Vocabulary.from_file(path)


def test_no_eos_is_an_actionable_error(tmp_path):
    path = write_json(tmp_path / "tokenizer.json", _bpe_json({"a": 0}, decoder=BYTE_LEVEL))
    with pytest.raises(VocabularyError, match=r"eos_token_ids=\[\.\.\.\]"):
        Vocabulary.from_file(path)


def test_unigram_metaspace_with_byte_fallback(tmp_path):
    pieces = ["<unk>", "</s>", "▁", "▁the", "x", "<0x41>", "<0x0A>"]
    data = {
        "added_tokens": [_special(1, "</s>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
                {"type": "ByteFallback"},
            ],
        },
        "model": {"type": "Unigram", "unk_id": 0, "vocab": [[p, -1.0] for p in pieces]},
    }
    path = write_json(tmp_path / "tokenizer.json", data)
    with pytest.warns(ByteCompletenessWarning):
        v = Vocabulary.from_file(path)
    assert v.all_token_bytes == (None, None, b" ", b" the", b"x", b"A", b"\n")
    assert v.special_ids == {0, 1} and v.eos_token_id == 1 and v.dummy_prefix


def test_file_without_decoder_is_read_by_its_pre_tokenizer(tmp_path):
    data = _bpe_json({"Ġa": 0, "b": 1, "<|endoftext|>": 2}, added=[_special(2, "<|endoftext|>")])
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [BYTE_LEVEL]}
    with pytest.warns(ByteCompletenessWarning):
        v = Vocabulary.from_file(write_json(tmp_path / "tokenizer.json", data))
    assert v.all_token_bytes == (b" a", b"b", None)
    data["pre_tokenizer"] = None
    with pytest.raises(VocabularyError, match="no decoder"):
        Vocabulary.from_file(write_json(tmp_path / "tokenizer.json", data))


def test_non_special_added_tokens_spell_their_content(tmp_path):
    data = _bpe_json(
        {"a": 0, "<think>": 1, "<|endoftext|>": 2},
        added=[_special(1, "<think>", special=False), _special(2, "<|endoftext|>")],
        decoder=BYTE_LEVEL,
    )
    with pytest.warns(ByteCompletenessWarning):
        v = Vocabulary.from_file(write_json(tmp_path / "tokenizer.json", data))
    assert v.all_token_bytes == (b"a", b"<think>", None)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model": {"type": "WordPiece", "vocab": {"a": 0}}}, "model type 'WordPiece'"),
        ({"decoder": {"type": "WordPiece", "prefix": "##"}}, "decoder 'WordPiece'"),
        ({"decoder": {"type": "CTC"}}, "decoder 'CTC'"),
        ({"model": None}, "no 'model' section"),
        ({"added_tokens": [{"content": "x"}]}, "malformed 'added_tokens'"),
    ],
)
def test_unsupported_tokenizer_json(tmp_path, change, message):
    data = _bpe_json({"a": 0, "<|endoftext|>": 1}, added=[_special(1, "<|endoftext|>")])
    data["decoder"] = BYTE_LEVEL
    data.update(change)
    with pytest.raises(VocabularyError, match=message):
        Vocabulary.from_file(write_json(tmp_path / "tokenizer.json", data))


def test_unreadable_files(tmp_path):
    with pytest.raises(VocabularyError, match="cannot read"):
        Vocabulary.from_file(tmp_path / "nope.json")
    with pytest.raises(VocabularyError, match="cannot read"):
        Vocabulary.from_file(tmp_path)  # a folder without tokenizer.json
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\x80\x81 not json")
    with pytest.raises(VocabularyError, match="not valid JSON"):
        Vocabulary.from_file(bad)
    bad.write_text('{"model": ')
    with pytest.raises(VocabularyError, match="not valid JSON"):
        Vocabulary.from_file(bad)
    bad.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(VocabularyError, match="from_gguf"):
        Vocabulary.from_file(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(VocabularyError, match="no 'model' section"):
        Vocabulary.from_file(bad)
