"""Load on `gridrail serve`: `python bench/serve_load.py [--clients 32] [--seconds 60] [--json]`.

The service over the bundled HR example (a copy), in this process, served by uvicorn on the
loopback; the model is the deterministic stand-in of the tests (tests/test_batch.py's
`ByQuestion`: it writes a fixed statement per question through the mask, at no model cost), so
what is measured is the service: keys, guides, the mask, the checker, running the answer, the
audit store. `--clients` threads each keep one request in flight for `--seconds`, alternating
`POST /v1/ask` (a question, `--candidates` candidates) and `POST /v1/check`. Reported per
endpoint: requests, p50 / p99 latency; the throughput; and, at the end, the audit store checked:
every answered ask must be stored (lost = answered − stored) and every stored record's chains
must verify.
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


def run(clients: int, seconds: float, candidates: int) -> dict:
    assert all(q in ANSWERS for q in QUESTIONS)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "hr.sqlite"
        shutil.copy(ROOT / "examples" / "hr.sqlite", db)
        keys_file = Path(tmp) / "keys.json"
        key = add_key(keys_file, "load", ["analyst"])
        store = AuditStore(Path(tmp) / "audit.sqlite")
        service = Service(
            Database.open(str(db)),
            gr.Policy.from_file(ROOT / "examples" / "hr_policy.toml"),
            KeyStore.read(keys_file),
            store,
            ByQuestion("stand-in", None, None, _small_vocab()),
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
        lock = threading.Lock()
        stop = time.monotonic() + seconds

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
                    started = time.perf_counter()
                    r = http.post(path, json=body, headers=headers)
                    took = time.perf_counter() - started
                    with lock:
                        latencies[path].append(took)
                        statuses[path, r.status_code] += 1
                    i += 1

        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        server.should_exit = True
        thread.join(timeout=30)
        stored, unverifiable = store.verify_all()
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
    for path, values in sorted(latencies.items()):
        values.sort()
        out[path] = {
            "requests": len(values),
            "p50_ms": round(1000 * statistics.median(values), 1),
            "p99_ms": round(1000 * values[min(len(values) - 1, int(0.99 * len(values)))], 1),
        }
    return out


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
    args = parser.parse_args()
    started = time.perf_counter()
    result = run(args.clients, args.seconds, args.candidates)
    print(json.dumps({**provenance(started), **result}, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
