"""Resume runs of threads written without a graph (``task_make``) never run where no worker consumes them.

A test that decides such tasks leaves queued runs behind, and later tests wait for the session's
runs to settle (tests/console/test_live.py). This fixture closes (as failed), after the test, the queued
resume runs it created on threads that never had a real start run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.utils import timezone

from runtime.models import Run, RunKind, RunStatus


@pytest.fixture
def fake_resumes_closed() -> Iterator[None]:
    started = timezone.now()
    yield
    left = Run.objects.filter(kind=RunKind.RESUME, status=RunStatus.QUEUED, created_at__gte=started)
    left.exclude(thread__runs__kind=RunKind.START).update(
        status=RunStatus.FAILED, error="test: a thread without a graph run is never resumed", finished_at=timezone.now()
    )
