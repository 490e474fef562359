"""Named guides for serving engines (issue 18): what a request to vLLM or SGLang may name.

A request to an engine carries a spec *name* (`gridrail:hr-analyst`), never a grammar, a policy
or a role: the operator declares the specs in a TOML file the engine reads at start
(`GRIDRAIL_SPECS`), and whoever sends requests to the engine (a gateway such as `gridrail
serve`, which maps the caller's key to a role) chooses among them. Each spec names a database
(its catalog is the schema), a policy and one of its roles, and optionally the token budget
every generation under it keeps (the budget reserve):

    [specs.hr-analyst]
    db = "/srv/hr.sqlite"            # a SQLite or DuckDB file, or a PostgreSQL DSN
    policy = "/etc/gridrail/hr_policy.toml"
    role = "analyst"
    max_tokens = 256                 # optional; the engine's max_tokens should be at least this

Relative paths are relative to the file. A spec's guide — the role's language under the
generation profile, with names declared in the statement tracked (Γ) — is compiled once per
vocabulary, on first use, however many requests ask for it at once (single-flight).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gridrail.database import Database, is_postgres_dsn
from gridrail.errors import GridrailError
from gridrail.grammar.model import Grammar
from gridrail.guide import Guide, compile
from gridrail.policy.bundle import Policy
from gridrail.policy.language import select_role
from gridrail.policy.profile import GenerationProfile
from gridrail.policy.role import binds_names
from gridrail.registry import Registry
from gridrail.vocab import Vocabulary

SPECS_ENVIRONMENT = "GRIDRAIL_SPECS"
PREFIX = "gridrail:"  # a request's grammar text: the prefix, then a spec's name
FIELDS = {"db", "policy", "role", "max_tokens"}
GRAMMAR = "sqlite"  # the bundled grammar (as `gridrail ask` and `gridrail serve` use)


class SpecError(GridrailError):
    """A spec file that cannot be read, or a request naming a spec it does not declare."""


@dataclass(frozen=True)
class Spec:
    name: str
    database: Database
    policy: Policy
    role: str
    max_tokens: int | None = None


class SpecRegistry:
    """The specs of one file, and their guides per vocabulary (built once each)."""

    def __init__(self, specs: dict[str, Spec]):
        self.specs = specs
        self._guides = Registry(capacity=max(16, 2 * len(specs)), failure_ttl=0)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> SpecRegistry:
        path = Path(path)
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise SpecError(f"{path}: cannot read the spec file ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{path}: not TOML ({exc})") from None
        table = document.get("specs")
        if not isinstance(table, dict) or not table:
            raise SpecError(f"{path}: declare at least one [specs.NAME] table")
        return cls({name: _spec(path, name, fields) for name, fields in table.items()})

    @classmethod
    def from_environment(cls) -> SpecRegistry:
        """The specs of the file `GRIDRAIL_SPECS` names."""
        location = os.environ.get(SPECS_ENVIRONMENT)
        if not location:
            raise SpecError(
                f"set {SPECS_ENVIRONMENT} to the spec file the engine serves "
                "(docs/serving-engines.md)"
            )
        return cls.from_file(location)

    def spec(self, grammar_text: str) -> Spec:
        """The spec a request's grammar text (`gridrail:NAME`) names."""
        if not grammar_text.startswith(PREFIX):
            raise SpecError(f"a gridrail request's grammar is {PREFIX}NAME, a declared spec")
        name = grammar_text[len(PREFIX) :].strip()
        found = self.specs.get(name)
        if found is None:
            known = ", ".join(sorted(self.specs)[:20])
            raise SpecError(f"no spec named {name[:80]!r} is declared (declared: {known})")
        return found

    def guide(self, spec: Spec, vocab: Vocabulary) -> Guide:
        """`spec`'s guide over `vocab` (compiled on first use; the catalog read then)."""

        def build() -> Guide:
            return compile(
                Grammar.bundled(GRAMMAR),
                vocab,
                schema=spec.database.schema(),
                policy=spec.policy,
                role=spec.role,
                profile=GenerationProfile(),
                gamma=binds_names(select_role(spec.policy, spec.role), None, default=True),
            )

        return self._guides.get((spec.name, vocab.fingerprint), build)


def _spec(path: Path, name: str, fields: object) -> Spec:
    where = f"{path}: [specs.{name}]"
    if not isinstance(fields, dict):
        raise SpecError(f"{where} is not a table")
    unknown = set(fields) - FIELDS
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    missing = {"db", "policy", "role"} - set(fields)
    if missing:
        raise SpecError(f"{where}: give {', '.join(sorted(missing))}")
    budget = fields.get("max_tokens")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int) or budget < 1
    ):
        raise SpecError(f"{where}: max_tokens is a positive integer")
    db = str(fields["db"])
    if not is_postgres_dsn(db):
        db = str(path.parent / db)
    try:
        policy = Policy.from_file(path.parent / str(fields["policy"]))
        database = Database.open(db)
    except GridrailError as exc:
        raise SpecError(f"{where}: {exc}") from None
    role = str(fields["role"])
    if role not in policy.roles:
        raise SpecError(f"{where}: the policy has no role {role!r}")
    return Spec(name, database, policy, role, budget)
