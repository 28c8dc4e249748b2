"""HEAD is answered as the GET it asks about, on both APIs, headers alone.

ninja routes by method, so every HEAD was a 405 ("HEAD is not served here; this path serves GET"), though HTTP
asks every server to serve HEAD wherever it serves GET (RFC 9110 §9.1), uptime monitors and link checkers
send it, LangGraph Server's routes answer it, and the console's pages already did (Django's views do).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from tests.conftest import Persona, daphne_serving, loan_input, scaled, worker_env

pytestmark = pytest.mark.usefixtures("live_db")


def _get_paths(client: Client, headers: dict[str, str], values: dict[str, str]) -> list[str]:
    """Every path both OpenAPI documents serve GET at, its parameters filled from ``values`` (an unknown UUID
    for the rest)."""
    paths = []
    for prefix in ("/api/", "/lg/"):
        spec = client.get(f"{prefix}openapi.json", headers=headers).json()
        for path, operations in spec["paths"].items():
            if "get" in operations:
                paths.append(re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), str(uuid.uuid4())), path))
    return paths


def _body(response: Any) -> bytes:
    """A response's body as the server would send it; an event stream's read to its end."""
    if not getattr(response, "streaming", False):
        return bytes(response.content)
    if response.is_async:

        async def read() -> bytes:
            return b"".join([chunk async for chunk in response.streaming_content])

        return async_to_sync(read)()
    return b"".join(response.streaming_content)


def test_every_get_of_either_api_answers_head_as_it_answers_get(personas: dict[str, Persona]) -> None:
    reviewer = personas["reviewer"]
    headers = {"Authorization": f"Bearer {reviewer.token}"}
    client = Client()
    operator = {"Authorization": f"Bearer {personas['operator'].token}"}
    body = {"metadata": {"case": "head"}}
    thread = client.post("/lg/threads", body, content_type="application/json", headers=operator)
    assert thread.status_code == 200, thread.content
    values = {"thread_id": thread.json()["thread_id"], "assistant_id": "loan_approval", "graph": "loan_approval"}
    paths = _get_paths(client, headers, values)
    assert len(paths) > 20  # both documents were read

    answered = {}
    for path in paths:
        get = client.get(path, headers=headers)
        head = client.head(path, headers=headers)
        assert head.status_code == get.status_code, (path, head.status_code, head.content[:300], get.status_code)
        assert head.headers.get("Content-Type") == get.headers.get("Content-Type"), path
        assert _body(head) == b"", path
        answered[path] = head.status_code
    # Not only refusals: the readable ones answered 200 (the thread, its state, the assistants, the lists).
    assert sum(status == 200 for status in answered.values()) >= 10, answered


def test_head_is_refused_where_no_get_is_served_and_needs_the_get_s_credentials(personas: dict[str, Persona]) -> None:
    client = Client()
    headers = {"Authorization": f"Bearer {personas['reviewer'].token}"}
    refused = client.head("/lg/threads/search", headers=headers)  # POST only
    assert refused.status_code == 405
    assert refused.headers["Allow"] == "POST"
    assert client.head("/api/threads").status_code == 401  # no credentials: as the GET
    assert client.get("/api/threads").status_code == 401


@pytest.fixture(scope="module")
def served(django_db_setup: None, bank: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("daphne") / "daphne.log"
    with daphne_serving(worker_env(bank), log_path, what="daphne to serve the APIs") as (_, base):
        yield base


def test_over_http_a_head_gets_the_get_s_headers_and_no_body(served: str, personas: dict[str, Persona]) -> None:
    headers = {"Authorization": f"Bearer {personas['reviewer'].token}"}
    with httpx.Client(base_url=served, headers=headers, timeout=scaled(10)) as client:
        get = client.get("/api/threads")
        head = client.head("/api/threads")
    assert (get.status_code, head.status_code) == (200, 200)
    assert head.content == b""
    assert head.headers["Content-Type"] == get.headers["Content-Type"] == "application/json; charset=utf-8"
    assert head.headers["X-Request-Id"]


def test_a_head_of_an_event_stream_answers_its_headers_without_running_it(
    served: str, personas: dict[str, Persona]
) -> None:
    """A thread's stream follows the thread for GATEHOUSE_PLATFORM_WAIT_SECONDS (120 s here): a HEAD ran it
    all that time for a body the server then dropped. It answers at once, as the GET's headers."""
    headers = {"Authorization": f"Bearer {personas['operator'].token}"}
    with httpx.Client(base_url=served, headers=headers, timeout=scaled(10)) as client:
        thread = client.post("/lg/threads", json={}).json()["thread_id"]
        head = client.head(f"/lg/threads/{thread}/stream")
        with client.stream("GET", f"/lg/threads/{thread}/stream") as get:
            assert next(get.iter_lines()) == ": joined"
    assert (head.status_code, get.status_code) == (200, 200)
    assert head.headers["Content-Type"] == get.headers["Content-Type"] == "text/event-stream"
    assert head.content == b""


def test_a_head_of_a_long_poll_answers_at_once_as_its_get_would_at_its_timeout(
    served: str, personas: dict[str, Persona]
) -> None:
    """``GET /api/threads/{id}?wait_for=completed&timeout=30`` waits up to 30 s: its HEAD waited as long for the
    same headers. No worker runs in this module, so the thread never completes: the HEAD must not wait (the
    client gives up well before 30 s), and answers the GET's status and headers."""
    headers = {"Authorization": f"Bearer {personas['operator'].token}"}
    with httpx.Client(base_url=served, headers=headers, timeout=scaled(10)) as client:
        started = client.post("/api/threads", json={"graph": "loan_approval", "input": loan_input()})
        assert started.status_code == 201, started.text
        path = f"/api/threads/{started.json()['id']}"
        head = client.head(path, params={"wait_for": "completed", "timeout": 30})
        get = client.get(path, params={"wait_for": "completed", "timeout": 0})
    assert (head.status_code, get.status_code) == (200, 200)
    assert head.headers["Content-Type"] == get.headers["Content-Type"] and head.content == b""
