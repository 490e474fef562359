"""Hugging Face adapters: a ``tokenizer.json`` read with the standard library, and
``transformers`` tokenizer objects.

A token's spelling is what the tokenizer's *decoder* turns it into, applied to that token alone:

* ``ByteLevel`` inverts GPT-2's byte-to-unicode table; ``Replace`` / ``Metaspace`` turn ``▁`` into
  a space; ``ByteFallback`` turns ``<0xNN>`` into that byte; ``Fuse`` joins tokens and so does
  nothing to one token; ``Strip`` removes the dummy-prefix space from the *start of the decoded
  text*, which is a property of the sequence, not of a token, so the canonical bytes keep it
  (``▁foo`` spells ``b" foo"``; see ``Vocabulary.dummy_prefix``).
* A file without a decoder is read by its pre-tokenizer: ``ByteLevel``, or ``Metaspace`` /
  a ``Replace(" ", "▁")`` normalizer (with byte fallback when the model has it).
* Added tokens: a special one (``"special": true``) has no spelling (permanently masked). A
  non-special one (qwen2's ``[PAD151646]``, a user's ``<think>``) decodes verbatim to its content
  -- ``tokenizers`` emits added tokens as they are, without the decoder -- and the encoder matches
  that same text back to it, so its spelling is its content in UTF-8.
* The model's unknown token (``unk_token`` / ``unk_id``) has no spelling: it stands for input the
  vocabulary could not spell, not for bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gridrail.vocab.spelling import (
    BYTE_LEVEL_ALPHABET,
    METASPACE,
    byte_fallback_value,
    byte_level_bytes,
    metaspace_bytes,
)
from gridrail.vocab.vocabulary import (
    Vocabulary,
    VocabularyError,
    assemble,
    check_id_span,
    read_token_id,
)

SUPPORTED_MODELS = ("BPE", "Unigram")
SUPPORTED_DECODERS = ("ByteLevel", "Metaspace", "Replace", "ByteFallback", "Fuse", "Strip")


@dataclass
class ParsedTokenizer:
    """What a ``tokenizer.json`` says about spellings, before the EOS rule is applied."""

    spellings: list[bytes | None]
    special_names: dict[int, str]
    ids_by_text: dict[str, int] = field(repr=False)
    dummy_prefix: bool


# ----- tokenizer.json ------------------------------------------------------------------------


def vocabulary_from_file(
    path, *, size: int | None, eos_token_ids: int | Sequence[int] | None
) -> Vocabulary:
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    source = str(file)
    data = _read_json(file, what="a Hugging Face tokenizer.json")
    parsed = parse_tokenizer_json(data, source)
    declared = declared_eos_beside(file.parent, parsed, source)
    return assemble(
        parsed.spellings,
        parsed.special_names,
        declared,
        source=source,
        size=size,
        eos_token_ids=eos_token_ids,
        dummy_prefix=parsed.dummy_prefix,
    )


def _read_json(file: Path, *, what: str):
    try:
        raw = file.read_bytes()
    except OSError as error:
        raise VocabularyError(
            f"cannot read {file}: {error.strerror or error}; expected {what}"
        ) from error
    if raw[:4] == b"GGUF":
        raise VocabularyError(
            f"{file} is a GGUF file, not {what}: read it with Vocabulary.from_gguf"
        )
    try:
        return json.loads(raw)
    except RecursionError:  # (json's C parser recurses on nesting)
        raise VocabularyError(
            f"{file} is not {what}: its JSON nests too deeply to read (corrupt or hostile)"
        ) from None
    except (UnicodeDecodeError, ValueError) as error:
        raise VocabularyError(
            f"{file} is not {what}: it is not valid JSON ({error}). A SentencePiece .model or "
            "a tiktoken file can be loaded with transformers / tiktoken and passed to "
            "Vocabulary.from_hf / Vocabulary.from_tiktoken"
        ) from error


def parse_tokenizer_json(data, source: str) -> ParsedTokenizer:
    """Spellings, special tokens and the dummy-prefix flag of a parsed ``tokenizer.json``."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise VocabularyError(
            f"{source} is not a Hugging Face tokenizer.json: it has no 'model' section"
        )
    model = data["model"]
    pieces, unk_id = _model_pieces(model, source)
    spell = _token_speller(data, source)

    added_by_id = _added_tokens(data.get("added_tokens") or [], source)
    ids = {token_id for token_id, _ in pieces} | set(added_by_id)
    if not ids:
        raise VocabularyError(f"{source}: the tokenizer has no tokens")
    check_id_span(max(ids), len(ids), source)

    spellings: list[bytes | None] = [None] * (max(ids) + 1)
    ids_by_text: dict[str, int] = {}
    for token_id, piece in pieces:
        ids_by_text.setdefault(piece, token_id)
        if token_id not in added_by_id and token_id != unk_id:
            spellings[token_id] = _spelled(spell, piece, token_id, source)
    special_names: dict[int, str] = {}
    for token_id, token in added_by_id.items():
        content = token["content"]
        ids_by_text[content] = token_id
        if token.get("special", False):
            spellings[token_id] = None
            special_names[token_id] = content
        else:
            spellings[token_id] = _spelled(str.encode, content, token_id, source)
    if unk_id is not None and unk_id not in special_names:
        special_names[unk_id] = next(
            (piece for token_id, piece in pieces if token_id == unk_id), "<unk>"
        )
    return ParsedTokenizer(spellings, special_names, ids_by_text, _adds_dummy_prefix(data))


def _added_tokens(added: object, source: str) -> dict[int, dict]:
    """The ``added_tokens`` entries by id: each a dict with an integer ``id`` (one entry per
    id) and a string ``content``."""
    if not isinstance(added, list) or not all(isinstance(token, dict) for token in added):
        raise VocabularyError(f"{source}: 'added_tokens' is not a list of objects")
    by_id: dict[int, dict] = {}
    for token in added:
        if "id" not in token or not isinstance(token.get("content"), str):
            raise VocabularyError(
                f"{source}: malformed 'added_tokens' entry {token!r:.80}; each needs an "
                "integer 'id' and a string 'content'"
            )
        token_id = read_token_id(token["id"], f"added token {token['content']!r}", source)
        if token_id in by_id:
            raise VocabularyError(
                f"{source}: token id {token_id} is added twice "
                f"({by_id[token_id]['content']!r} and {token['content']!r})"
            )
        by_id[token_id] = token
    return by_id


def _spelled(spell: Callable[[str], bytes], text: str, token_id: int, source: str) -> bytes:
    try:
        return spell(text)
    except UnicodeEncodeError as error:  # a lone surrogate (written "\\ud800" in the JSON)
        bad = text[error.start]
        raise VocabularyError(
            f"{source}: token {token_id} ({text!r:.60}) holds the lone surrogate "
            f"U+{ord(bad):04X}, which spells no bytes: is the file corrupt?"
        ) from None


def _model_pieces(model: dict, source: str) -> tuple[list[tuple[int, str]], int | None]:
    """(id, token text) for every token of the model, and the unknown token's id."""
    kind = model.get("type")
    vocab = model.get("vocab")
    if kind is None:  # older files leave the type out; the vocab's shape tells
        kind = "BPE" if isinstance(vocab, dict) and "merges" in model else None
        kind = "Unigram" if isinstance(vocab, list) else kind
    if kind not in SUPPORTED_MODELS:
        raise VocabularyError(
            f"{source}: tokenizer model type {kind!r} is not supported; gridrail reads "
            f"{' and '.join(SUPPORTED_MODELS)} models (byte-level or SentencePiece-style), "
            "whose tokens spell byte strings"
        )
    try:
        if kind == "BPE":
            pieces = [
                (read_token_id(token_id, f"token {piece!r:.40}", source), piece)
                for piece, token_id in vocab.items()
            ]
            unk = model.get("unk_token")
            unk_id = vocab[unk] if isinstance(unk, str) and unk in vocab else None
        else:
            pieces = [(token_id, entry[0]) for token_id, entry in enumerate(vocab)]
            unk_id = model.get("unk_id")
            if unk_id is not None:
                unk_id = read_token_id(unk_id, "the unknown token", source)
    except (AttributeError, TypeError, ValueError, IndexError, KeyError) as error:
        raise VocabularyError(f"{source}: malformed {kind} vocabulary ({error!r:.200})") from None
    if not all(isinstance(piece, str) for _, piece in pieces):
        raise VocabularyError(f"{source}: malformed {kind} vocabulary: a token is not a string")
    if kind == "BPE":
        _require_distinct_ids(pieces, source)
    return pieces, unk_id


def _require_distinct_ids(pieces: list[tuple[int, str]], source: str) -> None:
    """One token per id: a second would silently replace the first's spelling."""
    seen: dict[int, str] = {}
    for token_id, piece in pieces:
        if token_id in seen:
            raise VocabularyError(
                f"{source}: token id {token_id} is given to two tokens, {seen[token_id]!r} and "
                f"{piece!r}: is the file corrupt?"
            )
        seen[token_id] = piece


def _flatten(node, list_key: str) -> list[dict]:
    """The components of a normalizer / pre-tokenizer / decoder, Sequences flattened (in
    order, without recursion: a file may nest them as deep as its JSON goes)."""
    out: list[dict] = []
    pending = [node]
    while pending:
        item = pending.pop()
        if not isinstance(item, dict):
            continue
        if item.get("type") == "Sequence":
            children = item.get(list_key) or []
            pending.extend(reversed(children if isinstance(children, list) else []))
        else:
            out.append(item)
    return out


def _token_speller(data: dict, source: str) -> Callable[[str], bytes]:
    decoders = _flatten(data.get("decoder"), "decoders")
    if data.get("decoder") is None:
        return _speller_without_decoder(data, source)
    steps: list[tuple] = []
    for decoder in decoders:
        kind = decoder.get("type")
        if kind == "ByteLevel":
            steps.append(("bytelevel",))
        elif kind == "ByteFallback":
            steps.append(("bytefallback",))
        elif kind == "Metaspace":
            steps.append(("replace", decoder.get("replacement", METASPACE), " "))
        elif kind == "Replace":
            pattern = decoder.get("pattern") or {}
            content = str(decoder.get("content", ""))
            if not isinstance(pattern, dict):
                raise VocabularyError(f"{source}: the Replace decoder's pattern is not an object")
            if "String" in pattern:
                steps.append(("replace", str(pattern["String"]), content))
            elif "Regex" in pattern:
                try:
                    regex = re.compile(str(pattern["Regex"]))
                except (re.error, RecursionError) as error:
                    raise VocabularyError(
                        f"{source}: the Replace decoder's regex {pattern['Regex']!r} is not "
                        f"supported ({error})"
                    ) from error
                steps.append(("regex", regex, content))
            else:
                raise VocabularyError(f"{source}: Replace decoder without a pattern")
        elif kind in ("Fuse", "Strip"):
            continue  # act on the joined text (the dummy-prefix space), not on one token
        else:
            raise VocabularyError(
                f"{source}: decoder {kind!r} is not supported: its tokens do not spell byte "
                f"strings one by one. gridrail reads the decoders {', '.join(SUPPORTED_DECODERS)}"
            )
    if steps == [("bytelevel",)]:
        return byte_level_bytes

    def spell(piece: str) -> bytes:
        text = piece
        for step in steps:
            if step[0] == "bytelevel":
                return byte_level_bytes(text)
            if step[0] == "bytefallback":
                value = byte_fallback_value(text)
                if value is not None:
                    return bytes((value,))
            elif step[0] == "replace":
                text = text.replace(step[1], step[2])
            else:
                text = step[1].sub(lambda _match, content=step[2]: content, text)
        return text.encode("utf-8", "surrogateescape")

    return spell


def _speller_without_decoder(data: dict, source: str) -> Callable[[str], bytes]:
    pre = _flatten(data.get("pre_tokenizer"), "pretokenizers")
    normalizers = _flatten(data.get("normalizer"), "normalizers")
    byte_fallback = bool((data.get("model") or {}).get("byte_fallback"))
    if any(p.get("type") == "ByteLevel" for p in pre):
        return byte_level_bytes
    replaces_space = any(
        n.get("type") == "Replace"
        and (n.get("pattern") or {}).get("String") == " "
        and n.get("content") == METASPACE
        for n in normalizers
    )
    if replaces_space or any(p.get("type") == "Metaspace" for p in pre):
        return lambda piece: metaspace_bytes(piece, byte_fallback=byte_fallback)
    raise VocabularyError(
        f"{source}: the tokenizer has no decoder and neither a ByteLevel nor a Metaspace "
        "pre-tokenizer, so nothing says which bytes its tokens stand for"
    )


def _adds_dummy_prefix(data: dict) -> bool:
    for normalizer in _flatten(data.get("normalizer"), "normalizers"):
        if normalizer.get("type") == "Prepend" and normalizer.get("prepend") == METASPACE:
            return True
    for pre in _flatten(data.get("pre_tokenizer"), "pretokenizers"):
        if pre.get("type") == "Metaspace":
            scheme = pre.get("prepend_scheme")
            if scheme is None:
                return bool(pre.get("add_prefix_space", True))
            return scheme in ("always", "first")
        if pre.get("type") == "ByteLevel" and pre.get("add_prefix_space"):
            return True
    return False


def declared_eos_beside(folder: Path, parsed: ParsedTokenizer, source: str) -> list[int]:
    """EOS ids named by ``tokenizer_config.json`` (``eos_token``, first: the primary) and
    ``generation_config.json`` (``eos_token_id``, an id or a list) in ``folder``."""
    declared: list[int] = []
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        config = _read_json(config_file, what="a tokenizer_config.json")
        eos = config.get("eos_token") if isinstance(config, dict) else None
        if isinstance(eos, dict):
            eos = eos.get("content")
        if eos is not None:
            if not isinstance(eos, str) or eos not in parsed.ids_by_text:
                raise VocabularyError(
                    f"{config_file}: eos_token {eos!r} is not a token of {source}; fix the "
                    "config or pass eos_token_ids=[...]"
                )
            declared.append(parsed.ids_by_text[eos])
    generation_file = folder / "generation_config.json"
    if generation_file.is_file():
        generation = _read_json(generation_file, what="a generation_config.json")
        ids = generation.get("eos_token_id") if isinstance(generation, dict) else None
        for token_id in ids if isinstance(ids, list) else [] if ids is None else [ids]:
            if (
                isinstance(token_id, bool)
                or not isinstance(token_id, int)
                or not 0 <= token_id < len(parsed.spellings)
            ):
                raise VocabularyError(
                    f"{generation_file}: eos_token_id {token_id!r} is not a token id of "
                    f"{source}; fix the config or pass eos_token_ids=[...]"
                )
            declared.append(token_id)
    return declared


# ----- transformers objects ------------------------------------------------------------------


def vocabulary_from_hf(
    tokenizer, *, size: int | None, eos_token_ids: int | Sequence[int] | None
) -> Vocabulary:
    source = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        parsed = parse_tokenizer_json(json.loads(backend.to_str()), source)
    else:
        parsed = _parse_slow_tokenizer(tokenizer, source)
    # transformers' own list of special ids is the authority for what is special here
    special_ids = [int(i) for i in getattr(tokenizer, "all_special_ids", ()) or ()]
    for token_id in special_ids:
        if 0 <= token_id < len(parsed.spellings) and token_id not in parsed.special_names:
            parsed.spellings[token_id] = None
            parsed.special_names[token_id] = str(tokenizer.convert_ids_to_tokens(token_id))
    eos = getattr(tokenizer, "eos_token_id", None)
    declared = [int(eos)] if isinstance(eos, int) else []
    return assemble(
        parsed.spellings,
        parsed.special_names,
        declared,
        source=source,
        size=size,
        eos_token_ids=eos_token_ids,
        dummy_prefix=parsed.dummy_prefix,
    )


def _parse_slow_tokenizer(tokenizer, source: str) -> ParsedTokenizer:
    """A tokenizer without a ``tokenizers`` backend: its token texts and the conventions."""
    try:
        count = len(tokenizer)
        pieces = tokenizer.convert_ids_to_tokens(list(range(count)))
    except (TypeError, AttributeError) as error:
        raise VocabularyError(
            f"{source}: not a transformers tokenizer (no len() / convert_ids_to_tokens: {error})"
        ) from error
    added = dict(getattr(tokenizer, "added_tokens_decoder", None) or {})
    texts = [piece for token_id, piece in enumerate(pieces) if piece and token_id not in added]
    if getattr(tokenizer, "byte_decoder", None) is not None or (
        not any(METASPACE in text for text in texts)
        and all(set(text) <= BYTE_LEVEL_ALPHABET for text in texts)
        and any("Ġ" in text for text in texts)
    ):
        spell: Callable[[str], bytes] = byte_level_bytes
    elif getattr(tokenizer, "sp_model", None) is not None or any(METASPACE in t for t in texts):

        def spell(piece: str) -> bytes:
            return metaspace_bytes(piece, byte_fallback=True)

    else:
        raise VocabularyError(
            f"{source}: cannot tell how this tokenizer's tokens spell bytes: it has no "
            "tokenizers backend and its tokens follow neither the byte-level (GPT-2) nor the "
            "SentencePiece (▁) convention; load a fast tokenizer or its tokenizer.json"
        )
    spellings: list[bytes | None] = [None] * count
    special_names: dict[int, str] = {}
    ids_by_text: dict[str, int] = {}
    for token_id, piece in enumerate(pieces):
        if piece is None:
            continue
        ids_by_text.setdefault(piece, token_id)
        token = added.get(token_id)
        if token is not None:
            content = str(getattr(token, "content", piece))
            if getattr(token, "special", False):
                special_names[token_id] = content
            else:
                spellings[token_id] = content.encode("utf-8")
        else:
            spellings[token_id] = spell(piece)
    unk = getattr(tokenizer, "unk_token_id", None)
    if isinstance(unk, int) and 0 <= unk < count and unk not in special_names:
        spellings[unk] = None
        special_names[unk] = str(pieces[unk])
    return ParsedTokenizer(
        spellings, special_names, ids_by_text, _probe_dummy_prefix(tokenizer, spellings)
    )


def _probe_dummy_prefix(tokenizer, spellings: list[bytes | None]) -> bool:
    """Whether encoding ``"a"`` spells ``b" a"``: the tokenizer adds a dummy-prefix space."""
    try:
        ids = tokenizer.encode("a", add_special_tokens=False)
        spelled = b"".join(spellings[token_id] or b"" for token_id in ids)
    except (TypeError, AttributeError, ValueError, IndexError):
        return False
    return spelled == b" a"
