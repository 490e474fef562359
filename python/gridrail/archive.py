"""The artifact archive: what a guide's masks are a function of, filed by fingerprint, so that an
audit log can be replayed long after the process that wrote it is gone (paper §6.4).

A guide's masks, cache keys and mask entry ids depend on exactly three artifacts — the language
grammar, the vocabulary and the schema lexicons — and an audit seal names each by fingerprint.
The archive is a directory holding one file per fingerprint:

  grammar-<fp>.json     the language grammar's canonical form (`Grammar.canonical_form()`);
                        its BLAKE2b-128 is <fp>, so `b2sum -l 128` checks it
  vocabulary-<fp>.json  {"format": VOCABULARY_FORMAT, "eos_token_ids": [primary, ...],
                         "token_bytes": [hex spelling or null, one per id]}
  lexicons-<fp>.json    {"format": LEXICONS_FORMAT, "lexicons": [{"terminal", "words_source",
                         "suffix", "words", "pattern"}, ...]}  (no file when there are none: <fp>
                        is then "")

A file is intact when what it defines has the fingerprint it is filed under; anything else — a
missing file, an edit, a file that no longer parses — raises an `ArchiveError` naming the file,
never a guide that would quietly compute other masks.
"""

from __future__ import annotations

import json
import os
import re
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gridrail.canonical import canonical_json
from gridrail.errors import GridrailError
from gridrail.gamma.catalog import NameCatalog
from gridrail.grammar.compiled import CompiledGrammar
from gridrail.grammar.model import Grammar
from gridrail.guide import Guide, lexicon_signature
from gridrail.policy.constructs import WORD_SOURCES, LexiconCategory
from gridrail.policy.lexicon import Lexicon
from gridrail.registry import shared_compiled_grammar, shared_trie
from gridrail.vocab.vocabulary import ByteCompletenessWarning, Vocabulary

VOCABULARY_FORMAT = "gridrail-vocabulary-v1"
LEXICONS_FORMAT = "gridrail-lexicons-v1"
ARTIFACT_NAMES = ("grammar", "vocabulary", "lexicons")
_FINGERPRINT = re.compile(r"[0-9a-f]{32}")


class ArchiveError(GridrailError):
    """An archive cannot back the artifacts asked of it."""


class MissingArtifactError(ArchiveError):
    """The archive has no file for an artifact's fingerprint (wrong directory, or never saved)."""


class AlteredArtifactError(ArchiveError):
    """An archived file no longer defines what its fingerprint says: it was edited or damaged."""


def artifact_path(directory: str | os.PathLike[str], name: str, fingerprint: str) -> Path:
    """Where the archive files artifact `name` with `fingerprint`."""
    return Path(directory) / f"{name}-{fingerprint}.json"


# -- saving


def save_guide(guide: Guide, directory: str | os.PathLike[str]) -> dict[str, str]:
    """Archive what `guide`'s masks are a function of under `directory` (created if needed) and
    return the artifact fingerprints to seal its audit logs with (= `guide.artifacts()`).

    Idempotent and safe to run concurrently: a file whose bytes are already right is left alone,
    anything else is replaced atomically."""
    artifacts = guide.artifacts()
    Path(directory).mkdir(parents=True, exist_ok=True)
    for name, text in artifact_texts(guide, artifacts).items():
        write_artifact(directory, name, artifacts[name], text)
    return artifacts


def artifact_texts(guide: Guide, names: Iterable[str] | None = None) -> dict[str, str]:
    """The archived text of each of `guide`'s artifacts named in `names` (default: all of
    `guide.artifacts()`), as the archive files them; no text for no lexicons."""
    wanted = set(guide.artifacts() if names is None else names)
    texts = {}
    if "grammar" in wanted:
        texts["grammar"] = guide.compiled.grammar.canonical_form()
    if "vocabulary" in wanted:
        texts["vocabulary"] = _vocabulary_text(guide.vocab)
    if "lexicons" in wanted and guide.lexicons:
        texts["lexicons"] = _lexicons_text(guide.lexicons)
    if "names" in wanted and guide.names is not None:
        texts["names"] = guide.names.to_json()
    return texts


def write_artifact(
    directory: str | os.PathLike[str], name: str, fingerprint: str, text: str
) -> None:
    """File `text` as artifact `name` with `fingerprint` in the archive `directory` (loading
    checks that it hashes to the fingerprint)."""
    _check_fingerprint(name, fingerprint)
    _write_if_changed(artifact_path(directory, name, fingerprint), text)


def _vocabulary_text(vocab: Vocabulary) -> str:
    eos = [vocab.eos_token_id, *(t for t in vocab.eos_token_ids if t != vocab.eos_token_id)]
    spellings = [None if b is None else b.hex() for b in vocab.all_token_bytes]
    return _json({"format": VOCABULARY_FORMAT, "eos_token_ids": eos, "token_bytes": spellings})


def _lexicons_text(lexicons: Sequence[Lexicon]) -> str:
    rows = [
        {
            "terminal": lex.category.terminal,
            "words_source": lex.category.words,
            "suffix": lex.category.suffix,
            "words": list(lex.words),
            "pattern": lex.pattern,
        }
        for lex in sorted(lexicons, key=lambda lex: lex.category.terminal)
    ]
    return _json({"format": LEXICONS_FORMAT, "lexicons": rows})


def _json(doc: object) -> str:
    return canonical_json(doc)


def _write_if_changed(path: Path, text: str) -> None:
    """Write through a private temporary name and rename, so a reader never sees half a file
    and concurrent savers of one artifact (same bytes) cannot interleave."""
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


# -- loading


def load_guide(directory: str | os.PathLike[str], artifacts: Mapping[str, str]) -> Guide:
    """A Guide over the archived artifacts `artifacts` names (a seal's "artifacts"), whose
    masks, keys and entry ids are those of the guide that was saved. Its mask cache starts empty,
    so every mask is recomputed from the archive; it has no schema view, so `check` judges
    membership in the language only.

    Raises MissingArtifactError or AlteredArtifactError naming the file at fault, ArchiveError
    if `artifacts` does not give a fingerprint for each of grammar, vocabulary and lexicons, and
    OSError if `directory` is not a readable directory."""
    for name in ARTIFACT_NAMES:
        _check_fingerprint(name, artifacts.get(name))
    if not Path(directory).is_dir():
        raise NotADirectoryError(f"no archive directory {os.fspath(directory)!r}")
    compiled = shared_compiled_grammar(_load_grammar(directory, artifacts["grammar"]))
    vocab = _load_vocabulary(directory, artifacts["vocabulary"])
    lexicons = _load_lexicons(directory, artifacts["lexicons"], compiled)
    names = None
    if "names" in artifacts:  # a guide under Γ: the catalog its names resolved against
        _check_fingerprint("names", artifacts["names"])
        names = _load_names(directory, artifacts["names"])
    return Guide(compiled, vocab, lexicons=lexicons, trie=shared_trie(vocab), names=names)


def _load_names(directory: str | os.PathLike[str], fingerprint: str) -> NameCatalog:
    text = _read(directory, "names", fingerprint)
    try:
        names = NameCatalog.from_json(text)
    except GridrailError as exc:
        raise _altered(directory, "names", fingerprint, f"unreadable ({exc})") from None
    if names.fingerprint != fingerprint:
        raise _altered(directory, "names", fingerprint, f"it hashes to {names.fingerprint}")
    return names


def _check_fingerprint(name: str, fingerprint: object) -> None:
    """A fingerprint is 32 hex digits ("" for no lexicons): never a path to follow."""
    empty_ok = name == "lexicons" and fingerprint == ""
    if not empty_ok and not (isinstance(fingerprint, str) and _FINGERPRINT.fullmatch(fingerprint)):
        raise ArchiveError(
            f"the {name} fingerprint {fingerprint!r} is not 32 hex digits "
            f"(artifacts must name each of {', '.join(ARTIFACT_NAMES)})"
        )


def _read(directory: str | os.PathLike[str], name: str, fingerprint: str) -> str:
    path = artifact_path(directory, name, fingerprint)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingArtifactError(
            f"{path}: the archive has no {name} with fingerprint {fingerprint} "
            "(is this the archive the log was written against?)"
        ) from None
    except UnicodeDecodeError:
        raise _altered(directory, name, fingerprint, "it is not UTF-8 text") from None


def _altered(
    directory: str | os.PathLike[str], name: str, fingerprint: str, why: str
) -> AlteredArtifactError:
    path = artifact_path(directory, name, fingerprint)
    return AlteredArtifactError(f"{path}: the archived {name} was altered: {why}")


def _load_grammar(directory: str | os.PathLike[str], fingerprint: str) -> Grammar:
    text = _read(directory, "grammar", fingerprint)
    try:
        grammar = Grammar.from_canonical(text, name=f"archived grammar {fingerprint[:12]}")
    except (ValueError, KeyError, TypeError, GridrailError) as exc:
        raise _altered(directory, "grammar", fingerprint, f"unreadable ({exc!r})") from None
    if grammar.fingerprint != fingerprint:
        why = f"it hashes to {grammar.fingerprint}"
        raise _altered(directory, "grammar", fingerprint, why)
    return grammar


def _load_vocabulary(directory: str | os.PathLike[str], fingerprint: str) -> Vocabulary:
    text = _read(directory, "vocabulary", fingerprint)
    try:
        doc = json.loads(text)
        if doc["format"] != VOCABULARY_FORMAT:
            raise ValueError(f"format {doc['format']!r}, expected {VOCABULARY_FORMAT!r}")
        spellings = [None if s is None else bytes.fromhex(s) for s in doc["token_bytes"]]
        with warnings.catch_warnings():  # it was said when the vocabulary was first built
            warnings.simplefilter("ignore", ByteCompletenessWarning)
            vocab = Vocabulary(spellings, doc["eos_token_ids"], source=str(fingerprint))
    except (ValueError, KeyError, TypeError, RecursionError, GridrailError) as exc:
        raise _altered(directory, "vocabulary", fingerprint, f"unreadable ({exc!r})") from None
    if vocab.fingerprint != fingerprint:
        raise _altered(directory, "vocabulary", fingerprint, f"it hashes to {vocab.fingerprint}")
    return vocab


def _load_lexicons(
    directory: str | os.PathLike[str], fingerprint: str, compiled: CompiledGrammar
) -> tuple[Lexicon, ...]:
    """The archived lexicons; their fingerprint is over terminals of `compiled` (the archived
    grammar), so it is checked against that."""
    if not fingerprint:
        return ()
    text = _read(directory, "lexicons", fingerprint)
    try:
        doc = json.loads(text)
        if doc["format"] != LEXICONS_FORMAT:
            raise ValueError(f"format {doc['format']!r}, expected {LEXICONS_FORMAT!r}")
        lexicons = tuple(_lexicon(row) for row in doc["lexicons"])
        signature = lexicon_signature(compiled, lexicons)[1]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise _altered(directory, "lexicons", fingerprint, f"unreadable ({exc!r})") from None
    if signature != fingerprint:
        raise _altered(directory, "lexicons", fingerprint, f"it hashes to {signature!r}")
    return lexicons


def _lexicon(row: Mapping[str, object]) -> Lexicon:
    terminal, source, suffix, pattern, words = (
        row[k] for k in ("terminal", "words_source", "suffix", "pattern", "words")
    )
    if source not in WORD_SOURCES:
        raise ValueError(f"words_source {source!r} is not one of {WORD_SOURCES}")
    if not all(isinstance(f, str) for f in (terminal, suffix, pattern)):
        raise TypeError("terminal, suffix and pattern must be strings")
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise TypeError("words must be a list of strings")
    return Lexicon(LexiconCategory(terminal, source, suffix), tuple(words), pattern)
