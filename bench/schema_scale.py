"""Schema scale: `python bench/schema_scale.py [--sizes 10x10,50x20,...] [--json]`.

For each size T x C, a SQLite catalog of T tables, each of C - 1 TEXT columns plus an INTEGER
`id`, with generated names (`acct_price_7`, tables `<word>_<word>_<n>`), is written to a
temporary file; then, in a fresh Python process per size (so peak RSS is that size's alone):

  * introspection: `Schema.from_sqlite` on the file (with `--also postgres,duckdb`, also
    `Schema.from_duckdb` and `Schema.from_postgres` on the same catalog, the PostgreSQL one on
    a throwaway server started as the tests start one);
  * compile: `gridrail.compile` of the bundled sqlite grammar for gpt2's vocabulary under a
    select-only role over the schema (the dialect's own compiled grammar, its trie, the
    vocabulary and the role over a one-table SQLite schema built before the clock starts — the
    role's base scanner and parse tables are shared by every schema of the engine: this is the
    cost of a *new schema* for an existing dialect and role);
  * first mask: `guide.matcher().allowed()` at the start and after `SELECT ` (a column position:
    the identifier lexicons in play);
  * first check: `guide.check("SELECT 1;")`, whose first call builds the SQLite judge's
    schema-only copy of the catalog;
  * with `--gamma`, the role's language compiled as `gridrail ask` compiles it (the generation
    profile, Γ at the mask) and the masks of one statement (`SELECT <column> FROM <table>
    WHERE id > 3;`) computed token by token;
  * with `--listed F`, the role lists the first F of the tables and denies one column in every
    other table it lists (else it sees every table: no policy name to look up);
  * with `--more N`, N more catalogs of the size (other seeds), each compiled once in the same
    process after the first: the cost of a new schema in a process that has compiled one
    already (reported: each compile and their median);
  * peak RSS of the process (`ru_maxrss`);
  * with `--sharing`, cross-schema cache sharing (issue 14 item 2): 20 statements over the
    catalog are decoded token by token (a mask before every token), then 20 of the same shapes
    over a second catalog of the same size (another seed: other names), in the same process;
    reported for the second: the mask walks it needed, those the T1 cache answered (its own
    earlier walks), those the dialect family's T2 cache answered (walks of the first schema),
    and those computed; for both, the walks below CD nodes their residues asked for and those
    they computed (the rest were kept: by the guide, or — from the role's base scanner — by
    any schema of the role); for the second, what it asked of and computed into the store of
    walks from the role's base scanner (its residues' and its own walks' below the nodes
    where a lexeme leaves the names); and each schema's replay time.

A size that fails reports the error's class and its message's length in characters (issue 14:
errors stay short). The targets of issue 14 item 3: compile <= 50 ms at 1,000 x 20 and <= 1 s
at 10,000 x 20, first mask <= 10 ms.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = "10x10,50x20,100x20,200x20,1000x20,10000x20"
# fmt: off
WORDS = (
    "acct", "price", "order", "item", "cust", "ship", "rate", "plan", "unit", "cost", "stock",
    "part", "vendor", "region", "branch", "ledger", "note", "code", "status", "level", "batch",
    "grade", "score", "term", "zone",
)
# fmt: on
POLICY = '[roles.reader]\nstatements = ["select"]\n'


def catalog_ddl(tables: int, columns: int, seed: int = 0) -> list[str]:
    """The CREATE TABLE statements of one generated catalog (valid SQLite, DuckDB and
    PostgreSQL)."""
    rng = random.Random(seed)
    out = []
    for t in range(tables):
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{t}"
        cols = ", ".join(
            f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{c} TEXT" for c in range(columns - 1)
        )
        out.append(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, {cols})")
    return out


def introspect_elsewhere(ddl: list[str], tmp: Path, backends: list[str]) -> dict:
    """Seconds `Schema.from_duckdb` / `Schema.from_postgres` take on the same catalog (a
    throwaway PostgreSQL server, as the tests start one)."""
    import gridrail as gr

    out: dict = {}
    if "duckdb" in backends:
        import duckdb

        path = tmp / f"catalog{len(ddl)}.duckdb"
        with duckdb.connect(str(path)) as db:
            db.execute("BEGIN")
            for statement in ddl:
                db.execute(statement)
            db.execute("COMMIT")
        started = time.perf_counter()
        gr.Schema.from_duckdb(path)
        out["duckdb_introspect_s"] = time.perf_counter() - started
    if "postgres" in backends:
        import psycopg

        sys.path.insert(0, str(ROOT / "tests"))
        from postgres_server import running_cluster

        with running_cluster() as cluster:
            with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as db:
                for statement in ddl:
                    db.execute(statement)
            started = time.perf_counter()
            gr.Schema.from_postgres(cluster.dsn("postgres"))
            out["postgres_introspect_s"] = time.perf_counter() - started
    return out


def statements(schema, count: int = 20) -> list[str]:
    """`count` statements of fixed shapes over the schema's first tables."""
    out = []
    for table in schema.tables[:count]:
        first, second = (c.name for c in table.columns[1:3])
        out.append(
            f"SELECT {first}, count(*) FROM {table.name} WHERE {second} = 'abc' AND id > 42 "
            f"GROUP BY {first} ORDER BY 2 DESC LIMIT 10;"
        )
    return out


def replay(guide, sql: list[str]) -> None:
    """Decode each statement token by token, the mask computed before every token."""
    for text in sql:
        matcher = guide.matcher()
        for token in guide.trie.tokenize(text.encode()):
            if token not in matcher.allowed() or not matcher.accept_tokens([token]):
                raise AssertionError(f"{text!r} left the language")


def sharing(grammar, vocab, policy, first_schema, second_db: str) -> dict:
    """The second schema's mask walks after the first schema's (see the module docstring)."""
    import gridrail as gr

    first = gr.compile(grammar, vocab, schema=first_schema, policy=policy, role="reader")
    started = time.perf_counter()
    replay(first, statements(first_schema))
    first_s = time.perf_counter() - started
    second_schema = gr.Schema.from_sqlite(second_db)
    guide = gr.compile(grammar, vocab, schema=second_schema, policy=policy, role="reader")
    t1, t2 = guide.cache.stats, guide.family_cache.stats
    before = (t1.hits, t1.misses, t2.hits)
    shared = shared_store(guide)
    shared_before = shared.counts() if shared is not None else (0, 0)
    started = time.perf_counter()
    replay(guide, statements(second_schema))
    second_s = time.perf_counter() - started
    shared_after = shared.counts() if shared is not None else (0, 0)
    t1_hits, walks, t2_hits = (
        now - then for now, then in zip((t1.hits, t1.misses, t2.hits), before, strict=True)
    )
    walks += t1_hits
    below = [g.runners.walks_below for g in (first, guide)]  # None without the kernels
    residue = [memo.counts() if memo is not None else (0, 0) for memo in below]
    return {
        "first_replay_s": first_s,
        "second_replay_s": second_s,
        "second_shared_asked": shared_after[0] - shared_before[0],
        "second_shared_computed": shared_after[1] - shared_before[1],
        "first_below": residue[0][0],
        "first_below_computed": residue[0][1],
        "second_below": residue[1][0],
        "second_below_computed": residue[1][1],
        "second_walks": walks,
        "second_t1_hits": t1_hits,
        "second_t2_hits": t2_hits,
        "second_computed": walks - t1_hits - t2_hits,
    }


def shared_store(guide):
    """The store of walks from the role's base scanner the guide's kernels share (None
    without the kernels, or with kernels that share none: before session 31)."""
    from gridrail import kernels

    if not hasattr(kernels, "shared_walks") or guide.runners.walks_below is None:
        return None
    tables = kernels.kernel_tables(guide.oracle, guide.trie)
    return kernels.shared_walks(guide.compiled.scanner, tables, guide.trie, guide.vocab.size)


def write_catalog(path: Path | str, ddl: list[str]) -> None:
    with closing(sqlite3.connect(path)) as db:
        for statement in ddl:
            db.execute(statement)
        db.commit()


def warm_up_schema(beside: Path):
    """A one-table SQLite catalog in `beside`'s folder, introspected."""
    import gridrail as gr

    path = beside.with_name("warm_up.sqlite")
    if not path.exists():
        write_catalog(path, ["CREATE TABLE warm_up (id INTEGER PRIMARY KEY, name TEXT)"])
    return gr.Schema.from_sqlite(path)


def listed_policy(schema, fraction: float) -> str:
    """A role that lists the first `fraction` of the catalog's tables and denies one column of
    every other listed table (`--listed`): an enterprise role names what it may see."""
    tables = schema.tables[: max(1, round(len(schema.tables) * fraction))]
    listed = ", ".join(f'"{t.name}"' for t in tables)
    denied = "\n".join(f'{t.name} = {{ deny = ["{t.columns[1].name}"] }}' for t in tables[::2])
    return f"{POLICY}tables = [{listed}]\n[roles.reader.columns]\n{denied}\n"


def gamma_replay(grammar, vocab, policy, schema) -> dict:
    """`--gamma`: the role's language as `gridrail ask` compiles it (the generation profile, Γ
    at the mask), its compile and the masks of one statement over the catalog's fourth table,
    token by token."""
    import gridrail as gr
    from gridrail.policy.profile import GenerationProfile

    started = time.perf_counter()
    guide = gr.compile(
        grammar, vocab, schema=schema, policy=policy, role="reader",
        profile=GenerationProfile(), gamma=True,
    )  # fmt: skip
    compiled_s = time.perf_counter() - started
    table = schema.tables[min(3, len(schema.tables) - 1)]
    sql = f"SELECT {table.columns[1].name} FROM {table.name} WHERE id > 3;"
    started = time.perf_counter()
    replay(guide, [sql])
    return {
        "gamma_compile_s": compiled_s,
        "gamma_tokens": len(guide.trie.tokenize(sql.encode())),
        "gamma_masks_s": time.perf_counter() - started,
    }


def measure(
    db_path: str, tokenizer: str, listed: str, gamma: str, second_db: str = "", *more: str
) -> dict:
    """One size, in this process (the child)."""
    import gridrail as gr
    from gridrail.registry import shared_compiled_grammar, shared_trie

    grammar = gr.Grammar.bundled("sqlite")
    vocab = gr.Vocabulary.from_file(tokenizer)
    shared_compiled_grammar(grammar)
    shared_trie(vocab)
    policy = gr.Policy.from_text(POLICY)
    # the role over another schema of the same engine (its functions too): its base scanner
    # and parse tables are built once for every schema
    gr.compile(grammar, vocab, schema=warm_up_schema(Path(db_path)), policy=policy, role="reader")
    out: dict = {}
    started = time.perf_counter()
    schema = gr.Schema.from_sqlite(db_path)
    out["introspect_s"] = time.perf_counter() - started
    out["columns"] = sum(len(t.columns) for t in schema.tables)
    if float(listed):
        policy = gr.Policy.from_text(listed_policy(schema, float(listed)))
    try:
        started = time.perf_counter()
        guide = gr.compile(grammar, vocab, schema=schema, policy=policy, role="reader")
        out["compile_s"] = time.perf_counter() - started
        started = time.perf_counter()
        matcher = guide.matcher()
        matcher.allowed()
        out["first_mask_s"] = time.perf_counter() - started
        select = [t for t in range(vocab.size) if vocab.token_bytes(t) == b"SELECT"]
        if select and matcher.accept_tokens(select[:1]):
            space = [t for t in range(vocab.size) if vocab.token_bytes(t) == b" "]
            started = time.perf_counter()
            if space and matcher.accept_tokens(space[:1]):
                matcher.allowed()
                out["column_mask_s"] = time.perf_counter() - started
        started = time.perf_counter()
        guide.check("SELECT 1;")  # the checker's first statement builds the SQLite judge's copy
        out["first_check_s"] = time.perf_counter() - started
    except Exception as exc:  # reported as the size's result: the error a user would see
        out["error"] = f"{type(exc).__name__}"
        out["error_chars"] = len(str(exc))
        out["error_head"] = str(exc)[:160]
    if more and "error" not in out:
        schemas = [gr.Schema.from_sqlite(path) for path in more]
        out["more_compile_s"] = []
        for other in schemas:
            if float(listed):
                policy = gr.Policy.from_text(listed_policy(other, float(listed)))
            started = time.perf_counter()
            gr.compile(grammar, vocab, schema=other, policy=policy, role="reader")
            out["more_compile_s"].append(time.perf_counter() - started)
    if gamma == "1" and "error" not in out:
        out.update(gamma_replay(grammar, vocab, policy, schema))
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if second_db and "error" not in out:
        out.update(sharing(grammar, vocab, policy, schema, second_db))
    return out


def main() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from host import provenance, report_parser

    parser = report_parser(__doc__)
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"default: {DEFAULT_SIZES}")
    parser.add_argument(
        "--also",
        default="",
        metavar="postgres,duckdb",
        help="also time introspection of the same catalogs on these databases",
    )
    parser.add_argument(
        "--sharing", action="store_true", help="also measure cross-schema cache sharing"
    )
    parser.add_argument(
        "--more",
        type=int,
        default=0,
        metavar="N",
        help="also compile N more catalogs of each size in the same process (other seeds)",
    )
    parser.add_argument(
        "--listed",
        type=float,
        default=0.0,
        metavar="F",
        help="the role lists the first F of the tables (0 < F <= 1) and denies a column in "
        "every other one it lists (default 0: a role that sees every table)",
    )
    parser.add_argument(
        "--gamma",
        action="store_true",
        help="also compile the role's language as `gridrail ask` does (Γ at the mask) and time "
        "the masks of one statement",
    )
    parser.add_argument("--child", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(*args.child)))
        return
    from spider_eval import assets_root

    tokenizer = str(assets_root() / "tokenizers" / "gpt2" / "tokenizer.json")
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            tables, columns = (int(x) for x in size.split("x"))
            path = Path(tmp) / f"{size}.sqlite"
            ddl = catalog_ddl(tables, columns)
            write_catalog(path, ddl)
            second = ""
            if args.sharing:
                second = str(Path(tmp) / f"{size}-second.sqlite")
                write_catalog(second, catalog_ddl(tables, columns, seed=1))
            more = [str(Path(tmp) / f"{size}-more{i}.sqlite") for i in range(args.more)]
            for seed, other in enumerate(more, start=2):
                write_catalog(other, catalog_ddl(tables, columns, seed=seed))
            gamma = str(int(args.gamma))
            argv = [__file__, "--child", str(path), tokenizer, str(args.listed), gamma, second]
            argv += more
            child = subprocess.run(
                [sys.executable, *argv],
                capture_output=True,
                text=True,
                check=False,
            )
            if child.returncode != 0:
                result = {"error": "crashed", "error_head": child.stderr.strip()[-300:]}
            else:
                result = json.loads(child.stdout.strip().splitlines()[-1])
            result.update(introspect_elsewhere(ddl, Path(tmp), args.also.split(",")))
            rows.append({"size": size, **result})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    report = {
        **provenance(started),
        "listed": args.listed,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{report['host']}, {report['date']}")
    more = f" {args.more} more: median (each) |" if args.more else ""
    print(
        "| tables x columns | introspect: SQLite / DuckDB / PostgreSQL | compile (role + "
        f"lexicons) |{more} first mask | after `SELECT ` | first check | peak RSS | error |"
    )
    print("|---|---|---|" + "---|" * bool(args.more) + "---|---|---|---|---|")

    def ms(row, key):
        return f"{row[key] * 1000:.0f} ms" if key in row else "—"

    def more_ms(row):
        each = row.get("more_compile_s")
        if not each:
            return " — |"
        listed = ", ".join(f"{s * 1000:.0f}" for s in each)
        return f" {statistics.median(each) * 1000:.0f} ms ({listed}) |"

    for r in rows:
        error = f"{r['error']} ({r.get('error_chars', '?')} chars)" if "error" in r else ""
        rss = f"{r['peak_rss_mb']:.0f} MB" if "peak_rss_mb" in r else "—"
        introspect = " / ".join(ms(r, f"{k}introspect_s") for k in ("", "duckdb_", "postgres_"))
        print(
            f"| {r['size']} | {introspect} | {ms(r, 'compile_s')} |"
            f"{more_ms(r) if args.more else ''} "
            f"{ms(r, 'first_mask_s')} | {ms(r, 'column_mask_s')} | {ms(r, 'first_check_s')} | "
            f"{rss} | {error} |"
        )
    for r in rows:
        if "gamma_masks_s" in r:
            print(
                f"{r['size']} as `gridrail ask` compiles it (Γ): compile "
                f"{ms(r, 'gamma_compile_s')}, the masks of {r['gamma_tokens']} tokens "
                f"{ms(r, 'gamma_masks_s')}"
            )

    if args.sharing:
        print(
            "\n| tables x columns | second schema: mask walks | T1 hits | T2 hits (first "
            "schema's walks) | computed | residue's walks below CD nodes: first schema "
            "(computed / asked) | second schema | shared walks below nodes, second schema "
            "(computed / asked) | replay: first / second schema |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if "second_walks" in r:
                print(
                    f"| {r['size']} | {r['second_walks']} | {r['second_t1_hits']} | "
                    f"{r['second_t2_hits']} | {r['second_computed']} | "
                    f"{r['first_below_computed']} / {r['first_below']} | "
                    f"{r['second_below_computed']} / {r['second_below']} | "
                    f"{r['second_shared_computed']} / {r['second_shared_asked']} | "
                    f"{r['first_replay_s'] * 1000:.0f} / {r['second_replay_s'] * 1000:.0f} ms |"
                )


if __name__ == "__main__":
    main()
