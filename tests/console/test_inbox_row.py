"""The row a live inbox pushes when a task opens (console.selectors.inbox_row) is the list's own row.

``inbox_row`` reads the row by fixed SQL with the list's rule (``tasks_inbox``) as a subquery, where
``inbox_list`` composes the whole query through the ORM. Both must agree: the same task with the same
fields, thread, assignee, group and claim; nothing where the list would not show the task, to this
reader, under this filter; and on PostgreSQL one prepared statement per reader's filter, with the task
as its only parameter.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from approvals.comments import comment_post
from approvals.inbox_filter import InboxFilter
from approvals.models import ApprovalTask, TaskClaim
from console.selectors import inbox_list, inbox_row
from tests.factories import task_make
from tests.sqlite_probe import sqlite_probe

pytestmark = pytest.mark.django_db


def _fields(instance):
    deferred = instance.get_deferred_fields()
    return {
        f.attname: getattr(instance, f.attname)
        for f in type(instance)._meta.concrete_fields
        if f.attname not in deferred
    }


def _listed(user, filter, task):
    """The task as the inbox lists it (first page, 100 rows), or None."""
    return next((t for t in inbox_list(user=user, filter=filter, limit=100).items if t.pk == task.pk), None)


def _same_row(pushed, listed, django_assert_num_queries):
    assert _fields(pushed) == _fields(listed)
    assert pushed.get_deferred_fields() == listed.get_deferred_fields() == {"response_schema"}
    assert _fields(pushed.thread) == _fields(listed.thread)
    assert pushed.thread.get_deferred_fields() == listed.thread.get_deferred_fields() == {"values"}
    for attr in ("assigned_user", "assigned_group"):
        mine, theirs = getattr(pushed, attr), getattr(listed, attr)
        assert (mine and _fields(mine)) == (theirs and _fields(theirs)), attr
    claimed = TaskClaim.objects.filter(task=listed).exists()
    if claimed:
        assert _fields(pushed.claim) == _fields(listed.claim)
        assert _fields(pushed.claim.user) == _fields(listed.claim.user)
        assert pushed.claim.task is pushed
    else:
        for task in (pushed, listed):
            with pytest.raises(ApprovalTask.claim.RelatedObjectDoesNotExist):
                task.claim  # noqa: B018 - the access is the check
    # Nothing else is read: every relation the row shows came with it.
    with django_assert_num_queries(0):
        pushed.thread.metadata, pushed.assigned_user, pushed.assigned_group  # noqa: B018
        if claimed:
            pushed.claim.user.get_username()


def test_a_plain_new_task_reads_as_the_list_shows_it(personas, django_assert_num_queries):
    marker = uuid.uuid4().hex[:8]
    task = task_make(metadata={"case": marker, "applicant": "Ada"})
    reviewer = personas["reviewer"].user
    wanted = InboxFilter(q=marker)
    pushed = inbox_row(user=reviewer, filter=wanted, task_id=task.pk)
    assert pushed is not None and pushed.pk == task.pk
    _same_row(pushed, _listed(reviewer, wanted, task), django_assert_num_queries)
    assert pushed.thread.metadata == {"case": marker, "applicant": "Ada"}  # JSON parsed as the ORM parses it
    assert pushed.thread_commented is False


def test_a_claimed_assigned_commented_task_reads_as_the_list_shows_it(personas, django_assert_num_queries):
    marker = uuid.uuid4().hex[:8]
    task = task_make(metadata={"case": marker})
    holder, reviewer = personas["reviewer2"].user, personas["reviewer"].user
    group = Group.objects.create(name=f"desk-{marker}")
    now = timezone.now()
    ApprovalTask.objects.filter(pk=task.pk).update(assigned_user=holder, assigned_group=group, assigned_at=now)
    TaskClaim.objects.create(task=task, user=holder, claimed_at=now, expires_at=now + timedelta(minutes=30))
    comment_post(actor=reviewer, body="who checked the payslip?", task=task)
    wanted = InboxFilter(q=marker)
    pushed = inbox_row(user=reviewer, filter=wanted, task_id=task.pk)
    assert pushed is not None
    _same_row(pushed, _listed(reviewer, wanted, task), django_assert_num_queries)
    assert pushed.claim.user == holder and pushed.assigned_group == group
    assert pushed.thread_commented is True


@pytest.mark.parametrize(
    "persona,filter",
    [
        ("reviewer", InboxFilter(q="{other}")),  # filtered out by the search
        ("reviewer", InboxFilter(q="{marker}", status="approved")),  # by its status
        ("reviewer", InboxFilter(q="{marker}", graph="loan_approval")),  # by its graph
        ("reviewer", InboxFilter(q="{marker}", claimed="mine")),  # nobody's claim
        ("loan_reviewer", InboxFilter(q="{marker}")),  # a graph this reviewer is not assigned to
        ("unassigned", InboxFilter(q="{marker}")),  # a reviewer with no graph assigned: nothing visible
        ("outsider", InboxFilter(q="{marker}")),  # no permission to see tasks
    ],
)
def test_a_task_the_list_leaves_out_is_not_pushed(personas, persona, filter):
    marker, other = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
    task = task_make(graph="kyc_onboarding", node="compliance_review", metadata={"case": marker})
    wanted = dataclasses.replace(filter, q=filter.q.format(marker=marker, other=other))
    user = personas[persona].user if persona in personas else _unassigned_reviewer()
    assert _listed(user, wanted, task) is None
    assert inbox_row(user=user, filter=wanted, task_id=task.pk) is None
    # … while the same reader with the plain search sees it, where the list does.
    plain = InboxFilter(q=marker)
    assert (inbox_row(user=user, filter=plain, task_id=task.pk) is None) == (_listed(user, plain, task) is None)


def _unassigned_reviewer():
    from django.contrib.auth.models import User

    from approvals.roles import roles_ensure

    user = User.objects.create_user(f"unassigned-{uuid.uuid4().hex[:6]}")
    user.groups.add(roles_ensure()["reviewer"])
    return user


def test_a_claim_that_expired_reads_as_unclaimed_in_both(personas):
    marker = uuid.uuid4().hex[:8]
    task = task_make(metadata={"case": marker})
    past = timezone.now() - timedelta(hours=2)
    TaskClaim.objects.create(task=task, user=personas["reviewer2"].user, claimed_at=past, expires_at=past)
    reviewer = personas["reviewer"].user
    for claimed, shown in (("unclaimed", True), ("others", False)):
        wanted = InboxFilter(q=marker, claimed=claimed)
        assert (inbox_row(user=reviewer, filter=wanted, task_id=task.pk) is not None) is shown
        assert (_listed(reviewer, wanted, task) is not None) is shown


def test_an_id_that_is_no_task_key_is_the_lookups_validation_error(personas):
    with pytest.raises(ValidationError):
        inbox_row(user=personas["reviewer"].user, filter=InboxFilter(), task_id="not-a-uuid")
    assert inbox_row(user=personas["reviewer"].user, filter=InboxFilter(), task_id=uuid.uuid4()) is None


def test_one_readers_rows_are_one_prepared_statement_with_the_task_as_its_parameter(personas):
    """Planning the seven-table statement cost more than running it: it is prepared once per
    connection and reused for every task, so the task must be a parameter, not written in."""
    marker = uuid.uuid4().hex[:8]
    tasks = [task_make(metadata={"case": marker}) for _ in range(3)]
    reviewer = personas["reviewer"].user
    for task in tasks:
        assert inbox_row(user=reviewer, filter=InboxFilter(q=marker), task_id=task.pk).pk == task.pk
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{marker}%"],
        )
        prepared = cursor.fetchall()
    assert len(prepared) == 1, prepared
    statement, executions = prepared[0]
    assert executions == len(tasks)
    assert "$1" in statement and not any(str(t.pk) in statement or t.pk.hex in statement for t in tasks)


_SQLITE_PROBE = """
import json, uuid
import django
django.setup()
from datetime import timedelta
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from django.utils import timezone
from approvals.comments import comment_post
from approvals.inbox_filter import InboxFilter
from approvals.models import ApprovalTask, GraphAssignment, TaskClaim
from approvals.roles import roles_ensure
from console.selectors import inbox_list, inbox_row
from tests.factories import task_make

roles = roles_ensure()
reviewer = get_user_model().objects.create_user("reviewer")
reviewer.groups.add(roles["reviewer"])
GraphAssignment.objects.create(user=reviewer, graph="loan_approval")
plain, claimed, other = (task_make(metadata={"case": "C-1%_"}) for _ in range(3))
now = timezone.now()
ApprovalTask.objects.filter(pk=claimed.pk).update(assigned_user=reviewer)
TaskClaim.objects.create(task=claimed, user=reviewer, claimed_at=now, expires_at=now + timedelta(minutes=5))
comment_post(actor=reviewer, body="a question", task=claimed)
kyc = task_make(graph="kyc_onboarding", node="compliance_review", metadata={"case": "C-1%_"})

def fields(o):
    return None if o is None else {f.attname: str(getattr(o, f.attname)) for f in type(o)._meta.concrete_fields
                                   if f.attname not in o.get_deferred_fields()}

out = {}
for name, task in (("plain", plain), ("claimed", claimed), ("kyc", kyc)):
    for label, wanted in (("search", InboxFilter(q="C-1%_")), ("mine", InboxFilter(claimed="mine"))):
        pushed = inbox_row(user=reviewer, filter=wanted, task_id=task.pk)
        listed = next((t for t in inbox_list(user=reviewer, filter=wanted).items if t.pk == task.pk), None)
        same = fields(pushed) == fields(listed) and (pushed is None or (
            fields(pushed.thread) == fields(listed.thread)
            and fields(pushed.assigned_user) == fields(listed.assigned_user)))
        claim = getattr(pushed, "claim", None) if pushed is not None and name == "claimed" else None
        out[f"{name}/{label}"] = [pushed is not None, same, getattr(pushed, "thread_commented", None),
                                  fields(claim.user) == fields(reviewer) if claim else None]
print(json.dumps(out))
"""


@pytest.mark.embedded
def test_the_row_reads_the_same_on_sqlite(tmp_path):
    """Embedded mode (SQLite) reads the row with its own cursor, the subquery's values as parameters."""
    assert sqlite_probe(_SQLITE_PROBE, tmp_path / "var") == {
        "plain/search": [True, True, False, None],
        "plain/mine": [False, True, None, None],
        "claimed/search": [True, True, True, True],
        "claimed/mine": [True, True, True, True],
        "kyc/search": [False, True, None, None],  # a graph this reviewer is not assigned to
        "kyc/mine": [False, True, None, None],
    }
