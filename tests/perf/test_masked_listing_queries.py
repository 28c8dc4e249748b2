"""A listing of threads shown whole (``POST /lg/threads/search``: each thread's values and interrupts), read by
a reader who sees values masked, of threads whose state holds a chat message: the message text is masked by
the values the thread carried anywhere (``gateway._carried_if_spoken``), and those are read for the page at
once, not three queries per thread; the pending interrupts too, not one query per thread. The masking is the
single thread read's, value for value.

The native API's thread list (``GET /api/threads``) and the console's threads page show no values: they are
pinned here too, so that one that starts to show them cannot read them per thread unseen.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import ApiToken
from runtime.models import Run, RunKind, RunStatus, Thread
from tests.conftest import Persona
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db", "dispatched")  # task_make's runs are recorded, not sent

GRAPH = "chatty_secret"  # ``secret`` is sensitive


def _chat_threads(operator: Persona, case: str, count: int) -> dict[str, list[str]]:
    """``count`` threads paused at a gate, whose last values hold a message quoting two secrets they no longer
    hold: one only the pending task's payload carried, one only an earlier run's input. By id: the secrets."""
    made = {}
    for _ in range(count):
        in_payload, in_input = f"payload-{uuid.uuid4().hex[:10]}", f"input-{uuid.uuid4().hex[:10]}"
        message = {"type": "ai", "content": f"I know {in_payload} and {in_input} well", "id": "m1"}
        task = task_make(
            graph=GRAPH,
            metadata={"case": case},
            payload={"title": "Send the replies?", "secret": in_payload},
            values={"secret": "", "messages": [message]},
            created_by=operator.user,
        )
        Run.objects.create(
            thread=task.thread,
            kind=RunKind.START,
            input={"secret": in_input},
            status=RunStatus.SUCCEEDED,
            created_by=operator.user,
        )
        made[str(task.thread_id)] = [in_payload, in_input]
    return made


def _counted(call: Any) -> tuple[Any, int]:
    # A token's use is recorded at most once a minute (approvals.tokens): a minute that passes between the
    # two sizes' requests on a loaded machine would count that write in one of them only.
    ApiToken.objects.update(last_used_at=timezone.now())
    with CaptureQueriesContext(connection) as ctx:
        response = call()
    assert response.status_code == 200, response.content
    return response, len(ctx.captured_queries)


def test_lg_thread_search_reads_what_a_page_carried_in_the_same_queries_for_2_or_10_threads(operator, reviewer):
    # A first search warms what a process reads once (as every search but a process's first finds it).
    assert reviewer.client.post("/lg/threads/search", {"metadata": {"case": "warm"}}).status_code == 200
    counts = []
    for size in (2, 10):
        case = f"masked-list-{uuid.uuid4().hex[:8]}"
        made = _chat_threads(operator, case, size)
        search = {"metadata": {"case": case}, "limit": 50}
        response, queries = _counted(lambda search=search: reviewer.client.post("/lg/threads/search", search))
        found = response.json()
        assert sorted(t["thread_id"] for t in found) == sorted(made)
        for thread in found:
            secrets = made[thread["thread_id"]]
            assert not any(s in str(thread) for s in secrets), thread
            [message] = thread["values"]["messages"]
            assert secrets[0] not in message["content"] and "I know " in message["content"]
            assert len(thread["interrupts"]) == 1
            # Masked as the thread's own read masks it, value for value.
            assert thread == reviewer.client.get(f"/lg/threads/{thread['thread_id']}").json()
        counts.append(queries)
    assert counts[0] == counts[1], f"2 threads: {counts[0]} queries, 10 threads: {counts[1]}"


def test_the_native_thread_list_and_the_console_threads_page_read_no_more_for_more_threads(operator, reviewer):
    browser = Client()
    browser.force_login(reviewer.user)
    assert reviewer.client.get("/api/threads", q="warm").status_code == 200
    assert browser.get("/threads/", {"q": "warm"}).status_code == 200
    counts: dict[str, list[int]] = {"api": [], "console": []}
    for size in (2, 10):
        case = f"masked-list-{uuid.uuid4().hex[:8]}"
        made = _chat_threads(operator, case, size)
        # Both search thread metadata by text; a unique case finds exactly this round's threads.
        Thread.objects.filter(pk__in=list(made)).update(metadata={"case": case, "applicant": case})
        response, queries = _counted(lambda case=case: reviewer.client.get("/api/threads", q=case, limit=50))
        assert sorted(t["id"] for t in response.json()["items"]) == sorted(made)
        counts["api"].append(queries)
        response, queries = _counted(lambda case=case: browser.get("/threads/", {"q": case}))
        assert all(thread_id in response.content.decode() for thread_id in made)
        counts["console"].append(queries)
    assert counts["api"][0] == counts["api"][1], counts
    assert counts["console"][0] == counts["console"][1], counts
