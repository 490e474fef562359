"""PostgreSQL as the judge of what a statement reads: its own privilege check, run prepare-only.

The role's view of the schema is turned into the privileges of a database role of its own (a
*judging role*): USAGE on the schema; SELECT on each visible column when the role may read;
INSERT and UPDATE on the visible columns and DELETE on the tables its write kinds may target;
nothing on hidden tables or columns. Grants are always per column, so a column added after the
snapshot stays unreadable until the policy is compiled again. Nothing is revoked from anyone:
the judge only grants to its own role, and it refuses to judge when that role could use more
than the view allows (through PUBLIC, a membership or someone else's grant), checked before
every judgment.

The statement then runs as that role too (`Database.acting_as`, which `gridrail ask` uses
whenever it judges with this judge): the server's own privilege check is the last layer at
execution, where a function that runs SQL of its own (`query_to_xml`) would read with the
connecting user's rights. So that the role's INSERTs run, it also gets USAGE on the sequences
its tables' `serial` columns take their defaults from.

A judgment runs `EXPLAIN <statement>` as that role (`SET LOCAL ROLE`) in a read-only
transaction that is always rolled back, under a statement and lock timeout. EXPLAIN without
ANALYZE plans the statement and starts the executor without running it, and the executor's
start is where PostgreSQL checks table and column privileges (ExecCheckPermissions, called by
InitPlan; ExecCheckRTPerms before 16); PREPARE alone only parses and rewrites, so it checks
nothing (tests/security/test_database_judges.py shows both on a live server). The statement is
sent by the extended protocol, which refuses a second statement; it follows an options list
(`EXPLAIN (COSTS OFF) …`), so no text can turn it into EXPLAIN ANALYZE; and only a query or a
write is judged: EXPLAIN also plans CREATE TABLE AS, DECLARE and EXECUTE, which are rejected.

What it covers: every column read of a table of the snapshot's schema that survives planning,
in any clause, subquery, CTE, join or `*` expansion, whole-row references and system columns
(ctid) included; the tables and columns written. A part the planner drops without running it (a
CTE nothing references, a subquery under a constant-false condition) is not checked, and is not
read at execution either. What it does not cover: function policy (PostgreSQL grants EXECUTE to
PUBLIC by default, and the judge revokes nothing, so `functions` stays with the checker; only
functions PUBLIC may not call are refused), what PUBLIC may read outside the schema (the system
catalogs), and row-level security (it filters rows, it does not refuse statements). Functions
the planner folds at plan time (immutable ones) run, as the judging role, inside the rolled-back
read-only transaction.

Creating the judging role needs CREATEROLE (or superuser) and the right to grant the privileges
(owning the tables, or holding them WITH GRANT OPTION). Where the connecting user may not, an
administrator creates a role with those privileges once and passes its name (`database_role`);
it is checked the same way, and may be narrower than the view (that only makes the judge
stricter), never wider.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass
from typing import Any

from gridrail.check.checker import Violation
from gridrail.errors import JudgeError, listing
from gridrail.policy.schema import Table
from gridrail.policy.view import SchemaView

DEFAULT_TIMEOUT_S = 5.0
# The options list ends EXPLAIN's own syntax: what follows must be a statement, so a judged text
# cannot make it `EXPLAIN ANALYZE` (which runs the statement).
_EXPLAIN = "EXPLAIN (COSTS OFF) "
# First words of a query or a write. EXPLAIN also plans CREATE TABLE AS, DECLARE, EXECUTE and
# REFRESH, whose privileges say nothing of the policy: those are rejected, not judged.
_JUDGED = frozenset({"select", "values", "table", "with", "insert", "update", "delete", "("})
_WORD = re.compile(r"[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_$\x80-\U0010ffff]*")
_ROLE_PREFIX = "gridrail_"
_DENIED = re.compile(
    r"permission denied for (?P<kind>table|view|materialized view|foreign table|schema|"
    r"function|procedure|sequence) (?P<name>.+)"
)


@dataclass(frozen=True)
class Grant:
    """One privilege of the judging role: `privilege` on `table` (catalog spelling), on
    `columns` or, for DELETE (which PostgreSQL grants per table only), on the whole table."""

    privilege: str  # "SELECT" | "INSERT" | "UPDATE" | "DELETE"
    table: str
    columns: tuple[str, ...] | None  # None: the table (DELETE)


def grants_for(view: SchemaView) -> tuple[Grant, ...]:
    """The privileges that let a role do exactly what `view` allows, and nothing more."""
    grants = []
    for table in view.tables:
        columns = tuple(c.name for c in view.columns(table))
        if view.may_read and columns:
            grants.append(Grant("SELECT", table.name, columns))
        if not view.may_write_table(table.name):
            continue
        grants += [
            Grant(kind.upper(), table.name, columns)
            for kind in ("insert", "update")
            if view.may_hold(kind) and columns
        ]
        if view.may_hold("delete"):
            grants.append(Grant("DELETE", table.name, None))
    return tuple(grants)


def judging_role_name(policy_fingerprint: str, view: SchemaView, pg_schema: str) -> str:
    """The generated role's name: the policy role's name (for the administrator reading
    `\\du`) and a digest of everything its grants are a function of — the policy, the role,
    the schema snapshot and the PostgreSQL schema — so one name always means one set of grants
    and creating it again is a no-op."""
    role = view.role.name if view.role is not None else "all"
    digest = hashlib.blake2b(digest_size=8)
    for part in (policy_fingerprint, role, view.schema.fingerprint, pg_schema):
        digest.update(part.encode("utf-8") + b"\0")
    return f"{_ROLE_PREFIX}{role[:24]}_{digest.hexdigest()}"


class PostgresJudge:
    """Judges finished statements with PostgreSQL's privilege check, acting as
    `database_role`, in the PostgreSQL schema `pg_schema` that `view.schema` was read from.
    Build it with `provision` (which creates the judging role) or with the name of a
    pre-provisioned role; either way the role is checked against the view first."""

    def __init__(
        self,
        dsn: str,
        view: SchemaView,
        database_role: str,
        *,
        pg_schema: str = "public",
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        if view.schema.dialect != "postgres":
            raise JudgeError(
                f"a PostgreSQL judge needs a PostgreSQL schema snapshot, not a "
                f"{view.schema.dialect} one"
            )
        self.dsn = dsn
        self.view = view
        self.database_role = database_role
        self.pg_schema = pg_schema
        self.timeout_s = timeout_s
        with self._transaction(read_only=True) as conn:
            _require_within(conn, view, database_role, pg_schema, exact=False)

    @classmethod
    def provision(
        cls,
        dsn: str,
        view: SchemaView,
        policy_fingerprint: str,
        *,
        pg_schema: str = "public",
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> PostgresJudge:
        """Create the judging role of `view` if it is missing (its name says what it is for,
        so creating it again is a no-op), grant it exactly the view's privileges, judge as it."""
        name = judging_role_name(policy_fingerprint, view, pg_schema)
        with _session(dsn, pg_schema, timeout_s, read_only=False) as conn:
            _provision(conn, view, name, pg_schema)
        return cls(dsn, view, name, pg_schema=pg_schema, timeout_s=timeout_s)

    def judge(self, sql: str) -> list[Violation]:
        """[] when the judging role may plan `sql`; else one violation saying why: refused by
        a privilege check (`database_denied`), or not a statement PostgreSQL can plan
        (`database_rejected`: it cannot be judged, so it is not run). Raises JudgeError when
        the judge itself cannot run."""
        psycopg = _psycopg()
        first = _first_word(sql)
        if first not in _JUDGED:
            return [_rejected(sql, f"it is not a query or a write but starts with {first!r}")]
        with self._transaction(read_only=True) as conn:
            # checked in the transaction that judges: a grant made since is seen
            _require_within(conn, self.view, self.database_role, self.pg_schema, exact=False)
            role = psycopg.sql.Identifier(self.database_role)
            try:
                conn.execute(psycopg.sql.SQL("SET LOCAL ROLE {}").format(role))
            except psycopg.Error as exc:
                raise JudgeError(
                    f"PostgreSQL: cannot act as the judging role {self.database_role!r} "
                    f"({_words(exc)}); the connecting user must be a member of it"
                ) from None
            try:
                # prepare=True: the extended protocol, which refuses a second statement
                conn.cursor().execute(_EXPLAIN + sql, prepare=True)
            except psycopg.errors.InsufficientPrivilege as exc:
                return [self._denied(sql, exc)]
            except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable):
                late = f"it was not planned within {self.timeout_s:g} s, waiting for a lock or not"
                return [_rejected(sql, late)]
            except psycopg.OperationalError as exc:
                raise JudgeError(
                    f"PostgreSQL: the judge lost its connection ({_words(exc)})"
                ) from None
            except psycopg.Error as exc:
                return [_rejected(sql, _words(exc), _position(sql, exc))]
        return []

    # -- parts

    def _transaction(self, *, read_only: bool) -> AbstractContextManager[Any]:
        return _session(self.dsn, self.pg_schema, self.timeout_s, read_only=read_only)

    def _denied(self, sql: str, exc: Any) -> Violation:
        """The violation for a privilege refusal. PostgreSQL names the relation, never the
        column, so the message lists the columns the role may use there."""
        message = exc.diag.message_primary or _words(exc)
        found = _DENIED.match(message)
        size = len(sql.encode("utf-8"))
        role = _role(self.view)
        table = _catalog_table(self.view, found["name"]) if found else None
        if found is None:  # another refusal, or a server that speaks another language, whose
            # words might name a hidden table
            text = f"PostgreSQL's privilege check refused this statement for role {role!r}"
        elif table is None or found["kind"] in ("schema", "sequence", "function", "procedure"):
            text = f"PostgreSQL refused role {role!r} the use of {found['kind']} {found['name']}"
        elif not self.view.may_see_table(table.name):
            text = (
                f"PostgreSQL refused this statement: it uses {self.view.naming(table.name)}, "
                f"which role {role!r} may not see"
            )
        else:
            usable = ", ".join(c.name for c in self.view.columns(table)) or "none"
            text = (
                f"PostgreSQL refused this statement: it uses a column of {table.name} that role "
                f"{role!r} may not use so (the semantic checker did not catch it); the columns "
                f"of {table.name} it may see: {usable}"
            )
        shown, _ = self.view.disclosed(table.name if table else None)
        return Violation("database_denied", text, 0, size, table=shown)


# The connecting user: superuser? does the role exist? is the user a member of it?
_CURRENT_USER = """
SELECT rolsuper,
       EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s),
       EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
               WHERE r.rolname = %s AND pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER'))
FROM pg_catalog.pg_roles WHERE rolname = current_user
"""


def _provision(conn: Any, view: SchemaView, name: str, pg_schema: str) -> None:
    """Create the role if it is missing, grant it the view's privileges and make the
    connecting user a member (so it may SET ROLE), in one committed transaction. Of two
    concurrent creators, the second waits on the first's lock on the role name and then fails
    with "already exists": a JudgeError that says to try again (which is then a no-op)."""
    psycopg = _psycopg()
    superuser, exists, member = conn.execute(_CURRENT_USER, (name, name)).fetchone()
    try:
        if not exists:
            conn.execute(_sql(psycopg, "CREATE ROLE {} NOLOGIN NOINHERIT", name))
        conn.execute(_sql(psycopg, "GRANT USAGE ON SCHEMA {} TO {}", pg_schema, name))
        for grant in grants_for(view):
            conn.execute(_grant_statement(psycopg, grant, pg_schema, name))
        inserted = {g.table for g in grants_for(view) if g.privilege == "INSERT"}
        for sequence in _default_sequences(conn, pg_schema, inserted):
            conn.execute(_sql(psycopg, "GRANT USAGE ON SEQUENCE {}.{} TO {}", *sequence, name))
        if not superuser and not member:
            conn.execute(_sql(psycopg, "GRANT {} TO CURRENT_USER", name))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise JudgeError(
            f"PostgreSQL: the connecting user may not create the judging role {name!r} or "
            f"grant it the view's privileges ({_words(exc)}); it needs CREATEROLE (ALTER ROLE "
            "<user> CREATEROLE) and must own the tables or hold their privileges WITH GRANT "
            "OPTION; or an administrator creates a role holding the view's privileges and you "
            "pass its name (database_role=, --judge-role)"
        ) from None
    except psycopg.Error as exc:
        raise JudgeError(
            f"PostgreSQL: cannot provision the judging role {name!r} ({_words(exc)}); "
            "if another process was creating it at the same time, try again"
        ) from None
    _require_within(conn, view, name, pg_schema, exact=True)
    conn.commit()


# Per sequence a table's column default calls `nextval` on (`serial`, or a DEFAULT naming a
# sequence the column does not own: the default's expression depends on it), the sequence's
# schema and name and the table's name. An identity column's sequence needs no privilege, so it
# is not listed.
_DEFAULT_SEQUENCES = """
SELECT DISTINCT sn.nspname, s.relname, t.relname
FROM pg_catalog.pg_attrdef a
JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid = a.oid
  AND d.refclassid = 'pg_catalog.pg_class'::regclass
JOIN pg_catalog.pg_class s ON s.oid = d.refobjid AND s.relkind = 'S'
JOIN pg_catalog.pg_namespace sn ON sn.oid = s.relnamespace
JOIN pg_catalog.pg_class t ON t.oid = a.adrelid
JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = %s
ORDER BY 1, 2
"""


def _default_sequences(conn: Any, pg_schema: str, tables: set[str]) -> list[tuple[str, str]]:
    """The sequences whose `nextval` the defaults of `tables`' columns call (`serial`): the
    judging role runs the statements it judged (`Database.acting_as`), and an INSERT that
    leaves such a column to its default needs USAGE on its sequence, which EXPLAIN never
    checks."""
    rows = conn.execute(_DEFAULT_SEQUENCES, (pg_schema,)).fetchall()
    return [(schema, sequence) for schema, sequence, table in rows if table in tables]


def _sql(psycopg: Any, template: str, *names: str) -> Any:
    """`template` with each {} replaced by one name, quoted as an identifier."""
    return psycopg.sql.SQL(template).format(*map(psycopg.sql.Identifier, names))


def _require_within(conn: Any, view: SchemaView, role: str, pg_schema: str, *, exact: bool) -> None:
    """The judging role may use nothing the view hides (and, when `exact`, everything it
    allows): a wider role would vouch for reads the policy forbids."""
    wider, narrower = [], []
    for privilege, table, column, held in _privileges(conn, role, pg_schema):
        allowed = _allows(view, privilege, table, column)
        what = f"{privilege} on {table}" + (f".{column}" if column is not None else "")
        if held and not allowed:
            wider.append(what)
        elif exact and allowed and not held:
            narrower.append(what)
    if wider:
        raise JudgeError(
            f"PostgreSQL: the judging role {role!r} holds {listing(wider)}, which role "
            f"{_role(view)!r} may not use (granted to it, to PUBLIC or to a role it belongs to); "
            "revoke that grant, or judge with a role that lacks it"
        )
    if narrower:
        raise JudgeError(
            f"PostgreSQL: the judging role {role!r} lacks {listing(narrower)} after granting "
            "them; the connecting user must own those tables or hold the privileges WITH GRANT "
            "OPTION"
        )


def _grant_statement(psycopg: Any, grant: Grant, pg_schema: str, role: str) -> Any:
    sql, ident = psycopg.sql.SQL, psycopg.sql.Identifier
    columns = sql("")
    if grant.columns is not None:
        columns = sql(" ({})").format(sql(", ").join(map(ident, grant.columns)))
    return sql("GRANT {}{} ON TABLE {}.{} TO {}").format(
        sql(grant.privilege), columns, ident(pg_schema), ident(grant.table), ident(role)
    )


# Per relation of the schema and column (NULL for a relation without columns): what the role
# holds, through any path (its grants, PUBLIC's, its memberships'), as PostgreSQL decides it.
_PRIVILEGES = """
SELECT c.relname, a.attname,
       pg_catalog.has_column_privilege(%(role)s::name, c.oid, a.attnum, 'SELECT'),
       pg_catalog.has_column_privilege(%(role)s::name, c.oid, a.attnum, 'INSERT'),
       pg_catalog.has_column_privilege(%(role)s::name, c.oid, a.attnum, 'UPDATE'),
       pg_catalog.has_table_privilege(%(role)s::name, c.oid, 'DELETE')
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a
  ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY c.relname, a.attnum
"""


def _privileges(
    conn: Any, role: str, pg_schema: str
) -> Iterator[tuple[str, str, str | None, bool]]:
    """(privilege, table, column or None for DELETE, held) over every relation of the
    schema, snapshot or not: a relation the snapshot lacks is one the role may not use."""
    psycopg = _psycopg()
    found = conn.execute("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s", (role,))
    if found.fetchone() is None:
        raise JudgeError(
            f"PostgreSQL: there is no role {role!r} to judge as; create it or provision one"
        )
    try:
        rows = conn.execute(_PRIVILEGES, {"role": role, "schema": pg_schema}).fetchall()
    except psycopg.Error as exc:
        raise JudgeError(
            f"PostgreSQL: cannot read the judging role's privileges ({_words(exc)})"
        ) from None
    deletes = set()
    for table, column, select, insert, update, delete in rows:
        if column is not None:
            yield from (("SELECT", table, column, select), ("INSERT", table, column, insert))
            yield ("UPDATE", table, column, update)
        if table not in deletes:
            deletes.add(table)
            yield ("DELETE", table, None, delete)


def _allows(view: SchemaView, privilege: str, table_name: str, column: str | None) -> bool:
    table = _catalog_table(view, table_name)
    if table is None or not view.may_see_table(table.name):
        return False
    if privilege == "SELECT":
        return view.may_read and view.may_see_column(table.name, column)
    if not (view.may_hold(privilege.lower()) and view.may_write_table(table.name)):
        return False
    return column is None or view.may_see_column(table.name, column)


@contextmanager
def _session(dsn: str, pg_schema: str, timeout_s: float, *, read_only: bool) -> Iterator[Any]:
    """One transaction on a fresh connection: read-only or not, `search_path` = the schema,
    statement and lock timeouts; closed without a commit (so rolled back) unless committed."""
    psycopg = _psycopg()
    try:
        conn = psycopg.connect(dsn, connect_timeout=max(1, round(timeout_s)))
    except psycopg.Error as exc:
        raise JudgeError(f"PostgreSQL: the judge cannot connect ({_words(exc)})") from None
    with closing(conn):
        milliseconds = max(1, round(timeout_s * 1000))
        if read_only:
            conn.execute("SET TRANSACTION READ ONLY")
        schema = psycopg.sql.Identifier(pg_schema)
        conn.execute(psycopg.sql.SQL("SET LOCAL search_path TO {}").format(schema))
        conn.execute(f"SET LOCAL statement_timeout = {milliseconds}")
        conn.execute(f"SET LOCAL lock_timeout = {milliseconds}")
        yield conn


def _catalog_table(view: SchemaView, name: str) -> Table | None:
    """The snapshot's table of a relation PostgreSQL names (in catalog spelling)."""
    key = view.schema.rules.catalog_key
    return next((t for t in view.schema.tables if key(t.name) == key(name)), None)


def _rejected(sql: str, reason: str, start: int = 0) -> Violation:
    size = len(sql.encode("utf-8"))
    text = (
        f"PostgreSQL cannot plan this statement ({reason}), so it cannot be judged and is not "
        "run; write it in a form PostgreSQL accepts"
    )
    return Violation("database_rejected", text, min(start, size), size)


def _position(sql: str, exc: Any) -> int:
    """The byte offset in `sql` of the error PostgreSQL points at (0 when it does not)."""
    position = exc.diag.statement_position  # 1-based, in characters of the EXPLAIN text
    if not position or not position.isdigit():
        return 0
    character = max(0, int(position) - 1 - len(_EXPLAIN))
    return len(sql[:character].encode("utf-8"))


def _first_word(sql: str) -> str:
    """The first word of `sql` (lower case) or its first other character, read as PostgreSQL's
    lexer reads it: past whitespace, `--` comments and block comments, which nest."""
    at, depth = 0, 0
    while at < len(sql):
        if sql.startswith("/*", at):
            depth, at = depth + 1, at + 2
        elif depth and sql.startswith("*/", at):
            depth, at = depth - 1, at + 2
        elif depth or sql[at].isspace():
            at += 1
        elif sql.startswith("--", at):
            end = sql.find("\n", at)
            at = len(sql) if end < 0 else end + 1
        else:
            word = _WORD.match(sql, at)
            return word.group().lower() if word else sql[at]
    return ""


def _words(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _role(view: SchemaView) -> str:
    return view.role.name if view.role is not None else "(no role)"


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg.sql
    except ImportError:
        raise JudgeError(
            "judging on PostgreSQL needs the 'psycopg[binary]' package: "
            "pip install 'psycopg[binary]'"
        ) from None
    return psycopg
