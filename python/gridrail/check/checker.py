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
    `column_not_visible` for each hidden column (name the visible columns instead);
  * INSERT without a column list (and not DEFAULT VALUES) writes every column, so the same
    holds for its target;
  * NATURAL JOIN and USING compare the shared columns of both sides;
  * a double-quoted string where an expression stands: SQLite reads `"salary"` as the column
    salary when one is in scope (and as a string otherwise), so it is a `double_quoted_column`
    when that column is hidden.

Violation kinds: unknown_table, table_not_visible, unknown_column, column_not_visible,
ambiguous_column, unbound_qualifier, function_not_allowed, double_quoted_column.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterable
from dataclasses import dataclass

from gridrail.check.scopes import Cte, Lookup, Scope, Source
from gridrail.grammar.compiled import CompiledGrammar
from gridrail.parse.tree import Token, Tree, parse_tree
from gridrail.policy.schema import Table
from gridrail.policy.view import SchemaView

_LISTED = 20  # names listed in a message before "and N more"
_UNBOUND = frozenset({"unknown_column", "unbound_qualifier", "ambiguous_column"})
_SELECT_CLAUSES = frozenset({"with_clause", "order_by_clause", "limit_clause"})


@dataclass(frozen=True)
class Violation:
    """One thing the statement may not do. ``kind`` is machine-readable (see the module
    docstring), ``message`` is for the author; ``start``/``end`` are the byte span of the
    offending text in the UTF-8 statement; ``table``/``column`` name the table and column
    involved, where there are some (in catalog spelling if the catalog has them, else as the
    statement wrote them, without quotes)."""

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

    def check(self, sql: str) -> list[Violation]:
        """The violations of `sql`, in statement order ([]: clean). Raises ParseError if `sql`
        is not a sentence of the grammar."""
        tree = parse_tree(self.compiled, sql)  # one parser per grammar, shared by checkers
        binder = _Binder(self.view, sql.encode("utf-8"))
        binder.statement(tree.children[0])
        return sorted(binder.violations, key=lambda v: (v.start, v.end))


Span = Tree | Token
Columns = dict[str, str]  # key -> name, in order


class _Binder:
    """Binds the names of one statement, collecting violations (one instance per check)."""

    def __init__(self, view: SchemaView, data: bytes):
        self.view = view
        self.rules = view.schema.rules
        self.data = data
        self.violations: list[Violation] = []

    # -- statements

    def statement(self, node: Tree) -> None:
        if node.label == "select_stmt":
            self.select_stmt(node, None, ChainMap())
        elif node.label == "insert_stmt":
            self.insert(node)
        else:
            self.update_or_delete(node)

    def insert(self, node: Tree) -> None:
        ctes = self.with_clause(node.child("with_clause"), None, ChainMap())
        scope = Scope(None, ctes)
        target = self.target(node, scope)
        listed = node.child("column_name_list")
        query = node.child("insert_source")  # None: DEFAULT VALUES, which writes no value
        if listed is not None:
            for column in listed.terminals("COLUMN_NAME"):
                self.target_column(target, column)
        elif query is not None:
            (name,) = node.terminals("TABLE_NAME")
            self.read_every_column(target, name, "INSERT without a column list writes")
        if query is not None:
            self.select_stmt(query.trees()[0], None, ctes)
        self.returning(node, scope)

    def update_or_delete(self, node: Tree) -> None:
        """UPDATE and DELETE: the target (with its alias), FROM items, SET, WHERE, RETURNING."""
        scope = Scope(None, self.with_clause(node.child("with_clause"), None, ChainMap()))
        target = self.target(node, scope)
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
        self.returning(node, scope)

    def target(self, node: Tree, scope: Scope) -> Source:
        """The table an INSERT / UPDATE / DELETE writes (never a CTE), added to `scope`."""
        (name,) = node.terminals("TABLE_NAME")
        alias = _alias(node)
        source = self.table_source(name, alias, self.schema_table(name))
        scope.sources.append(source)
        return source

    def target_column(self, target: Source, column: Token) -> None:
        """A column of the target named in an INSERT column list or an UPDATE SET."""
        name = target.column(self.key(column.text))
        if name is None:
            self.unknown_column_of(target, column, column)
        else:
            self.read(target, name, column)

    def returning(self, node: Tree, scope: Scope) -> None:
        clause = node.child("returning_clause")
        if clause is not None:  # its items are result columns (without `t.*`)
            self.result_columns(clause, scope)

    # -- SELECT

    def select_stmt(self, node: Tree, outer: Scope | None, ctes: ChainMap) -> Columns | None:
        """Bind a whole SELECT (WITH, compound cores, ORDER BY, LIMIT) and return the names of
        its result columns (None when they cannot be known)."""
        ctes = self.with_clause(node.child("with_clause"), outer, ctes)
        body = next(c for c in node.trees() if c.label not in _SELECT_CLAUSES)
        cores = [self.select_core(core, outer, ctes) for core in _compound_cores(body)]
        order_by = node.child("order_by_clause")
        if order_by is not None and len(cores) == 1:
            self.order_by(order_by, cores[0][0])
        elif order_by is not None:
            self.compound_order_by(order_by, cores)
        limit = node.child("limit_clause")
        if limit is not None:  # SQLite binds no column name in LIMIT / OFFSET
            self.expression(limit, Scope(None, ctes))
        return cores[0][1]

    def with_clause(self, node: Tree | None, outer: Scope | None, ctes: ChainMap) -> ChainMap:
        """The CTEs of a WITH. As in SQLite, each body sees every CTE of its WITH: itself (for
        recursion) and later ones too."""
        if node is None:
            return ctes
        ctes = ctes.new_child()
        for cte in node.trees("common_table_expr"):
            listed = cte.child("cte_column_list")
            declared = None if listed is None else self.names(listed.terminals("COLUMN_ALIAS"))
            (query,) = cte.trees("select_stmt")
            ctes[self.key(cte.terminals("CTE_NAME")[0].text)] = Cte(query, declared, outer, ctes)
        for cte in ctes.maps[0].values():
            self.cte_columns(cte)
        return ctes

    def cte_columns(self, cte: Cte) -> Columns | None:
        """The columns of a CTE, binding its body the first time it is needed."""
        if not cte.binding:
            cte.binding = True
            body = self.select_stmt(cte.query, cte.outer, cte.ctes)
            cte.columns, cte.bound = (body if cte.declared is None else cte.declared), True
        return cte.columns if cte.bound else cte.declared

    def select_core(
        self, core: Tree, outer: Scope | None, ctes: ChainMap
    ) -> tuple[Scope, Columns | None]:
        """One SELECT ... FROM ... WHERE ... GROUP BY ... HAVING, or a VALUES list. Result
        aliases become visible after the result columns, so WHERE, GROUP BY and HAVING (not
        FROM or the result columns) may use them, as SQLite allows; GROUP BY terms cannot
        reach outer queries."""
        scope = Scope(outer, ctes)
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
            self.expression(clause, scope if clause.label == "having_clause" else scope.local())
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
                key, name = self.output_name(alias[0] if alias else expr, scope)
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
                        if item.label == "table_all_columns" or key not in source.hidden:
                            columns.setdefault(key, name)
            if any(s.columns is None for s in sources):
                columns = None
        return columns, aliases

    def star_sources(self, item: Tree, scope: Scope) -> list[Source]:
        """The sources `*` (all of this core's) or `T.*` (one of them) expands."""
        qualifier = item.terminals("QUALIFIER")
        if not qualifier:
            return list(scope.sources)
        key = self.key(qualifier[0].text[:-1])
        found = [s for s in scope.sources if s.key == key]
        if not found:
            self.unbound_qualifier(qualifier[0], scope)
        return found[:1]

    def output_name(self, node: Span, scope: Scope) -> tuple[str, str]:
        """(key, name) of a result column: its alias, the column it reads (a double-quoted
        string that binds to a column reads it), or else its text."""
        if isinstance(node, Tree) and node.label == "column_ref":
            node = node.terminals("COLUMN_NAME")[0]
        elif isinstance(node, Tree) and (quoted := node.terminals("DQ_STRING")):
            name = self.rules.unquote(quoted[0].text)[0]
            if scope.lookup(self.rules.key(name, True)).sources:
                node = quoted[0]
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
                self.expression(expr, scope.local())

    def compound_order_by(self, node: Tree, cores: list[tuple[Scope, Columns | None]]) -> None:
        """ORDER BY of a compound names result columns: a bare name of any core's result, or
        an expression that binds in one of the cores (the first that binds it is reported)."""
        for term in node.trees("ordering_term"):
            expr = term.trees()[0]
            key = self.bare_name(expr)
            if key is not None and any(c is None or key in c for _, c in cores):
                continue
            attempts = [self.trial(expr, scope.local()) for scope, _ in cores]
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
        conditions: list[Tree] = []
        self.join_source(node.trees()[0], scope, conditions)
        for condition in conditions:
            self.expression(condition, scope)

    def join_source(self, node: Tree, scope: Scope, conditions: list[Tree]) -> list[Source]:
        """Add the sources of one FROM item or join to `scope`; return them, left to right."""
        if node.label == "parenthesized_join":
            return self.join_source(node.trees()[0], scope, conditions)
        if node.label != "join":
            source = self.from_item(node, scope)
            scope.sources.append(source)
            return [source]
        left_node, operator, right_node, *constraint = node.trees()
        left = self.join_source(left_node, scope, conditions)
        right = self.join_source(right_node, scope, conditions)
        if operator.terminals("NATURAL"):
            shared = {k for s in right if s.columns for k in s.columns if _exposing(left, k)}
            self.merge_columns(left, right, shared, operator)
        for condition in constraint:
            if condition.label == "on":
                conditions.append(condition)
            else:
                self.using(condition, left, right)
        return left + right

    def using(self, node: Tree, left: list[Source], right: list[Source]) -> None:
        """USING (c, ...): each column must be on both sides; the join then merges it."""
        (listed,) = node.trees("column_name_list")
        for column in listed.terminals("COLUMN_NAME"):
            key = self.key(column.text)
            name = self.rules.unquote(column.text)[0]
            for side, sources in (("left", left), ("right", right)):
                if not _exposed(sources, key):
                    self.report(
                        "unknown_column",
                        f'USING column "{name}" is not a column of the {side} side of the join '
                        f"({', '.join(s.label for s in sources)}); USING names columns that "
                        "both sides have",
                        column,
                        column=name,
                    )
                    break
            else:
                self.merge_columns(left, right, {key}, column)

    def merge_columns(
        self, left: list[Source], right: list[Source], keys: Iterable[str], span: Span
    ) -> None:
        """USING / NATURAL: the join compares these columns of both sides (so reads them);
        afterwards a bare name binds to the left one."""
        for key in keys:
            for source in (*_exposing(left, key)[:1], *_exposing(right, key)):
                self.read(source, source.columns[key], span)
            for source in right:
                source.hidden.add(key)

    def from_item(self, node: Tree, scope: Scope) -> Source:
        """A table, view or CTE reference, or a subquery (which cannot see this core's other
        FROM items, only the enclosing queries)."""
        alias = _alias(node)
        if node.label == "subquery_table":
            (query,) = node.trees("select_stmt")
            columns = self.select_stmt(query, scope.parent, scope.ctes)
            if alias is None:
                return Source(None, None, "subquery", None, columns)
            name = self.rules.unquote(alias.text)[0]
            return Source(self.key(alias.text), name, "subquery", None, columns)
        (name,) = node.terminals("TABLE_NAME")
        key = self.key(name.text)
        if key in scope.ctes:  # a CTE shadows a table of the same name
            columns = self.cte_columns(scope.ctes[key])
            return Source(*self.source_name(name, alias), None, columns)
        return self.table_source(name, alias, self.schema_table(name))

    def source_name(self, name: Token, alias: Token | None) -> tuple[str, str, str]:
        """(qualifier key, qualifier name, origin) of a FROM item naming a table or CTE."""
        written = self.rules.unquote(name.text)[0]
        qualifier = alias or name
        return self.key(qualifier.text), self.rules.unquote(qualifier.text)[0], written

    def table_source(self, name: Token, alias: Token | None, table: Table | None) -> Source:
        """The source for a schema table; without one (unknown or hidden: reported) its
        columns are unknown."""
        named = self.source_name(name, alias)
        if table is None:
            return Source(*named, None, None)
        columns = {self.rules.catalog_key(c.name): c.name for c in table.columns}
        return Source(*named, table, columns, has_rowid=self.view.schema.dialect == "sqlite")

    def schema_table(self, name: Token) -> Table | None:
        """The schema table `name` denotes, if it exists and the role may see it (else the
        violation is reported and None returned)."""
        table = self.view.schema.table(name.text)
        if table is not None and self.view.may_see_table(table.name):
            return table
        visible = _listing(t.name for t in self.view.tables)
        if table is None:
            written = self.rules.unquote(name.text)[0]
            message = f'no table or view named "{written}" in the schema'
            self.report("unknown_table", f"{message}; tables you may use: {visible}", name, written)
        else:
            message = f'table "{table.name}" is not visible to {self.role()}'
            self.report(
                "table_not_visible", f"{message}; tables it may use: {visible}", name, table.name
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
            elif node.label == "string":
                self.double_quoted(node, scope)
            pending.extend(reversed(node.trees()))

    def column_ref(self, node: Tree, scope: Scope) -> None:
        (column,) = node.terminals("COLUMN_NAME")
        key = self.key(column.text)
        qualifier = node.terminals("QUALIFIER")
        if not qualifier:
            self.bind(scope.lookup(key), key, column, scope)
            return
        sources = scope.qualifier(self.key(qualifier[0].text[:-1]), key)
        having = [s for s in sources if s.column(key) is not None]
        if len(having) > 1:  # `t JOIN t USING (c)`: t.c is the left one
            having = [s for s in having if key not in s.hidden] or having
        if not sources:
            self.unbound_qualifier(qualifier[0], scope)
        elif not having:
            self.unknown_column_of(sources[0], column, node)
        elif len(having) > 1:
            self.ambiguous(node, self.text(node), self.rules.unquote(column.text)[0], having)
        else:
            self.read(having[0], having[0].column(key) or key, node)

    def bind(self, found: Lookup, key: str, column: Token, scope: Scope) -> None:
        """Judge a bare column name bound by `Scope.lookup`."""
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

    def double_quoted(self, node: Tree, scope: Scope) -> None:
        """A double-quoted string reads the column of that name if one is in scope."""
        tokens = node.terminals("DQ_STRING")
        if not tokens:
            return
        token = tokens[0]
        name = self.rules.unquote(token.text)[0]
        key = self.rules.key(name, True)
        found = scope.lookup(key)
        if len(found.sources) > 1:
            self.ambiguous(token, name, name, found.sources)
            return
        for source in found.sources:
            column = source.column(key) or key
            if source.table is not None and not self.may_read(source, column):
                self.report(
                    "double_quoted_column",
                    f'{token.text} in double quotes reads column "{column}" of table '
                    f'"{source.table.name}" (SQLite takes a double-quoted name for a column '
                    f"in scope), which {self.role()} may not see; for a string, use single "
                    f"quotes: {_single_quoted(name)}",
                    token,
                    table=source.table.name,
                    column=column,
                )
                return

    def function_call(self, node: Tree) -> None:
        (token,) = node.terminals("FUNCTION_NAME")
        function = token.text.rstrip("(").strip().lower()  # the lexeme includes its "("
        if not self.view.may_call(function):
            allowed = self.view.role.functions if self.view.role else None
            self.report(
                "function_not_allowed",
                f'function "{function}" is not allowed for {self.role()}; functions it may '
                f"call: {_listing(sorted(allowed or ()))}",
                token,
            )

    # -- policy and reports

    def may_read(self, source: Source, column: str) -> bool:
        """Only tables are under policy: what a subquery or CTE selects was judged in it.
        SQLite's rowid is the INTEGER PRIMARY KEY column when the table has one, and the
        snapshot does not say which column that is, so rowid is readable only when every
        column of the table is."""
        table = source.table
        if table is None:
            return True
        if table.column(column, self.rules) is None:  # rowid, oid, _rowid_
            return all(self.view.may_see_column(table.name, c.name) for c in table.columns)
        return self.view.may_see_column(table.name, column)

    def read(self, source: Source, column: str, span: Span) -> None:
        """A reference to `column` of `source`."""
        table = source.table
        if table is None or self.may_read(source, column):
            return
        why = ""
        if table.column(column, self.rules) is None:
            why = f" ({column} may be its INTEGER PRIMARY KEY, and some of its columns are hidden)"
        visible = _listing(c.name for c in self.view.columns(table))
        self.report(
            "column_not_visible",
            f'column "{column}" of table "{table.name}" is not visible to {self.role()}{why}; '
            f"visible columns: {visible}",
            span,
            table=table.name,
            column=column,
        )

    def read_every_column(self, source: Source, span: Span, verb: str) -> None:
        """`*`, `T.*`, or an INSERT without a column list: every column of a table."""
        table = source.table
        if table is None:
            return
        visible = _listing(c.name for c in self.view.columns(table))
        for column in table.columns:
            if not self.may_read(source, column.name):
                self.report(
                    "column_not_visible",
                    f'{verb} every column of table "{table.name}", including "{column.name}", '
                    f"which {self.role()} may not see; name the columns instead (visible: "
                    f"{visible})",
                    span,
                    table=table.name,
                    column=column.name,
                )

    def unknown_column(self, column: Token, scope: Scope) -> None:
        name = self.rules.unquote(column.text)[0]
        sources = [source for level in scope.levels() for source in level.sources]
        where = "; ".join(f"{s.label}: {self.column_names(s)}" for s in sources)
        self.report(
            "unknown_column",
            f'no table in scope has a column "{name}"; '
            + (f"columns in scope: {where}" if sources else "the query reads no table (no FROM)"),
            column,
            column=name,
        )

    def unknown_column_of(self, source: Source, column: Token, span: Span) -> None:
        name = self.rules.unquote(column.text)[0]
        self.report(
            "unknown_column",
            f'{source.label} has no column "{name}"; its columns: {self.column_names(source)}',
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
            return _listing(c.name for c in self.view.columns(source.table))
        return _listing(source.columns.values()) if source.columns is not None else "unknown"

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


def _compound_cores(body: Tree) -> list[Tree]:
    """The SELECT cores of a compound (left-nested `compound` nodes), left to right."""
    cores = []
    while body.label == "compound":
        body, _, core = body.trees()
        cores.append(core)
    cores.append(body)
    return cores[::-1]


def _alias(node: Tree) -> Token | None:
    alias = node.child("table_alias")
    return None if alias is None else alias.terminals("TABLE_ALIAS")[0]


def _exposing(sources: list[Source], key: str) -> list[Source]:
    return [s for s in sources if s.is_known and s.exposes(key)]


def _exposed(sources: list[Source], key: str) -> bool:
    return any(s.exposes(key) for s in sources)


def _listing(names: Iterable[str]) -> str:
    names = list(names)
    if not names:
        return "none"
    shown = ", ".join(names[:_LISTED])
    return shown if len(names) <= _LISTED else f"{shown}, and {len(names) - _LISTED} more"


def _single_quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
