"""gridrail: grammar-railed decoding (GRID) for LLM-written SQL."""

from gridrail.check import SemanticChecker, Violation
from gridrail.errors import (
    GrammarConflict,
    GrammarError,
    GridrailError,
    LexiconError,
    ParseError,
    PolicyError,
    RegexError,
    SchemaError,
)
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.guide import Guide, Matcher, compile
from gridrail.mask.bitmask import allocate_bitmask
from gridrail.parse.oracle import Configuration, Oracle
from gridrail.policy import Policy, Schema
from gridrail.registry import Registry
from gridrail.vocab import Vocabulary

__all__ = [
    "CompiledGrammar",
    "Configuration",
    "Grammar",
    "GrammarConflict",
    "GrammarError",
    "GridrailError",
    "Guide",
    "LexiconError",
    "Matcher",
    "Oracle",
    "ParseError",
    "Policy",
    "PolicyError",
    "RegexError",
    "Registry",
    "Schema",
    "SchemaError",
    "SemanticChecker",
    "Violation",
    "Vocabulary",
    "allocate_bitmask",
    "compile",
    "compile_grammar",
]
__version__ = "0.1.0"
