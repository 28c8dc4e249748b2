"""An audit reading (the API's list, the console's page, an export) masks an effect's arguments and a comment's
text by the values their thread carried (``gateway.threads_redacted_values``), and those are read once for the
rows that need them, not per row: a page of 100 such rows of different threads read four queries for each
(stop 53 noticed it; a lead's export of a year's payments read them for every payment). The masking and the
reveals audited are the per-row reading's."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.audit import audit_record
from approvals.models import ApiToken, AuditAction, AuditEvent
from approvals.tokens import token_issue
from runtime.models import Thread
from tests.conftest import ApiClient
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db", "dispatched")  # task_make's runs are recorded, not sent


def _masked_reader() -> User:
    """An audit reader who sees values masked (a lead's rights: no "view sensitive")."""
    user = User.objects.create_user(f"audit-masked-{uuid.uuid4().hex[:6]}")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_audit", "view_all_graphs", "view_approvaltask", "view_thread"])
    )
    return user


def _rows(label: str, count: int) -> list[str]:
    """``count`` KYC threads, each with an ``effect.executed`` row passed its date of birth and a comment quoting
    it by an author who could see it, recorded as ``label``. Their dates of birth."""
    born = []
    for _ in range(count):
        dob = f"dob-{uuid.uuid4().hex[:10]}"
        task = task_make(graph="kyc_onboarding", node="compliance_review", values={"applicant": {"date_of_birth": dob}})
        thread = task.thread
        Thread.objects.filter(pk=thread.pk).update(values={"applicant": {"name": "Ada", "date_of_birth": dob}})
        common = {"actor": None, "actor_label": label, "thread_id": thread.pk, "graph": thread.graph}
        with transaction.atomic():
            audit_record(
                **common, action=AuditAction.EFFECT_EXECUTED, subject_type="effect", subject_id=f"gh:{thread.pk}",
                details={"key": f"gh:{thread.pk}", "name": "verify", "args": {"dob": dob}, "result": {"ok": True}},
            )  # fmt: skip
            audit_record(
                **common, action=AuditAction.COMMENT_POSTED, subject_type="comment", subject_id=str(uuid.uuid4()),
                details={"body": f"born {dob}, checked", "author_saw_sensitive": True, "version": 1},
            )  # fmt: skip
        born.append(dob)
    return born


def _counted(call: Any) -> tuple[str, int]:
    ApiToken.objects.update(last_used_at=timezone.now())  # a token's use is written at most once a minute
    with CaptureQueriesContext(connection) as ctx:
        response = call()
        if not response.streaming:
            body = response.content
        elif response.is_async:
            body = async_to_sync(_joined)(response.streaming_content)
        else:
            body = b"".join(response.streaming_content)
    assert response.status_code == 200, body
    return body.decode(), len(ctx.captured_queries)


async def _joined(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def test_an_audit_reading_reads_the_threads_values_once_for_all_its_rows(personas):
    masked = _masked_reader()
    readers = {"masked": masked, "auditor": personas["auditor"].user}
    api = {name: ApiClient(token_issue(user=user)) for name, user in readers.items()}
    browsers = {name: Client() for name in readers}
    for name, user in readers.items():
        browsers[name].force_login(user)
    for name in readers:  # a first request's once-per-session writes are not the reading's
        assert api[name].get("/api/audit", actor="warm").status_code == 200
        assert browsers[name].get("/audit/", {"actor": "warm"}).status_code == 200
    counts: dict[str, list[int]] = {}
    for size in (2, 10):
        label = f"audit-reading-{uuid.uuid4().hex[:8]}"
        born = _rows(label, size)
        revealed = AuditEvent.objects.filter(action=AuditAction.SENSITIVE_REVEALED, actor=personas["auditor"].user)
        before = revealed.count()
        for name in readers:
            query = {"actor": label}
            surfaces = {
                "api": lambda name=name, query=query: api[name].get("/api/audit", **query, limit=100),
                "page": lambda name=name, query=query: browsers[name].get("/audit/", query),
                "export": lambda name=name, query=query: browsers[name].get(
                    "/api/audit/export", {**query, "format": "jsonl"}
                ),
            }
            for surface, call in surfaces.items():
                body, queries = _counted(call)
                counts.setdefault(f"{name} {surface}", []).append(queries)
                if name == "masked":
                    assert not any(dob in body for dob in born), f"{surface}: a value shown to a masked reader"
                else:
                    assert all(dob in body for dob in born), f"{surface}: the auditor may see them"
        # What the auditor was shown of the comments is audited once per reading, naming every row.
        new = list(revealed.order_by("id")[before:])
        assert [(e.subject_type, e.subject_id, e.details["count"]) for e in new] == [
            ("audit", "list", size),
            ("audit", "page", size),
            ("audit", "export", size),
        ]
    assert all(two == ten for two, ten in counts.values()), counts
