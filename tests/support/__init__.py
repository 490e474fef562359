"""Test-only helpers (not part of the gridrail package)."""
