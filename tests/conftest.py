import sys
from pathlib import Path

# Make `tests/support` importable as `support` and prefer the in-tree package when it is built.
sys.path.insert(0, str(Path(__file__).resolve().parent))
