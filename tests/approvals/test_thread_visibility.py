"""Which threads the LangGraph-Platform API shows (permissions.threads_visible_or_own_unbound).

``/lg/`` creates a thread before its first run names the graph; graph scoping
alone would hide that thread from the principal who created it. In-process, one
transaction per test, rolled back.
"""

from __future__ import annotations

import pytest

from approvals import permissions
from runtime.threads import thread_create
from tests.approvals.guards import user_make, via_token

pytestmark = pytest.mark.django_db

LOAN = "loan_approval"
OTHER = "kyc_review"  # any second graph name: threads are rows here, no graph runs


def _shown(user, *threads) -> set:
    return set(permissions.threads_visible_or_own_unbound(user).filter(pk__in=[t.pk for t in threads]))


def test_a_graph_scoped_creator_sees_its_own_unbound_thread_and_no_one_elses():
    operator, colleague = user_make("operator", LOAN), user_make("operator", LOAN)
    own = thread_create(graph="", metadata={}, created_by=operator)
    theirs = thread_create(graph="", metadata={}, created_by=colleague)
    loan = thread_create(graph=LOAN, metadata={}, created_by=colleague)
    other = thread_create(graph=OTHER, metadata={}, created_by=operator)
    assert _shown(operator, own, theirs, loan, other) == {own, loan}
    assert not permissions.threads_visible(operator).filter(pk=own.pk).exists()  # why the rule exists


def test_a_token_scoped_to_start_still_sees_the_thread_it_created():
    operator = user_make("operator", LOAN)
    own = thread_create(graph="", metadata={}, created_by=operator)
    loan = thread_create(graph=LOAN, metadata={}, created_by=operator)
    starter = via_token(operator, actions=["start"])
    assert _shown(starter, own, loan) == {own}


def test_without_the_view_permission_not_even_its_own_threads_show():
    nobody = user_make(None, "*")
    own = thread_create(graph="", metadata={}, created_by=nobody)
    assert _shown(nobody, own) == set()
