"""Resume runs of threads made without a graph (``tests.factories``) never run where no worker consumes them.

A test that decides such tasks leaves queued runs behind, and later tests wait for the session's
runs to settle (tests/console/test_live.py). This fixture closes (as failed), after the test, the queued
resume runs it created on threads that never had a real start run (only the factory's).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.utils import timezone

from runtime.models import Run, RunKind, RunStatus
from tests.factories import FACTORY_WORKER


@pytest.fixture
def fake_resumes_closed() -> Iterator[None]:
    started = timezone.now()
    yield
    left = Run.objects.filter(kind=RunKind.RESUME, status=RunStatus.QUEUED, created_at__gte=started)
    real_starts = Run.objects.filter(kind=RunKind.START).exclude(lease_owner=FACTORY_WORKER).values("thread_id")
    left.exclude(thread_id__in=real_starts).update(
        status=RunStatus.FAILED, error="test: a thread without a graph run is never resumed", finished_at=timezone.now()
    )
