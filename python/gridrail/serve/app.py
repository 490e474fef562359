"""The HTTP API of `gridrail serve` (FastAPI: typed request bodies, an OpenAPI document at
/openapi.json, and Starlette underneath for the middleware).

Who asks decides the role: the key in `Authorization: Bearer <key>` names a principal
(`gridrail.serve.keys`) and the roles it holds; `X-Gridrail-Role` picks one of them when it
holds several. Nothing in a body can name or widen a role (bodies are closed: an unknown field
is a 422). Every error is `{"error": code, "message": ...}`: 401 no or unknown key, 403 a role or
permission the key lacks, 413 a body over the limit, 422 a malformed body, 429 too many requests
for one key, 422 `unanswerable` what gridrail refuses for the request (its message says why),
500 `internal` a defect. The answers of `/v1/ask` and their audit logs go into the audit store
(`gridrail.serve.store`), which an auditor's key reads back with the chain verified.

Concurrency: requests run on the server's thread pool. The model is called by one request at a
time (llama.cpp and transformers keep one decoding state); checks and guides of other roles do
not wait for it. Guides are compiled once per role through the registry (single-flight).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from gridrail.ask import DEFAULT_CANDIDATES, DEFAULT_MAX_TOKENS, ask, database_judge
from gridrail.audit import AuditLog
from gridrail.check.checker import Violation
from gridrail.database import Database
from gridrail.errors import GridrailError, UsageError
from gridrail.grammar.model import Grammar
from gridrail.guide import Guide, compile
from gridrail.lru import CacheStats
from gridrail.models import LanguageModel
from gridrail.policy.bundle import Policy
from gridrail.policy.language import select_role
from gridrail.policy.profile import GenerationProfile
from gridrail.policy.role import binds_names
from gridrail.policy.schema import Schema
from gridrail.registry import Registry, RegistryStats
from gridrail.serve.keys import AUDITOR, KeysFileError, KeyStore, Principal
from gridrail.serve.store import AuditStore, AuditStoreError
from gridrail.vocab import Vocabulary

LOG = logging.getLogger("gridrail.serve")  # one JSON line per request
PAGE = resources.files("gridrail.serve").joinpath("page.html").read_text(encoding="utf-8")
MAX_BODY_BYTES = 64 * 1024
MAX_SQL_CHARS = 20_000
MAX_QUESTION_CHARS = 2_000
REQUESTS_PER_MINUTE = 120  # per key
SCHEMA_REFRESH_S = 5.0  # how stale the catalog a new request is judged against may be
DEADLINE_S = 120.0  # the longest a request's answer may take (a caller may ask for less)
GUIDES_HELD = 64  # guides (per endpoint kind, role and catalog) kept warm between requests
# /v1/check judges SQL written elsewhere: its guides need no model, only some vocabulary
BYTE_VOCABULARY = Vocabulary([bytes([b]) for b in range(256)] + [None], eos_token_ids=256)


class ApiError(Exception):
    """An error the API answers with its status, a stable code and a message."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers


class CheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sql: str = Field(max_length=MAX_SQL_CHARS)


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    execute: bool = True
    candidates: int | None = Field(default=None, ge=1, le=16)
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=16, le=1024)
    # seconds from the request's arrival: the generation running then is ended with the
    # shortest completion of its exact mask and no further candidate starts (at most the
    # server's deadline)
    deadline_s: float | None = Field(default=None, gt=0, le=3600)


@dataclass
class Service:
    """What the app serves: one database, its policy, the keys, and (for /v1/ask) a model."""

    database: Database
    policy: Policy
    keys: KeyStore
    store: AuditStore
    model: LanguageModel | None = None
    signing_key: Ed25519PrivateKey | None = None  # signs every seal; the store checks it
    grammar: Grammar = field(default_factory=lambda: Grammar.bundled("sqlite"))
    requests_per_minute: int = REQUESTS_PER_MINUTE
    max_body_bytes: int = MAX_BODY_BYTES
    schema_refresh_s: float = SCHEMA_REFRESH_S
    deadline_s: float = DEADLINE_S
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time  # comparable across replicas

    def __post_init__(self) -> None:
        if self.requests_per_minute < 1 or not self.deadline_s > 0:
            raise UsageError(
                "the service needs at least 1 request a minute per key and a positive deadline "
                f"(got {self.requests_per_minute} and {self.deadline_s} s)"
            )
        if AUDITOR in self.policy.roles:  # a key's grant of it reads records: never the role
            raise UsageError(
                f"the policy has a role named {AUDITOR!r}, which is the name of the permission "
                "to read audit records in the keys file: rename the role"
            )
        self._schema = self.database.schema()
        self._schema_read = self.clock()
        self._schema_lock = threading.Lock()
        self.metrics = Metrics()
        self.model_lock = threading.Lock()
        # replicas sharing a PostgreSQL store share each key's limit there (on wall-clock time)
        shared = self.store.kind == "postgres"
        self.limiter = RateLimiter(
            self.requests_per_minute,
            self.wall_clock if shared else self.clock,
            self.store if shared else None,
        )
        # one guide per (kind, role, catalog fingerprint), built once (single-flight) and kept
        # warm, so its caches serve later requests; a new catalog rolls the role's guide over
        self.guides = Registry(capacity=GUIDES_HELD, failure_ttl=0)
        self.judges = Registry(capacity=GUIDES_HELD, failure_ttl=0)  # the database's, per guide

    @property
    def schema(self) -> Schema:
        """The catalog, read again when `schema_refresh_s` have passed: a changed one has
        another fingerprint, so new requests get guides of the new catalog (compiled once, by
        the registry) while those in flight keep theirs."""
        with self._schema_lock:
            if self.clock() - self._schema_read >= self.schema_refresh_s:
                self._schema, self._schema_read = self.database.schema(), self.clock()
            return self._schema

    def checking_guide(self, role: str) -> Guide:
        return self._guide("check", role, lambda schema: compile(
            self.grammar, BYTE_VOCABULARY, schema=schema, policy=self.policy, role=role
        ))  # fmt: skip

    def asking_guide(self, role: str) -> Guide:
        assert self.model is not None
        vocab = self.model.vocab
        return self._guide("ask", role, lambda schema: compile(
            self.grammar, vocab, schema=schema, policy=self.policy, role=role,
            profile=GenerationProfile(),
            gamma=binds_names(select_role(self.policy, role), None, default=True),
        ))  # fmt: skip

    def judge(self, guide: Guide) -> Callable[[str], list[Violation]] | None:
        """The database's own judge of the guide's view, as `gridrail ask` judges with it
        (`database_judge`: DuckDB's binder, PostgreSQL's privilege check; None on SQLite, whose
        binder judges inside `guide.check`), built once per role and catalog. A JudgeError
        when it cannot be set up: the request then fails, and nothing unjudged runs."""
        view = guide.view
        assert view is not None and view.role is not None
        key = (view.role.name, view.schema.fingerprint)
        self.judges.rollover(view.role.name, key)
        return self.judges.get(
            key, lambda: database_judge(self.database, view, self.policy.fingerprint)
        )

    def _guide(self, kind: str, role: str, build: Callable[[Schema], Guide]) -> Guide:
        schema = self.schema
        key = (kind, role, schema.fingerprint)
        self.guides.rollover((kind, role), key)  # requests in flight keep the guide they hold
        return self.guides.get(key, lambda: build(schema))

    def cache_stats(self) -> dict[str, CacheStats]:
        """The caches of the guides held now, summed per kind (a cache two guides share,
        such as T2 across roles, counted once)."""
        seen: dict[int, tuple[str, CacheStats]] = {}
        for guide in self.guides.values():
            for kind, stats in guide.cache_stats().items():  # type: ignore[attr-defined]
                seen.setdefault(id(stats), (kind, stats))
        totals = {kind: CacheStats() for kind in ("t1", "t2", "masks", "gamma_masks")}
        for kind, stats in seen.values():
            total = totals[kind]
            total.hits += stats.hits
            total.misses += stats.misses
            total.evictions += stats.evictions
            total.entries += stats.entries
            total.bytes += stats.bytes
        return totals


class RateLimiter:
    """At most `per_minute` requests per key in any minute (a token bucket refilled evenly),
    counted in this process — or, with a `store` that replicas share (PostgreSQL), in the store,
    so the limit holds across replicas (then `clock` must be a wall clock)."""

    def __init__(
        self, per_minute: int, clock: Callable[[], float], store: AuditStore | None = None
    ):
        self.per_minute, self.clock, self.store = per_minute, clock, store
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0 when a request may go now, else the seconds until one may."""
        now = self.clock()
        if self.store is not None:
            return self.store.take_request(key, self.per_minute, now, token_bucket)
        with self._lock:
            tokens, wait = token_bucket(self._buckets.get(key), now, self.per_minute)
            self._buckets[key] = (tokens, now)
            return wait


def token_bucket(
    found: tuple[float, float] | None, now: float, per_minute: int
) -> tuple[float, float]:
    """A key's bucket after a request at `now`: (tokens left, seconds to wait: 0 if the
    request may go), from `found` (tokens, when last updated) or a full bucket."""
    tokens, then = found if found is not None else (float(per_minute), now)
    tokens = min(per_minute, tokens + max(0.0, now - then) * per_minute / 60)
    if tokens < 1:
        return tokens, (1 - tokens) * 60 / per_minute
    return tokens - 1, 0.0


# upper bounds (ms) of the per-token guard latency histogram's buckets
GUARD_MS_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 50.0, 100.0)


class Metrics:
    """Counters and the per-token guard latency histogram, in the Prometheus text format."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.sums: defaultdict[str, float] = defaultdict(float)
        self.guard_buckets = [0] * len(GUARD_MS_BUCKETS)
        self.guard_count = 0
        self.guard_sum_ms = 0.0

    def guard(self, ms_per_token: float, tokens: int) -> None:
        """One generation's guard time per token, counted once per token."""
        with self._lock:
            for i, bound in enumerate(GUARD_MS_BUCKETS):
                if ms_per_token <= bound:
                    self.guard_buckets[i] += tokens
            self.guard_count += tokens
            self.guard_sum_ms += ms_per_token * tokens

    def count(self, endpoint: str, outcome: str) -> None:
        with self._lock:
            self.requests[endpoint, outcome] += 1

    def add(self, name: str, value: float) -> None:
        with self._lock:
            self.sums[name] += value

    def text(self, caches: dict[str, CacheStats], guides: RegistryStats) -> str:
        """Everything counted, with the hit rates of the `caches` the held guides use and the
        counts of the service's guide registry (`guides`)."""
        with self._lock:
            lines = [
                "# HELP gridrail_requests_total Requests by endpoint and outcome.",
                "# TYPE gridrail_requests_total counter",
            ]
            for (endpoint, outcome), n in sorted(self.requests.items()):
                labels = f'endpoint="{_label(endpoint)}",outcome="{_label(outcome)}"'
                lines.append(f"gridrail_requests_total{{{labels}}} {n}")
            for name, value in sorted(self.sums.items()):
                lines += [f"# TYPE gridrail_{name} counter", f"gridrail_{name} {value}"]
            name = "gridrail_guard_ms_per_token"
            lines += [
                f"# HELP {name} The mask's time per generated token (ms).",
                f"# TYPE {name} histogram",
            ]
            for bound, n in zip(GUARD_MS_BUCKETS, self.guard_buckets, strict=True):
                lines.append(f'{name}_bucket{{le="{bound}"}} {n}')
            lines += [
                f'{name}_bucket{{le="+Inf"}} {self.guard_count}',
                f"{name}_sum {self.guard_sum_ms}",
                f"{name}_count {self.guard_count}",
            ]
        return "\n".join(lines + _cache_lines(caches, guides)) + "\n"


def _label(value: str) -> str:
    """A label value as the Prometheus text format escapes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _cache_lines(caches: dict[str, CacheStats], guides: RegistryStats) -> list[str]:
    lines = [
        "# HELP gridrail_guide_lookups_total Guides asked of the service's registry, by outcome "
        "(built: compiled for a role and catalog; hit: a warm one served).",
        "# TYPE gridrail_guide_lookups_total counter",
        f'gridrail_guide_lookups_total{{outcome="built"}} {guides.builds}',
        f'gridrail_guide_lookups_total{{outcome="hit"}} {guides.hits}',
        f'gridrail_guide_lookups_total{{outcome="joined"}} {guides.waits}',
    ]
    # gauges, not counters: a guide dropped (catalog rollover, eviction) takes its counts along
    for metric, what in (
        ("hits", "Lookups a cache answered"),
        ("misses", "Lookups a cache did not answer"),
        ("hit_ratio", "hits / (hits + misses)"),
        ("entries", "Entries held"),
    ):
        lines += [
            f"# HELP gridrail_cache_{metric} {what}, per cache of the guides held now "
            "(t1, t2: mask walks; masks: by configuration; gamma_masks: by configuration and the "
            "names the statement declared).",
            f"# TYPE gridrail_cache_{metric} gauge",
        ]
        for cache, stats in sorted(caches.items()):
            looked = stats.hits + stats.misses
            value = {
                "hits": stats.hits,
                "misses": stats.misses,
                "hit_ratio": round(stats.hits / looked, 6) if looked else 0.0,
                "entries": stats.entries,
            }[metric]
            lines.append(f'gridrail_cache_{metric}{{cache="{cache}"}} {value}')
    return lines


def create_app(service: Service) -> FastAPI:
    app = FastAPI(
        title="gridrail",
        version="1",
        description="SQL a role may run: checked, generated under the role's mask, audited.",
    )
    app.state.service = service

    def endpoint(request: Request) -> str:
        """The route a request is counted under: its path template (`/v1/audit/{audit_id}`),
        "other" where none matches — never the path as sent, which would grow the metrics
        without bound and write the caller's bytes into them."""
        for route in app.routes:
            if isinstance(route, BaseRoute) and route.matches(request.scope)[0] != Match.NONE:
                return getattr(route, "path", "other")
        return "other"

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        request.state.outcome = exc.code
        service.metrics.count(endpoint(request), exc.code)
        return _error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        request.state.outcome = "malformed"
        service.metrics.count(endpoint(request), "malformed")
        what = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return _error(422, "malformed", f"the request body is not what this endpoint takes: {what}")

    @app.exception_handler(AuditStoreError)
    async def store_down(request: Request, exc: AuditStoreError) -> JSONResponse:
        # the operator's store refused (a server restarting, a full disk): try again later
        request.state.outcome = "unavailable"
        service.metrics.count(endpoint(request), "unavailable")
        LOG.error("request %s: %s", getattr(request.state, "id", "?"), exc)
        return _error(
            503,
            "unavailable",
            "the audit store cannot be reached now; nothing "
            "was answered without its record: try again later",
            {"Retry-After": "5"},
        )

    @app.exception_handler(GridrailError)
    async def unanswerable(request: Request, exc: GridrailError) -> JSONResponse:
        # what gridrail refuses to do for this request (a prompt past the model's context, ...)
        request.state.outcome = "unanswerable"
        service.metrics.count(endpoint(request), "unanswerable")
        return _error(422, "unanswerable", str(exc))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        # a defect, not the caller's doing: logged with the request id, answered as JSON
        request.state.outcome = "internal"
        service.metrics.count(endpoint(request), "internal")
        LOG.exception("request %s failed", getattr(request.state, "id", "?"))
        return _error(500, "internal", f"gridrail failed on this request ({type(exc).__name__})")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {404: "not_found", 405: "method_not_allowed"}
        return _error(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))

    @app.middleware("http")
    async def each_request(request: Request, call_next):
        """Give the request an id, refuse a body over the limit (counted as it arrives, with or
        without a Content-Length), and log one JSON line when it is answered."""
        started = time.perf_counter()
        request.state.arrived = time.monotonic()  # a deadline counts from here
        request.state.id = request.headers.get("x-request-id") or uuid.uuid4().hex
        response = await _limited(request, call_next)
        response.headers["X-Request-Id"] = request.state.id
        state = request.state
        LOG.info(
            json.dumps(
                {
                    "request_id": state.id,
                    "method": request.method,
                    "path": request.url.path,
                    "status": response.status_code,
                    "outcome": getattr(state, "outcome", None),
                    "principal": getattr(state, "principal", None),
                    "role": getattr(state, "role", None),
                    "seconds": round(time.perf_counter() - started, 4),
                }
            )
        )
        return response

    async def _limited(request: Request, call_next):
        declared = request.headers.get("content-length")
        too_big = declared is not None and (
            not declared.isdigit() or int(declared) > service.max_body_bytes
        )
        if not too_big and request.method in ("POST", "PUT", "PATCH"):
            body = b""
            async for chunk in request.stream():
                body += chunk
                if len(body) > service.max_body_bytes:
                    too_big = True
                    break
            else:
                request._body = body  # the endpoint reads the body already received
        if too_big:
            request.state.outcome = "too_large"
            service.metrics.count(endpoint(request), "too_large")
            return _error(
                413, "too_large", f"the request body is over {service.max_body_bytes} bytes"
            )
        return await call_next(request)

    def caller(
        request: Request,
        authorization: str | None = Header(default=None),
        x_gridrail_role: str | None = Header(default=None),
    ) -> tuple[Principal, str | None]:
        key = None
        if authorization and authorization.lower().startswith("bearer "):
            key = authorization[7:].strip()
        try:
            principal = service.keys.principal(key)
        except KeysFileError:  # the operator's file went missing or bad: not the caller's fault
            LOG.exception("the keys file cannot be read")
            raise ApiError(503, "unavailable", "the service cannot read its keys now") from None
        if principal is None:
            raise ApiError(
                401, "unauthenticated", "give a gridrail API key: Authorization: Bearer <key>",
                {"WWW-Authenticate": "Bearer"},
            )  # fmt: skip
        request.state.principal = principal.name  # logged: who, never the key
        wait = service.limiter.take(principal.name)
        if wait > 0:
            seconds = max(1, round(wait))
            raise ApiError(
                429, "rate_limited", f"too many requests for this key; retry in {seconds} s",
                {"Retry-After": str(seconds)},
            )  # fmt: skip
        if x_gridrail_role is None:
            role = principal.roles[0] if len(principal.roles) == 1 else None
        elif x_gridrail_role in principal.roles:
            role = x_gridrail_role
        else:
            raise ApiError(403, "forbidden", f"this key may not act as role {x_gridrail_role!r}")
        request.state.role = role
        return principal, role

    def acting_role(found: tuple[Principal, str | None]) -> str:
        principal, role = found
        if role is None:
            if not principal.roles:
                raise ApiError(403, "forbidden", "this key holds no role of the policy")
            raise ApiError(
                403, "role_required",
                f"this key holds several roles ({', '.join(principal.roles)}): "
                "choose one with X-Gridrail-Role",
            )  # fmt: skip
        return role

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> str:
        return PAGE

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        return service.metrics.text(service.cache_stats(), service.guides.stats())

    @app.post("/v1/check")
    def check(request: Request, body: CheckRequest, found=Depends(caller)) -> dict:  # noqa: B008
        role = acting_role(found)
        guide = service.checking_guide(role)
        violations = guide.check(body.sql, service.judge(guide))
        verdict = "clean"
        if violations:
            outside = any(v.kind == "outside_language" for v in violations)
            verdict = "outside_language" if outside else "violations"
        service.metrics.count("/v1/check", verdict)
        request.state.outcome = verdict
        return {"role": role, "verdict": verdict, "violations": [_violation(v) for v in violations]}

    @app.post("/v1/ask")
    def ask_question(request: Request, body: AskRequest, found=Depends(caller)) -> dict:  # noqa: B008
        principal, _ = found
        role = acting_role(found)
        if service.model is None:
            raise ApiError(
                503, "no_model", "this server was started without a model: /v1/check only"
            )
        guide = service.asking_guide(role)
        judge = service.judge(guide)  # before the model's lock: PostgreSQL's may be provisioned
        writes = bool(guide.view.role.statements - {"select"})
        candidates = body.candidates or (1 if writes else DEFAULT_CANDIDATES)
        if writes and candidates > 1:
            raise ApiError(
                422, "malformed",
                "candidates are chosen by running them read-only: a role that writes gets one",
            )  # fmt: skip
        allowed_s = min(body.deadline_s or service.deadline_s, service.deadline_s)
        deadline = request.state.arrived + allowed_s
        if not service.model_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise ApiError(
                503, "deadline",
                f"the model was busy with other requests past this request's deadline "
                f"({allowed_s:g} s); try again later", {"Retry-After": "1"},
            )  # fmt: skip
        started = time.perf_counter()
        try:
            # a role that only reads has its candidates run read-only to choose among them,
            # whether or not the caller wants the rows (`execute`)
            answer = ask(
                body.question, guide, service.model, max_tokens=body.max_tokens,
                candidates=candidates, database=service.database, run=not writes,
                deadline=deadline, judge=judge, signing_key=service.signing_key,
                asked_by={"principal": principal.name, "role": role},
            )  # fmt: skip
        finally:
            service.model_lock.release()
        seconds = time.perf_counter() - started
        result = answer.result if body.execute and not writes else None
        audit_id = service.store.put(principal.name, role, answer, guide)
        service.metrics.add("ask_seconds_total", seconds)
        service.metrics.add("tokens_total", sum(len(a.generation.tokens) for a in answer.attempts))
        for generation in (a.generation for a in answer.attempts):
            service.metrics.add("model_seconds_total", generation.model_seconds)
            if generation.tokens:
                ms = 1000 * generation.guard_seconds / len(generation.tokens)
                service.metrics.guard(ms, len(generation.tokens))
        outcome = "violations" if answer.violations else ("ran" if result else "answered")
        service.metrics.count("/v1/ask", outcome)
        request.state.outcome = outcome
        out = {
            "role": role,
            "sql": answer.sql,
            "violations": [_violation(v) for v in answer.violations],
            "audit_id": audit_id,
            "attempts": len(answer.attempts),
            "seconds": round(seconds, 3),
            "executed": result is not None,
            # how the chosen generation ended: "eos" (the model ended it), "reserve" (the token
            # budget did) or "deadline"; `deadline_reached` also when candidates were skipped
            "stop": answer.final.generation.stop,
            "deadline_reached": answer.deadline_reached,
        }
        if result is not None:
            out["columns"], out["rows"] = list(result.columns), [list(r) for r in result.rows]
        elif body.execute:
            out["not_executed"] = (
                "the role writes: its statements are not run by the service"
                if writes
                else (answer.error or "the answer did not run")
            )
        return out

    @app.get("/v1/audit/{audit_id}")
    def audit(request: Request, audit_id: str, found=Depends(caller)) -> dict:  # noqa: B008
        principal, _ = found
        key = service.signing_key
        record = service.store.get(audit_id, key.public_key() if key is not None else None)
        # the audit permission reads every record; a principal its own answers' records
        if not principal.auditor and (record is None or record["principal"] != principal.name):
            raise ApiError(403, "forbidden", "reading this audit record needs the audit permission")
        if record is None:
            raise ApiError(404, "not_found", f"no audit record {audit_id!r}")
        record["steps"] = _steps(record["logs"], service.model)
        service.metrics.count("/v1/audit/{audit_id}", "read")
        request.state.outcome = "read"
        return record

    return app


def _steps(logs: list[list[str]], model: LanguageModel | None) -> list[dict]:
    """The chosen answer's steps (its log is the one sealed "chosen", else the last): kind,
    the token as text (its id without a model to spell it), tokens the mask blocked."""
    parsed = [AuditLog.parse(lines) for lines in logs]
    chosen = next(
        (log for log in parsed if (log.seal_record or {}).get("mode", {}).get("chosen")),
        parsed[-1] if parsed else None,
    )
    out = []
    for record in chosen.records if chosen is not None else []:
        token = record["token"]
        if record["kind"] == "rollback":
            text = f"(back {token})"
        elif model is None:
            text = str(token)
        else:
            spelled = model.vocab.token_bytes(token)
            text = "<eos>" if spelled is None else spelled.decode("utf-8", "replace")
        out.append(
            {
                "step": record["step"],
                "kind": record["kind"],
                "token": text,
                "blocked": record["blocked"],
            }
        )
    return out


def _violation(v) -> dict:
    return {
        "kind": v.kind, "message": v.message, "start": v.start, "end": v.end,
        "table": v.table, "column": v.column,
    }  # fmt: skip


def _error(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)
