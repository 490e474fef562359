"""Schema linking recall: `python bench/schema_linking.py [--json]`.

For every Spider training question whose database is here and whose gold query the bundled
sqlite dialect parses, the gold tables are the tables its TABLE_NAME tokens denote (CTE names
left out). `gridrail.linking.link_tables` then picks k tables for the question, and a question
is *covered* at k when every gold table is among them. Two catalogs:

  * own: the question's own database (Spider's, 2 to 26 tables): what `gridrail ask` faces on
    these questions, and how often `DEFAULT_PROMPT_TABLES` leaves a gold table out;
  * merged: every training database's tables in one catalog (about 800 tables), each renamed
    `<db_id>__<table>` as a module prefix names tables in a large company catalog: does the
    question's table come out of a catalog no prompt can hold.

Reports, per k, the share of covered questions and, for the own catalog, the share of
questions whose database has more than k tables (where linking changes the prompt at all).
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import gridrail as gr
from gridrail.errors import ParseError
from gridrail.linking import TableIndex
from gridrail.parse.tree import parse_tree
from gridrail.policy.schema import Schema, Table
from gridrail.policy.view import SchemaView
from gridrail.registry import shared_compiled_grammar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host import provenance, report_parser
from spider_eval import assets_root, database_path, load_questions

KS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32)


def gold_tables(dialect, schema: Schema, sql: str) -> set[str] | None:
    """The catalog names of the tables `sql` reads, or None when the dialect does not parse it
    or it names a table the schema lacks."""
    try:
        tree = parse_tree(dialect, sql.rstrip().rstrip(";") + ";")
    except ParseError:
        return None
    tokens = list(tree.tokens())
    ctes = {
        schema.rules.key(*schema.rules.unquote(t.text)) for t in tokens if t.terminal == "CTE_NAME"
    }
    out = set()
    for token in tokens:
        if token.terminal != "TABLE_NAME":
            continue
        if schema.rules.key(*schema.rules.unquote(token.text)) in ctes:
            continue
        table = schema.table(token.text)
        if table is None:
            return None
        out.add(table.name)
    return out or None


def main() -> None:
    args = report_parser(__doc__).parse_args()
    started = time.perf_counter()
    spider = assets_root() / "data" / "spider"
    dialect = shared_compiled_grammar(gr.Grammar.bundled("sqlite"))
    schemas: dict[str, Schema] = {}
    questions = []
    skipped = defaultdict(int)
    for q in load_questions(spider, "train"):
        path = database_path(spider, q.db_id)
        if not path.is_file():
            skipped["database missing"] += 1
            continue
        if q.db_id not in schemas:
            schemas[q.db_id] = Schema.from_sqlite(path)
        gold = gold_tables(dialect, schemas[q.db_id], q.gold)
        if gold is None:
            skipped["gold not parsed or names no table"] += 1
            continue
        questions.append((q, gold))
    merged = Schema(
        "sqlite",
        tuple(
            Table(f"{db}__{t.name}", t.columns)
            for db, s in sorted(schemas.items())
            for t in s.tables
        ),
        "every Spider training database",
    )
    merged_index = TableIndex(SchemaView(merged, None))
    own_indexes = {db: TableIndex(SchemaView(s, None)) for db, s in schemas.items()}
    own = {k: 0 for k in KS}
    own_linked = {k: 0 for k in KS}
    big = {k: 0 for k in KS}
    for q, gold in questions:
        index = own_indexes[q.db_id]
        wanted = {f"{q.db_id}__{name}" for name in gold}
        for k in KS:
            own[k] += gold <= {t.name for t in index.link(q.question, k)}
            own_linked[k] += len(index.tables) > k
            big[k] += wanted <= {t.name for t in merged_index.link(q.question, k)}
    n = len(questions)
    result = {
        **provenance(started),
        "questions": n,
        "skipped": dict(skipped),
        "databases": len(schemas),
        "merged_tables": len(merged.tables),
        "own_covered": {k: round(100 * own[k] / n, 1) for k in KS},
        "own_database_larger_than_k": {k: round(100 * own_linked[k] / n, 1) for k in KS},
        "merged_covered": {k: round(100 * big[k] / n, 1) for k in KS},
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(
        f"{n} questions ({dict(skipped)} left out), {len(schemas)} databases, merged catalog "
        f"{len(merged.tables)} tables; {result['seconds']} s on {result['host']}"
    )
    print("| k | own: covered | own: database has > k tables | merged: covered |")
    print("|---|---|---|---|")
    for k in KS:
        cells = (
            result[key][k]
            for key in ("own_covered", "own_database_larger_than_k", "merged_covered")
        )
        print(f"| {k} | " + " | ".join(f"{c}%" for c in cells) + " |")


if __name__ == "__main__":
    main()
