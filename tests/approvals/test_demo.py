"""The demo set-up works with whatever graphs are registered (``GATEHOUSE_GRAPHS`` pointing at your own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from approvals.models import GraphAssignment
from demo.seed import DEMO_USERS, demo_setup
from runtime.models import Thread
from runtime.registry import registry_load
from tests.embedded.conftest import SOAK_GRAPHS

pytestmark = pytest.mark.django_db


@pytest.fixture
def own_graphs() -> Iterator[None]:
    registry_load(SOAK_GRAPHS)
    yield
    registry_load()


def test_with_your_own_graphs_the_demo_users_exist_and_no_demo_thread_starts(own_graphs: None) -> None:
    started = timezone.now()  # threads other tests left in this database are not the demo's
    created = demo_setup()
    users = get_user_model().objects.filter(username__in=DEMO_USERS)
    assert sorted(u.username for u in users) == sorted(DEMO_USERS)
    assert not Thread.objects.filter(graph__in=["loan_approval", "kyc_onboarding"], created_at__gte=started).exists()
    assert not [line for line in created if line.startswith("thread")]
    graphs = {a.user.username: a.graph for a in GraphAssignment.objects.select_related("user").filter(user__in=users)}
    assert graphs["reviewer"] == "*"
    # The loan-only reviewer has no loan graph to review: it gets one registered graph instead.
    assert graphs["reviewer2"] == "soak_review"


def test_with_the_demo_graphs_registered_the_demo_threads_start() -> None:
    demo_setup()
    cases = set(Thread.objects.values_list("graph", "metadata__case"))
    assert {("loan_approval", "L-1001"), ("loan_approval", "L-1002"), ("kyc_onboarding", "K-2001")} <= cases
    assert GraphAssignment.objects.get(user__username="reviewer2").graph == "loan_approval"
