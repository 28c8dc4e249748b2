"""Bulk decisions: each task decided on its own through task_decide, skips listed with why, bounded, idempotent.

Tasks are made without a worker (``task_make``); ``bulk_run`` runs in this process. The
resume of each decided task is a queued Run dispatched after commit (the worker's side is
covered by tests/console/test_bulk_browser.py).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from approvals import bulk, claims, services
from approvals.errors import Forbidden, InvalidInput, NotFound
from approvals.inbox_filter import InboxFilter
from approvals.models import ApprovalTask, AuditEvent, BulkAction, BulkStatus, Decision
from approvals.payloads import DecisionRequest
from console.selectors import inbox_list
from runtime import runs
from runtime.gatekeeper import gate_payload
from runtime.models import Run, RunKind, Thread
from tests.factories import loan_gate, task_decided, task_make
from tests.fake_resumes import fake_resumes_closed  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("live_db", "fake_resumes_closed")


@pytest.fixture(autouse=True)
def no_worker_dispatch(monkeypatch):
    """Run bulks here, not on a worker another test may have started: record what would be sent."""
    sent: list[str] = []
    monkeypatch.setattr(bulk, "bulk_dispatch", lambda *, bulk_id: sent.append(str(bulk_id)))
    return sent


def _tag() -> str:
    return f"BULK-{uuid.uuid4().hex[:8]}"


def _tasks(n: int, tag: str, **kwargs) -> list[ApprovalTask]:
    return [task_make(title=f"{tag} #{i}", metadata={"case": tag}, **kwargs) for i in range(n)]


def _fresh() -> services.Signer:
    return services.Signer(authenticated_at=timezone.now())


def _run(actor, tasks, *, outcome="approve", reason="batch of small loans") -> BulkAction:
    started = bulk.bulk_decide(
        actor=actor, outcome=outcome, reason=reason, task_ids=[str(t.pk) for t in tasks], signer=_fresh()
    )
    return bulk.bulk_run(bulk_id=started.pk)


def test_each_task_gets_its_own_decision_evidence_audit_row_and_resume(personas, no_worker_dispatch):
    approver = personas["approver"].user
    tasks = _tasks(4, _tag())
    done = _run(approver, tasks)
    assert done.status == BulkStatus.FINISHED and done.done == 4 and not done.skipped
    assert no_worker_dispatch == [str(done.pk)]
    for task in tasks:
        [decision] = Decision.objects.filter(task=task)
        task.refresh_from_db()
        assert task.status == "decided" and decision.actor == approver and decision.reason == "batch of small loans"
        assert decision.evidence_digest == services.evidence_digest(task=task, redaction=[])
        assert decision.run is not None and decision.run.kind == RunKind.RESUME
        assert decision.run.thread_id == task.thread_id
        audit = AuditEvent.objects.filter(subject_type="task", subject_id=str(task.pk), action="decision.made")
        assert audit.count() == 1 and audit.get().details["decision"] == str(decision.pk)
    assert len({d.evidence_digest for d in Decision.objects.filter(task__in=tasks)}) == 4
    assert [item["task"] for item in done.decided] == [str(t.pk) for t in tasks]
    frame = AuditEvent.objects.filter(subject_type="bulk", subject_id=str(done.pk)).order_by("id")
    assert list(frame.values_list("action", flat=True)) == ["bulk.started", "bulk.finished"]
    assert frame.last().details["decided"] == [str(t.pk) for t in tasks]


def test_every_resume_is_dispatched_after_its_decision_commits(personas, monkeypatch):
    sent: list[tuple[str, bool]] = []  # (run, committed when sent)

    def dispatch(*, run_id):
        sent.append((str(run_id), not transaction.get_connection().in_atomic_block))

    monkeypatch.setattr(runs, "run_dispatch", dispatch)
    tasks = _tasks(3, _tag())
    _run(personas["approver"].user, tasks)
    resumes = Run.objects.filter(thread__in=[t.thread_id for t in tasks], kind=RunKind.RESUME)
    assert resumes.count() == 3
    resume_ids = {str(r.pk) for r in resumes}
    assert sorted(entry for entry in sent if entry[0] in resume_ids) == sorted((run, True) for run in resume_ids)


def test_tasks_it_cannot_decide_are_skipped_with_why(personas):
    reviewer, approver2 = personas["reviewer"].user, personas["approver2"].user
    tag = _tag()
    ok = task_make(title=f"{tag} ok", metadata={"case": tag})
    needs_edit = task_make(
        title=f"{tag} edit",
        payload=gate_payload(title="must edit", decisions=("edit", "reject")),
        metadata={"case": tag},
    )
    stale = task_make(title=f"{tag} stale", metadata={"case": tag})
    Thread.objects.filter(pk=stale.thread_id).update(checkpoint_id=uuid.uuid4().hex)  # the thread moved on
    decided = task_decided(by=personas["approver"].user, title=f"{tag} decided", metadata={"case": tag})
    claimed = task_make(title=f"{tag} claimed", metadata={"case": tag})
    claims.task_claim(actor=approver2, task_id=claimed.pk)
    quorum = task_make(title=f"{tag} quorum", payload=loan_gate(required_approvals=2), metadata={"case": tag})
    services.task_decide(
        actor=approver2,
        task_id=quorum.pk,
        request=DecisionRequest(outcome="approve"),
        signer=services.Signer(authenticated_at=timezone.now()),
    )
    hidden = task_make(graph="kyc_onboarding", title=f"{tag} hidden", metadata={"case": tag})
    selection = [ok, needs_edit, stale, decided, claimed, quorum, hidden]

    done = _run(reviewer, selection[:-1])
    codes = {item["task"]: item["code"] for item in done.skipped}
    assert [item["task"] for item in done.decided] == [str(ok.pk)]
    assert codes == {
        str(needs_edit.pk): bulk.SkipCode.NEEDS_EDIT,
        str(stale.pk): bulk.SkipCode.STALE,
        str(decided.pk): bulk.SkipCode.ALREADY_DECIDED,
        str(claimed.pk): bulk.SkipCode.CLAIMED,
        str(quorum.pk): bulk.SkipCode.QUORUM,
    }
    reasons = {item["task"]: item["reason"] for item in done.skipped}
    assert "does not take a plain approve" in reasons[str(needs_edit.pk)]
    assert "moved on" in reasons[str(stale.pk)]
    assert "decided" in reasons[str(decided.pk)]
    assert approver2.get_username() in reasons[str(claimed.pk)]
    assert "approver role" in reasons[str(quorum.pk)]
    assert all(item["title"].startswith(tag) for item in done.skipped)
    # Skipped tasks are untouched: no decision of the bulk's signer, the quorum still waits.
    assert not Decision.objects.filter(task__in=selection[1:], actor=reviewer).exists()
    # A reviewer assigned to loans only: the kyc task is not theirs to see, it is skipped, not decided.
    hidden_done = _run(personas["loan_reviewer"].user, [hidden])
    assert [s["code"] for s in hidden_done.skipped] == [bulk.SkipCode.NOT_PERMITTED]
    assert not Decision.objects.filter(task=hidden).exists()


def test_a_quorum_task_gets_this_signers_approval_and_waits_for_the_rest(personas):
    [task] = _tasks(1, _tag(), payload=loan_gate(required_approvals=2))
    done = _run(personas["approver"].user, [task])
    [entry] = done.decided
    assert entry["final"] is False and entry["run"] is None
    task.refresh_from_db()
    assert task.status == "pending"


def test_a_rerun_continues_and_never_decides_twice(personas):
    tasks = _tasks(3, _tag())
    started = bulk.bulk_decide(
        actor=personas["approver"].user,
        outcome="approve",
        reason="",
        task_ids=[str(t.pk) for t in tasks],
        signer=_fresh(),
    )
    bulk.bulk_step(bulk_id=started.pk, task_id=str(tasks[0].pk))  # the first worker died after one step
    done = bulk.bulk_run(bulk_id=started.pk)  # the redelivered task
    bulk.bulk_run(bulk_id=started.pk)  # and once more, finished already
    assert done.done == 3 and not done.skipped
    assert Decision.objects.filter(task__in=tasks).count() == 3
    assert AuditEvent.objects.filter(subject_id=str(started.pk), action="bulk.finished").count() == 1


def test_a_reject_needs_the_reason_the_graph_requires(personas):
    """Refused before it starts, naming the reason: it used to start, skip every task one by one and
    leave the audit rows of a bulk that decided nothing."""
    tasks = _tasks(2, _tag())
    before = BulkAction.objects.count()
    with pytest.raises(InvalidInput) as refused:
        _run(personas["approver"].user, tasks, outcome="reject", reason="  ")
    assert refused.value.field == "reason"
    assert refused.value.message == "a reason is required to reject at loan_approval / human_review"
    assert BulkAction.objects.count() == before
    assert _run(personas["approver"].user, tasks, outcome="approve", reason="").done == 2  # approving needs none


def test_a_reject_with_the_reason_decides_each_task(personas):
    tasks = _tasks(2, _tag())
    rejected = _run(personas["approver"].user, tasks, outcome="reject", reason="duplicates")
    assert len(rejected.decided) == 2
    assert set(Decision.objects.filter(task__in=tasks).values_list("outcome", flat=True)) == {"reject"}


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"outcome": "edit", "task_ids": ["x"]}, "outcome"),
        ({"outcome": "approve"}, "task_ids"),
        ({"outcome": "approve", "task_ids": [], "filter": {}}, "task_ids"),
        ({"outcome": "approve", "task_ids": []}, "task_ids"),
        ({"outcome": "approve", "task_ids": [str(uuid.uuid4()) for _ in range(bulk.BULK_MAX + 1)]}, "task_ids"),
        ({"outcome": "approve", "task_ids": ["not-a-uuid"]}, "task_ids[0]"),
        ({"outcome": "approve", "filter": {"colour": "red"}}, "filter.colour"),
        ({"outcome": "approve", "filter": {"claimed": "everyone"}}, "filter.claimed"),
        ({"outcome": "approve", "filter": {"q": 5}}, "filter.q"),
        ({"outcome": "approve", "filter": {"q": "no such task " + uuid.uuid4().hex}}, "filter"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(personas, kwargs, field):
    before = BulkAction.objects.count()
    with pytest.raises(InvalidInput) as refused:
        bulk.bulk_decide(actor=personas["approver"].user, reason="", **kwargs, signer=_fresh())
    assert refused.value.field == field
    assert BulkAction.objects.count() == before


def test_a_filter_matching_more_than_the_bound_is_refused_with_the_count(personas):
    tag = _tag()
    threads = Thread.objects.bulk_create(
        [Thread(graph="loan_approval", status="interrupted", metadata={"case": tag}) for _ in range(bulk.BULK_MAX + 1)]
    )
    ApprovalTask.objects.bulk_create(
        [
            ApprovalTask(thread=t, graph="loan_approval", node="human_review", interrupt_id="i", checkpoint_id="c")
            for t in threads
        ]
    )
    with pytest.raises(InvalidInput) as refused:
        bulk.bulk_decide(
            actor=personas["approver"].user, outcome="approve", reason="", filter={"q": tag}, signer=_fresh()
        )
    assert refused.value.field == "filter" and f"{bulk.BULK_MAX + 1} tasks match" in refused.value.message
    ApprovalTask.objects.filter(thread__in=threads).delete()
    Thread.objects.filter(pk__in=[t.pk for t in threads]).delete()


def test_select_all_matching_takes_exactly_the_inbox_filter(personas):
    approver = personas["approver"].user
    tag = _tag()
    mine = _tasks(3, tag)
    _tasks(2, tag, node="other_gate")
    task_decided(by=personas["reviewer"].user, title=f"{tag} decided", metadata={"case": tag})
    task_make(graph="kyc_onboarding", title=f"{tag} kyc", metadata={"case": tag})
    wanted = {"graph": "loan_approval", "node": "human_review", "q": tag}
    inbox = inbox_list(user=approver, filter=InboxFilter(status="pending", **wanted), limit=100)
    started = bulk.bulk_decide(actor=approver, outcome="approve", reason="", filter=wanted, signer=_fresh())
    assert set(started.task_ids) == {str(t.pk) for t in inbox.items} == {str(t.pk) for t in mine}
    assert bulk.bulk_count(user=approver, filter=InboxFilter.parse(wanted)) == 3
    assert bulk.bulk_count(user=approver, filter=InboxFilter.parse(wanted), at_most=2) == 2
    assert bulk.bulk_count(user=approver, filter=InboxFilter.parse(wanted), at_most=4) == 3
    # Stored and audited by the API's names (the task list's): "node" was read as its alias "gate".
    stored = {"graph": "loan_approval", "gate": "human_review", "q": tag, "thread": ""}
    assert started.filter == {**stored, "claimed": "", "assigned": "", "due": "", "columns": {}}


def test_select_all_matching_an_overdue_filter_takes_only_the_overdue_tasks(personas):
    """The bulk selects what the inbox lists: a filter it ignored would approve tasks nobody saw."""
    approver = personas["approver"].user
    tag = _tag()
    late = _tasks(2, tag)
    on_time = _tasks(2, tag)
    now = timezone.now()
    ApprovalTask.objects.filter(pk__in=[t.pk for t in late]).update(due_at=now - timedelta(minutes=5))
    ApprovalTask.objects.filter(pk__in=[t.pk for t in on_time]).update(due_at=now + timedelta(hours=5))
    wanted = {"q": tag, "due": "overdue"}
    inbox = inbox_list(user=approver, filter=InboxFilter(status="pending", **wanted), limit=100)
    started = bulk.bulk_decide(actor=approver, outcome="approve", reason="", filter=wanted, signer=_fresh())
    assert set(started.task_ids) == {str(t.pk) for t in inbox.items} == {str(t.pk) for t in late}


def test_an_unknown_due_filter_is_refused_naming_it(personas):
    with pytest.raises(InvalidInput) as refused:
        InboxFilter.parse({"due": "yesterday"})
    assert refused.value.field == "filter.due"


def test_one_reauthentication_signs_every_decision(personas):
    approver = personas["approver"].user
    tasks = _tasks(3, _tag())
    old = services.Signer(authenticated_at=timezone.now() - timedelta(days=1), password="gatehouse")
    started = bulk.bulk_decide(
        actor=approver, outcome="approve", reason="", task_ids=[str(t.pk) for t in tasks], signer=old
    )
    assert started.reauthenticated_at is not None
    bulk.bulk_run(bulk_id=started.pk)
    stamps = set(Decision.objects.filter(task__in=tasks).values_list("reauthenticated_at", flat=True))
    assert stamps == {started.reauthenticated_at}


@pytest.mark.parametrize("password,field", [(None, "password"), ("wrong", "password")])
def test_a_failed_reauthentication_refuses_the_whole_action(personas, password, field):
    approver = personas["approver"].user
    tasks = _tasks(2, _tag())
    before = BulkAction.objects.count()
    stale = services.Signer(authenticated_at=timezone.now() - timedelta(days=1), password=password)
    with pytest.raises(Forbidden) as refused:
        bulk.bulk_decide(
            actor=approver, outcome="approve", reason="", task_ids=[str(t.pk) for t in tasks], signer=stale
        )
    assert refused.value.field == field
    assert BulkAction.objects.count() == before
    assert not Decision.objects.filter(task__in=tasks).exists()
    assert AuditEvent.objects.filter(actor=approver, subject_type="bulk", action="decision.refused").exists()


def test_only_deciders_may_start_one(personas):
    tasks = _tasks(1, _tag())
    for name in ("auditor", "operator", "outsider"):
        with pytest.raises(Forbidden):
            bulk.bulk_decide(
                actor=personas[name].user, outcome="approve", reason="", task_ids=[str(tasks[0].pk)], signer=_fresh()
            )


def test_a_bulk_is_visible_to_its_starter_and_to_auditors_only(personas):
    started = bulk.bulk_decide(
        actor=personas["reviewer"].user,
        outcome="approve",
        reason="",
        task_ids=[str(_tasks(1, _tag())[0].pk)],
        signer=_fresh(),
    )
    assert bulk.bulk_get_for(personas["reviewer"].user, started.pk) == started
    assert bulk.bulk_get_for(personas["auditor"].user, started.pk) == started
    for name in ("reviewer2", "operator", "outsider"):
        with pytest.raises(NotFound):
            bulk.bulk_get_for(personas[name].user, started.pk)
