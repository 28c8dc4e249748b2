"""Time travel from the thread page: fork or replay from the checkpoint shown (operators, with a reason).

A refused fork or replay re-renders the form where it was, with the message beside the field it names
and what was typed kept: the branch panel for htmx posts, the whole thread page otherwise.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from approvals import permissions, store, time_travel
from approvals.errors import DomainError, Forbidden, InvalidInput
from console import page_context
from console.forms import NUL_REFUSED, nul_fields
from console.middleware import form_text_checked
from console.schema_form import FieldInvalid, json_typed
from console.views.common import SignedInRequest, console_login_required, domain_errors

VALUES_MAX = 100_000  # characters of the fork's JSON values field
VALUES_LABEL = "State changes (JSON)"  # the fork form's values box, as its label reads
REASON_MAX = 4000  # the form's maxlength; the service is what enforces it
FORM_FIELDS = ("values", "as_node", "reason")  # a refusal naming another field shows above the form


def _values(raw: str) -> dict[str, Any] | None:
    """The fork's state changes, refused naming the box as its label reads (``VALUES_LABEL``)."""
    if not raw.strip():
        return None
    if len(raw) > VALUES_MAX:
        raise InvalidInput(f"{VALUES_LABEL}: longer than {VALUES_MAX} characters", field="values")
    try:
        parsed: dict[str, Any] = json_typed(raw, VALUES_LABEL, object_wanted="a JSON object of state keys")
    except FieldInvalid as exc:
        raise InvalidInput(str(exc), field="values") from None
    return parsed


def _redone_seen(request: SignedInRequest) -> str | None:
    """The actions the form's confirmation named (``time_travel.effects_redone_for``); None from a form without."""
    seen = request.POST.get("redo")
    return seen[:4000] if seen is not None else None


def _done(request: SignedInRequest, thread_id: UUID) -> HttpResponse:
    url = reverse("console:thread", kwargs={"thread_id": thread_id})
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def _refused(request: SignedInRequest, thread_id: UUID, kind: str, exc: DomainError) -> HttpResponse:
    """The thread page (or, for htmx, its branch panel) at the posted checkpoint with the form as sent."""
    if isinstance(exc, Forbidden):
        raise exc
    checkpoint = request.POST.get("checkpoint_id", "")[:64]
    if "\x00" in checkpoint:  # names no checkpoint, and PostgreSQL cannot even compare it: the refusal itself
        raise exc
    try:
        ctx = page_context.thread_context(request.user, thread_id, checkpoint)
    except DomainError:  # no page to show it on (an unknown checkpoint): the refusal itself, as it was
        raise exc from None
    if not ctx["can_time_travel"]:
        raise exc
    field = (exc.field or "").split(".")[0].split("[")[0]
    named = not exc.field or exc.field in exc.message or exc.message.startswith(f"{VALUES_LABEL}:")
    message = exc.message if named else f"{exc.field}: {exc.message}"
    ctx["tt"] = {
        "kind": kind,
        "field": field if field in FORM_FIELDS else "",
        "message": message,
        "values": request.POST.get("values", "")[:VALUES_MAX],
        "as_node": request.POST.get("as_node", "")[:100],
        "reason": request.POST.get("reason", "")[:REASON_MAX],
        "run": request.POST.get("run") == "on",
    }
    if request.htmx:
        return render(request, "console/partials/time_travel.html", ctx, status=exc.status)
    ctx["store_operations"] = store.store_operations_visible(user=request.user, thread=ctx["thread"])
    return render(request, "console/thread.html", ctx, status=exc.status)


def _text_check(request: SignedInRequest, thread_id: UUID) -> None:
    """Refuse a field holding a NUL byte (PostgreSQL can store no such text) as the form's other refusals are, on
    the page next to it; to someone who may not time-travel, the refusal they would hear for any form."""
    refused = nul_fields(request.POST)
    if not refused:
        return
    permissions.require_time_travel(request.user, permissions.thread_get_for(request.user, thread_id))
    name = refused[0]
    if name == "values":
        raise InvalidInput(f"{VALUES_LABEL}: {NUL_REFUSED}", field=name)
    raise InvalidInput(NUL_REFUSED, field=None if "\x00" in name else name)


@form_text_checked  # a NUL byte in a field: refused next to it (_text_check), not the API's JSON
@require_POST
@console_login_required
@domain_errors
def thread_fork(request: SignedInRequest, thread_id: UUID) -> HttpResponse:
    try:
        _text_check(request, thread_id)
        branch = time_travel.thread_fork(
            actor=request.user,
            thread_id=thread_id,
            checkpoint_id=request.POST.get("checkpoint_id", "")[:64],
            values=_values(request.POST.get("values", "")),
            as_node=request.POST.get("as_node", "").strip()[:100] or None,
            reason=request.POST.get("reason", ""),
            run=request.POST.get("run") == "on",
            redone_seen=_redone_seen(request),
        )
    except DomainError as exc:
        return _refused(request, thread_id, "fork", exc)
    messages.success(request, f"Forked: branch {branch.id}" + (" (run queued)" if branch.run_id else ""))
    return _done(request, thread_id)


@form_text_checked  # a NUL byte in a field: refused next to it (_text_check), not the API's JSON
@require_POST
@console_login_required
@domain_errors
def thread_replay(request: SignedInRequest, thread_id: UUID) -> HttpResponse:
    try:
        _text_check(request, thread_id)
        branch = time_travel.thread_replay(
            actor=request.user,
            thread_id=thread_id,
            checkpoint_id=request.POST.get("checkpoint_id", "")[:64],
            reason=request.POST.get("reason", ""),
            redone_seen=_redone_seen(request),
        )
    except DomainError as exc:
        return _refused(request, thread_id, "replay", exc)
    messages.success(request, f"Replay queued: branch {branch.id}")
    return _done(request, thread_id)
