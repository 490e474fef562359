"""The semantic checker: what no left-to-right mask can enforce (paper §5, Proposition 11).

Masks enforce the statement kinds and the tables a role may name. They cannot enforce column
policy: `SELECT salary FROM employees` names the column before the table, and which table
`T1.salary` reads depends on an alias bound further on. So the finished statement is parsed
(with the engine's own grammar and lexing), every name is bound the way SQLite binds it, and
each reference is judged against the schema and the role's view of it. A violation says what is
wrong, quotes the offending text, points at its bytes and says what the role may use instead:
that is what lets a repair loop fix a statement instead of retrying it blindly.

What counts as reading a column:
  * any reference to it, in any clause (a predicate on a hidden column leaks it as surely as
    selecting it);
  * `*` and `T.*`: they expand to every column, so over a table with a hidden column they are a
    `column_not_visible` (name the visible columns instead);
  * INSERT without a column list (and not DEFAULT VALUES) writes every column, so the same
    holds for its target;
  * NATURAL JOIN and USING compare the shared columns of both sides;
  * `x MATCH q` searches every column of x's full-text table (FTS3/4 queries name columns:
    `body:term`), so it reads them all; x must be a column of a table the statement names
    (a subquery's or a view's column may be flattened into a hidden one), else
    `full_text_query`;
  * in an INSERT, `last_insert_rowid()` returns the row key of the row it wrote last (a
    multi-row VALUES' row before), so it reads the target's row key;
  * a double-quoted string where an expression stands: SQLite reads `"salary"` as the column
    salary when one is in scope (and as a string otherwise), so it is a `double_quoted_column`
    unless it binds a column the role sees, or binds nothing where no table in scope has a
    hidden column (elsewhere a string and a hidden column's name are refused alike);
  * SQLite's row key (`rowid`, `oid`, `_rowid_`): the INTEGER PRIMARY KEY column it is an alias
    of, where the snapshot says there is one (else the implicit key, which policy treats as a
    column named rowid); where it may not know (a schema written by hand; a FROM subquery, whose
    row key depends on SQLite's version), the key is readable only if every column is, and a
    bare name is judged wherever it may bind.

What a violation may say: the role learns nothing of the tables and columns it may not see, not
even that they exist (the "does not exist or not authorized" of some databases). A table it may
not see is reported as one the schema lacks (`unknown_table`, and its columns bind silently
after), a column it may not see as one its table lacks, where the statement names it:
`unknown_column` or `ambiguous_column`, worded so that both are true, with what the role may
use instead; names are bound as SQLite binds them, and a name that binds to a hidden column is
reported as the role's binding of it (`scopes`, `seen`) says a name no table has would be. Only
where that binding takes a column or alias the role sees, SQLite's reading of the hidden one is
refused all the same (`column_not_visible`, naming nothing more than the statement wrote). A
read the statement does not spell (`*`, NATURAL JOIN, a row key, ...) is a
`column_not_visible` of its table that never names the hidden column; a `*` expanded inside a
subquery gives it no column the role may not see.

A CTE's body is bound as SQLite binds it: where a FROM item reads it, as a subquery there (its
free names bind in the queries around that FROM, so each read binds it again: past
MAX_CTE_BINDINGS, `statement_too_complex`). Its own body reads it only as SQLite allows (once,
from the FROM of a recursive SELECT, whose columns are then the anchor's); any other reference
from inside is a `circular_reference`, which SQLite refuses too.

What a role may do, beyond seeing names (a guide's mask enforces the first three too; the
checker names them for statements from elsewhere):
  * `statement_not_allowed`: a statement of a kind the role does not hold;
  * `conflict_not_allowed`: OR REPLACE / REPLACE INTO deletes the row a new or changed row
    conflicts with (and an INSERT then writes over it), so it needs delete and update; so does
    a plain INSERT or UPDATE of a table whose constraints say ON CONFLICT REPLACE;
  * `cascade_not_allowed`: deleting rows, or changing a referenced key, runs the actions of the
    foreign keys to the table (ON DELETE CASCADE, SET NULL, ...) on the tables that hold them,
    which the role must be allowed to write as they are written;
  * `read_not_allowed`: reading is the select capability, in every statement — a column
    reference in a WHERE, SET value, RETURNING or subquery, `*`, a table in a FROM, a
    double-quoted name that binds to a column — so a role without select may not read at all
    (the columns an INSERT or SET writes are not reads);
  * `table_not_writable`: an INSERT / UPDATE / DELETE target outside the role's `writes` (its
    tables are one lexicon, read and written alike, so only the checker can tell);
  * `cast_not_allowed`: on PostgreSQL, a CAST to a type that is not a built-in one that looks
    nothing up (`policy.dialect.CAST_TYPES`): a type name is looked up in the catalogs, where
    `CAST('salaries' AS regclass)` and `CAST(NULL AS salaries)` (a table's row type) tell
    whether a table exists, privilege or not — for every role, as the database's judge cannot
    see it (the lookup needs no privilege).

Violation kinds: unknown_table, unknown_column, column_not_visible,
ambiguous_column, unbound_qualifier, function_not_allowed, double_quoted_column,
circular_reference, statement_too_complex, statement_not_allowed, conflict_not_allowed,
cascade_not_allowed, read_not_allowed, table_not_writable, full_text_query, cast_not_allowed.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from gridrail.check.scopes import ROWID_KEYS, Cte, Lookup, Scope, Source
from gridrail.errors import PolicyError, listing
from gridrail.grammar.compiled import CompiledGrammar
from gridrail.parse.tree import Token, Tree, parse_tree
from gridrail.policy.binding import CLAUSE_REACH, Reach
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.dialect import DATABASE_NAMES, cast_type_key, cast_types
from gridrail.policy.schema import Table
from gridrail.policy.view import SchemaView

# CTE bodies bound per statement at most: each read binds one again, so CTEs that read each
# other from nested queries take exponentially many (as they do SQLite, preparing them)
MAX_CTE_BINDINGS = 256
MAX_NESTING = 64
"""Query blocks and joins nested inside each other that the binder follows (it recurses once per
level, so deeper statements are refused as `statement_too_complex` rather than exhausting
Python's stack; SQLite's own parser stops at a few hundred levels too)."""
_NESTING_LABELS = frozenset({"select_stmt", "join", "parenthesized_join"})
# The sqlite grammar's statement nodes, by the catalogue's statement kind they are.
_STATEMENT_KINDS = {
    "select_stmt": "select",
    "insert_stmt": "insert",
    "update_stmt": "update",
    "delete_stmt": "delete",
}
_UNBOUND = frozenset({"unknown_column", "unbound_qualifier", "ambiguous_column"})
_RESOLUTIONS = frozenset({"ROLLBACK", "ABORT", "REPLACE", "FAIL", "IGNORE"})
_SELECT_CLAUSES = frozenset({"with_clause", "order_by_clause", "limit_clause"})


@dataclass(frozen=True)
class Violation:
    """One thing the statement may not do. ``kind`` is machine-readable (see the module
    docstring), ``message`` is for the author; ``start``/``end`` are the byte span of the
    offending text in the UTF-8 statement; ``table``/``column`` name the table and column
    involved, where there are some (in catalog spelling if the catalog has them, else as the
    statement wrote them, without quotes), but never a table or column the role may not see:
    callers get a violation whole."""

    kind: str
    message: str
    start: int
    end: int
    table: str | None = None
    column: str | None = None


class SemanticChecker:
    """Checks finished statements of one grammar against one role's view of one schema."""

    def __init__(self, compiled: CompiledGrammar, view: SchemaView):
        self.compiled = compiled
        self.view = view
        self._keyword_functions = _keyword_functions(compiled)

    def check(self, sql: str) -> list[Violation]:
        """The violations of `sql`, in statement order ([]: clean). Raises ParseError if `sql`
        is not a sentence of the grammar."""
        tree = parse_tree(self.compiled, sql)  # one parser per grammar, shared by checkers
        binder = _Binder(self.view, sql.encode("utf-8"), self._keyword_functions)
        depth = _nesting(tree)
        if depth > MAX_NESTING:
            binder.report(
                "statement_too_complex",
                f"the statement nests {depth} queries or joins inside each other; at most "
                f"{MAX_NESTING} are checked — write it with fewer levels (a CTE, or a join "
                "instead of a nested subquery)",
                tree,
            )
            return binder.violations
        binder.statement(tree.children[0])
        # a CTE read from several scopes binds its body once in each: say each thing once
        return sorted(dict.fromkeys(binder.violations), key=lambda v: (v.start, v.end))


Span = Tree | Token
Columns = dict[str, str]  # key -> name, in order
Symbols = tuple[str, ...]  # a production's terminals


class _Binder:
    """Binds the names of one statement, collecting violations (one instance per check)."""

    def __init__(
        self,
        view: SchemaView,
        data: bytes,
        keyword_functions: Mapping[str, tuple[tuple[Symbols, str], ...]],
    ):
        self.view = view
        self.rules = view.schema.rules
        self.data = data
        self.keyword_functions = keyword_functions  # `_keyword_functions`
        self.violations: list[Violation] = []
        self.cte_bindings = 0
        # while an ON is bound: the FROM items after its join that it may not read (`_On`)
        self.after_on: tuple[Source, ...] = ()
        self.inserting: Table | None = None  # an INSERT's target table, while it is bound

    # -- statements

    def statement(self, node: Tree) -> None:
        kind = _STATEMENT_KINDS.get(node.label)
        if self.view.role is not None and (kind is None or not self.view.may_hold(kind)):
            self.statement_not_allowed(node, kind)
        if kind is None:  # a statement this checker does not know how to bind
            return
        if node.label == "select_stmt":
            self.select_stmt(node, None, ChainMap())
        elif node.label == "insert_stmt":
            self.insert(node)
        else:
            self.update_or_delete(node)

    def insert(self, node: Tree) -> None:
        ctes = self.with_clause(node.child("with_clause"), ChainMap())
        scope = Scope(None, ctes)
        target = self.target(node, scope)
        self.inserting = target.table
        self.write_effects(node, node.child("insert_verb"), ())
        listed = node.child("column_name_list")
        query = node.child("insert_source")  # None: DEFAULT VALUES, which writes no value
        if listed is not None:
            for column in listed.terminals("COLUMN_NAME"):
                self.target_column(target, column)
        elif query is not None:
            (name,) = node.terminals("TABLE_NAME")
            self.read_every_column(target, name, "INSERT without a column list writes", reads=False)
        if query is not None:
            self.select_stmt(query.trees()[0], None, ctes)
        self.returning(node, target)

    def update_or_delete(self, node: Tree) -> None:
        """UPDATE and DELETE: the target (with its alias), FROM items, SET, WHERE, RETURNING."""
        ctes = self.with_clause(node.child("with_clause"), ChainMap())
        scope = Scope(None, ctes)
        target = self.target(node, scope)
        assigned = [c for a in node.trees("assignment") for c in a.terminals("COLUMN_NAME")]
        self.write_effects(node, node.child("conflict_resolution"), assigned)
        from_clause = node.child("from_clause")
        if from_clause is not None:
            self.from_clause(from_clause, scope)
        for assignment in node.trees("assignment"):
            listed = assignment.child("column_name_list")
            for column in (listed or assignment).terminals("COLUMN_NAME"):
                self.target_column(target, column)
            self.expression(assignment.trees()[-1], scope)
        where = node.child("where_clause")
        if where is not None:
            self.expression(where, scope)
        self.returning(node, target)

    def target(self, node: Tree, scope: Scope) -> Source:
        """The table an INSERT / UPDATE / DELETE writes (never a CTE), added to `scope`."""
        (name,) = node.terminals("TABLE_NAME")
        alias = _alias(node)
        table = self.schema_table(name)
        if table is not None and not self.view.may_write_table(table.name):
            writable = listing(t.name for t in self.view.writable_tables)
            self.report(
                "table_not_writable",
                f'table "{table.name}" is read-only for {self.role()}: its INSERT, UPDATE and '
                f"DELETE statements may target only {writable}",
                name,
                table.name,
            )
        source = self.table_source(name, alias, table)
        scope.sources.append(source)
        return source

    def target_column(self, target: Source, column: Token) -> None:
        """A column of the target named in an INSERT column list or an UPDATE SET: written,
        not read, but the role must see it (a hidden one is as good as absent; the row key
        that is one is said so)."""
        name = target.column(self.key(column.text), seen=True)
        if name is None:
            self.unknown_column_of(target, column, column)
        elif target.table is not None and not self.may_read(target, name):
            self.hidden_read(target.table, column, self.row_key_read(target.table, name))

    def write_effects(self, node: Tree, clause: Tree | None, assigned: Sequence[Token]) -> None:
        """What the write does beyond its target's rows. OR REPLACE (or REPLACE INTO) deletes
        the existing row a new or changed row conflicts with, and an INSERT writes over it: it
        needs delete and update; a statement that names no conflict resolution takes its
        table's, so where a constraint says ON CONFLICT REPLACE a plain INSERT or UPDATE does
        the same. Deleting rows (DELETE, or a REPLACE) and changing referenced columns run the
        actions of the foreign keys to the table, on the tables that hold them: the role must
        hold what each does there."""
        chosen = (
            None
            if clause is None
            else next((t for t in clause.tokens() if t.terminal in _RESOLUTIONS), None)
        )
        table = self.view.schema.table(node.terminals("TABLE_NAME")[0].text)
        if table is not None and not self.view.may_see_table(table.name):
            table = None  # reported as an unknown table
        if chosen is not None:
            replaces = chosen.terminal == "REPLACE"
        else:
            replaces = table is not None and table.replaces_on_conflict
        missing = [kind for kind in ("delete", "update") if not self.view.may_hold(kind)]
        if replaces and missing:
            if chosen is not None:
                reason = "REPLACE conflict resolution deletes the row that conflicts (and an "
                reason += "INSERT writes over it)"
                advice = "use OR IGNORE, OR ABORT or a plain statement instead"
            else:
                assert table is not None  # the table's own resolution
                reason = f'table "{table.name}" resolves conflicts by REPLACE (a constraint of '
                reason += "its definition says ON CONFLICT REPLACE): this statement deletes the "
                reason += "rows it conflicts with"
                advice = "write OR ABORT (or OR IGNORE), which overrides the table's"
            self.report(
                "conflict_not_allowed",
                f"{reason}, so it needs {' and '.join(missing)}, which {self.role()} does not "
                f"hold; {advice}",
                chosen or node,
            )
        if table is None:
            return
        deletes = node.label == "delete_stmt" or replaces
        changed = {self.key(c.text) for c in assigned}
        for cascade in table.cascades:
            if cascade.event == "delete" and not deletes:
                continue
            if cascade.event == "update" and not changed & set(
                self.rules.catalog_keys(cascade.columns)
            ):
                continue
            shown = not cascade.elsewhere and self.view.may_see_table(cascade.table)
            if (
                shown
                and self.view.may_write_table(cascade.table)
                and self.view.may_hold(cascade.does)
            ):
                continue
            other = f'table "{cascade.table}"' if shown else "a table it may not see"
            self.report(
                "cascade_not_allowed",
                f"{'deleting rows of' if cascade.event == 'delete' else 'changing the key of'} "
                f'table "{table.name}" {cascade.does}s rows of {other} (a foreign key\'s ON '
                f"{cascade.event.upper()} action), which {self.role()} may not "
                f"{cascade.does} there",
                node,
            )

    def returning(self, node: Tree, target: Source) -> None:
        """RETURNING's items are result columns (without `t.*`) over the target alone, under
        its table name: SQLite binds them so (an alias does not reach it, an UPDATE's FROM
        items are not in scope)."""
        clause = node.child("returning_clause")
        if clause is not None:
            (name,) = node.terminals("TABLE_NAME")
            key, shown, _ = self.source_name(name, None)
            own = replace(target, key=key, name=shown)
            self.result_columns(clause, self.reach(clause, Scope(None, ChainMap(), [own])))

    @staticmethod
    def reach(clause: Tree, scope: Scope, parent: Tree | None = None) -> Scope:
        """The names `clause` binds against (`policy.binding`: the one table Γ reads too),
        from `scope`, its query's (for RETURNING, the write's target alone); the terms of
        GROUP BY's expression list take GROUP BY's reach (`parent`)."""
        label = clause.label if clause.label in CLAUSE_REACH or parent is None else parent.label
        reach = CLAUSE_REACH[label]
        if reach is Reach.OWN:
            return scope.local()
        if reach is Reach.NONE:
            return Scope(None, scope.ctes)
        return scope

    # -- SELECT

    def select_stmt(
        self, node: Tree, outer: Scope | None, ctes: ChainMap, recursive: Cte | None = None
    ) -> Columns | None:
        """Bind a whole SELECT (WITH, compound cores, ORDER BY, LIMIT) and return the names of
        its result columns (None when they cannot be known). `recursive`: the CTE this is the
        body of; its recursive SELECTs are bound once the anchor has given its columns."""
        ctes = self.with_clause(node.child("with_clause"), ctes)
        body = next(c for c in node.trees() if c.label not in _SELECT_CLAUSES)
        parts = _compound_cores(body)
        first = len(parts) if recursive is None else self.first_recursive(parts, recursive.key)
        cores: list[tuple[Scope, Columns | None]] = []
        for n, (_, core) in enumerate(parts):
            if recursive is not None and n == first:  # the anchor is bound: it has the columns
                anchor = cores[0][1]
                recursive.columns = anchor if recursive.declared is None else recursive.declared
            cores.append(self.select_core(core, outer, ctes, recursive if n >= first else None))
        order_by = node.child("order_by_clause")
        if order_by is not None and len(cores) == 1:
            self.order_by(order_by, cores[0][0])
        elif order_by is not None:
            self.compound_order_by(order_by, cores)
        limit = node.child("limit_clause")
        if limit is not None:
            self.expression(limit, self.reach(limit, Scope(None, ctes)))
        return cores[0][1]

    def with_clause(self, node: Tree | None, ctes: ChainMap) -> ChainMap:
        """The CTEs of a WITH, bound where they are read. As in SQLite, each body sees every
        CTE of its WITH: itself (for recursion) and later ones too."""
        if node is None:
            return ctes
        ctes = ctes.new_child()
        for cte in node.trees("common_table_expr"):
            listed = cte.child("cte_column_list")
            declared = None if listed is None else self.names(listed.terminals("COLUMN_ALIAS"))
            (query,) = cte.trees("select_stmt")
            key = self.key(cte.terminals("CTE_NAME")[0].text)
            ctes[key] = Cte(key, query, declared, ctes)
        return ctes

    def cte_reference(self, cte: Cte, name: Token, scope: Scope) -> Columns | None:
        """The columns of a CTE a FROM item of `scope` names, its body bound as a FROM subquery
        there (once per enclosing scope). From inside its own body only a recursive SELECT may
        read it, once (else SQLite reports a circular reference)."""
        outer = scope.parent
        if not cte.binding and outer not in cte.bound:
            self.cte_bindings += 1
            if self.cte_bindings > MAX_CTE_BINDINGS:
                if self.cte_bindings == MAX_CTE_BINDINGS + 1:  # said once
                    self.report(
                        "statement_too_complex",
                        f"the statement's CTEs are read inside each other so often that "
                        f"binding them takes more than {MAX_CTE_BINDINGS} passes (SQLite's "
                        "too, preparing it); read each CTE in fewer places",
                        name,
                    )
                return None
            cte.binding = True
            body = self.select_stmt(cte.query, outer, cte.ctes, cte)
            cte.binding = False
            cte.bound[outer] = body if cte.declared is None else cte.declared
        if not cte.binding:
            return cte.bound[outer]
        if scope.recursive is cte and not scope.recursion_read:
            scope.recursion_read = True
            return cte.columns
        written = self.rules.unquote(name.text)[0]
        self.report(
            "circular_reference",
            f'CTE "{written}" is read inside its own definition, which SQLite refuses: only a '
            "recursive SELECT (one after the first, joined by UNION or UNION ALL) may read it, "
            "once, in its own FROM; read it outside its definition, or join the data instead",
            name,
        )
        return None  # unknown: names that would bind to it were reported with it

    def first_recursive(self, parts: list[tuple[Tree | None, Tree]], key: str) -> int:
        """Where the recursive SELECTs of the CTE `key` begin among a body's cores (len(parts)
        if it has none). SQLite's rule: from the last core leftwards, while the operator
        before a core is the last one, a UNION or UNION ALL, and the core's own FROM names
        the CTE."""
        last = _operator(parts[-1][0])
        first = len(parts)
        while first > 1 and last[0] == "union" and _operator(parts[first - 1][0]) == last:
            core = parts[first - 1][1]
            from_clause = core.child("from_clause")
            named = () if from_clause is None else _from_table_names(from_clause)
            if not any(self.key(token.text) == key for token in named):
                break
            first -= 1
        return first

    def select_core(
        self, core: Tree, outer: Scope | None, ctes: ChainMap, recursive: Cte | None = None
    ) -> tuple[Scope, Columns | None]:
        """One SELECT ... FROM ... WHERE ... GROUP BY ... HAVING, or a VALUES list. Result
        aliases become visible after the result columns, so WHERE, GROUP BY and HAVING (not
        FROM or the result columns) may use them, as SQLite allows; GROUP BY terms cannot
        reach outer queries. `recursive`: the CTE this core is a recursive SELECT of."""
        scope = Scope(outer, ctes, recursive=recursive)
        if core.label == "values_clause":
            self.expression(core, scope)
            width = len(core.trees("value_row")[0].trees("expr_list")[0].trees())
            return scope, self.names(f"column{i}" for i in range(1, width + 1))
        from_clause = core.child("from_clause")
        if from_clause is not None:
            self.from_clause(from_clause, scope)
        (result,) = core.trees("result_columns")
        columns, scope.aliases = self.result_columns(result, scope)
        where = core.child("where_clause")
        if where is not None:
            self.expression(where, scope)
        group_by = core.child("group_by_clause")
        for clause in () if group_by is None else group_by.trees():
            self.expression(clause, self.reach(clause, scope, group_by))
        return scope, columns

    def result_columns(self, node: Tree, scope: Scope) -> tuple[Columns | None, Columns]:
        """Bind the result columns; return their names (None if a `*` covers an unknown
        source) and the aliases they declare."""
        columns: Columns | None = {}
        aliases: Columns = {}
        for item in node.trees():
            if item.label == "expr_column":
                expr = item.trees()[0]
                self.expression(expr, scope)
                alias = item.terminals("COLUMN_ALIAS")
                key, name = self.output_name(alias[0] if alias else expr)
                if alias:
                    aliases[key] = name
                if columns is not None:
                    columns.setdefault(key, name)
                continue
            sources = self.star_sources(item, scope)
            for source in sources:
                self.read_every_column(source, item, f'"{self.text(item)}" reads')
                if columns is not None and source.columns is not None:
                    for key, name in source.columns.items():
                        # a hidden column (its read is reported) gives no name to list later
                        if key in source.hidden:
                            continue
                        if item.label == "table_all_columns" or key not in source.merged:
                            columns.setdefault(key, name)
            if any(s.columns is None for s in sources):
                columns = None
        return columns, aliases

    def star_sources(self, item: Tree, scope: Scope) -> list[Source]:
        """The sources `*` (all of this core's) or `T.*` (each named T: SQLite expands every
        one, where two FROM items share the name) expands."""
        qualifier = item.terminals("QUALIFIER")
        if not qualifier:
            return list(scope.sources)
        key = self.key(qualifier[0].text[:-1])
        found = [s for s in scope.sources if s.key == key]
        if not found:
            self.unbound_qualifier(qualifier[0], scope)
        return found

    def output_name(self, node: Span) -> tuple[str, str]:
        """(key, name) of a result column as SQLite names it (`sqlite3ColumnsFromExprList`, which
        runs before names are bound): its alias; else, past COLLATE clauses and parentheses,
        the column name a column reference writes, or the name a double-quoted string spells
        whether or not it binds a column; else the expression's text. A NATURAL join or USING
        around a subquery merges the columns so named."""
        node = _named_part(node)
        if isinstance(node, Tree) and node.label == "column_ref":
            node = node.terminals("COLUMN_NAME")[0]
        elif isinstance(node, Tree) and node.label == "string" and node.terminals("DQ_STRING"):
            node = node.terminals("DQ_STRING")[0]
        if isinstance(node, Token):
            return self.key(node.text), self.rules.unquote(node.text)[0]
        text = self.text(node)
        return self.rules.key(text, False), text

    def order_by(self, node: Tree, scope: Scope) -> None:
        """A bare name in ORDER BY is a result alias first, then a column of this core (SQLite's
        order; ORDER BY terms cannot reach outer queries)."""
        for term in node.trees("ordering_term"):
            expr = term.trees()[0]
            if self.bare_name(expr) not in scope.aliases:
                self.expression(expr, self.reach(node, scope))

    def compound_order_by(self, node: Tree, cores: list[tuple[Scope, Columns | None]]) -> None:
        """ORDER BY of a compound names result columns: a bare name of any core's result, or
        an expression that binds in one of the cores (the first that binds it is reported)."""
        for term in node.trees("ordering_term"):
            expr = term.trees()[0]
            key = self.bare_name(expr)
            if key is not None and any(c is None or key in c for _, c in cores):
                continue
            attempts = [self.trial(expr, self.reach(node, scope)) for scope, _ in cores]
            bound = [found for found in attempts if not any(v.kind in _UNBOUND for v in found)]
            self.violations += (bound or attempts)[0]

    def trial(self, expr: Tree, scope: Scope) -> list[Violation]:
        """The violations binding `expr` in `scope` would report, without reporting them."""
        saved, self.violations = self.violations, []
        try:
            self.expression(expr, scope)
            return self.violations
        finally:
            self.violations = saved

    def bare_name(self, expr: Tree) -> str | None:
        """The key of an unqualified column reference, else None."""
        if expr.label != "column_ref" or expr.terminals("QUALIFIER"):
            return None
        return self.key(expr.terminals("COLUMN_NAME")[0].text)

    # -- FROM

    def from_clause(self, node: Tree, scope: Scope) -> None:
        """Add the FROM items to `scope`; ON conditions are bound once all are there."""
        conditions: list[_On] = []
        self.join_list(node.trees()[0], scope, scope, conditions)
        for on in conditions:
            self.after_on = on.after
            try:
                self.expression(on.condition, on.scope)
            finally:
                self.after_on = ()

    def join_list(
        self, node: Tree, scope: Scope, names: Scope, conditions: list[_On]
    ) -> list[Source]:
        """Add the sources of one list of joins (a FROM clause, or a parenthesized join SQLite
        reads as a subquery) to `scope`, and its ON conditions, bound in `names`, to
        `conditions`; return the sources, left to right. SQLite refuses an ON that reads an
        item after its join ("ON clause references tables to its right") in an outer join,
        and in every join of a list that has a RIGHT or FULL one."""
        joins: list[tuple[Tree, set[str], int]] = []  # ON, its join's kinds, items up to it
        sources = self.join_source(node, scope, names, conditions, joins, True)
        right = any(kinds & {"right", "full"} for _, kinds, _ in joins)
        for condition, kinds, end in joins:
            strict = right or "left" in kinds
            conditions.append(_On(condition, names, tuple(sources[end:]) if strict else ()))
        return sources

    def join_source(
        self,
        node: Tree,
        scope: Scope,
        names: Scope,
        conditions: list[_On],
        joins: list[tuple[Tree, set[str], int]],
        first: bool,
    ) -> list[Source]:
        """Add the sources of one FROM item or join to `scope`; return them, left to right.
        `first`: the item begins its list, where SQLite reads a parenthesized join as if it
        had no parentheses; elsewhere as a subquery, whose ON conditions see only its own
        items and the queries around this one."""
        if node.label == "parenthesized_join":
            if first:
                return self.join_source(node.trees()[0], scope, names, conditions, joins, True)
            own = Scope(names.parent, names.ctes, recursive=names.recursive)
            own.sources.extend(self.join_list(node.trees()[0], scope, own, conditions))
            for source in own.sources:  # SQLite's subquery is `(SELECT * FROM <the join>)`
                self.read_every_column(
                    source,
                    node,
                    "a parenthesized join after a FROM clause's first item is a subquery "
                    "`SELECT * FROM …` to SQLite, which reads",
                    advice="write the join without parentheses, or as the first item",
                )
            return own.sources
        if node.label != "join":
            source = self.from_item(node, scope)
            scope.sources.append(source)
            return [source]
        left_node, operator, right_node, *constraint = node.trees()
        left = self.join_source(left_node, scope, names, conditions, joins, first)
        right = self.join_source(right_node, scope, names, conditions, joins, False)
        if operator.terminals("NATURAL"):
            shared = {k for s in right if s.columns for k in s.columns if _exposing(left, k)}
            how = "NATURAL JOIN compares the columns its two sides share, among them one"
            self.merge_columns(left, right, shared, operator, how)
        for condition in constraint:
            if condition.label == "on":
                kinds = {t.label for t in operator.trees()}
                joins.append((condition, kinds, len(left) + len(right)))
            else:
                self.using(condition, left, right)
        return left + right

    def using(self, node: Tree, left: list[Source], right: list[Source]) -> None:
        """USING (c, ...): each column must be on both sides (as the role sees them); the join
        then merges it."""
        (listed,) = node.trees("column_name_list")
        for column in listed.terminals("COLUMN_NAME"):
            key = self.key(column.text)
            name = self.rules.unquote(column.text)[0]
            for side, sources in (("left", left), ("right", right)):
                if not _exposed(sources, key):
                    self.report(
                        "unknown_column",
                        f"the {side} side of the join ({', '.join(s.label for s in sources)}) "
                        f'has no column "{name}" that {self.role()} may use; USING names '
                        "columns that both sides have",
                        column,
                        column=name,
                    )
                    break
            else:
                how = f"USING ({name}) compares that column of each side, among them one"
                self.merge_columns(left, right, {key}, column, how)

    def merge_columns(
        self, left: list[Source], right: list[Source], keys: Iterable[str], span: Span, how: str
    ) -> None:
        """USING / NATURAL: the join compares these columns of both sides (so reads them);
        afterwards a bare name binds to the left one. `how`: what compares them, as a hidden
        one's report begins."""
        for key in keys:
            for source in (*_exposing(left, key)[:1], *_exposing(right, key)):
                self.read(source, source.columns[key], span, how)
            for source in right:
                source.merged.add(key)

    def from_item(self, node: Tree, scope: Scope) -> Source:
        """A table, view or CTE reference, or a subquery (which cannot see this core's other
        FROM items, only the enclosing queries)."""
        alias = _alias(node)
        if node.label == "subquery_table":
            (query,) = node.trees("select_stmt")
            columns = self.select_stmt(query, scope.parent, scope.ctes)
            # SQLite gives a FROM subquery a row key (NULL) in some versions
            sqlite = self.view.schema.dialect == "sqlite"
            if alias is None:
                return Source(None, None, "subquery", None, columns, sqlite, sqlite)
            name = self.rules.unquote(alias.text)[0]
            return Source(self.key(alias.text), name, "subquery", None, columns, sqlite, sqlite)
        (name,) = node.terminals("TABLE_NAME")
        key = self.key(name.text)
        # in a recursive SELECT its CTE's name is the CTE; elsewhere a CTE shadows a table
        cte = scope.recursive if scope.recursive and scope.recursive.key == key else None
        if cte is not None or key in scope.ctes:
            columns = self.cte_reference(cte or scope.ctes[key], name, scope)
            return Source(*self.source_name(name, alias), None, columns)
        table = self.schema_table(name)
        if table is not None and not self.view.may_read:  # count(*) reads the table too
            self.read_not_allowed(name, f'table "{table.name}"', table.name)
        return self.table_source(name, alias, table)

    def source_name(self, name: Token, alias: Token | None) -> tuple[str, str, str]:
        """(qualifier key, qualifier name, origin) of a FROM item naming a table or CTE."""
        written = self.rules.unquote(name.text)[0]
        qualifier = alias or name
        return self.key(qualifier.text), self.rules.unquote(qualifier.text)[0], written

    def table_source(self, name: Token, alias: Token | None, table: Table | None) -> Source:
        """The source for a schema table (`table`: None if the role may see none of that name,
        which was reported: its columns are unknown, whether the schema has it or not, so
        that what follows says nothing of a hidden one)."""
        named = self.source_name(name, alias)
        if table is None:
            return Source(*named, None, None)
        columns = {self.rules.catalog_key(c.name): c.name for c in table.columns}
        hidden = frozenset(
            k for k, c in columns.items() if not self.view.may_see_column(table.name, c)
        )
        sqlite = self.view.schema.dialect == "sqlite"
        return Source(
            *named,
            table,
            columns,
            has_rowid=sqlite and table.has_rowid is not False,
            rowid_uncertain=sqlite and table.has_rowid is None,
            hidden=hidden,
        )

    def schema_table(self, name: Token) -> Table | None:
        """The schema table `name` denotes, if the role may see it (else the violation is
        reported, the same whether the schema has a hidden table of that name or none, and
        None returned)."""
        table = self.view.schema.table(name.text)
        if table is not None and self.view.may_see_table(table.name):
            return table
        written = self.rules.unquote(name.text)[0]
        self.report(
            "unknown_table",
            f'no table or view named "{written}" that {self.role()} may use; tables it may '
            f"use: {listing(t.name for t in self.view.tables)}",
            name,
            written,
        )
        return None

    # -- expressions

    def expression(self, node: Tree, scope: Scope) -> None:
        """Bind every name in an expression (or clause); subqueries are scopes of their own,
        inside this one (correlated references bind outwards). Iterative: a long chain of
        operators is a deep tree."""
        pending = [node]
        while pending:
            node = pending.pop()
            if node.label == "column_ref":
                self.column_ref(node, scope)
                continue
            if node.label == "select_stmt":
                self.select_stmt(node, scope, scope.ctes)
                continue
            if node.label == "function_call":
                self.function_call(node)
            elif (function := self.keyword_function(node)) is not None:
                self.call(function, node)
            elif node.label == "string":
                self.double_quoted(node, scope)
            elif node.label == "cast_expr":
                self.cast(node)
            elif node.label == "like" and _spelled(node.child("match_operator"), "MATCH"):
                self.full_text_match(node, scope)
            pending.extend(reversed(node.trees()))

    def column_ref(self, node: Tree, scope: Scope) -> None:
        (column,) = node.terminals("COLUMN_NAME")
        key = self.key(column.text)
        qualifier = node.terminals("QUALIFIER")
        if not qualifier:
            self.bind(key, column, scope)
            return
        found = self.qualified(qualifier[0], key, scope)
        if found is None:
            self.shadowed(node)
            return
        sources, having = found
        if not sources:
            self.unbound_qualifier(qualifier[0], scope)
        elif not having:
            self.unknown_column_of(sources[0], column, node)
        elif len(having) > 1:
            self.ambiguous(node, self.text(node), self.rules.unquote(column.text)[0], having)
        else:
            self.read(having[0], having[0].column(key) or key, node)

    def binding(self, key: str, scope: Scope) -> Lookup | None:
        """Where a bare name binds, as the role may be told: SQLite's binding, unless that is a
        column the role may not see; then the role's (`seen`: where a name no table has would
        bind), or None where that takes a column or alias the role sees (SQLite's reading of
        the hidden one is refused all the same: `shadowed`)."""
        found = scope.lookup(key)
        if not any(key in s.hidden for s in found.sources):
            return found
        seen = scope.lookup(key, seen=True)
        if seen.alias or (len(seen.sources) == 1 and seen.sources[0].is_known):
            return None
        return replace(seen, seen=True)

    def bind(self, key: str, column: Token, scope: Scope) -> None:
        """Judge a bare column name, bound by `binding`."""
        found = self.binding(key, scope)
        if found is None:
            self.shadowed(column)
            return
        if found.alias:
            return
        if not found.sources:
            self.unknown_column(column, scope)
        elif len(found.sources) > 1:
            name = self.rules.unquote(column.text)[0]
            self.ambiguous(column, name, name, found.sources)
        else:
            source = found.sources[0]
            self.read(source, source.column(key) or key, column)
        # with guessed row keys it may bind elsewhere: judge those too (the role's binding is
        # refused already)
        if key in ROWID_KEYS and not found.seen:
            for other in scope.row_key_candidates(key):
                if other not in found.sources:
                    self.read(other, other.column(key) or key, column)

    def full_text_match(self, node: Tree, scope: Scope) -> None:
        """`x MATCH q` over a full-text table searches the columns `q` names (FTS3/4's
        `body:term`), not only x's, and SQLite's authorizer hears a read of x alone: so it
        reads every column of x's table. Where x is no column of a table the statement names,
        SQLite may still flatten it into one (a subquery's, CTE's or view's column), so it is
        refused (over a table that is not full-text, SQLite refuses MATCH when it runs)."""
        left = _named_part(node.children[0])
        found = left if isinstance(left, Tree) and left.label == "column_ref" else None
        source = self.column_source(found, scope) if found is not None else None
        if source is not None and source.table is not None and not source.table.is_view:
            self.read_every_column(
                source,
                node,
                f'"{self.text(node)}" is a full-text query, which may search',
                advice="match only in a table whose every column the role sees",
            )
            return
        self.report(
            "full_text_query",
            f'"{self.text(node)}": a full-text MATCH is allowed only on a column of a table the '
            "statement names (its query may search the table's other columns, `body:term`, "
            "and a subquery's, CTE's or view's column may stand for a hidden one)",
            node,
        )

    def column_source(self, node: Tree, scope: Scope) -> Source | None:
        """The one FROM item a column reference binds to, as the role may be told (None: none,
        several, or an alias)."""
        (column,) = node.terminals("COLUMN_NAME")
        key = self.key(column.text)
        qualifier = node.terminals("QUALIFIER")
        if qualifier:
            found = self.qualified(qualifier[0], key, scope)
            sources = [] if found is None else found[1]
        else:
            bound = self.binding(key, scope)
            sources = [] if bound is None or bound.alias else list(bound.sources)
        return sources[0] if len(sources) == 1 else None

    def qualified(
        self, qualifier: Token, key: str, scope: Scope
    ) -> tuple[list[Source], list[Source]] | None:
        """The FROM items `qualifier` names, and those of them with the column `key` (for
        `t JOIN t USING (c)`, t.c is the left one), as the role may be told (`binding`): None
        where SQLite binds a hidden column and the role's binding a column it sees."""
        wanted = self.key(qualifier.text[:-1])
        sources, having = self.named(wanted, key, scope, seen=False)
        if not any(key in s.hidden for s in having):
            return sources, having
        sources, having = self.named(wanted, key, scope, seen=True)
        return None if any(s.is_known for s in having) else (sources, having)

    @staticmethod
    def named(wanted: str, key: str, scope: Scope, seen: bool) -> tuple[list[Source], list[Source]]:
        """`qualified`, as SQLite binds it or as the role sees the columns (`seen`)."""
        sources = list(scope.qualifier(wanted, key, seen))
        having = [s for s in sources if s.column(key, seen) is not None]
        if len(having) > 1:
            having = [s for s in having if key not in s.merged] or having
        return sources, having

    def double_quoted(self, node: Tree, scope: Scope) -> None:
        """A double-quoted string reads the column of that name if one is in scope. It is
        refused unless that is a column the role sees (or a result alias), or it binds nothing
        where no table in scope hides a column: a string and a hidden column get one answer,
        which depends on no hidden name."""
        tokens = node.terminals("DQ_STRING")
        if not tokens:
            return
        token = tokens[0]
        name = self.rules.unquote(token.text)[0]
        key = self.rules.key(name, True)
        found = self.binding(key, scope)
        if found is None:
            self.quoted_string(token)
            return
        if len(found.sources) > 1 and found.sources[0].has_column(key):
            self.ambiguous(token, name, name, found.sources)
        elif len(found.sources) == 1:
            self.quoted_read(found.sources[0], key, token)
        elif not found.alias and self.hides_columns(scope):
            self.quoted_string(token)  # a string to SQLite: no column, or several row keys
        if key in ROWID_KEYS and not found.seen:  # as in `bind`
            for other in scope.row_key_candidates(key):
                if other not in found.sources:
                    self.quoted_read(other, key, token)

    @staticmethod
    def hides_columns(scope: Scope) -> bool:
        """Has a table in scope columns the role may not see (which a double-quoted string
        might name)?"""
        return any(s.hidden for level in scope.levels() for s in level.sources)

    def quoted_read(self, source: Source, key: str, token: Token) -> None:
        """A double-quoted string `token` that binds to the column `key` of `source`."""
        table = source.table
        if table is None:
            return
        column = self.column_read(table, source.column(key) or key)
        if not self.may_read(source, column):  # the row key: a hidden column it may be
            self.quoted_string(token)
        elif not self.view.may_read:
            what = f'{token.text} in double quotes (column "{column}" of "{table.name}")'
            self.read_not_allowed(token, what, table.name, column)

    def quoted_string(self, token: Token) -> None:
        """A double-quoted string that binds no column the role sees: SQLite would read it as
        a string, or as a column the role may not see, and the message is the same."""
        self.report(
            "double_quoted_column",
            f"{token.text} in double quotes is no column {self.role()} may read here, and "
            "SQLite reads a double-quoted name as a column where one is in scope; for a "
            f"string, use single quotes: {_single_quoted(self.rules.unquote(token.text)[0])}",
            token,
        )

    def keyword_function(self, node: Tree) -> str | None:
        """The function `node` calls if its production spells one as a keyword or operator."""
        calls = self.keyword_functions.get(node.label)
        if not calls:
            return None
        spelled = tuple(c.terminal for c in node.children if isinstance(c, Token))
        return next((function for terminals, function in calls if terminals == spelled), None)

    def function_call(self, node: Tree) -> None:
        token = next(node.tokens())  # the function's lexeme, with its "(": a call's first token
        function = token.text.rstrip("(").strip().lower()
        self.call(function, token)
        if function == "last_insert_rowid" and self.inserting is not None:
            self.inserted_row_key(self.inserting, token)

    def inserted_row_key(self, table: Table, token: Token) -> None:
        """`last_insert_rowid()` in an INSERT returns the row key of the row it wrote last (of a
        multi-row VALUES, the row before; `max(key) + 1` on a fresh table's end): a read of
        the target's row key. (Outside an INSERT it is 0: every statement runs on a
        connection of its own.)"""
        if not may_read_row_key(self.view, table):
            what = "last_insert_rowid() returns the row key of the row an INSERT wrote, a column"
            self.hidden_read(table, token, f'{what} of table "{table.name}"')

    def call(self, function: str, token: Span) -> None:
        if not self.view.may_call(function):
            allowed = self.view.role.functions if self.view.role else None
            self.report(
                "function_not_allowed",
                f'function "{function}" is not allowed for {self.role()}; functions it may '
                f"call: {listing(sorted(allowed or ()))}",
                token,
            )

    def cast(self, node: Tree) -> None:
        """`CAST(x AS t)`: where the database looks `t` up in its catalogs (PostgreSQL), only a
        built-in type that looks nothing up (`policy.dialect.CAST_TYPES`): a table's row type
        or an OID alias type (`CAST('salaries' AS regclass)`) would tell whether a table the
        role may not see exists. The message quotes only what was written."""
        allowed = cast_types(self.view.schema.dialect)
        type_name = node.child("type_name")
        if allowed is None or type_name is None:
            return
        words = [t.text for t in type_name.terminals("TYPE_NAME")]
        if cast_type_key(self.rules, words) in allowed:
            return
        database = DATABASE_NAMES.get(self.view.schema.dialect, self.view.schema.dialect)
        self.report(
            "cast_not_allowed",
            f'CAST to "{" ".join(words)}" is not allowed on {database}, which looks a type '
            "name up in its catalogs (where the OID alias types such as regclass, and a table's "
            "row type, would tell what exists); cast to a built-in type that looks nothing up: "
            f"{', '.join(sorted(allowed))}",
            type_name,
        )

    # -- policy and reports

    def may_read(self, source: Source, column: str) -> bool:
        """Only tables are under policy: what a subquery or CTE selects was judged in it."""
        table = source.table
        if table is None:
            return True
        if table.column(column, self.rules) is None:  # rowid, oid, _rowid_
            return may_read_row_key(self.view, table)
        return self.view.may_see_column(table.name, column)

    def column_read(self, table: Table, column: str) -> str:
        """The column of `table` that a reference to `column` reads: itself, or for a row key
        name the INTEGER PRIMARY KEY it is an alias of (else "rowid", the implicit key), as
        SQLite's authorizer names it too."""
        if table.column(column, self.rules) is not None:
            return column
        return table.rowid_column or "rowid"

    def read(self, source: Source, column: str, span: Span, how: str = "") -> None:
        """A read of `column` of `source` that SQLite binds (a column the role sees or a row key,
        or `how`: one NATURAL / USING compares): the role must see it, and hold select."""
        if source in self.after_on:
            self.report(
                "unknown_column",
                f'this ON reads "{column}" of {source.label}, which comes after its join: '
                "SQLite refuses that in an outer join's ON, and in every ON of a FROM clause "
                'that has a RIGHT or FULL join ("ON clause references tables to its right"); '
                "join that item first, or move the condition to WHERE",
                span,
                column=column,
            )
            return
        table = source.table
        if table is None:
            return
        if not self.may_read(source, column):
            what = f'{how} of table "{table.name}"' if how else self.row_key_read(table, column)
            self.hidden_read(table, span, what)
        elif not self.view.may_read:
            what = f'column "{column}" of table "{table.name}"'
            self.read_not_allowed(span, what, table.name, self.column_read(table, column))

    def row_key_read(self, table: Table, column: str) -> str:
        """How `hidden_read` says that `column` (a row key name, as the statement wrote it)
        reads a hidden column: the row key, or a real column of that name where it may bind
        to one (a guessed row key elsewhere)."""
        if table.column(column, self.rules) is not None:
            return f'"{column}" may bind to a column of table "{table.name}"'
        if table.has_rowid is None:
            return (
                f'"{column}" reads the row key of table "{table.name}", which may be its INTEGER '
                "PRIMARY KEY (the schema does not say), and so a column"
            )
        key = "its INTEGER PRIMARY KEY" if table.rowid_column else "its implicit row key"
        return f'"{column}" reads the row key of table "{table.name}" ({key}), a column'

    def hidden_read(self, table: Table, span: Span, what: str, advice: str = "") -> None:
        """A read of a column of `table` the role may not see that the statement does not name
        (`what` says how it reads it): said without naming the column."""
        visible = listing(c.name for c in self.view.columns(table))
        self.report(
            "column_not_visible",
            f"{what} that {self.role()} may not see; {advice or f'visible columns: {visible}'}",
            span,
            table=table.name,
        )

    def shadowed(self, span: Span) -> None:
        """A name SQLite binds to a column the role may not see, where the role's binding takes
        a column or result alias it sees: refused, and said as little as can be (refusing it
        says that much)."""
        self.report(
            "column_not_visible",
            f'"{self.text(span)}" binds here, as SQLite binds names (the innermost table that has '
            "the column, before a result alias or an outer query), to a column that "
            f"{self.role()} may not see; qualify it with the table or alias it should read, or "
            "rename the result alias it means",
            span,
        )

    def read_every_column(
        self, source: Source, span: Span, verb: str, reads: bool = True, advice: str = ""
    ) -> None:
        """`*`, `T.*` (`reads`), or an INSERT without a column list (it writes): every column
        of a table. `advice`: what to do instead (default: name the visible columns)."""
        table = source.table
        if table is None:
            return
        visible = self.view.columns(table)
        if reads and not self.view.may_read:
            for column in visible:
                what = f'{verb} every column, so column "{column.name}" of table "{table.name}"'
                self.read_not_allowed(span, what, table.name, column.name)
        if source.hidden:
            shown = listing(c.name for c in visible)
            self.hidden_read(
                table,
                span,
                f'{verb} every column of table "{table.name}", including columns',
                advice or f"name the columns instead (visible: {shown})",
            )

    def read_not_allowed(
        self, span: Span, what: str, table: str, column: str | None = None
    ) -> None:
        """A read by a role that does not hold select (so there is a role)."""
        kinds = listing(sorted(self.view.role.statements))  # type: ignore[union-attr]
        self.report(
            "read_not_allowed",
            f"{what} would be read, and reading any table or column needs select, which "
            f"{self.role()} does not hold (it holds: {kinds}); write without reading: no "
            "column, table, RETURNING or subquery over a table",
            span,
            table=table,
            column=column,
        )

    def statement_not_allowed(self, node: Tree, kind: str | None) -> None:
        """A statement of a kind the role does not hold (so there is a role)."""
        held = listing(k.upper() for k in sorted(self.view.role.statements))  # type: ignore[union-attr]
        what = kind.upper() if kind else f"a {node.label} statement"
        self.report(
            "statement_not_allowed",
            f"{what} is not a statement {self.role()} may write; it may write: {held}",
            next(node.tokens()),
        )

    def unknown_column(self, column: Token, scope: Scope) -> None:
        """A bare name that binds no column the role sees (none exists, or it is hidden)."""
        name = self.rules.unquote(column.text)[0]
        sources = [source for level in scope.levels() for source in level.sources]
        where = "; ".join(f"{s.label}: {self.column_names(s)}" for s in sources)
        self.report(
            "unknown_column",
            f'no table in scope has a column "{name}" that {self.role()} may use; '
            + (f"columns in scope: {where}" if sources else "the query reads no table (no FROM)"),
            column,
            column=name,
        )

    def unknown_column_of(self, source: Source, column: Token, span: Span) -> None:
        """A column `source` lacks as the role sees it (none exists, or it is hidden)."""
        name = self.rules.unquote(column.text)[0]
        self.report(
            "unknown_column",
            f'{source.label} has no column "{name}" that {self.role()} may use; its columns: '
            f"{self.column_names(source)}",
            span,
            table=source.table.name if source.table else None,
            column=name,
        )

    def unbound_qualifier(self, qualifier: Token, scope: Scope) -> None:
        named = [
            source.name if source.name == source.origin else f"{source.name} ({source.origin})"
            for level in scope.levels()
            for source in level.sources
            if source.name is not None
        ]
        self.report(
            "unbound_qualifier",
            f'"{qualifier.text[:-1]}" is not a table or alias in scope; qualifiers in scope: '
            + (", ".join(named) or "none (the query reads no named table)"),
            qualifier,
        )

    def ambiguous(self, span: Span, written: str, column: str, sources: Iterable[Source]) -> None:
        """`written`: the reference as messages quote it (`id`, `T.id`)."""
        labels = [s.label for s in sources]
        self.report(
            "ambiguous_column",
            f'column "{written}" is ambiguous: {" and ".join(labels)} '
            f"{'both' if len(labels) == 2 else 'all'} have it; qualify it with the table or "
            "alias it should read",
            span,
            column=column,
        )

    def column_names(self, source: Source) -> str:
        """The columns a message may list for a source: what the role sees of a table."""
        if source.table is not None:
            return listing(c.name for c in self.view.columns(source.table))
        return listing(source.columns.values()) if source.columns is not None else "unknown"

    def role(self) -> str:
        return f'role "{self.view.role.name}"' if self.view.role else "this role"

    def report(
        self,
        kind: str,
        message: str,
        span: Span,
        table: str | None = None,
        column: str | None = None,
    ) -> None:
        self.violations.append(Violation(kind, message, span.start, span.end, table, column))

    # -- names

    def key(self, written: str) -> str:
        """The comparison key of an identifier as written (quotes allowed)."""
        name, quoted = self.rules.unquote(written)
        return self.rules.key(name, quoted)

    def names(self, written: Iterable[str | Token]) -> Columns:
        """Declared names (tokens or text) as key -> name, first spelling winning."""
        out: Columns = {}
        for item in written:
            text = item.text if isinstance(item, Token) else item
            out.setdefault(self.key(text), self.rules.unquote(text)[0])
        return out

    def text(self, span: Span) -> str:
        return self.data[span.start : span.end].decode("utf-8", "surrogateescape")


def _spelled(node: Tree | None, terminal: str) -> bool:
    """Is `node` a production whose one token is a `terminal`?"""
    return node is not None and [c.terminal for c in node.children] == [terminal]


def _named_part(node: Span) -> Span:
    """The part of a result column's expression SQLite names the column by: the expression
    without its COLLATE clauses and parentheses (`("x") COLLATE nocase` is named x)."""
    while isinstance(node, Tree):
        if node.label == "collate":
            node = node.children[0]
        elif node.label == "primary" and isinstance(node.children[0], Token):
            node = node.children[1]  # `( expr )`: the only unaliased production of primary
        else:
            break
    return node


def _nesting(tree: Tree) -> int:
    """The most `_NESTING_LABELS` nodes on one root-to-leaf path (iteratively: the tree may be
    deep)."""
    deepest = 0
    pending = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        depth += node.label in _NESTING_LABELS
        deepest = max(deepest, depth)
        pending.extend((child, depth) for child in node.trees())
    return deepest


def _compound_cores(body: Tree) -> list[tuple[Tree | None, Tree]]:
    """The SELECT cores of a compound (left-nested `compound` nodes), left to right, each with
    the operator before it (None for the first)."""
    parts: list[tuple[Tree | None, Tree]] = []
    while body.label == "compound":
        body, operator, core = body.trees()
        parts.append((operator, core))
    parts.append((None, body))
    return parts[::-1]


def _operator(node: Tree | None) -> tuple[str, bool]:
    """A compound operator as (union | intersect | except_, ALL?); ("", False) for none."""
    return ("", False) if node is None else (node.label, bool(node.terminals("ALL")))


def _from_table_names(from_clause: Tree) -> Iterator[Token]:
    """The table (or CTE) names of a FROM's own items, parenthesized joins included, not those
    inside its subqueries."""
    pending = list(from_clause.trees())
    while pending:
        node = pending.pop()
        if node.label == "table":
            yield node.terminals("TABLE_NAME")[0]
        elif node.label in ("join", "parenthesized_join"):
            pending.extend(node.trees())


@dataclass(frozen=True)
class _On:
    """An ON condition, the scope it binds in, and the FROM items after its join it may not
    read (empty: any)."""

    condition: Tree
    scope: Scope
    after: tuple[Source, ...]


def _alias(node: Tree) -> Token | None:
    alias = node.child("table_alias")
    return None if alias is None else alias.terminals("TABLE_ALIAS")[0]


def _exposing(sources: list[Source], key: str) -> list[Source]:
    """The known sources a NATURAL / USING column binds to: a real column, never the row key."""
    return [s for s in sources if s.columns is not None and key in s.columns and s.exposes(key)]


def _exposed(sources: list[Source], key: str) -> bool:
    """Has a side of a join the column USING names (a real one, never the row key; one the
    role sees)?"""
    return any(
        s.exposes(key, seen=True) and (not s.is_known or s.has_column(key, seen=True))
        for s in sources
    )


def may_read_row_key(view: SchemaView, table: Table) -> bool:
    """May the role read the row key of `table` (`rowid`, `oid`, `_rowid_`)? It is the INTEGER
    PRIMARY KEY column where the table has one; else the implicit key, which policy sees as a
    column named rowid (an allow-list that does not name it hides it). A schema written by hand
    does not say which it is, so then every column must be visible, and rowid too."""
    if table.has_rowid is None:
        names = [c.name for c in table.columns] + ["rowid"]
        return all(view.may_see_column(table.name, name) for name in names)
    return view.may_see_column(table.name, table.rowid_column or "rowid")


def _single_quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _keyword_functions(compiled: CompiledGrammar) -> dict[str, tuple[tuple[Symbols, str], ...]]:
    """Tree label -> (the production's terminals, the function it calls), for the productions
    that spell functions as keywords or operators (its construct catalogue's
    [function_keywords]; none for a grammar without a bundled catalogue). A label can be
    several productions' and only some of them calls (`match_operator: REGEXP`, not GLOB): a
    node is a call where its tokens are the production's terminals."""
    grammar = compiled.grammar
    try:
        catalogue = ConstructCatalogue.for_grammar(grammar)
    except PolicyError:
        return {}
    by_index = {p.index: p for p in grammar.productions}
    terminals = {t.name for t in grammar.terminals}
    out: dict[str, tuple[tuple[Symbols, str], ...]] = {}
    for function, productions in catalogue.function_keywords.items():
        for i in sorted(productions):
            production = by_index[i]
            spelled = tuple(s for s in production.rhs if s in terminals)
            label = production.alias or production.lhs
            out[label] = (*out.get(label, ()), (spelled, function))
    return out
