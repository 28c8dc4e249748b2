"""GET /api/audit takes the console audit page's and the export's filters, through their one parser."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.approvals.test_export import event
from tests.conftest import Persona

pytestmark = pytest.mark.django_db


def api_ids(auditor: Persona, **params: Any) -> list[int]:
    response = auditor.client.get("/api/audit", **params)
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()]


def export_ids(auditor: Persona, **params: Any) -> list[int]:
    response = auditor.client.get("/api/audit/export", **params)
    assert response.status_code == 200, response.content
    lines = b"".join(response.streaming_content).decode().splitlines()
    return sorted((json.loads(line)["id"] for line in lines[:-1]), reverse=True)


def page_ids(auditor: Persona, **params: Any) -> list[int]:
    browser = Client()
    browser.force_login(auditor.user)
    response = browser.get(reverse("console:audit"), params)
    assert response.status_code == 200
    return [e.id for e in response.context["page"].items]


def test_a_family_of_actions_lists_what_the_console_and_the_export_list(auditor):
    family = f"test.family{uuid.uuid4().hex[:6]}."
    a, b = event(family + "one"), event(family + "two")
    assert api_ids(auditor, action=family) == [b.id, a.id]
    assert api_ids(auditor, action=family) == export_ids(auditor, action=family) == page_ids(auditor, action=family)


def test_actor_graph_thread_and_a_window_filter_as_the_console_and_the_export_do(auditor):
    family = f"test.filters{uuid.uuid4().hex[:6]}."
    thread = uuid.uuid4()
    a = event(family + "x", actor="Alice", thread=thread)
    b = event(family + "x", actor="bob", graph="kyc_onboarding", thread=thread)
    c = event(family + "x", actor="alice")
    cases: list[dict[str, Any]] = [
        {"actor": "ALICE"},
        {"graph": "kyc_onboarding"},
        {"thread": str(thread)},
        {"since": b.at.isoformat(), "until": c.at.isoformat()},
        {"since": b.at.isoformat(), "actor": "alice"},
    ]
    expected = [[c.id, a.id], [b.id], [b.id, a.id], [b.id], [c.id]]
    for params, ids in zip(cases, expected, strict=True):
        params = {"action": family, **params}
        assert api_ids(auditor, **params) == ids, params
        assert export_ids(auditor, **params) == ids == page_ids(auditor, **params), params


@pytest.mark.parametrize(
    "params,field",
    [
        ({"bogus": "1"}, "bogus"),
        ({"before": "5"}, "before"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
        ({"since": "2026-12-07", "until": "2026-12-06"}, "since"),
        ({"thread": "not-a-thread"}, "thread"),
        ({"actor": "x" * 151}, "actor"),
        ({"graph": "g" * 101}, "graph"),
        ({"action": "no.such.action"}, "action"),
    ],
)
def test_an_unknown_parameter_or_a_bad_value_is_a_422_naming_it(auditor, params, field):
    response = auditor.client.get("/api/audit", **params)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field


def test_paging_with_before_id_under_a_filter_skips_nothing(auditor):
    family = f"test.paging{uuid.uuid4().hex[:6]}."
    mine = [event(family + "x").id if n % 2 else event("test.paging.other").id for n in range(9)]
    wanted = sorted((i for n, i in enumerate(mine) if n % 2), reverse=True)
    seen: list[int] = []
    before: dict[str, Any] = {}
    while page := api_ids(auditor, action=family, limit=2, **before):
        seen += page
        before = {"before_id": page[-1]}
    assert seen == wanted


def test_a_bare_date_as_until_includes_that_day_everywhere(auditor):
    family = f"test.day{uuid.uuid4().hex[:6]}."
    e = event(family + "x")
    day = e.at.date().isoformat()
    params = {"action": family, "since": day, "until": day}
    assert api_ids(auditor, **params) == export_ids(auditor, **params) == page_ids(auditor, **params) == [e.id]
    before = (e.at.date() - timedelta(days=1)).isoformat()
    assert api_ids(auditor, action=family, since=before, until=before) == []
    browser = Client()
    browser.force_login(auditor.user)
    decisions = browser.get(reverse("console:decisions"), {"since": day, "until": day})
    assert decisions.status_code == 200 and not decisions.context["error"]
    assert not decisions.context["form"].errors


@pytest.mark.parametrize("page", ["console:audit", "console:decisions"])
def test_a_time_whose_utc_is_out_of_range_is_a_form_error_on_the_pages(auditor, page):
    browser = Client()
    browser.force_login(auditor.user)
    response = browser.get(reverse(page), {"until": "9999-12-31T23:59:59-12:00"})
    assert response.status_code == 200 and "out of range" in response.context["form"].errors["until"][0]
    assert auditor.client.get("/api/audit", until="9999-12-31T23:59:59-12:00").json()["error"]["field"] == "until"


@pytest.mark.parametrize("name", ["bogus", "thread_id", "limit", "before"])
def test_the_export_refuses_a_parameter_it_does_not_take_naming_it(auditor, name):
    """A misspelt filter (``thread_id=``) exported the whole trail, read as the filtered one (outside re-test)."""
    response = auditor.client.get("/api/audit/export", **{name: "5"})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == name


def test_the_console_pages_export_links_are_taken_by_the_export(auditor):
    """The audit page's export links carry its filters and an empty ``before``: they export, refused nothing."""
    family = f"test.links{uuid.uuid4().hex[:6]}."
    made = event(family + "x")
    browser = Client()
    browser.force_login(auditor.user)
    html = browser.get(reverse("console:audit"), {"action": family}).content.decode()
    links = re.findall(r'href="(/api/audit/export[^"]*)"', html)
    assert len(links) == 2
    for link in links:
        response = browser.get(link.replace("&amp;", "&"))
        assert response.status_code == 200, response.content
        lines = b"".join(response.streaming_content).decode().splitlines()
        if "format=jsonl" in link:  # its rows, then the trailer
            assert [json.loads(line)["id"] for line in lines[:-1]] == [made.id]
        else:  # a header, then its rows
            assert [line.split(",", 1)[0] for line in lines[1:]] == [str(made.id)]
