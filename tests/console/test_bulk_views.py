"""The inbox's bulk bar: checked rows or "select all matching" (the list's own filter), CSRF, errors naming fields."""

from __future__ import annotations

import re
import uuid

import pytest

from approvals import bulk
from approvals.models import BulkAction, Decision
from approvals.payloads import REASON_MAX_CHARS
from runtime.models import Run, RunStatus
from tests.console.conftest import console_client
from tests.factories import loan_gate, task_make
from tests.fake_resumes import fake_resumes_closed  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("live_db", "fake_resumes_closed")


@pytest.fixture(autouse=True)
def run_here(monkeypatch):
    monkeypatch.setattr(bulk, "bulk_dispatch", lambda *, bulk_id: bulk.bulk_run(bulk_id=bulk_id))


def _tagged(tag: str, n: int, **kwargs):
    return [task_make(title=f"{tag} {i}", metadata={"case": tag}, **kwargs) for i in range(n)]


def test_the_list_carries_the_filter_that_select_all_sends(personas):
    tag = f"V-{uuid.uuid4().hex[:6]}"
    _tagged(tag, 3)
    html = console_client(personas["approver"]).get("/", {"q": tag}).content.decode()
    assert f'name="q" value="{tag}" form="bulk-form"' in html
    assert "Select all <strong>3</strong> pending tasks matching this filter" in html
    assert html.count('name="task_ids"') == 3
    # the reason's limit is every decision's (it said 10000; the service refuses over 4000)
    assert f'id="bulk-reason" name="reason" maxlength="{REASON_MAX_CHARS}"' in html


def test_select_all_of_one_task_reads_as_one(personas):
    tag = f"V-{uuid.uuid4().hex[:6]}"
    _tagged(tag, 1)
    html = console_client(personas["approver"]).get("/", {"q": tag}).content.decode()
    assert "Select the <strong>1</strong> pending task matching this filter" in html  # was "all 1 … tasks"


def test_past_the_most_an_action_takes_select_all_is_not_offered(personas, monkeypatch):
    monkeypatch.setattr(bulk, "BULK_MAX", 2)
    tag = f"V-{uuid.uuid4().hex[:6]}"
    _tagged(tag, 5)
    client = console_client(personas["approver"])
    # The whole list on one page (its rows are the count), and every status (counted, bounded).
    for params in ({"q": tag}, {"q": tag, "status": "all"}):
        html = client.get("/", params).content.decode()
        assert "data-bulk-all" not in html, params
        assert "More than 2 pending tasks match this filter" in html, params
    monkeypatch.setattr(bulk, "BULK_MAX", 5)
    html = client.get("/", {"q": tag, "status": "all"}).content.decode()
    assert "Select all <strong>5</strong> pending tasks matching this filter" in html


def test_select_all_decides_exactly_the_filtered_tasks(personas):
    tag = f"V-{uuid.uuid4().hex[:6]}"
    wanted = _tagged(tag, 3)
    other_gate = _tagged(tag, 2, node="elsewhere")
    client = console_client(personas["approver"])
    seen = _seen(client, {"q": tag, "node": "human_review"})
    body = {"all_matching": "1", "q": tag, "node": "human_review", "graph": "", "claimed": "", "outcome": "approve"}
    response = client.post("/bulk/", {**body, "all_matching_seen": seen}, headers={"HX-Request": "true"})
    assert response.status_code == 200 and response["HX-Redirect"].startswith("/bulk/")
    action = BulkAction.objects.get(pk=response["HX-Redirect"].strip("/").split("/")[-1])
    assert set(action.task_ids) == {str(t.pk) for t in wanted}
    assert Decision.objects.filter(task__in=wanted).count() == 3
    assert not Decision.objects.filter(task__in=other_gate).exists()
    page = client.get(response["HX-Redirect"]).content.decode()
    assert "Finished" in page and "3 decided, 0 skipped" in page


def _seen(client, params) -> str:
    """The set the inbox page counted for "select all matching", as its bulk form sends it."""
    html = client.get("/", params).content.decode()
    match = re.search(r'name="all_matching_seen" value="([0-9a-f]*)" form="bulk-form"', html)
    assert match, "the page offers select all matching"
    return match.group(1)


def test_select_all_decides_the_tasks_the_page_counted_or_nothing(personas):
    """An outside tester confirmed "Approve 3 tasks at once?" while a fourth matching loan arrived: four were
    approved, and the fourth paid out without anyone having seen it."""
    tag = f"V-{uuid.uuid4().hex[:6]}"
    shown = _tagged(tag, 3)
    client = console_client(personas["approver"])
    seen = _seen(client, {"q": tag})
    late = _tagged(tag, 1)  # arrives while the confirmation is open
    body = {"all_matching": "1", "q": tag, "outcome": "approve", "reason": "batch", "all_matching_seen": seen}
    refused = client.post("/bulk/", body, headers={"HX-Request": "true"})
    assert refused.status_code == 409
    assert "have changed since your page counted them (4 match now): nothing was decided" in refused.content.decode()
    assert not Decision.objects.filter(task__in=shown + late).exists()
    assert not BulkAction.objects.filter(task_ids__contains=[str(late[0].pk)]).exists()
    # A page without the count it showed (an old page, a hand-made request) is refused the same way.
    assert client.post("/bulk/", {**body, "all_matching_seen": ""}, headers={"HX-Request": "true"}).status_code == 409
    # Looked at again, the four are what the page counts, and what is decided.
    again = client.post(
        "/bulk/", {**body, "all_matching_seen": _seen(client, {"q": tag})}, headers={"HX-Request": "true"}
    )
    assert again.status_code == 200, again.content
    assert Decision.objects.filter(task__in=shown + late).count() == 4
    # One decided elsewhere meanwhile: the set changed too (exactly the tasks named, or none).
    fewer = _tagged(tag, 2)
    seen = _seen(client, {"q": tag})
    client.post("/bulk/", {"task_ids": [str(fewer[0].pk)], "outcome": "reject", "reason": "x"})
    assert Decision.objects.filter(task=fewer[0]).exists()
    assert client.post("/bulk/", {**body, "all_matching_seen": seen}, headers={"HX-Request": "true"}).status_code == 409
    assert not Decision.objects.filter(task=fewer[1]).exists()


def test_the_results_say_what_each_resume_run_did_not_resuming_forever(personas):
    """The Thread column read "resuming" twenty minutes after every thread had completed."""
    tag = f"V-{uuid.uuid4().hex[:6]}"
    tasks = _tagged(tag, 2)
    client = console_client(personas["approver"])
    done = client.post("/bulk/", {"task_ids": [str(t.pk) for t in tasks], "outcome": "approve"})
    runs = [Decision.objects.get(task=t).run_id for t in tasks]
    Run.objects.filter(pk=runs[0]).update(status=RunStatus.SUCCEEDED)  # as the worker finishes it
    Run.objects.filter(pk=runs[1]).update(status=RunStatus.QUEUED)
    page = client.get(done["Location"]).content.decode()
    rows = {t.pk: page.split(f'data-task-id="{t.pk}"')[-1].split("</tr>")[0] for t in tasks}
    assert "resumed: completed" in rows[tasks[0].pk]
    assert "resuming" in rows[tasks[1].pk]


def test_checked_rows_are_decided_and_a_bad_form_names_the_field(personas):
    tag = f"V-{uuid.uuid4().hex[:6]}"
    tasks = _tagged(tag, 2)
    client = console_client(personas["approver"])
    refused = client.post(
        "/bulk/", {"task_ids": [str(tasks[0].pk)], "outcome": "respond"}, headers={"HX-Request": "true"}
    )
    assert refused.status_code == 422 and b"outcome" in refused.content
    empty = client.post("/bulk/", {"outcome": "approve"}, headers={"HX-Request": "true"})
    assert empty.status_code == 422 and b"task_ids" in empty.content
    done = client.post("/bulk/", {"task_ids": [str(tasks[0].pk)], "outcome": "approve"})
    assert done.status_code == 302
    assert Decision.objects.filter(task=tasks[0]).count() == 1 and not Decision.objects.filter(task=tasks[1]).exists()


def test_the_bulk_form_needs_its_csrf_token(personas):
    task = _tagged(f"V-{uuid.uuid4().hex[:6]}", 1)[0]
    client = console_client(personas["approver"], enforce_csrf=True)
    response = client.post("/bulk/", {"task_ids": [str(task.pk)], "outcome": "approve"})
    assert response.status_code == 403
    assert not Decision.objects.filter(task=task).exists()


def test_a_signature_on_a_two_approval_task_is_reported_apart_from_decided_tasks(personas):
    """Five approved, one of them needing two approvals: "Finished: 5 decided, 0 skipped", "Decided (5)",
    though that task still waited for another approval."""
    tag = f"V-{uuid.uuid4().hex[:6]}"
    plain = _tagged(tag, 4)
    quorum = task_make(title=f"{tag} quorum", metadata={"case": tag}, payload=loan_gate(required_approvals=2))
    client = console_client(personas["approver"])
    done = client.post("/bulk/", {"task_ids": [str(t.pk) for t in [*plain, quorum]], "outcome": "approve"})
    page = client.get(done["Location"]).content.decode()
    state = page.split('class="bulk-state"', 1)[1].split("</p>", 1)[0]
    assert "4 decided, 1 signed — waits for 1 more approval, 0 skipped" in " ".join(state.split())
    assert "Decided (4)" in page and "Signed, waiting for more approvals (1)" in page
    decided = page.split('class="grid bulk-decided"', 1)[1].split("</table>", 1)[0]
    signed = page.split('class="grid bulk-signed"', 1)[1].split("</table>", 1)[0]
    assert f'data-task-id="{quorum.pk}"' not in decided and all(f'data-task-id="{t.pk}"' in decided for t in plain)
    assert f'data-task-id="{quorum.pk}"' in signed and "waits for 1 more approval" in signed
