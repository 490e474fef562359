"""Random statements over the HR example for differentials of Γ and the checker against
SQLite (tests/test_gamma.py, tests/test_checker.py): each writes names where SQLite's binding
rules are subtle, so that what L_Γ accepts can be prepared by SQLite and compared.

`join_statement`: FROM clauses of two to four items under aliases `t0`…, every join operator
SQLite has but NATURAL, at most one parenthesized join (as the FROM clause's first item or a
later one), and ON conditions naming a column bare or qualified — of any item, before or after
the ON, inside or outside the parentheses, or of a query around the clause — sometimes from
inside a subquery.

`cte_statement`: a WITH of one or two CTEs (with or without a column list, a body that may be
a compound, a name that may shadow a table, a body that may name its own CTE or a later one)
and a query over them naming columns bare or qualified in every clause, a window's PARTITION
BY and ORDER BY, a derived table and a compound's ORDER BY included."""

from __future__ import annotations

import random

TABLES = {
    "employees": ("id", "name", "dept", "salary", "manager_id"),
    "orders": ("id", "employee_id", "total", "placed_on"),
    "salaries": ("employee_id", "amount", "since"),
    "employees_public": ("id", "name", "dept"),
}
OPERATORS = ("JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "INNER JOIN", "CROSS JOIN", ",")
OUTER = "q"  # the alias of the query around the clause, when there is one


def join_statement(rng: random.Random) -> str:
    """One statement: `SELECT 1 FROM <joins>;`, sometimes as an EXISTS subquery of a query
    whose columns its ON conditions may name."""
    n = rng.randint(2, 4)
    tables = rng.sample(sorted(TABLES), n)
    aliases = [f"t{i}" for i in range(n)]
    correlated = rng.random() < 0.3
    pool = [(a, c) for a, t in zip(aliases, tables, strict=True) for c in TABLES[t]]
    if correlated:
        pool += [(OUTER, c) for c in TABLES["employees_public"]]

    def on() -> str:
        if rng.random() < 0.2:
            return " ON 1"
        alias, column = rng.choice(pool)
        name = column if rng.random() < 0.5 else f"{alias}.{column}"
        if rng.random() < 0.15:
            name = f"EXISTS ( SELECT 1 FROM orders AS z WHERE z.id = {name} )"
        return f" ON {name} = 1"

    def item(i: int) -> str:
        return f"{tables[i]} AS {aliases[i]}"

    def joined(operator: str, right: str) -> str:
        return f", {right}" if operator == "," else f" {operator} {right}{on()}"

    paren = rng.randrange(n - 1) if rng.random() < 0.5 else None  # its first item's index
    parts, i = [], 0
    while i < n:
        if i == paren:
            inner = f"( {item(i)}{joined(rng.choice(OPERATORS[:-1]), item(i + 1))} )"
            parts.append(inner if i == 0 else joined(rng.choice(OPERATORS), inner))
            i += 2
        else:
            parts.append(item(i) if i == 0 else joined(rng.choice(OPERATORS), item(i)))
            i += 1
    sql = f"SELECT 1 FROM {''.join(parts)}"
    if correlated:
        sql = f"SELECT 1 FROM employees_public AS {OUTER} WHERE EXISTS ( {sql} )"
    return sql + ";"


def cte_statement(rng: random.Random) -> str:
    """One statement: `WITH …` (usually) and a query naming what the CTEs and tables offer."""
    tables = sorted(TABLES)
    first, second = rng.sample(tables, 2)
    chosen = rng.sample(TABLES[first], min(2, len(TABLES[first])))
    listed = [f"k{i}" for i in range(len(chosen))] if rng.random() < 0.5 else None
    body = f"SELECT {', '.join(chosen)} FROM {rng.choice([first, second])}"
    if rng.random() < 0.3:
        body += f" UNION SELECT {', '.join(rng.sample(TABLES[second], len(chosen)))} FROM "
        body += rng.choice([second, first])
    name = rng.choice(["c", second, first])  # a new name, or a table's
    columns = f" ( {', '.join(listed)} )" if listed else ""
    head = f"WITH {name}{columns} AS ( {body} ) "
    if rng.random() < 0.3:  # a second CTE, which may read the first or shadow a table
        head = head[:-1] + f", {rng.choice(['e', first])} AS ( SELECT 1 AS one FROM "
        head += f"{rng.choice([name, first, second])} ) "
    offered = listed or chosen
    shape = rng.randrange(3)  # the FROM clause: the CTE; and a table; and a derived table
    pool = [("x", c) for c in offered] + [("x", rng.choice(TABLES[first]))]
    if shape == 1:
        pool += [("y", c) for c in TABLES[second]]
    if shape == 2:
        pool += [("d", "v"), ("d", chosen[0])]

    def ref() -> str:
        alias, column = rng.choice(pool)
        return column if rng.random() < 0.4 else f"{alias}.{column}"

    source = (
        f"{name} AS x",
        f"{name} AS x, {second} AS y",
        f"{name} AS x JOIN ( SELECT {chosen[0]} AS v FROM {first} ) AS d ON {ref()} = 1",
    )[shape]
    shown = ref()
    if rng.random() < 0.3:
        shown = f"count(*) OVER ( PARTITION BY {ref()} ORDER BY {ref()} )"
    sql = f"SELECT {shown} FROM {source}"
    if rng.random() < 0.5:
        sql += f" WHERE {ref()} = 1"
    if rng.random() < 0.3:
        sql += f" GROUP BY {ref()}"
    if rng.random() < 0.3:
        sql += f" UNION SELECT {ref()} FROM {source}"
    if rng.random() < 0.4:
        sql += f" ORDER BY {ref()}"
    return (head if rng.random() < 0.8 else "") + sql + ";"
