"""The inbox page takes ``GET /api/tasks``' name for the gate filter, ``gate=``, as well as its own ``node=``.

A link built from the API's names listed every gate under a notice that ``gate`` was ignored.
"""

from __future__ import annotations

import uuid
from html import unescape

import pytest
from django.http import QueryDict

from console.page_context import inbox_row_context
from tests.console.conftest import console_client
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def _listed(html: str, *tasks) -> set:
    return {t for t in tasks if f'data-task-id="{t.pk}"' in html}


def _link(html: str, rel: str) -> str:
    return unescape(html.split(f'rel="{rel}"')[0].rsplit('href="', 1)[1].split('"')[0])


@pytest.mark.parametrize("name", ["gate", "node"])
def test_the_inbox_lists_only_the_gates_tasks_by_either_name(personas, name):
    marker = uuid.uuid4().hex[:8]
    gate = f"gate_{marker}"
    mine = task_make(node=gate, metadata={"case": marker})
    other = task_make(node="human_review", metadata={"case": marker})
    html = console_client(personas["reviewer"]).get("/", {"q": marker, name: gate}).content.decode()
    assert _listed(html, mine, other) == {mine}
    assert "ignored" not in html
    assert f'<option value="{gate}" selected>{gate}</option>' in html  # the form shows the filter it applied
    # The live socket follows the same list (its query is the page's, by the page's name for the gate).
    reader = personas["reviewer"].user.pk  # whom the page was drawn for (its socket refuses another session's user)
    assert f'ws-connect="/ws/inbox/?q={marker}&amp;node={gate}&amp;reader={reader}"' in html


def test_a_gate_filtered_inboxs_next_page_link_keeps_the_gate(personas):
    marker = uuid.uuid4().hex[:8]
    gate = f"gate_{marker}"
    for _ in range(51):
        task_make(node=gate, metadata={"case": marker})
    other = task_make(node="human_review", metadata={"case": marker})
    client = console_client(personas["reviewer"])
    html = client.get("/", {"q": marker, "gate": gate}).content.decode()
    link = _link(html, "next")
    assert f"node={gate}" in link and "cursor=" in link
    page2 = client.get("/" + link).content.decode()
    assert page2.count("data-task-id=") == 1 and not _listed(page2, other)


def test_a_live_inbox_by_the_apis_gate_name_pushes_only_the_gates_new_tasks(personas):
    marker = uuid.uuid4().hex[:8]
    gate = f"gate_{marker}"
    mine = task_make(node=gate, metadata={"case": marker})
    other = task_make(node="human_review", metadata={"case": marker})
    query = QueryDict(f"gate={gate}")
    pushed = inbox_row_context(personas["reviewer"].user, query, mine.pk)
    assert pushed is not None and [t for t, _ in pushed["rows"]] == [mine]
    assert inbox_row_context(personas["reviewer"].user, query, other.pk) is None


def test_gate_and_node_naming_different_gates_keeps_node_and_says_so(personas):
    marker = uuid.uuid4().hex[:8]
    mine = task_make(node=f"gate_{marker}", metadata={"case": marker})
    other = task_make(node="human_review", metadata={"case": marker})
    query = {"q": marker, "node": f"gate_{marker}", "gate": "human_review"}
    html = unescape(console_client(personas["reviewer"]).get("/", query).content.decode())
    assert _listed(html, mine, other) == {mine}
    assert f"gate: 'human_review' is another name for node, which says 'gate_{marker}'; gate ignored" in html
