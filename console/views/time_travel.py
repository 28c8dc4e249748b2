"""Time travel from the thread page: fork or replay from the checkpoint shown (operators, with a reason)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from approvals import time_travel
from approvals.errors import InvalidInput
from approvals.inputs import MalformedJson, json_loads_strict
from console.views.common import SignedInRequest, console_login_required, domain_errors

VALUES_MAX = 100_000  # characters of the fork's JSON values field


def _values(raw: str) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    if len(raw) > VALUES_MAX:
        raise InvalidInput(f"values: longer than {VALUES_MAX} characters", field="values")
    try:
        parsed = json_loads_strict(raw, field="values")
    except MalformedJson as exc:  # its message speaks of a request body; this is one field of a form
        raise MalformedJson(f"values: not valid JSON ({exc.message.rsplit(': ', 1)[-1]})", field="values") from None
    if not isinstance(parsed, dict):
        raise InvalidInput("values: a JSON object of state keys is required", field="values")
    return parsed


@require_POST
@console_login_required
@domain_errors
def thread_fork(request: SignedInRequest, thread_id: UUID) -> HttpResponse:
    branch = time_travel.thread_fork(
        actor=request.user,
        thread_id=thread_id,
        checkpoint_id=request.POST.get("checkpoint_id", "")[:64],
        values=_values(request.POST.get("values", "")),
        as_node=request.POST.get("as_node", "").strip()[:100] or None,
        reason=request.POST.get("reason", ""),
        run=request.POST.get("run") == "on",
    )
    messages.success(request, f"Forked: branch {branch.id}" + (" (run queued)" if branch.run_id else ""))
    return redirect("console:thread", thread_id=thread_id)


@require_POST
@console_login_required
@domain_errors
def thread_replay(request: SignedInRequest, thread_id: UUID) -> HttpResponse:
    branch = time_travel.thread_replay(
        actor=request.user,
        thread_id=thread_id,
        checkpoint_id=request.POST.get("checkpoint_id", "")[:64],
        reason=request.POST.get("reason", ""),
    )
    messages.success(request, f"Replay queued: branch {branch.id}")
    return redirect("console:thread", thread_id=thread_id)
