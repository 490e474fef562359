"""Policy compiled into the language: role projections (L2) and schema lexicons (L3)."""

from gridrail.policy.bundle import Policy
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.role import ColumnRule, Role
from gridrail.policy.schema import Column, Schema, Table
from gridrail.policy.view import SchemaView

__all__ = [
    "Column",
    "ColumnRule",
    "ConstructCatalogue",
    "Policy",
    "Role",
    "Schema",
    "SchemaView",
    "Table",
]
