"""Random FROM clauses of joins over the HR example, for the differential of Γ's ON rules
against SQLite (tests/test_gamma.py): two to four items under aliases `t0`…, every join
operator SQLite has but NATURAL, at most one parenthesized join (as the FROM clause's first
item or a later one), and ON conditions naming a column bare or qualified — of any item,
before or after the ON, inside or outside the parentheses, or of a query around the clause —
sometimes from inside a subquery."""

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
