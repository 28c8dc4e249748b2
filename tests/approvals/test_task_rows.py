"""The fixed statements of a pause and a decision (``approvals.task_rows``, ``claims.claim_for``) read
and write what their ORM forms did."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals import claims
from approvals.models import ApprovalTask, Decision, TaskClaim, TaskStatus
from approvals.task_rows import decision_grounds, task_closing, tasks_pending
from runtime import rows
from tests.approvals.handoffs import person
from tests.factories import decision_make, loan_gate, task_make
from tests.sqlite_probe import sqlite_probe

pytestmark = pytest.mark.usefixtures("live_db")


def _fields(instance):
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_the_decisions_on_a_task_are_the_orms_and_know_their_task():
    task = task_make(payload=loan_gate(required_approvals=2))
    first, second = decision_make(task, person()), decision_make(task, person("approver"))
    mine = sorted(decision_grounds(task).decisions, key=lambda d: d.created_at)
    orms = sorted(task.decisions.all(), key=lambda d: d.created_at)
    assert [d.pk for d in mine] == [first.pk, second.pk]
    assert [_fields(d) for d in mine] == [_fields(d) for d in orms]
    with CaptureQueriesContext(connection) as reads:
        assert all(d.task is task for d in mine)
    assert len(reads) == 0
    assert decision_grounds(task_make()).decisions == []


def test_a_decisions_grounds_are_one_statement_whatever_they_hold():
    """Claimed or not, with no decision or several: one row set, each decision once, the claim once."""
    task = task_make(payload=loan_gate(required_approvals=3))
    with CaptureQueriesContext(connection) as reads:
        grounds = decision_grounds(task)
    assert len(reads) == 1
    assert (grounds.claim, grounds.decisions) == (None, [])
    holder = person("approver")
    decision_make(task, person())
    decision_make(task, person())
    claims.task_claim(actor=holder, task_id=task.pk)
    with CaptureQueriesContext(connection) as reads:
        grounds = decision_grounds(task)
    assert len(reads) == 1
    assert grounds.claim is not None and grounds.claim.user.username == holder.username
    assert len(grounds.decisions) == 2 and len({d.pk for d in grounds.decisions}) == 2


def _siblings_by_orm(task: ApprovalTask) -> set[str]:
    return set(
        ApprovalTask.objects.filter(
            Q(status=TaskStatus.PENDING) | Q(checkpoint_id=task.checkpoint_id), thread=task.thread
        )
        .exclude(pk=task.pk)
        .values_list("status", flat=True)
    )


def _copy(task: ApprovalTask, **changes) -> ApprovalTask:
    other = ApprovalTask.objects.get(pk=task.pk)
    other.pk = None
    for name, value in changes.items():
        setattr(other, name, value)
    other.save(force_insert=True)
    return other


def _resume_way(task: ApprovalTask) -> str:
    """What a final decision's resume does by the grounds (``services._resume_waiting``)."""
    grounds = decision_grounds(task)
    return "wait" if grounds.pending_sibling else "checkpoint" if grounds.checkpoint_sibling else "own"


def _resume_way_by_orm(task: ApprovalTask) -> str:
    """What it did by the statuses of the siblings' ORM query (before the grounds were one read)."""
    statuses = _siblings_by_orm(task)
    return "wait" if TaskStatus.PENDING in statuses else "own" if not statuses else "checkpoint"


def test_the_siblings_say_what_the_orm_querys_statuses_said():
    task = task_make()
    assert _resume_way(task) == _resume_way_by_orm(task) == "own"
    decided_here = _copy(task, interrupt_id="same-checkpoint", status=TaskStatus.DECIDED)
    assert _resume_way(task) == _resume_way_by_orm(task) == "checkpoint"
    # A pending one at another checkpoint, a decided one elsewhere.
    pending = _copy(task, interrupt_id="pending-elsewhere", checkpoint_id="another-checkpoint")
    _copy(task, interrupt_id="decided-elsewhere", checkpoint_id="a-third-checkpoint", status=TaskStatus.DECIDED)
    for each in (task, pending, decided_here):
        assert _resume_way(each) == _resume_way_by_orm(each) == "wait"
    ApprovalTask.objects.filter(pk=pending.pk).update(status=TaskStatus.DECIDED)
    assert _resume_way(task) == _resume_way_by_orm(task) == "checkpoint"
    assert _resume_way(pending) == _resume_way_by_orm(pending) == "wait"  # ``task`` is pending
    ApprovalTask.objects.filter(pk=task.pk).update(status=TaskStatus.DECIDED)
    assert _resume_way(pending) == _resume_way_by_orm(pending) == "own"  # alone at its checkpoint


def test_closing_a_task_writes_its_status_and_time_with_the_decision_that_closes_it():
    task = task_make()
    before = timezone.now()
    actor = person()
    with CaptureQueriesContext(connection) as writes:
        decision = rows.row_insert(
            Decision(task=task, actor=actor, outcome="approve", checkpoint_id=task.checkpoint_id),
            along=task_closing(task),
        )
    assert len(writes) == 1  # one statement on PostgreSQL
    stored = ApprovalTask.objects.get(pk=task.pk)
    assert stored.status == task.status == TaskStatus.DECIDED
    assert stored.decided_at == task.decided_at and stored.decided_at >= before
    assert Decision.objects.get(pk=decision.pk).task_id == task.pk


def test_a_claim_is_read_with_its_holder_and_an_expired_one_is_none():
    holder = person()
    task = task_make()
    claims.task_claim(actor=holder, task_id=task.pk)
    claim = claims.claim_for(task)
    assert claim is not None and _fields(claim) == _fields(TaskClaim.objects.get(task=task))
    grounds = decision_grounds(task).claim
    assert grounds is not None and _fields(grounds) == _fields(claim)
    with CaptureQueriesContext(connection) as reads:
        assert claim.user.username == holder.username
        assert _fields(grounds.user) == _fields(claim.user)
    assert len(reads) == 0
    TaskClaim.objects.filter(task=task).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert claims.claim_for(task) is None
    assert decision_grounds(task).claim is None
    claims.claim_drop(task=task)
    assert not TaskClaim.objects.filter(task=task).exists()
    assert claims.claim_for(task_make()) is None


def test_a_threads_pending_tasks_are_the_orms_oldest_first():
    task = task_make()
    later = _copy(task, interrupt_id="later", created_at=task.created_at + timedelta(seconds=1))
    _copy(task, interrupt_id="decided", status=TaskStatus.DECIDED)
    mine = tasks_pending(task.thread)
    orms = list(ApprovalTask.objects.filter(thread=task.thread, status=TaskStatus.PENDING).order_by("created_at"))
    assert [t.pk for t in mine] == [task.pk, later.pk] == [t.pk for t in orms]
    assert [_fields(t) for t in mine] == [_fields(t) for t in orms]
    with CaptureQueriesContext(connection) as reads:
        assert all(t.thread is task.thread for t in mine)
    assert len(reads) == 0


_SQLITE_PROBE = """
import json
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from approvals import claims, services
from approvals.errors import Conflict
from approvals.models import GraphAssignment
from approvals.payloads import DecisionRequest
from approvals.roles import roles_ensure
from approvals.task_rows import decision_grounds
from runtime.models import Run, Thread
from runtime.runs import ThreadBusy, run_enqueue
from tests.factories import loan_gate, task_make

roles = roles_ensure()

def approver(name):
    user = get_user_model().objects.create_user(name)
    user.groups.add(roles["approver"])
    GraphAssignment.objects.create(user=user, graph="*")
    return user

def sign(actor, task):
    request = DecisionRequest(outcome="approve", reason="probe")
    try:
        signer = services.Signer(authenticated_at=timezone.now())
        return services.task_decide(actor=actor, task_id=task.pk, request=request, signer=signer).run_id is not None
    except Conflict as exc:
        return exc.field

def grounds(task):
    g = decision_grounds(task)
    return [g.claim and g.claim.user.username, sorted(d.actor.username for d in g.decisions),
            g.pending_sibling, g.checkpoint_sibling]

first, second, holder = approver("first"), approver("second"), approver("holder")
task = task_make(payload=loan_gate(required_approvals=2))
out = {"empty": grounds(task)}
claims.task_claim(actor=holder, task_id=task.pk)
out["claimed"] = [grounds(task), sign(first, task)]
claims.task_release(actor=holder, task_id=task.pk)
out["first"] = [sign(first, task), sign(first, task), grounds(task)]
out["second"] = sign(second, task)
task.refresh_from_db()
thread = Thread.objects.get(pk=task.thread_id)
out["closed"] = [task.status, task.decided_at is not None, thread.status]
out["runs"] = sorted(Run.objects.filter(thread=thread).values_list("kind", "status"))
try:
    with transaction.atomic():
        run_enqueue(thread=thread, kind="retry")
except ThreadBusy:
    out["again"] = "busy"
print(json.dumps(out))
"""


@pytest.mark.embedded
def test_a_decisions_grounds_and_folded_writes_hold_on_sqlite(tmp_path):
    """Embedded mode (SQLite): the same grounds read, and each folded write as a statement of its own."""
    assert sqlite_probe(_SQLITE_PROBE, tmp_path / "var") == {
        "empty": [None, [], False, False],
        "claimed": [["holder", [], False, False], "claim"],
        "first": [False, "task_id", [None, ["first"], False, False]],  # recorded; then "already signed"
        "second": True,  # the quorum is met: a resume is queued
        "closed": ["decided", True, "busy"],
        "runs": [["resume", "queued"], ["start", "interrupted"]],
        "again": "busy",  # the one-active-run index, recognised on SQLite
    }
