"""Post-parse semantic checking: the column-level policy and alias binding that no
left-to-right grammar mask can enforce (paper §5, Proposition 11)."""

from gridrail.check.checker import SemanticChecker, Violation

__all__ = ["SemanticChecker", "Violation"]
