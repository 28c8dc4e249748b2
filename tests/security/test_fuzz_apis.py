"""Fuzzing both APIs (``/api/`` and ``/lg/``) on PostgreSQL and on SQLite: no input may cause a 5xx.

Schemathesis turns each OpenAPI operation into a Hypothesis strategy of schema-conforming
requests; on top of that most examples are poisoned where a parser or a database breaks:
a NUL byte, a lone surrogate, ``NaN``/``Infinity``/``1e309``,
integers past 64 bits, nesting thousands of levels deep, very long strings, a real id
of a seeded thread or task in place of a random one, and no or a bad token. Requests go
over HTTP to a real daphne process (``tests/security/conftest.py``), authenticated as an
admin (every right) or not at all; signed webhook deliveries are signed with the seeded
endpoint's secret so their bodies reach the parser.

Assertions, per response: never 5xx; a 2xx is documented for the operation; documented
JSON bodies match their schema. Every failure is collected (not just the first), with
the request that caused it and the server log.

Each operation first gets a sweep: every declared query and path parameter and every
top-level body field (and a key inside each object field) set once to each of a few
poison values; then ``GATEHOUSE_FUZZ_EXAMPLES`` random examples (default 10).

Budget: all of it inside
``GATEHOUSE_FUZZ_SECONDS`` per backend (default 30; a budget, so not stretched by the time factor),
shared evenly: each operation gets the time left divided by the operations left, so a
slow machine runs fewer examples of each rather than none of the last (the count is printed).
Generation is seeded (``GATEHOUSE_FUZZ_SEED``, printed) so a failure reproduces with the same seed.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core import NotSet
from schemathesis.specs.openapi.checks import response_schema_conformance

from approvals.outbound.signing import webhook_sign
from tests.conftest import scaled

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

SEED = int(os.environ.get("GATEHOUSE_FUZZ_SEED") or 20261201)
EXAMPLES = int(os.environ.get("GATEHOUSE_FUZZ_EXAMPLES") or 10)
SECONDS = float(os.environ.get("GATEHOUSE_FUZZ_SECONDS") or 30)


class Raw:
    """JSON text placed verbatim in a body: what ``json.dumps`` will not write (NaN, 1e309, 5,000 levels)."""

    def __init__(self, text: str) -> None:
        self.text = text


def json_text(value: Any) -> str:
    raws: list[str] = []

    def placeholder(obj: Any) -> str:
        if isinstance(obj, Raw):
            raws.append(obj.text)
            return f"__raw_{len(raws) - 1}__"
        raise TypeError(type(obj).__name__)

    text = json.dumps(value, default=placeholder)
    return re.sub(r'"__raw_(\d+)__"', lambda m: raws[int(m.group(1))], text)


def nested(depth: int) -> Raw:
    return Raw("[" * depth + "]" * depth)


POISON_VALUES = st.sampled_from(
    [
        "\x00",
        "ok\x00ok",
        "\ud800",
        "x" * 70_000,
        "é" * 300,
        2**63,
        -(2**63) - 1,
        2**64,
        10**30,
        Raw("1e309"),
        Raw("-1e309"),
        Raw("NaN"),
        Raw("Infinity"),
        1e308,
        -0.0,
        nested(65),
        nested(1000),
        nested(5000),
        {"\x00": 1},
        {"a" * 300: "b"},
        [],
        {},
        None,
        True,
        "",
    ]
)
POISON_TEXT = st.sampled_from(
    [
        "\x00",
        "a\x00b",
        "9" * 30,
        str(2**63),
        str(2**64),
        "-1",
        "0",
        "-9223372036854775809",
        "1e309",
        "NaN",
        "garbage",
        "x" * 5000,
        "",
        " ",
        "../../etc/passwd",
        "%",
        "é",
        "true",
        "null",
        "[]",
    ]
)


def poison_json(draw: Any, value: Any, depth: int = 0) -> Any:
    """``value`` with one node (possibly the root) replaced by a poison value."""
    if depth < 6 and isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        return {**value, key: poison_json(draw, value[key], depth + 1)}
    if depth < 6 and isinstance(value, list) and value and draw(st.booleans()):
        index = draw(st.integers(0, len(value) - 1))
        return [*value[:index], poison_json(draw, value[index], depth + 1), *value[index + 1 :]]
    if isinstance(value, dict) and draw(st.booleans()):
        return {**value, draw(st.sampled_from(["x", "\x00", "offset", "limit", "metadata"])): draw(POISON_VALUES)}
    return draw(POISON_VALUES)


# The sweep: every declared parameter and every top-level body field of every operation
# gets each of these once (the random examples that follow combine and nest them).
SWEEP_QUERY = ["a\x00b", str(2**64), "garbage"]
SWEEP_PATH = ["a\x00b", "9" * 30]
SWEEP_BODY = ["a\x00b", 2**64, Raw("1e309"), nested(5000)]


LOAN_INPUT = {"applicant": "Fuzz", "loan_id": "L-F", "amount": 18000, "income": 40000, "term_months": 24}
# A valid body per operation, so poison also lands behind the first checks (graph names, decisions).
VALID_BODIES: dict[str, dict[str, Any]] = {
    "POST /api/threads": {"graph": "loan_approval", "input": LOAN_INPUT, "metadata": {"case": "F-1"}},
    "POST /api/tasks/{task_id}/decision": {"decision": "edit", "reason": "fuzz", "edits": {"amount": 1}},
    "POST /api/webhook-endpoints": {"name": "fuzz-new", "graph": "loan_approval", "gates": ["human_review"]},
    "PATCH /api/webhook-endpoints/{name}": {"gates": ["human_review"]},
    "POST /api/webhook-subscriptions": {"url": "https://example.invalid/hook", "event_types": ["task.opened"]},
    "POST /api/webhooks/{name}": {"correlation_key": "fuzz", "status": "approved", "reason": "ok"},
    "POST /lg/threads": {"metadata": {"graph_id": "loan_approval"}},
    "PATCH /lg/threads/{thread_id}": {"metadata": {"title": "fuzz"}},
    "POST /lg/threads/search": {"metadata": {"case": "F-1"}, "values": {"amount": 1}, "limit": 5},
    "POST /lg/threads/{thread_id}/state": {"values": {"amount": 1}},
    "POST /lg/threads/{thread_id}/history": {"limit": 5},
    "POST /lg/threads/{thread_id}/runs": {"assistant_id": "loan_approval", "input": LOAN_INPUT},
    "POST /lg/threads/{thread_id}/runs/wait": {"assistant_id": "loan_approval", "command": {"resume": {"x": 1}}},
    "POST /lg/threads/{thread_id}/runs/stream": {"assistant_id": "loan_approval", "input": LOAN_INPUT},
    "POST /lg/runs": {"assistant_id": "loan_approval", "input": LOAN_INPUT},
    "POST /lg/runs/wait": {"assistant_id": "loan_approval", "input": LOAN_INPUT},
    "POST /lg/runs/stream": {"assistant_id": "loan_approval", "input": LOAN_INPUT},
}


def _resolved(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while isinstance(schema, dict) and "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema if isinstance(schema, dict) else {}


def sweep_of(operation: Any) -> list[tuple[str, str, Any]]:
    """(where, name, value) for each parameter and body field × each sweep value."""
    items = [("query", p.name, v) for p in operation.query for v in SWEEP_QUERY]
    items += [("path", p.name, v) for p in operation.path_parameters for v in SWEEP_PATH]
    body = (operation.definition.raw.get("requestBody") or {}).get("content", {}).get("application/json")
    if body:
        root = operation.schema.raw_schema
        properties = _resolved(body.get("schema", {}), root).get("properties") or {}
        for name, prop in properties.items():
            prop = _resolved(prop, root)
            for value in SWEEP_BODY:
                items.append(("body", name, value))
                if prop.get("type") == "object" or "additionalProperties" in prop:
                    items.append(("body", name, {"x": value}))
    return items


@dataclass
class Failure:
    operation: str
    status: int
    request: str
    problem: str


@dataclass
class Run:
    server: Any
    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    examples: dict[str, int] = field(default_factory=dict)
    planned: dict[str, int] = field(default_factory=dict)
    generated: int = 0  # examples Hypothesis ran, and the seconds it took: the pace
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)


def _documented(operation: Any) -> tuple[set[str], dict[str, Any]]:
    responses = operation.definition.raw.get("responses", {}) or {}
    return set(map(str, responses)), responses


def _send(
    run: Run,
    client: httpx.Client,
    operation: Any,
    case: Any,
    data: Any,
    until: float,
    sweep: tuple[str, str, Any] | None = None,
) -> None:
    server = run.server
    path_params = dict(case.path_parameters or {})
    query = {k: v for k, v in (case.query or {}).items() if v is not None}
    headers: dict[str, str] = {k: str(v) for k, v in (case.headers or {}).items()}
    body = case.body
    valid = VALID_BODIES.get(operation.label)
    use_valid = valid is not None and data.draw(st.booleans(), label="valid base")
    if valid is not None and (use_valid or sweep is not None):
        body = valid
    has_body = not isinstance(body, NotSet)

    # Real ids of seeded objects reach past the 404s into the handlers.
    for name in path_params:
        if name in ("thread_id", "task_id") and data.draw(st.booleans(), label=f"real {name}"):
            path_params[name] = server.thread_id if name == "thread_id" else server.task_id
        elif name == "name" and data.draw(st.booleans(), label="real endpoint"):
            path_params[name] = server.endpoint
        elif name == "user_id":
            # Generated ids are small integers: the session's personas. Act only on the fuzz's own user,
            # or on an id nobody has, so user administration never locks a persona out of later tests.
            real = data.draw(st.booleans(), label="real user") and server.user_id
            path_params[name] = server.user_id if real else 2_147_483_000
    where = data.draw(st.sampled_from(["none", "body", "body", "query", "path", "header"]), label="poison")
    if where == "body" and operation.method.upper() in ("POST", "PUT", "PATCH"):
        body = poison_json(lambda s, label=None: data.draw(s, label=label), body if has_body else {})
        has_body = True
    elif where == "query":
        names = [p.name for p in operation.query] or ["limit", "offset"]
        query[data.draw(st.sampled_from(names), label="query param")] = data.draw(POISON_TEXT, label="query value")
    elif where == "path" and path_params:
        name = data.draw(st.sampled_from(sorted(path_params)), label="path param")
        path_params[name] = data.draw(POISON_TEXT, label="path value")
    elif where == "header":
        headers["User-Agent"] = data.draw(POISON_TEXT, label="user agent")
    if sweep is not None:  # applied after the draws, so they stay the same whatever the sweep holds
        at, name, value = sweep
        if at == "query":
            query[name] = value
        elif at == "path":
            path_params[name] = value
        else:
            body = {**(body if isinstance(body, dict) else {}), name: value}
            has_body = True

    url = operation.path
    for name, value in path_params.items():
        url = url.replace("{" + name + "}", quote(str(value), safe=""))
    url = operation.schema.base_path.rstrip("/") + url
    if isinstance(body, bytes):  # a schema-violating media type: sent as generated
        content: bytes | None = body
    else:
        content = json_text(body).encode("utf-8", "surrogatepass") if has_body else None
    if content is not None:
        headers["Content-Type"] = "application/json"
    auth = data.draw(st.sampled_from(["admin"] * 8 + ["none", "bad"]), label="auth")
    if auth == "admin":
        headers["Authorization"] = f"Bearer {server.token}"
    elif auth == "bad":
        headers["Authorization"] = "Bearer gh_not-a-token"
    if url.endswith(f"/webhooks/{server.endpoint}") and content is not None and data.draw(st.booleans()):
        headers.update(webhook_sign(server.secret, content))

    if time.monotonic() >= until and run.examples.get(operation.label):
        # Out of time: every draw above still happens, so Hypothesis sees the same data each run. Each
        # operation still gets its first request, so a slow machine cuts the fuzz short but never empties it.
        return
    run.examples[operation.label] = run.examples.get(operation.label, 0) + 1
    try:
        response = client.request(
            operation.method.upper(),
            url,
            params={k: str(v) for k, v in query.items()},
            content=content,
            headers=headers,
        )
    except (httpx.InvalidURL, UnicodeEncodeError, httpx.LocalProtocolError):
        return  # the client itself cannot send it (a header with a NUL byte, say): no server sees it
    except httpx.TransportError as exc:  # no answer in time, or the connection dropped: as bad as a 500
        status, problem = 0, f"no response: {type(exc).__name__} {exc}"
    else:
        status = response.status_code
        problem = _problem(operation, response) or _schema_problem(case, response)
    run.requests += 1
    run.statuses[status] = run.statuses.get(status, 0) + 1
    if problem:
        shown = (content or b"")[:300].decode("utf-8", "replace")
        request = f"{operation.method.upper()} {url} params={query!r:.200} headers={auth} body={shown!r}"
        run.failures.append(Failure(operation.label, status, request, problem))


def _schema_problem(case: Any, response: httpx.Response) -> str | None:
    """A documented success whose body does not match the documented schema."""
    if not 200 <= response.status_code < 300:
        return None
    try:
        case.validate_response(response, checks=[response_schema_conformance])
    except Exception as exc:  # schemathesis raises a failure group describing every mismatch
        return f"response does not match its schema: {str(exc)[:400]}"
    return None


def _problem(operation: Any, response: httpx.Response) -> str | None:
    status = response.status_code
    if status >= 500:
        return f"server error {status}: {response.text[:300]}"
    documented, _responses = _documented(operation)
    if 200 <= status < 300 and str(status) not in documented and "default" not in documented:
        return f"undocumented success status {status} (documented: {sorted(documented)})"
    if 400 <= status < 500 and response.headers.get("content-type", "").startswith("application/json"):
        try:
            body = response.json()
        except ValueError:
            return f"a {status} whose body is not JSON"
        error = body.get("error") if isinstance(body, dict) else None
        if body.get("detail") is None and not (isinstance(error, dict) and error.get("message")):
            return f"a {status} without an error message: {response.text[:200]}"
    return None


def _operation_fuzz(run: Run, client: httpx.Client, operation: Any, until: float) -> None:
    # Schemathesis's negative mode filters heavily (and cannot negate an operation without
    # parameters), which costs more than the requests; the poison above makes the bad data.
    strategy = operation.as_strategy(generation_mode=GenerationMode.POSITIVE)
    sweep = sweep_of(operation)
    planned = run.planned[operation.label] = len(sweep) + EXAMPLES
    examples = planned
    if run.generated:  # as many as the time left allows at the pace so far: Hypothesis cannot be stopped
        examples = max(1, min(planned, int((until - time.monotonic()) / (run.seconds / run.generated))))

    @seed(SEED)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(case=strategy, data=st.data())
    def one(case: Any, data: Any) -> None:
        _send(run, client, operation, case, data, until, sweep.pop(0) if sweep else None)

    started = time.monotonic()
    one()
    run.generated += examples
    run.seconds += time.monotonic() - started


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_no_request_to_either_api_causes_a_server_error(request, backend, capsys):
    server = request.getfixturevalue(f"{backend}_server")
    run = Run(server)
    with httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {server.token}"}) as warm:
        for path in ("/api/graphs", f"/api/tasks/{server.task_id}", f"/lg/threads/{server.thread_id}/state"):
            warm.get(path, timeout=scaled(30))  # the server's first requests load graphs: not the fuzz's time
    operations = [
        result.ok()
        for api in ("api", "lg")
        for result in schemathesis.openapi.from_url(f"{server.base}/{api}/openapi.json").get_all_operations()
    ]
    started = time.monotonic()  # after loading the schemas, which on a loaded machine can take the whole budget
    deadline = started + SECONDS  # a budget, not a wait: not stretched by the time factor
    with httpx.Client(base_url=server.base, timeout=scaled(15)) as client:
        for index, operation in enumerate(operations):
            now = time.monotonic()
            _operation_fuzz(run, client, operation, now + (deadline - now) / (len(operations) - index))
            if os.environ.get("GATEHOUSE_FUZZ_VERBOSE"):
                done, planned = run.examples.get(operation.label, 0), run.planned[operation.label]
                print(f"  {operation.label}: {done}/{planned} in {time.monotonic() - now:.2f}s")
    elapsed = time.monotonic() - started
    short = sorted(o.label for o in operations if run.examples.get(o.label, 0) < run.planned.get(o.label, 0))
    with capsys.disabled():
        print(
            f"\n[fuzz {backend}] seed={SEED} (GATEHOUSE_FUZZ_SEED) operations={len(operations)} "
            f"sweep={sum(run.planned.values()) - EXAMPLES * len(operations)} random={EXAMPLES}/operation "
            f"requests={run.requests} in {elapsed:.1f}s; "
            f"statuses={dict(sorted(run.statuses.items()))}"
            + (f"; cut short by the time budget: {', '.join(short)}" if short else "")
        )
    distinct: dict[tuple[str, int], Failure] = {}
    for failure in run.failures:
        distinct.setdefault((failure.operation, failure.status), failure)
    report = "\n".join(f"- {f.operation}: {f.problem}\n    {f.request}" for f in distinct.values())
    assert not distinct, (
        f"{len(run.failures)} bad responses on {backend} (seed {SEED}):\n{report}\nserver log:\n{server.log_tail(80)}"
    )
    assert run.requests > 0
