"""``GET /api/threads`` and the console's thread list: search, filters and pages over the threads a
reader may see (which status each persona gets is in test_permissions_matrix.py)."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from runtime.models import Thread, ThreadStatus
from tests.console.conftest import console_client
from tests.factories import thread_make

pytestmark = pytest.mark.usefixtures("live_db")


def _threads(count: int, *, case: str, graph: str = "loan_approval", **metadata: Any) -> list[Thread]:
    """``count`` threads of one case, created a second apart (oldest first), as the list orders them."""
    made = [thread_make(graph=graph, metadata={"case": case, **metadata}) for _ in range(count)]
    start = timezone.now() - timedelta(hours=1)
    for i, thread in enumerate(made):
        Thread.objects.filter(pk=thread.pk).update(created_at=start + timedelta(seconds=i))
    return made


def _ids(body: dict[str, Any]) -> list[str]:
    return [item["id"] for item in body["items"]]


def _case() -> str:
    return f"TL-{uuid.uuid4().hex[:8]}"


def test_a_search_finds_threads_by_case_applicant_or_id_newest_first(personas):
    case = _case()
    threads = _threads(3, case=case, applicant=f"Ada {case}")
    reader = personas["reviewer"].client

    found = reader.get("/api/threads", q=case.lower())  # case-insensitive, as the inbox's search
    assert found.status_code == 200, found.content
    assert _ids(found.json()) == [str(t.pk) for t in reversed(threads)]
    assert found.json()["next_cursor"] is None
    item = found.json()["items"][0]
    assert item["metadata"] == {"case": case, "applicant": f"Ada {case}"} and item["graph"] == "loan_approval"
    assert "values" not in item and "pending_tasks" not in item  # a list names threads; the detail has state

    assert _ids(reader.get("/api/threads", q=f"ada {case}").json()) == [str(t.pk) for t in reversed(threads)]
    assert _ids(reader.get("/api/threads", q=str(threads[1].pk)).json()) == [str(threads[1].pk)]
    assert reader.get("/api/threads", q=f"{case}-nobody").json() == {"items": [], "next_cursor": None}


def test_pages_walk_every_thread_once_in_order(personas):
    case = _case()
    threads = _threads(5, case=case)
    # Two threads created at the same instant: the id orders them, and neither is skipped or repeated.
    Thread.objects.filter(pk=threads[3].pk).update(created_at=threads[2].created_at)
    reader = personas["reviewer"].client
    seen, cursor, pages = [], None, 0
    while True:
        params = {"q": case, "limit": 2, **({"cursor": cursor} if cursor else {})}
        body = reader.get("/api/threads", **params).json()
        seen += _ids(body)
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    newest_first = Thread.objects.filter(pk__in=[t.pk for t in threads]).order_by("-created_at", "-id")
    assert seen == [str(t.pk) for t in newest_first]


def test_the_graph_and_status_filters_narrow_the_list(personas):
    case = _case()
    [loan_done, loan_open] = _threads(2, case=case)
    [kyc] = _threads(1, case=case, graph="kyc_onboarding")
    Thread.objects.filter(pk=loan_done.pk).update(status=ThreadStatus.COMPLETED)
    reader = personas["reviewer"].client

    assert set(_ids(reader.get("/api/threads", q=case).json())) == {str(loan_done.pk), str(loan_open.pk), str(kyc.pk)}
    assert _ids(reader.get("/api/threads", q=case, graph="kyc_onboarding").json()) == [str(kyc.pk)]
    assert _ids(reader.get("/api/threads", q=case, status="completed").json()) == [str(loan_done.pk)]
    assert _ids(reader.get("/api/threads", q=case, graph="kyc_onboarding", status="completed").json()) == []


def test_a_reader_lists_only_the_threads_of_graphs_they_may_see(personas):
    case = _case()
    [loan] = _threads(1, case=case)
    [kyc] = _threads(1, case=case, graph="kyc_onboarding")
    assert set(_ids(personas["auditor"].client.get("/api/threads", q=case).json())) == {str(loan.pk), str(kyc.pk)}
    assert _ids(personas["loan_reviewer"].client.get("/api/threads", q=case).json()) == [str(loan.pk)]
    # Not even by its id, nor by asking for its graph.
    assert _ids(personas["loan_reviewer"].client.get("/api/threads", q=str(kyc.pk)).json()) == []
    assert _ids(personas["loan_reviewer"].client.get("/api/threads", graph="kyc_onboarding", q=case).json()) == []
    assert personas["outsider"].client.get("/api/threads", q=case).json() == {"items": [], "next_cursor": None}


def _cursor(*parts: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "sleeping"}, "status"),
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"q": "x" * 201}, "q"),
        ({"graph": "g" * 101}, "graph"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": _cursor("2026-01-01T00:00:00+00:00", "not-a-uuid")}, "cursor"),
        ({"cursor": _cursor(5, str(uuid.uuid4()))}, "cursor"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(personas, params, field):
    response = personas["reviewer"].client.get("/api/threads", **params)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field


def test_a_task_list_cursor_whose_key_is_no_uuid_is_a_4xx(personas):
    """The codec both lists share: a well-formed cursor whose key is no UUID was a 500 for the task list."""
    response = personas["reviewer"].client.get("/api/tasks", cursor=_cursor("2026-01-01T00:00:00+00:00", "x"))
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "cursor"


def test_the_console_list_searches_filters_and_pages(personas):
    case = _case()
    threads = _threads(52, case=case, applicant="Grace Hopper")
    [kyc] = _threads(1, case=case, graph="kyc_onboarding")
    client = console_client(personas["reviewer"])

    first = client.get("/threads/", {"q": case, "graph": "loan_approval"})
    assert first.status_code == 200
    page = first.content.decode()
    shown = [str(t.pk) for t in threads if f'data-thread-id="{t.pk}"' in page]
    assert len(shown) == 50 and str(threads[-1].pk) in shown and str(kyc.pk) not in page
    assert 'value="loan_approval" selected' in page and f'value="{case}"' in page
    older = first.context["next_url"]
    assert older and "q=" in older and "graph=loan_approval" in older and first.context["first_url"] == ""

    second = client.get(f"/threads/{older}")
    page = second.content.decode()
    assert [t for t in threads if f'data-thread-id="{t.pk}"' in page] == threads[:2]  # the two oldest
    assert page.index(str(threads[1].pk)) < page.index(str(threads[0].pk))  # newest first
    assert second.context["next_url"] == "" and "Newest threads" in page
    assert second.context["first_url"] == f"?q={case}&graph=loan_approval"

    # The list page says so beside its list, with a way back (tests/console/test_views.py), not a bare 422.
    broken = client.get("/threads/", {"cursor": "garbage"})
    assert broken.status_code == 200 and "cursor: this page link is broken" in broken.content.decode()
