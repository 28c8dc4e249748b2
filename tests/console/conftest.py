"""Console fixtures: signed-in browsers-as-clients per persona, and tasks made without a worker.

``task_make`` writes a Thread and an ApprovalTask directly (no checkpoint),
which is all the inbox, permission and form tests need; flows that must
resume a thread use the real worker from ``tests/conftest.py``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from approvals.models import ApprovalTask
from runtime.gatekeeper import gate_payload
from runtime.models import Thread, ThreadStatus
from tests.conftest import Persona


def console_client(persona: Persona, *, enforce_csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(persona.user)
    return client


@pytest.fixture
def as_role(personas: dict[str, Persona]) -> Callable[[str], Client]:
    return lambda role: console_client(personas[role])


def loan_gate(amount: int = 20000) -> dict[str, Any]:
    return gate_payload(
        title=f"Loan for {amount}",
        summary="Borderline risk",
        proposed_action={"name": "disburse", "args": {"amount": amount, "term_months": 24}},
        editable=["amount", "term_months"],
        sla_seconds=3600,
        details={"risk_score": 0.5},
    )


def task_make(
    *,
    graph: str = "loan_approval",
    node: str = "human_review",
    payload: Any = None,
    status: str = "pending",
    metadata: dict[str, Any] | None = None,
    created_at: datetime | None = None,
    due_at: datetime | None = None,
    title: str = "",
) -> ApprovalTask:
    payload = loan_gate() if payload is None else payload
    checkpoint = uuid.uuid4().hex
    thread = Thread.objects.create(
        graph=graph, status=ThreadStatus.INTERRUPTED, metadata=metadata or {}, checkpoint_id=checkpoint
    )
    task = ApprovalTask.objects.create(
        thread=thread,
        graph=graph,
        node=node,
        interrupt_id=uuid.uuid4().hex,
        checkpoint_id=checkpoint,
        payload=payload,
        payload_digest=hashlib.sha256(repr(payload).encode()).hexdigest(),
        title=title or (payload.get("title", node) if isinstance(payload, dict) else node),
        status=status,
        due_at=due_at,
        # A decided task has a decision time, as task_decide records it (metrics and history read it).
        decided_at=timezone.now() if status == "decided" else None,
    )
    if created_at is not None:
        ApprovalTask.objects.filter(pk=task.pk).update(created_at=created_at)
        task.refresh_from_db()
    return task
