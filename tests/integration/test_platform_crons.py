"""Crons (``client.crons``) through the official ``langgraph_sdk`` client against daphne: made, found, changed
and deleted as LangGraph Server's are; fired at the times the tests choose (``lgplatform.crons.cron_fire``,
what the beat's sweep calls for each due cron), their runs executed by the real worker. What Gatehouse adds
is attacked here: a run started as its owner with the owner's permissions of the moment, a firing skipped
(and audited) while its thread waits for a reviewer, one firing per due time however many sweepers race for
it, only the owner changing a cron, and a payload masked for a reader without "view sensitive".
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from django.contrib.auth.models import Group
from django.db import close_old_connections
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from approvals.models import AuditEvent
from approvals.redaction import MASK
from approvals.tokens import token_issue
from lgplatform.crons import cron_fire
from lgplatform.models import Cron
from lgplatform.services import assistant_id_for
from lgplatform.tasks import fire_crons
from runtime.models import Run, Thread
from tests.approvals.guards import user_make
from tests.conftest import loan_input, scaled, wait_for
from tests.console.conftest import console_client
from tests.integration.test_platform_sdk import server  # noqa: F401 - the live daphne fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

TIMEOUT = httpx.Timeout(scaled(30.0))
LOAN = assistant_id_for("loan_approval")
NEVER = "0 0 1 1 *"  # New Year's midnight: no test's cron comes due while the suite runs; tests fire them
APPROVE = {"resume": {"decision": "approve", "reason": "ok"}}


def _sdk(server: str, token: str) -> SyncLangGraphClient:  # noqa: F811
    return get_sync_client(url=server, api_key=token, timeout=TIMEOUT)


def _refused(call: Any, status: int) -> dict[str, Any]:
    """The Gatehouse error of a call the SDK raised on, with ``status``."""
    with pytest.raises(httpx.HTTPStatusError) as raised:
        call()
    response = raised.value.response
    assert response.status_code == status, response.text
    return dict(response.json()["error"])


def _due(cron_id: str) -> datetime:
    """When the cron fires next: the time a test fires it at."""
    due = Cron.objects.get(pk=cron_id).next_run_date
    assert due is not None
    return due


def _settled(thread_id: Any, status: str) -> Thread:
    return wait_for(
        lambda: (t := Thread.objects.get(pk=thread_id)).status == status and t,
        timeout=30,
        what=f"thread {thread_id} to be {status}",
    )


def test_the_sdk_makes_finds_changes_and_deletes_crons(server, personas):  # noqa: F811
    operator, auditor, admin = personas["operator"], personas["auditor"], personas["admin"]
    op = _sdk(server, operator.token)
    team = f"risk-{uuid.uuid4().hex[:6]}"
    thread = op.threads.create()["thread_id"]
    stateless = op.crons.create(
        LOAN, schedule="*/5 * * * *", input=loan_input(), metadata={"team": team}, multitask_strategy="reject"
    )
    on_thread = op.crons.create_for_thread(thread, LOAN, schedule=NEVER, input=loan_input(), metadata={"team": team})
    # The shape LangGraph Server answers with.
    assert set(stateless) == {
        "cron_id", "assistant_id", "thread_id", "on_run_completed", "end_time", "schedule", "timezone",
        "created_at", "updated_at", "payload", "user_id", "next_run_date", "metadata", "enabled",
    }  # fmt: skip
    assert stateless["assistant_id"] == LOAN and stateless["thread_id"] is None
    assert stateless["user_id"] == operator.username and stateless["enabled"] is True
    assert stateless["on_run_completed"] == "keep" and on_thread["on_run_completed"] is None
    assert stateless["payload"]["input"]["applicant"] == "Test Applicant"
    assert stateless["payload"]["multitask_strategy"] == "reject"
    nxt = datetime.fromisoformat(stateless["next_run_date"])
    now = datetime.now(UTC)
    assert now < nxt <= now + timedelta(minutes=5) and nxt.minute % 5 == 0 and nxt.second == 0
    assert on_thread["thread_id"] == thread
    assert datetime.fromisoformat(on_thread["next_run_date"]).strftime("%m-%d %H:%M") == "01-01 00:00"

    # Search and count: by assistant, thread, metadata and state; sorted; only the fields selected.
    mine = {"metadata": {"team": team}}
    assert {c["cron_id"] for c in op.crons.search(**mine)} == {stateless["cron_id"], on_thread["cron_id"]}
    assert [c["cron_id"] for c in op.crons.search(thread_id=thread)] == [on_thread["cron_id"]]
    assert op.crons.count(thread_id=thread) == 1
    ordered = op.crons.search(**mine, sort_by="next_run_date", sort_order="asc")
    assert [c["cron_id"] for c in ordered] == [stateless["cron_id"], on_thread["cron_id"]]
    assert op.crons.search(**mine, select=["cron_id", "schedule"], limit=1, offset=1) in (
        [{"cron_id": on_thread["cron_id"], "schedule": NEVER}],
        [{"cron_id": stateless["cron_id"], "schedule": "*/5 * * * *"}],
    )
    assert len(op.crons.search(assistant_id=LOAN, limit=1000)) >= 2
    assert _sdk(server, auditor.token).crons.count(thread_id=thread) == 1  # every graph's reader sees it

    # Update: the schedule read in its time zone; disabled, it has no next run; enabled again, it has.
    changed = op.crons.update(stateless["cron_id"], schedule="30 9 * * 1-5", timezone="Europe/Paris")
    nxt = datetime.fromisoformat(changed["next_run_date"])
    assert changed["timezone"] == "Europe/Paris"
    assert nxt.astimezone(ZoneInfo("Europe/Paris")).strftime("%H:%M") == "09:30"
    assert nxt.astimezone(ZoneInfo("Europe/Paris")).isoweekday() <= 5
    assert op.crons.update(stateless["cron_id"], enabled=False)["next_run_date"] is None
    assert op.crons.update(stateless["cron_id"], enabled=True)["next_run_date"] == changed["next_run_date"]
    amended = op.crons.update(stateless["cron_id"], input=loan_input(amount=5000), metadata={"team": team, "v": 2})
    assert amended["payload"]["input"]["amount"] == 5000 and amended["metadata"]["v"] == 2
    assert amended["payload"]["multitask_strategy"] == "reject"  # what was not sent is kept

    # Only the owner changes a cron (its runs are started as them); an administrator may delete it.
    error = _refused(lambda: _sdk(server, admin.token).crons.update(stateless["cron_id"], enabled=False), 403)
    assert error["field"] == "cron_id" and "owner" in error["message"]
    assert Cron.objects.get(pk=stateless["cron_id"]).enabled is True
    _sdk(server, admin.token).crons.delete(on_thread["cron_id"])
    op.crons.delete(stateless["cron_id"])
    assert op.crons.count(thread_id=thread) == 0 and not op.crons.search(**mine)
    assert _refused(lambda: op.crons.delete(stateless["cron_id"]), 404)["field"] == "cron_id"

    # Every change is in the audit trail, by whom.
    trail = AuditEvent.objects.filter(subject_type="cron", subject_id__in=[stateless["cron_id"], on_thread["cron_id"]])
    actions = [(e.action, e.actor_label) for e in trail.order_by("id")]
    assert actions.count(("cron.created", operator.username)) == 2
    assert ("cron.deleted", admin.username) in actions and ("cron.deleted", operator.username) in actions
    assert actions.count(("cron.updated", operator.username)) == 4
    op.close()


def test_a_due_cron_starts_its_run_as_its_owner_on_a_new_thread_once(server, personas):  # noqa: F811
    operator = personas["operator"]
    op = _sdk(server, operator.token)
    cron = op.crons.create(LOAN, schedule=NEVER, input=loan_input(), metadata={"purpose": "nightly"})
    due = _due(cron["cron_id"])
    assert cron_fire(cron_id=cron["cron_id"], now=due - timedelta(seconds=1)) is None  # not yet due
    assert cron_fire(cron_id=cron["cron_id"], now=due) == "fired"
    assert cron_fire(cron_id=cron["cron_id"], now=due) is None  # that time has fired: once
    run = Run.objects.get(metadata__cron_id=cron["cron_id"])
    assert run.created_by_id == operator.user.pk
    thread = _settled(run.thread_id, "interrupted")  # the worker ran it to the loan's gate
    assert thread.metadata == {"purpose": "nightly", "cron_id": cron["cron_id"]}
    found = op.threads.search(metadata={"cron_id": cron["cron_id"]})
    assert [t["thread_id"] for t in found] == [str(run.thread_id)]
    # Its next firing is the following New Year, and the firing is audited with the run.
    assert _due(cron["cron_id"]).year == due.year + 1
    fired = AuditEvent.objects.get(subject_type="cron", subject_id=cron["cron_id"], action="cron.fired")
    assert fired.details["run"] == str(run.id) and fired.actor_id == operator.user.pk
    assert fired.thread_id == run.thread_id
    op.close()


def test_a_thread_cron_is_skipped_while_its_thread_waits_for_a_reviewer(server, personas):  # noqa: F811
    """A timer never pushes a thread past its gate: the firing is skipped and says why, and the cron fires again
    at its next time, when (the reviewer having decided) it starts the thread's next run."""
    operator, reviewer = personas["operator"], personas["reviewer"]
    op, rv = _sdk(server, operator.token), _sdk(server, reviewer.token)
    thread = op.threads.create()["thread_id"]
    op.runs.wait(thread, LOAN, input=loan_input())
    assert op.threads.get(thread)["status"] == "interrupted"
    cron = op.crons.create_for_thread(thread, LOAN, schedule=NEVER, input=loan_input())
    due = _due(cron["cron_id"])
    runs_before = Run.objects.filter(thread_id=thread).count()
    assert cron_fire(cron_id=cron["cron_id"], now=due) == "skipped"
    assert Run.objects.filter(thread_id=thread).count() == runs_before
    skipped = AuditEvent.objects.get(subject_type="cron", subject_id=cron["cron_id"], action="cron.skipped")
    assert "waits for a decision" in skipped.details["reason"] and skipped.details["due"] == due.isoformat()
    assert _due(cron["cron_id"]) > due  # on to its next time, not retried every sweep
    # Skipped again for the same reason: counted, not audited again (a cron every minute on a thread waiting a
    # week would write ten thousand events).
    assert cron_fire(cron_id=cron["cron_id"], now=_due(cron["cron_id"])) == "skipped"
    assert AuditEvent.objects.filter(subject_id=cron["cron_id"], action="cron.skipped").count() == 1
    assert Cron.objects.get(pk=cron["cron_id"]).skipped_count == 2
    # Decided: the next firing starts the thread's next run, with the cron's input, and says what it skipped.
    rv.runs.wait(thread, LOAN, command=APPROVE)
    _settled(thread, "completed")
    assert cron_fire(cron_id=cron["cron_id"], now=_due(cron["cron_id"])) == "fired"
    run = Run.objects.get(thread_id=thread, metadata__cron_id=cron["cron_id"])
    assert run.created_by_id == operator.user.pk
    fired = AuditEvent.objects.get(subject_id=cron["cron_id"], action="cron.fired")
    assert fired.details["skipped_before"] == {"count": 2, "reason": skipped.details["reason"]}
    assert Cron.objects.get(pk=cron["cron_id"]).skipped_count == 0
    _settled(thread, "interrupted")
    op.close()
    rv.close()


def test_the_thread_page_shows_who_will_start_runs_there_and_when(server, personas):  # noqa: F811
    operator, reviewer = personas["operator"], personas["reviewer"]
    op = _sdk(server, operator.token)
    thread = op.threads.create()["thread_id"]
    secret = f"L-{uuid.uuid4().hex[:8]}"
    cron = op.crons.create_for_thread(
        thread, LOAN, schedule="30 9 * * 1-5", timezone="Europe/Paris", input=loan_input(loan_id=secret)
    )
    page = console_client(reviewer).get(f"/threads/{thread}/").content.decode()
    assert 'id="thread-crons"' in page and "<code>30 9 * * 1-5</code>" in page and "Europe/Paris" in page
    assert operator.username in page and cron["cron_id"][:8] in page
    assert secret not in page  # who and when, never what it sends
    # The thread waits for its reviewer: the firing is skipped, and the page says so.
    op.runs.wait(thread, LOAN, input=loan_input())
    assert cron_fire(cron_id=cron["cron_id"], now=_due(cron["cron_id"])) == "skipped"
    assert (
        "skipped 1× since its last run: the thread waits for a decision"
        in console_client(reviewer).get(f"/threads/{thread}/").content.decode()
    )
    op.crons.update(cron["cron_id"], enabled=False)
    assert "disabled" in console_client(reviewer).get(f"/threads/{thread}/").content.decode()
    op.close()


def test_an_administrator_sees_and_deletes_a_departed_users_crons_in_the_console(server, personas):  # noqa: F811
    """Offboarding: the user's page lists the crons that run in their name (a thread's, and one that makes a new
    thread each time); Delete stops them, audited as the administrator's. A reviewer on the thread's page sees
    the cron but no Delete button, and a delete they post is refused."""
    admin, reviewer = personas["admin"], personas["reviewer"]
    leaver = user_make("operator", "loan_approval")
    sdk = _sdk(server, token_issue(user=leaver))
    thread = sdk.threads.create()["thread_id"]
    on_thread = sdk.crons.create_for_thread(thread, LOAN, schedule=NEVER, input=loan_input())
    stateless = sdk.crons.create(LOAN, schedule="15 6 * * *", input=loan_input())
    leaver.is_active = False
    leaver.save()
    as_reviewer = console_client(reviewer)
    page = as_reviewer.get(f"/threads/{thread}/").content.decode()
    assert on_thread["cron_id"][:8] in page and f"/crons/{on_thread['cron_id']}/delete" not in page
    assert as_reviewer.post(f"/crons/{on_thread['cron_id']}/delete").status_code == 403
    as_admin = console_client(admin)
    user_page = f"/users/{leaver.pk}/"
    page = as_admin.get(user_page).content.decode()
    assert 'id="user-crons"' in page and "every firing is skipped" in page
    assert "<code>15 6 * * *</code>" in page and "a new thread each run" in page
    for cron in (on_thread, stateless):
        assert f"/crons/{cron['cron_id']}/delete" in page
        answer = as_admin.post(f"/crons/{cron['cron_id']}/delete", headers={"Referer": f"http://testserver{user_page}"})
        assert answer.status_code == 302 and answer["Location"] == user_page
    assert not Cron.objects.filter(owner=leaver).exists()
    ids = [on_thread["cron_id"], stateless["cron_id"]]
    deleted = AuditEvent.objects.filter(action="cron.deleted", subject_id__in=ids)
    assert sorted(e.actor_id for e in deleted) == [admin.user.pk, admin.user.pk]
    assert 'id="user-crons"' not in as_admin.get(user_page).content.decode()
    sdk.close()


def test_a_deactivated_owner_or_a_withdrawn_role_stops_the_firings(server, personas):  # noqa: F811
    owner = user_make("operator", "loan_approval")
    cron = _sdk(server, token_issue(user=owner)).crons.create(LOAN, schedule=NEVER, input=loan_input())
    owner.groups.remove(Group.objects.get(name="operator"))
    assert cron_fire(cron_id=cron["cron_id"], now=_due(cron["cron_id"])) == "skipped"
    owner.groups.add(Group.objects.get(name="operator"))
    owner.is_active = False
    owner.save()
    assert cron_fire(cron_id=cron["cron_id"], now=_due(cron["cron_id"])) == "skipped"
    reasons = [
        e.details["reason"]
        for e in AuditEvent.objects.filter(subject_id=cron["cron_id"], action="cron.skipped").order_by("id")
    ]
    assert "start threads" in reasons[0] and "deactivated" in reasons[1], reasons
    assert not Run.objects.filter(metadata__cron_id=cron["cron_id"]).exists()


def test_sweepers_racing_for_a_due_cron_fire_it_once(server, personas):  # noqa: F811
    cron = _sdk(server, personas["operator"].token).crons.create(LOAN, schedule=NEVER, input=loan_input())
    due = _due(cron["cron_id"])
    start = threading.Barrier(4)
    outcomes: list[str | None] = []

    def sweep() -> None:
        try:
            start.wait(scaled(10))
            outcomes.append(cron_fire(cron_id=cron["cron_id"], now=due))
        finally:
            close_old_connections()

    sweepers = [threading.Thread(target=sweep) for _ in range(4)]
    for sweeper in sweepers:
        sweeper.start()
    for sweeper in sweepers:
        sweeper.join(scaled(30))
    assert len(outcomes) == 4 and outcomes.count("fired") == 1 and outcomes.count(None) == 3, outcomes
    assert Run.objects.filter(metadata__cron_id=cron["cron_id"]).count() == 1


def test_the_beat_task_fires_what_is_due_on_the_worker(server, personas):  # noqa: F811
    """``lgplatform.fire_crons`` (the beat's entry) run by the worker: a cron whose time has come fires."""
    cron = _sdk(server, personas["operator"].token).crons.create(LOAN, schedule=NEVER, input=loan_input())
    Cron.objects.filter(pk=cron["cron_id"]).update(next_run_date=datetime.now(UTC) - timedelta(seconds=1))
    fire_crons.delay()
    run = wait_for(
        lambda: Run.objects.filter(metadata__cron_id=cron["cron_id"]).first(), timeout=30, what="the cron's run"
    )
    _settled(run.thread_id, "interrupted")


def test_a_payload_is_masked_for_a_reader_without_view_sensitive(server, personas):  # noqa: F811
    admin, reviewer, auditor = personas["admin"], personas["reviewer"], personas["auditor"]
    secret = f"19{uuid.uuid4().int % 100:02d}-01-01"
    kyc = assistant_id_for("kyc_onboarding")
    cron = _sdk(server, admin.token).crons.create(
        kyc, schedule=NEVER, input={"applicant": {"name": "Ada", "date_of_birth": secret}, "documents": []}
    )
    shown = _sdk(server, reviewer.token).crons.search(assistant_id=kyc, limit=1000)
    [mine] = [c for c in shown if c["cron_id"] == cron["cron_id"]]
    assert mine["payload"]["input"]["applicant"] == {"name": "Ada", "date_of_birth": MASK}
    assert secret not in str(shown)
    before = AuditEvent.objects.filter(action="sensitive.revealed", actor=auditor.user).count()
    # crons.get is LangGraph Server's GET /runs/crons/{cron_id} (this SDK has no method for it yet).
    response = httpx.get(
        f"{server}/runs/crons/{cron['cron_id']}", headers={"x-api-key": auditor.token}, timeout=TIMEOUT
    )
    assert response.status_code == 200, response.text
    seen = response.json()
    assert seen["payload"]["input"]["applicant"]["date_of_birth"] == secret
    assert AuditEvent.objects.filter(action="sensitive.revealed", actor=auditor.user).count() == before + 1


@pytest.mark.parametrize(
    ("sent", "field"),
    [
        ({"schedule": "every day at nine"}, "schedule"),
        ({"schedule": "0 9 * * * *"}, "schedule"),  # a sixth field (seconds): finer than the sweep
        ({"schedule": "0 0 30 2 *"}, "schedule"),  # February 30th: never fires
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({"input": None}, "input"),
        ({"input": {"amount": "lots"}}, "input.amount"),
        ({"on_run_completed": "delete"}, "on_run_completed"),
        ({"interrupt_before": ["human_review"]}, "interrupt_before"),
        ({"config": {"configurable": {"model": "x"}}}, "config.configurable"),
        ({"multitask_strategy": "enqueue"}, "multitask_strategy"),
        ({"stream_mode": "nonsense"}, "stream_mode"),
        ({"assistant_id": "no-such-graph"}, "assistant_id"),
    ],
)
def test_a_cron_no_firing_could_start_is_refused_naming_the_field(server, personas, sent, field):  # noqa: F811
    operator = personas["operator"]
    body = {"assistant_id": LOAN, "schedule": NEVER, "input": loan_input(), **sent}
    before = (Cron.objects.count(), AuditEvent.objects.filter(action="cron.created").count())
    response = httpx.post(f"{server}/runs/crons", json=body, headers={"x-api-key": operator.token}, timeout=TIMEOUT)
    assert response.status_code in (404, 422), response.text
    assert response.json()["error"]["field"] == field, response.text
    assert (Cron.objects.count(), AuditEvent.objects.filter(action="cron.created").count()) == before


def test_who_may_make_and_change_crons(server, personas):  # noqa: F811
    reviewer, operator = personas["reviewer"], personas["operator"]
    # A reviewer may not start threads: nor make a cron that would.
    _refused(lambda: _sdk(server, reviewer.token).crons.create(LOAN, schedule=NEVER, input=loan_input()), 403)
    # A cron on a thread of another graph, or on a thread one may not see.
    op = _sdk(server, operator.token)
    thread = op.threads.create()["thread_id"]
    op.runs.create(thread, LOAN, input=loan_input())
    kyc = assistant_id_for("kyc_onboarding")
    error = _refused(lambda: op.crons.create_for_thread(thread, kyc, schedule=NEVER, input={"applicant": {}}), 422)
    assert error["field"] == "assistant_id"
    hidden = _sdk(server, token_issue(user=user_make("operator", "kyc_onboarding")))  # loans are not theirs
    error = _refused(lambda: hidden.crons.create_for_thread(thread, kyc, schedule=NEVER, input={"applicant": {}}), 404)
    assert error["field"] == "thread_id"
    assert (
        _refused(lambda: hidden.crons.create(LOAN, schedule=NEVER, input=loan_input()), 404)["field"] == "assistant_id"
    )
    # Nothing sent to change: refused, naming the body.
    cron = op.crons.create(LOAN, schedule=NEVER, input=loan_input())
    response = httpx.patch(
        f"{server}/runs/crons/{cron['cron_id']}", json={}, headers={"x-api-key": operator.token}, timeout=TIMEOUT
    )
    assert response.status_code == 422 and response.json()["error"]["field"] == "body", response.text
    assert _refused(lambda: op.crons.delete("not-a-uuid"), 422)["field"] == "cron_id"
    op.close()
