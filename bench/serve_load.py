"""Load on `gridrail serve`: `python bench/serve_load.py [--clients 32] [--seconds 60] [--json]`.

The service over the bundled HR example (a copy), in this process, served by uvicorn on the
loopback; the model is the deterministic stand-in of the tests (tests/test_batch.py's
`ByQuestion`: it writes a fixed statement per question through the mask, at no model cost), so
what is measured is the service: keys, guides, the mask, the checker, running the answer, the
audit store. `--clients` threads each keep one request in flight for `--seconds`, alternating
`POST /v1/ask` (a question, `--candidates` candidates) and `POST /v1/check`. `--real-model`:
the default model instead (its calls serialized: one answer written at a time). Reported per
endpoint: requests, p50 / p99 latency; the throughput; and, at the end, the audit store checked:
every answered ask must be stored (lost = answered − stored) and every stored record's chains
must verify. `--cold-roles`: halfway through, four roles nobody has used yet make their first
request (their guides compile meanwhile); reported: how long those took, and the warm requests'
latency while one was compiling against the rest of the run (a cold role must not stall them).
"""

from __future__ import annotations

import json
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from contextlib import closing
from pathlib import Path

import httpx
import uvicorn

import gridrail as gr
from gridrail.database import Database
from gridrail.models import load_model
from gridrail.serve.app import Service, create_app
from gridrail.serve.keys import KeyStore, add_key
from gridrail.serve.store import AuditStore

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from test_batch import ANSWERS, ByQuestion  # noqa: E402
from test_walk_arm import _small_vocab  # noqa: E402

QUESTIONS = ["How many orders?", "Who works in sales?"]
CHECKS = ["SELECT name FROM employees;", "DELETE FROM orders;", "SELECT salary FROM employees;"]


COLD_ROLES = ("clerk", "auditor", "manager", "admin")


def run(
    clients: int,
    seconds: float,
    candidates: int,
    cold_roles: bool = False,
    real: bool = False,
    audit_store: str | None = None,
) -> dict:
    assert all(q in ANSWERS for q in QUESTIONS)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "hr.sqlite"
        shutil.copy(ROOT / "examples" / "hr.sqlite", db)
        keys_file = Path(tmp) / "keys.json"
        key = add_key(keys_file, "load", ["analyst"])
        cold_key = add_key(keys_file, "cold", list(COLD_ROLES))
        store = AuditStore(audit_store or Path(tmp) / "audit.sqlite")
        before = store.verify_all()[0]  # a shared store may hold answers already
        service = Service(
            Database.open(str(db)),
            gr.Policy.from_file(ROOT / "examples" / "hr_policy.toml"),
            KeyStore.read(keys_file),
            store,
            load_model() if real else ByQuestion("stand-in", None, None, _small_vocab()),
            requests_per_minute=10**9,
        )
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(create_app(service), host="127.0.0.1", port=port, log_level="error")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        latencies: defaultdict[str, list[float]] = defaultdict(list)
        statuses: Counter[tuple[str, int]] = Counter()
        windows: list[tuple[float, float]] = []  # (start, end) of each warm request
        lock = threading.Lock()
        stop = time.monotonic() + seconds
        colds: list[tuple[str, float, float]] = []

        def cold() -> None:
            """Halfway through, the first request of each other role (its guide compiled)."""
            time.sleep(seconds / 2)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
                for role in COLD_ROLES:
                    headers = {"Authorization": f"Bearer {cold_key}", "X-Gridrail-Role": role}
                    began = time.monotonic()
                    r = http.post("/v1/check", json={"sql": CHECKS[0]}, headers=headers)
                    assert r.status_code == 200, r.text
                    colds.append((role, began, time.monotonic()))

        def client(n: int) -> None:
            headers = {"Authorization": f"Bearer {key}"}
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
                i = n
                while time.monotonic() < stop:
                    if i % 2 == 0:
                        path = "/v1/ask"
                        body = {"question": QUESTIONS[i // 2 % 2], "candidates": candidates}
                    else:
                        path, body = "/v1/check", {"sql": CHECKS[i // 2 % 3]}
                    began = time.monotonic()
                    r = http.post(path, json=body, headers=headers)
                    ended = time.monotonic()
                    with lock:
                        latencies[path].append(ended - began)
                        statuses[path, r.status_code] += 1
                        windows.append((began, ended))
                    i += 1

        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        if cold_roles:
            threads.append(threading.Thread(target=cold))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        server.should_exit = True
        thread.join(timeout=30)
        stored, unverifiable = store.verify_all()
        stored -= before
        store.close()
    answered = statuses["/v1/ask", 200]
    out = {
        "clients": clients,
        "load_seconds": round(elapsed, 1),
        "requests": sum(statuses.values()),
        "throughput_per_s": round(sum(statuses.values()) / elapsed, 1),
        "statuses": {f"{p} {s}": n for (p, s), n in sorted(statuses.items())},
        "answered_asks": answered,
        "stored": stored,
        "lost": answered - stored,
        "unverifiable": len(unverifiable),
    }
    if cold_roles:
        out["cold_roles"] = _cold_role_effect(colds, windows)
    for path, values in sorted(latencies.items()):
        values.sort()
        out[path] = {
            "requests": len(values),
            "p50_ms": round(1000 * statistics.median(values), 1),
            "p99_ms": round(1000 * values[min(len(values) - 1, int(0.99 * len(values)))], 1),
        }
    return out


def _cold_role_effect(colds: list, windows: list) -> dict:
    """How long each cold role's first request took, and the warm requests' latency while one
    was compiling against the rest: a cold role must not stall the warm ones."""
    during, outside = [], []
    for began, ended in windows:
        overlaps = any(began < c_end and ended > c_begin for _, c_begin, c_end in colds)
        (during if overlaps else outside).append(ended - began)

    def summary(values: list[float]) -> dict:
        values = sorted(values)
        if not values:
            return {"requests": 0}
        return {
            "requests": len(values),
            "p50_ms": round(1000 * statistics.median(values), 1),
            "max_ms": round(1000 * values[-1], 1),
        }

    return {
        "first_request_ms": {role: round(1000 * (e - b), 1) for role, b, e in colds},
        "warm_while_cold": summary(during),
        "warm_otherwise": summary(outside),
    }


def free_port() -> int:
    """A free loopback port (bound, then released, for the server to take)."""
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    from host import provenance, report_parser

    parser = report_parser(__doc__)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--candidates", type=int, default=1)
    parser.add_argument(
        "--cold-roles",
        action="store_true",
        help="halfway through, the first request of four other roles: their guides compile "
        "while the load runs; reported: those requests and the warm ones meanwhile",
    )
    parser.add_argument(
        "--real-model",
        action="store_true",
        help="the default model (SmolLM2-135M) instead of the stand-in: the service's "
        "throughput with its model calls serialized",
    )
    parser.add_argument(
        "--audit-store",
        metavar="FILE|DSN",
        help="the audit store to write (a PostgreSQL DSN, say); default: a new SQLite file",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    result = run(
        args.clients, args.seconds, args.candidates, args.cold_roles, args.real_model,
        args.audit_store,
    )  # fmt: skip
    print(json.dumps({**provenance(started), **result}, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
