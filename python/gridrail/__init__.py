"""gridrail: grammar-railed decoding (GRID) for LLM-written SQL."""

from gridrail.errors import GrammarConflict, GrammarError, GridrailError, ParseError, RegexError

__all__ = ["GrammarConflict", "GrammarError", "GridrailError", "ParseError", "RegexError"]
__version__ = "0.1.0"
