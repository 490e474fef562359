"""The audit store of `gridrail serve` in both its databases: a SQLite file, and a PostgreSQL
database several replicas share (issue 17 item 4). Each answer is one transaction with the
artifacts its logs name; every record verifies and replays from the store alone."""

from __future__ import annotations

import io
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

import gridrail as gr
import test_serve
from gridrail.cli import main
from gridrail.serve.app import create_app
from gridrail.serve.store import AuditStore, AuditStoreError
from test_serve import _as, _service

keys, hr_db = test_serve.keys, test_serve.hr_db  # the fixtures, shared


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("audit_store_dsn")
    return str(tmp_path / "audit.sqlite")


def _execute(location: str, sql: str, params: tuple = ()) -> list[tuple]:
    """`sql` (with %s parameters) run on the store's database directly, as an intruder would."""
    if location.endswith(".sqlite"):
        with closing(sqlite3.connect(location)) as db, db:
            return db.execute(sql.replace("%s", "?"), params).fetchall()
    with psycopg.connect(location, autocommit=True) as db:
        cursor = db.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def _replica(hr_db: Path, keys: dict, tmp_path: Path, location: str, **options) -> TestClient:
    service = _service(hr_db, keys["path"], tmp_path, store=AuditStore(location), **options)
    return TestClient(create_app(service))


def test_replicas_share_one_store(location: str, keys, hr_db, tmp_path: Path) -> None:
    """Two services on one store: each reads the other's records, every record verifies and
    replays from the store alone, and the artifacts are stored once, not per answer."""
    one, two = (_replica(hr_db, keys, tmp_path, location) for _ in range(2))
    ids = []
    asked = ((one, "How many orders?"), (two, "Who works in sales?"), (one, "How many orders?"))
    for client, question in asked:
        r = client.post("/v1/ask", json={"question": question}, headers=_as(keys["analyst"]))
        assert r.status_code == 200, r.text
        ids.append(r.json()["audit_id"])
    for client in (one, two):
        for audit_id in ids:
            record = client.get(f"/v1/audit/{audit_id}", headers=_as(keys["auditor"])).json()
            assert record["verified"] and record["principal"] == "ana"
    store = AuditStore(location, create=False)
    assert store.verify_all() == (3, [])
    for audit_id in ids:
        replayed = store.replay(audit_id)
        logs = store.get(audit_id)["logs"]
        assert replayed == [len(gr.audit.AuditLog.parse(lines).records) for lines in logs]
    stored = _execute(location, "SELECT name, fingerprint FROM artifacts")
    assert len(stored) == len(set(stored)) == 4  # grammar, vocabulary, lexicons, names
    out = io.StringIO()
    assert main(["audit", "replay", "--store", location, ids[1]], out) == 0, out.getvalue()
    assert "replayed" in out.getvalue() and "bit-identically" in out.getvalue()


def test_an_edited_record_or_a_lost_artifact_is_found(location: str, keys, hr_db, tmp_path):
    client = _replica(hr_db, keys, tmp_path, location)
    ids = [
        client.post("/v1/ask", json={"question": q}, headers=_as(keys["analyst"])).json()[
            "audit_id"
        ]
        for q in ("How many orders?", "Who works in sales?")
    ]
    (logs,) = _execute(location, "SELECT logs FROM answers WHERE id = %s", (ids[0],))[0]
    edited = json.loads(logs)
    edited[0][0] = edited[0][0].replace('"step":0', '"step":1')
    _execute(location, "UPDATE answers SET logs = %s WHERE id = %s", (json.dumps(edited), ids[0]))
    out = io.StringIO()
    assert main(["audit", "verify", "--store", location], out) == 1
    assert f"answer {ids[0]}: not intact" in out.getvalue()
    assert "1 of 2 stored answers intact" in out.getvalue()
    assert (
        client.get(f"/v1/audit/{ids[0]}", headers=_as(keys["auditor"])).json()["verified"] is False
    )
    # an artifact deleted from the store: replay names what it lacks
    _execute(location, "DELETE FROM artifacts WHERE name = 'vocabulary'")
    out = io.StringIO()
    assert main(["audit", "replay", "--store", location, ids[1]], out) == 1
    assert "the archive cannot back it" in out.getvalue() and "vocabulary" in out.getvalue()
    assert main(["audit", "replay", "--store", location, "nope"], io.StringIO()) == 2


def test_a_postgres_store_that_drops_the_connection_is_a_503_then_reconnects(
    audit_store_dsn: str,
    keys,
    hr_db,
    tmp_path: Path,
) -> None:
    client = _replica(hr_db, keys, tmp_path, audit_store_dsn)
    body, headers = {"question": "How many orders?"}, _as(keys["analyst"])
    assert client.post("/v1/ask", json=body, headers=headers).status_code == 200
    # the server ends the store's session (a restart, a failover)
    _execute(
        audit_store_dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    r = client.post("/v1/ask", json=body, headers=headers)
    assert r.status_code == 503 and r.json()["error"] == "unavailable"
    assert r.headers["retry-after"] == "5"
    r = client.post("/v1/ask", json=body, headers=headers)  # a new connection
    assert r.status_code == 200
    assert AuditStore(audit_store_dsn).verify_all() == (2, [])


def test_a_store_that_cannot_be_opened_is_one_error_without_the_password(tmp_path: Path):
    with pytest.raises(AuditStoreError) as caught:
        AuditStore("postgresql://auditor:s3cret@127.0.0.1:1/audit")
    assert "s3cret" not in str(caught.value)
    with pytest.raises(AuditStoreError, match="no audit store there"):
        AuditStore(tmp_path / "absent.sqlite", create=False)
    err = io.StringIO()
    assert main(["audit", "verify", "--store", "host=127.0.0.1 port=1 dbname=x"], err) == 2


def test_replicas_on_a_postgres_store_share_each_keys_limit(
    audit_store_dsn: str, keys, hr_db, tmp_path: Path
) -> None:
    """5 requests a minute per key, whichever replica takes them; another key is not limited by
    this one; the bucket refills with (wall-clock) time."""
    now = [1_000_000.0]
    one, two = (
        _replica(hr_db, keys, tmp_path, audit_store_dsn, requests_per_minute=5,
                 wall_clock=lambda: now[0])
        for _ in range(2)
    )  # fmt: skip
    body, analyst = {"sql": "SELECT 1;"}, _as(keys["analyst"])
    codes = [c.post("/v1/check", json=body, headers=analyst).status_code for c in (one, two) * 3]
    assert codes == [200] * 5 + [429]
    r = one.post("/v1/check", json=body, headers=analyst)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert two.post("/v1/check", json=body, headers=_as(keys["auditor"])).status_code == 200
    now[0] += 12.0  # 5 a minute: one request back every 12 s
    assert two.post("/v1/check", json=body, headers=analyst).status_code == 200
    assert one.post("/v1/check", json=body, headers=analyst).status_code == 429


def test_a_sqlite_store_leaves_the_limit_to_each_replica(keys, hr_db, tmp_path: Path) -> None:
    location = str(tmp_path / "audit.sqlite")
    one, two = (_replica(hr_db, keys, tmp_path, location, requests_per_minute=2) for _ in range(2))
    body, analyst = {"sql": "SELECT 1;"}, _as(keys["analyst"])
    assert [
        c.post("/v1/check", json=body, headers=analyst).status_code for c in (one, one, two, two)
    ] == [200] * 4
    assert one.post("/v1/check", json=body, headers=analyst).status_code == 429
