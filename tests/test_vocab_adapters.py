"""Vocabulary.from_hf (transformers objects) and Vocabulary.from_tiktoken agree with from_file."""

from __future__ import annotations

import functools
import json
import warnings
from pathlib import Path

import pytest

from gridrail.vocab import ByteCompletenessWarning, Vocabulary, VocabularyError
from test_vocab import CORPUS, NAMES, gpt2_byte_table, hf_tokenizer, tokenizer_json, vocab

# GPT-2's pre-tokenizer regex, as tiktoken writes it
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@functools.cache
def _auto_tokenizer_cached(folder: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def auto_tokenizer(name: str):
    pytest.importorskip("transformers")
    return _auto_tokenizer_cached(str(tokenizer_json(name).parent))


@functools.cache
def _hf_vocab_cached(folder: str) -> Vocabulary:
    return Vocabulary.from_hf(_auto_tokenizer_cached(folder))


def hf_vocab(name: str) -> Vocabulary:
    auto_tokenizer(name)
    return _hf_vocab_cached(str(tokenizer_json(name).parent))


class WithoutBackend:
    """A transformers tokenizer seen without its `tokenizers` backend (like a slow one)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __getattr__(self, name):
        if name == "backend_tokenizer":
            raise AttributeError(name)
        return getattr(self._tokenizer, name)

    def __len__(self):
        return len(self._tokenizer)


# ----- transformers --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_from_hf_equals_from_file(name):
    tok = auto_tokenizer(name)
    expected = vocab(name)
    got = hf_vocab(name)
    assert got.all_token_bytes == expected.all_token_bytes
    assert got.fingerprint == expected.fingerprint
    assert got.eos_token_id == expected.eos_token_id == tok.eos_token_id
    assert got.eos_token_ids == expected.eos_token_ids
    assert got.dummy_prefix == expected.dummy_prefix
    assert got == expected


@pytest.mark.parametrize("name", NAMES)
def test_from_hf_without_backend_uses_the_conventions(name):
    tok = auto_tokenizer(name)
    got = Vocabulary.from_hf(WithoutBackend(tok))
    assert got == vocab(name)
    assert got.all_token_bytes == vocab(name).all_token_bytes


@pytest.mark.parametrize("name", NAMES)
def test_from_hf_spells_what_transformers_encodes(name):
    tok = auto_tokenizer(name)
    v = hf_vocab(name)
    prefix = b" " if v.dummy_prefix else b""
    for text in CORPUS:
        ids = tok.encode(text, add_special_tokens=False)
        assert b"".join(v.token_bytes(i) for i in ids) == prefix + text.encode(), text


def test_from_hf_overrides_and_errors():
    tok = auto_tokenizer("gpt2")
    v = Vocabulary.from_hf(tok, size=50304, eos_token_ids=[50256])
    assert v.size == 50304 and v.token_bytes(50300) is None
    assert v.special_ids == frozenset({50256, *range(50257, 50304)})

    class NotATokenizer:
        pass

    with pytest.raises(VocabularyError, match="not a transformers tokenizer"):
        Vocabulary.from_hf(NotATokenizer())


# ----- tiktoken ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _gpt2_encoding_cached(path: str):
    """GPT-2 as a tiktoken Encoding built offline from tokenizer.json (rank = id)."""
    import tiktoken

    table = gpt2_byte_table()
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    ranks = {
        bytes(table[c] for c in piece): token_id
        for piece, token_id in data["model"]["vocab"].items()
        if token_id != 50256
    }
    return tiktoken.Encoding(
        name="gpt2-offline",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
    )


def gpt2_encoding():
    pytest.importorskip("tiktoken")
    return _gpt2_encoding_cached(str(tokenizer_json("gpt2")))


def test_offline_tiktoken_encoding_is_gpt2():
    """The oracle itself: tiktoken with these ranks encodes exactly as the gpt2 tokenizer."""
    enc = gpt2_encoding()
    tok = hf_tokenizer("gpt2")
    for text in CORPUS:
        assert enc.encode_ordinary(text) == tok.encode(text, add_special_tokens=False).ids


def test_from_tiktoken_equals_gpt2_from_file():
    enc = gpt2_encoding()
    got = Vocabulary.from_tiktoken(enc)
    expected = vocab("gpt2")
    assert got.size == enc.n_vocab == 50257
    assert got.all_token_bytes == expected.all_token_bytes
    assert got.eos_token_id == expected.eos_token_id == enc.eot_token
    assert got.fingerprint == expected.fingerprint
    assert got == expected
    for text in CORPUS:
        ids = enc.encode(text, disallowed_special=())
        assert b"".join(got.token_bytes(i) for i in ids) == text.encode()


class DecodingOnly:
    """A tiktoken-like object without `_mergeable_ranks`: read through its public methods."""

    def __init__(self, encoding):
        self._encoding = encoding
        self.name = encoding.name
        self.n_vocab = encoding.n_vocab
        self.special_tokens_set = encoding.special_tokens_set

    def decode_single_token_bytes(self, token_id):
        return self._encoding.decode_single_token_bytes(token_id)

    def encode_single_token(self, text):
        return self._encoding.encode_single_token(text)


def test_from_tiktoken_through_public_methods():
    assert Vocabulary.from_tiktoken(DecodingOnly(gpt2_encoding())) == vocab("gpt2")


def test_from_tiktoken_gaps_and_specials():
    tiktoken = pytest.importorskip("tiktoken")
    ranks = {bytes((b,)): b for b in range(256)}
    ranks[b"ab"] = 256
    enc = tiktoken.Encoding(
        name="tiny",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 300, "<|fim_middle|>": 301, "<|im_end|>": 305},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", ByteCompletenessWarning)
        v = Vocabulary.from_tiktoken(enc)
    assert v.size == 306
    assert v.token_bytes(256) == b"ab"
    assert all(v.token_bytes(i) is None for i in range(257, 306))
    assert v.eos_token_id == 300 and v.eos_token_ids == (300, 305)
    assert Vocabulary.from_tiktoken(DecodingOnly(enc)) == v
    assert Vocabulary.from_tiktoken(enc, eos_token_ids=301).eos_token_ids == (301,)

    class NotAnEncoding:
        name = "x"

    with pytest.raises(VocabularyError, match="not a tiktoken Encoding"):
        Vocabulary.from_tiktoken(NotAnEncoding())
