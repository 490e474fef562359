import sys
from pathlib import Path

from hypothesis import settings

# Make `tests/support` importable as `support` and `tests/assets.py` as `assets`.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from postgres_server import audit_store_dsn, postgres_dsn, postgres_hr_schema  # noqa: F401  (session fixture: a live server)

# Property tests assert correctness, never speed: no per-example deadline (a loaded 2-core CI
# machine would otherwise turn slow examples into failures), and a fixed derivation of examples
# so a CI failure reproduces locally.
settings.register_profile("gridrail", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("gridrail")
