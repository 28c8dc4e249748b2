"""The task page updates live for every open viewer: header (status, claim), timeline and decisions list.

Two viewers hold the page's websocket open; a third principal claims and then decides. Each viewer's
socket receives the new header, timeline and decisions without reloading, each rendered with that
viewer's own permissions: a reviewer without "view sensitive" never receives the redacted value the
decision wrote, an auditor with it does (proof the pushed timeline carries the edit at all).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from approvals import claims
from tests.conftest import api_decide, pending_tasks, scaled, thread_start, wait_for
from tests.console.test_live import ORIGIN, Socket, _cookie, loop  # noqa: F401 - the module's event loop fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def _until(socket: Socket, *needles: str, timeout: float = 20.0) -> list[str]:
    """Messages received until one holds every needle; fails at the (scaled) deadline."""
    seen: list[str] = []
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        try:
            message = socket.receive(timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            break
        seen.append(message)
        if all(n in message for n in needles):
            return seen
    raise AssertionError(f"no pushed fragment held {needles}; got {len(seen)} message(s)")


def _head(message: str) -> str:
    start = message.index('id="task-head"')
    return message[start : message.index("</p>", start)]


def _timeline(message: str) -> str:
    start = message.index('id="task-timeline"')
    return message[start : message.index("</section>", start)]


def test_two_viewers_see_header_timeline_and_decisions_change_live(personas, loop):  # noqa: F811
    admin = personas["admin"]
    name = f"Live {uuid.uuid4().hex[:6]}"
    secret_in, secret_edit = f"dob-in-{uuid.uuid4().hex}", f"dob-edit-{uuid.uuid4().hex}"
    thread = thread_start(
        admin, "kyc_onboarding", {"applicant": {"name": name, "country": "GB", "date_of_birth": secret_in}}
    )
    [identity] = pending_tasks(admin, thread["id"])
    response = api_decide(admin, identity, reason="ok")
    assert response.status_code == 201, response.content

    def review_task() -> Any:
        items = admin.client.get("/api/tasks", status="pending", thread=thread["id"]).json()["items"]
        return next((t for t in items if t["node"] == "compliance_review"), None)

    task = wait_for(review_task, what="the compliance review to open")

    reviewer = Socket(loop, f"/ws/tasks/{task['id']}/", [ORIGIN, _cookie(personas["reviewer2"])])
    auditor = Socket(loop, f"/ws/tasks/{task['id']}/", [ORIGIN, _cookie(personas["auditor"])])
    try:
        for socket in (reviewer, auditor):
            assert socket.connect()[0]
            first = _until(socket, 'id="task-head"', 'id="task-timeline"', 'id="task-live"')[-1]
            assert "Pending" in _head(first) and "Unclaimed" in _head(first)
            assert '<p class="meta" id="task-head" hx-swap-oob="true"' in first  # swapped by id, no reload

        # A claim shows in every viewer's header.
        claims.task_claim(actor=admin.user, task_id=task["id"])
        for socket in (reviewer, auditor):
            message = _until(socket, f"Claimed by <strong>{admin.username}</strong>")[-1]
            assert f"Claimed by <strong>{admin.username}</strong>" in _head(message)

        edits = {"applicant": {"name": name, "country": "GB", "date_of_birth": secret_edit}}
        decided = api_decide(admin, task, "edit", reason="fixed the date", edits=edits)
        assert decided.status_code == 201, decided.content

        pushed: dict[str, list[str]] = {}
        for label, socket in (("reviewer", reviewer), ("auditor", auditor)):
            messages = _until(socket, "Decided", "Edit and approve at compliance_review", "fixed the date")
            last = messages[-1]
            assert "Decided" in _head(last) and "1 decision" in _head(last)
            assert "Edit and approve at compliance_review" in _timeline(last)
            assert 'id="quorum-status"' in last and admin.username in last.split('id="quorum-status"')[1]
            pushed[label] = messages
        reviewer_text = "".join(pushed["reviewer"])
        assert secret_edit not in reviewer_text and secret_in not in reviewer_text
        assert "date_of_birth" in reviewer_text  # the edit is shown, its value masked
        # An auditor may see sensitive values: the pushed timeline carries the edit itself.
        assert secret_edit in "".join(pushed["auditor"])
    finally:
        reviewer.close()
        auditor.close()
