"""gridrail: grammar-railed decoding (GRID) for LLM-written SQL."""

from gridrail.errors import GrammarConflict, GrammarError, GridrailError, ParseError, RegexError
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.parse.oracle import Configuration, Oracle

__all__ = [
    "CompiledGrammar",
    "Configuration",
    "Grammar",
    "GrammarConflict",
    "GrammarError",
    "GridrailError",
    "Oracle",
    "ParseError",
    "RegexError",
    "compile_grammar",
]
__version__ = "0.1.0"
