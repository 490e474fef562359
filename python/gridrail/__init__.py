"""gridrail: grammar-railed decoding (GRID) for LLM-written SQL."""

from gridrail.archive import AlteredArtifactError, ArchiveError, MissingArtifactError
from gridrail.audit import AuditError, SignatureError
from gridrail.batch import fill_next_token_bitmask
from gridrail.check import SemanticChecker, Violation
from gridrail.database import DatabaseError, ExecutionLimitError, SchemaChangedError
from gridrail.decode import UnmaskedTokenError
from gridrail.decode.llama_model import ContextLengthError
from gridrail.errors import (
    GrammarConflict,
    GrammarError,
    GridrailError,
    JudgeError,
    LexiconError,
    ParseError,
    PolicyError,
    RegexError,
    RegexTooLargeError,
    RequestError,
    SchemaError,
    UsageError,
)
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.grammar.model import Grammar, StackBound
from gridrail.guide import Guide, Matcher, compile
from gridrail.integrations.specs import SpecError
from gridrail.mask.bitmask import allocate_bitmask
from gridrail.models import ModelLoadError
from gridrail.parse.completion import CompletionError
from gridrail.parse.oracle import Configuration, Oracle
from gridrail.policy import ConstructCatalogue, Policy, Schema
from gridrail.policy.profile import GenerationProfile
from gridrail.registry import Registry
from gridrail.serve.keys import KeysFileError
from gridrail.serve.store import AuditStoreError
from gridrail.signing import SigningKeyError
from gridrail.vocab import Vocabulary, VocabularyError

__all__ = [
    "AlteredArtifactError",
    "ArchiveError",
    "AuditError",
    "AuditStoreError",
    "CompiledGrammar",
    "CompletionError",
    "Configuration",
    "ConstructCatalogue",
    "ContextLengthError",
    "DatabaseError",
    "ExecutionLimitError",
    "GenerationProfile",
    "Grammar",
    "GrammarConflict",
    "GrammarError",
    "GridrailError",
    "Guide",
    "JudgeError",
    "KeysFileError",
    "LexiconError",
    "Matcher",
    "MissingArtifactError",
    "ModelLoadError",
    "Oracle",
    "ParseError",
    "Policy",
    "PolicyError",
    "RegexError",
    "RegexTooLargeError",
    "Registry",
    "RequestError",
    "Schema",
    "SchemaChangedError",
    "SchemaError",
    "SemanticChecker",
    "SignatureError",
    "SigningKeyError",
    "SpecError",
    "StackBound",
    "UnmaskedTokenError",
    "UsageError",
    "Violation",
    "Vocabulary",
    "VocabularyError",
    "allocate_bitmask",
    "compile",
    "compile_grammar",
    "fill_next_token_bitmask",
]
__version__ = "0.1.0"
