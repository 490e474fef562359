"""`gridrail serve` fuzzed from its own OpenAPI document (schemathesis): bodies valid and not,
with a valid key and with none — no answer is a server error, and every error is JSON with a
stable `error` code and a `message`."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gridrail as gr
from gridrail.database import Database
from gridrail.serve.app import Service, create_app
from gridrail.serve.keys import KeyStore, add_key
from gridrail.serve.store import AuditStore
from support.long_tier import long_size
from test_batch import ANSWERS, EXAMPLES, HR_POLICY, ByQuestion
from test_walk_arm import _small_vocab

KEYS: dict[str, str] = {}


class AnyQuestion(ByQuestion):
    """The scripted model, answering a question it has no script for as the first one."""

    def prompt_ids(self, messages: list[dict[str, str]], prefix: str = "") -> list[int]:
        scripted = list(ANSWERS)
        asked = messages[1]["content"]
        return [scripted.index(asked) if asked in scripted else 0]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("serve-fuzz")
    db = tmp / "hr.sqlite"
    db.write_bytes((EXAMPLES / "hr.sqlite").read_bytes())
    keys = tmp / "keys.json"
    KEYS["analyst"] = add_key(keys, "fuzz", ["analyst", "audit"])
    service = Service(
        Database.open(str(db)),
        gr.Policy.from_file(HR_POLICY),
        KeyStore.read(keys),
        AuditStore(tmp / "audit.sqlite"),
        AnyQuestion("any-question", None, None, _small_vocab()),
        requests_per_minute=10**9,
    )
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(service))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_no_server_error_and_every_error_is_json(api, data) -> None:
    _one_case(api, data)


@pytest.mark.long
@settings(
    max_examples=long_size(full=3000, reduced=400),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.data())
def test_no_server_error_fuzzed_longer(api, data) -> None:
    _one_case(api, data)


def _one_case(api, data) -> None:
    """One drawn request, with a valid key and with none: no 5xx; every error is JSON with a
    stable code and a message."""
    # (schemathesis's pytest plugin does not load under pytest 9: its strategies, with hypothesis)
    operations = [result.ok() for result in api.get_all_operations()]
    case = data.draw(st.sampled_from(operations).flatmap(lambda op: op.as_strategy()))
    for headers in ({"Authorization": f"Bearer {KEYS['analyst']}"}, {}):
        response = case.call(headers=headers)
        assert response.status_code < 500, (case.method, case.path, response.text)
        if response.status_code >= 400:
            body = response.json()
            assert set(body) == {"error", "message"}, body
            assert body["error"] and body["message"]


def test_the_document_names_every_endpoint(api) -> None:
    paths = set(api.raw_schema["paths"])
    assert {"/v1/check", "/v1/ask", "/v1/audit/{audit_id}", "/healthz", "/metrics"} <= paths
