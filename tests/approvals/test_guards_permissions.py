"""The one access policy (approvals/permissions.py), probed the way a principal would try to get around it.

Each test is something an attacker would use if the guard were gone: a disabled account or a token narrowed to
some graphs or actions that still reads or decides, a reviewer assigned to one gate deciding another, an
unassigned graph showing up in a list, an id of an invisible object telling it exists.

In-process (one transaction per test, rolled back): written against the surviving mutants of
``approvals/permissions.py`` (docs/mutation-testing.md).
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from approvals import permissions
from approvals.audit import audit_record
from approvals.errors import Forbidden, NotFound
from approvals.models import AuditEvent, GraphAssignment
from tests.approvals.guards import user_make, via_token
from tests.factories import task_make

pytestmark = pytest.mark.django_db

LOAN = "loan_approval"
OTHER = "kyc_review"  # any second graph name: tasks and threads are rows here, no graph runs


def audit_event(graph: str) -> AuditEvent:
    return audit_record(actor=None, action="test.guard", subject_type="test", subject_id="x", graph=graph)


# --- can(): who holds a permission ---------------------------------------------------------------


def test_an_anonymous_visitor_holds_no_permission_and_sees_no_graph():
    anonymous = AnonymousUser()
    assert not permissions.can(anonymous, "approvals.view_approvaltask")
    assert permissions.graphs_visible(anonymous) == set()
    assert not permissions.graph_visible(anonymous, LOAN)


def test_a_disabled_account_keeps_its_role_but_may_do_nothing():
    admin = user_make("admin", "*", active=False)
    assert not permissions.can(admin, "approvals.view_approvaltask")
    assert not permissions.can(admin, "approvals.decide_task")
    assert permissions.graphs_visible(admin) == set()
    task = task_make(graph=LOAN)
    assert not permissions.tasks_visible(admin).filter(pk=task.pk).exists()
    assert not permissions.can_decide(admin, task)


def test_a_role_without_the_permission_is_refused_with_a_message_naming_the_action():
    operator = user_make("operator", "*")
    assert permissions.can(operator, "runtime.start_thread")
    assert not permissions.can(operator, "approvals.decide_task")
    with pytest.raises(Forbidden, match="you may not decide tasks"):
        permissions.require(operator, "approvals.decide_task", "decide tasks")
    permissions.require(operator, "runtime.start_thread", "start threads")  # held: no exception


def test_a_token_narrowed_to_reading_cannot_decide_or_start():
    admin = user_make("admin", "*")
    reader = via_token(admin, actions=["read"])
    assert permissions.can(reader, "approvals.view_approvaltask")
    assert permissions.can(reader, "approvals.view_sensitive")
    assert not permissions.can(reader, "approvals.decide_task")
    assert not permissions.can(reader, "runtime.start_thread")
    task = task_make(graph=LOAN)
    assert not permissions.can_decide(reader, task)
    with pytest.raises(Forbidden, match=r"this API token is limited to read: to decide approval tasks it needs"):
        permissions.require_decide(reader, task)


def test_a_token_narrowed_to_deciding_cannot_read_the_audit_trail_or_retry():
    admin = user_make("admin", "*")
    decider = via_token(admin, actions=["decide"])
    assert permissions.can(decider, "approvals.decide_task")
    assert not permissions.can(decider, "approvals.view_audit")
    assert not permissions.can(decider, "runtime.retry_thread")


def test_a_permission_outside_the_token_actions_needs_the_admin_action():
    """Webhook management and user administration are no "read", "decide", "start" or "retry"."""
    admin = user_make("admin", "*")
    assert not permissions.can(via_token(admin, actions=["read", "decide", "start", "retry"]), "approvals.manage_users")
    assert permissions.can(via_token(admin, actions=["admin"]), "approvals.manage_users")


def test_an_unscoped_token_has_its_users_permissions():
    admin = user_make("admin", "*")
    full = via_token(admin)
    assert permissions.can(full, "approvals.manage_webhooks")
    assert permissions.can(full, "approvals.decide_task")


def test_a_scoped_token_never_adds_a_permission_the_user_lacks():
    operator = user_make("operator", "*")
    assert not permissions.can(via_token(operator, actions=["decide"]), "approvals.decide_task")


# --- graphs: what a principal may see -------------------------------------------------------------


def test_a_reviewer_sees_only_the_graphs_assigned_to_them():
    reviewer = user_make("reviewer", LOAN)
    assert permissions.graphs_visible(reviewer) == {LOAN}
    assert permissions.graph_visible(reviewer, LOAN)
    assert not permissions.graph_visible(reviewer, OTHER)


def test_a_reviewer_without_assignments_sees_no_graph():
    reviewer = user_make("reviewer")
    assert permissions.graphs_visible(reviewer) == set()
    task = task_make(graph=LOAN)
    assert not permissions.tasks_visible(reviewer).filter(pk=task.pk).exists()


def test_the_star_assignment_means_every_graph():
    reviewer = user_make("reviewer", "*")
    assert permissions.graphs_visible(reviewer) is None
    assert permissions.graph_visible(reviewer, "any_graph_at_all")


def test_the_view_all_graphs_right_sees_every_graph_without_assignments():
    auditor = user_make("auditor")
    assert permissions.graphs_visible(auditor) is None
    assert permissions.graph_visible(auditor, OTHER)


def test_a_token_narrowed_to_a_graph_sees_only_that_graph_even_for_an_all_graphs_user():
    auditor = via_token(user_make("auditor"), graphs=[LOAN])
    assert permissions.graphs_visible(auditor) == {LOAN}
    reviewer = via_token(user_make("reviewer", "*"), graphs=[LOAN])
    assert permissions.graphs_visible(reviewer) == {LOAN}
    assert not permissions.graph_visible(reviewer, OTHER)


def test_a_token_scope_never_widens_the_users_graphs():
    reviewer = via_token(user_make("reviewer", LOAN), graphs=[LOAN, OTHER])
    assert permissions.graphs_visible(reviewer) == {LOAN}
    assert not permissions.graph_visible(reviewer, OTHER)


def test_a_token_narrowed_to_actions_only_keeps_the_users_graphs():
    reviewer = via_token(user_make("reviewer", LOAN), actions=["read"])
    assert permissions.graphs_visible(reviewer) == {LOAN}


def test_assignments_are_read_once_per_user_object():
    reviewer = user_make("reviewer", LOAN)
    assert permissions.graph_visible(reviewer, LOAN)
    GraphAssignment.objects.create(user=reviewer, graph=OTHER)
    # The same request (the same user object) keeps one consistent view...
    assert not permissions.graph_visible(reviewer, OTHER)
    # ...and the next request (a fresh user object) sees the new assignment.
    assert permissions.graph_visible(get_user_model().objects.get(pk=reviewer.pk), OTHER)


def test_a_user_not_yet_saved_has_no_assignments_not_even_those_of_user_1():
    first = get_user_model().objects.filter(pk=1).first() or get_user_model().objects.create_user("guard-1", id=1)
    GraphAssignment.objects.get_or_create(user=first, graph=LOAN, gate="")
    unsaved = get_user_model()(username="never-saved")
    assert permissions._assignments(unsaved) == []


# --- lists and lookups ---------------------------------------------------------------------------


def test_lists_hold_only_the_visible_graphs_rows():
    reviewer = user_make("reviewer", LOAN)
    mine, theirs = task_make(graph=LOAN), task_make(graph=OTHER)
    tasks = set(permissions.tasks_visible(reviewer).filter(pk__in=[mine.pk, theirs.pk]))
    assert tasks == {mine}
    threads = set(permissions.threads_visible(reviewer).filter(pk__in=[mine.thread_id, theirs.thread_id]))
    assert threads == {mine.thread}


def test_lists_need_the_view_permission_whatever_the_assignments():
    nobody = user_make(None, "*")
    task = task_make(graph=LOAN)
    assert not permissions.tasks_visible(nobody).filter(pk=task.pk).exists()
    assert not permissions.threads_visible(nobody).filter(pk=task.thread_id).exists()
    assert not permissions.audit_visible(nobody).exists()


def test_the_audit_trail_is_for_auditors_and_only_of_their_graphs():
    loan_event, other_event = audit_event(LOAN), audit_event(OTHER)
    reviewer = user_make("reviewer", "*")
    assert not permissions.audit_visible(reviewer).filter(pk=loan_event.pk).exists()
    auditor = user_make("auditor")
    assert set(permissions.audit_visible(auditor).filter(pk__in=[loan_event.pk, other_event.pk])) == {
        loan_event,
        other_event,
    }
    narrowed = via_token(user_make("auditor"), graphs=[LOAN])
    assert set(permissions.audit_visible(narrowed).filter(pk__in=[loan_event.pk, other_event.pk])) == {loan_event}


def test_an_invisible_thread_or_task_is_not_found_rather_than_forbidden():
    """A 403 would tell the caller the id exists."""
    reviewer = user_make("reviewer", LOAN)
    theirs = task_make(graph=OTHER)
    with pytest.raises(NotFound, match=f"thread {theirs.thread_id} not found") as thread_error:
        permissions.thread_get_for(reviewer, theirs.thread_id)
    assert thread_error.value.field == "thread_id"
    with pytest.raises(NotFound, match=f"task {theirs.pk} not found") as task_error:
        permissions.task_get_for(reviewer, theirs.pk)
    assert task_error.value.field == "task_id"
    with pytest.raises(NotFound):
        permissions.task_get_for(reviewer, theirs.pk, lock=True)


def test_a_visible_thread_and_task_are_returned_with_the_tasks_thread():
    reviewer = user_make("reviewer", LOAN)
    mine = task_make(graph=LOAN)
    assert permissions.thread_get_for(reviewer, mine.thread_id) == mine.thread
    for lock in (False, True):
        found = permissions.task_get_for(reviewer, mine.pk, lock=lock)
        assert found == mine
        assert found.thread == mine.thread


# --- deciding ------------------------------------------------------------------------------------


def test_a_reviewer_decides_the_tasks_of_their_graph_only():
    reviewer = user_make("reviewer", LOAN)
    assert permissions.can_decide(reviewer, task_make(graph=LOAN))
    assert not permissions.can_decide(reviewer, task_make(graph=OTHER))
    with pytest.raises(Forbidden, match="you may not decide approval tasks"):
        permissions.require_decide(reviewer, task_make(graph=OTHER))


def test_a_reviewer_assigned_to_one_gate_cannot_decide_another_gate_of_the_graph():
    reviewer = user_make("reviewer", (LOAN, "human_review"))
    assert permissions.can_decide(reviewer, task_make(graph=LOAN, node="human_review"))
    other_gate = task_make(graph=LOAN, node="final_signoff")
    assert not permissions.can_decide(reviewer, other_gate)
    with pytest.raises(Forbidden, match="not assigned to the gate 'final_signoff'"):
        permissions.require_decide(reviewer, other_gate)


def test_a_gate_assignment_of_another_graph_does_not_narrow_this_one():
    reviewer = user_make("reviewer", LOAN, (OTHER, "kyc_check"))
    assert permissions.can_decide(reviewer, task_make(graph=LOAN, node="human_review"))
    assert not permissions.can_decide(reviewer, task_make(graph=OTHER, node="human_review"))


def test_a_whole_graph_assignment_covers_every_gate_even_beside_a_gate_one():
    reviewer = user_make("reviewer", LOAN, (LOAN, "human_review"))
    assert permissions.can_decide(reviewer, task_make(graph=LOAN, node="final_signoff"))


def test_a_gate_assignment_under_the_star_graph_narrows_every_graph():
    reviewer = user_make("reviewer", ("*", "human_review"))
    assert permissions.can_decide(reviewer, task_make(graph=OTHER, node="human_review"))
    assert not permissions.can_decide(reviewer, task_make(graph=OTHER, node="final_signoff"))


def test_an_all_graphs_principal_without_assignments_is_not_narrowed_by_gate():
    admin = user_make("admin")
    assert permissions.can_decide(admin, task_make(graph=OTHER, node="final_signoff"))


def test_deciding_needs_the_decide_permission():
    auditor = user_make("auditor", "*")
    task = task_make(graph=LOAN)
    assert not permissions.can_decide(auditor, task)
    with pytest.raises(Forbidden) as error:
        permissions.require_decide(auditor, task)
    assert error.value.message == "you may not decide approval tasks"


# --- starting and retrying -----------------------------------------------------------------------


def test_an_operator_starts_threads_of_their_graphs_only():
    operator = user_make("operator", LOAN)
    permissions.require_start(operator, LOAN)
    with pytest.raises(Forbidden, match="not assigned to graph 'kyc_review'") as error:
        permissions.require_start(operator, OTHER)
    assert error.value.field == "graph"


def test_a_reviewer_cannot_start_or_retry():
    reviewer = user_make("reviewer", "*")
    with pytest.raises(Forbidden, match="you may not start threads"):
        permissions.require_start(reviewer, LOAN)
    with pytest.raises(Forbidden, match="you may not retry threads"):
        permissions.require_retry(reviewer, task_make(graph=LOAN).thread)


def test_an_operator_retries_a_thread_it_sees():
    operator = user_make("operator", LOAN)
    permissions.require_retry(operator, task_make(graph=LOAN).thread)
