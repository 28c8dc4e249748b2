"""Conversation: post a comment on a task or a thread, or a new version of one's own (htmx or plain forms).

Every refusal re-renders the conversation with the message next to the field;
nothing is saved. The list itself is also pushed live (task and thread sockets).
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from approvals import comments, permissions
from approvals.errors import DomainError, InvalidInput
from approvals.models import ApprovalTask, Comment, CommentKind
from console import page_context
from console.conversation import conversation_context
from console.middleware import form_text_checked
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors
from runtime.models import Thread

TEMPLATE = "console/partials/conversation.html"


def _post(request: HtmxHttpRequest, *, task: ApprovalTask | None, thread: Thread | None) -> Comment:
    kind = request.POST.get("kind", CommentKind.COMMENT)
    answers = request.POST.get("answers", "").strip()
    reply_to: Comment | None = None
    if answers:
        try:
            reply_to = comments.comment_get_for(request.user, UUID(answers))
        except (ValueError, DomainError):
            raise InvalidInput("answers: not a question of this conversation", field="answers") from None
        kind = CommentKind.ANSWER
    elif kind not in (CommentKind.COMMENT, CommentKind.QUESTION):
        raise InvalidInput("kind: a comment or a question", field="kind")
    return comments.comment_post(
        actor=cast(User, request.user),  # @console_login_required
        task=task,
        thread=thread,
        body=request.POST.get("body", ""),
        kind=kind,
        reply_to=reply_to,
    )


def _respond(
    request: HtmxHttpRequest,
    *,
    task: ApprovalTask | None,
    thread: Thread | None,
    error: DomainError | None = None,
) -> HttpResponse:
    if not request.htmx and error is None:
        messages.success(request, "Comment posted")
        return redirect("console:task", task_id=task.pk) if task else redirect("console:thread", thread_id=thread.pk)  # type: ignore[union-attr]
    ctx: dict[str, Any] = {"task": task, "thread": task.thread if task else thread, "me": request.user}
    ctx.update(conversation_context(request.user, task=task, thread=thread))
    if error is not None:
        typed = request.POST.get("body", "")[: comments.BODY_MAX_CHARS].replace("\x00", "\ufffd")  # shown, not stored
        ctx.update({"comment_error": error, "comment_body": typed})
    status = error.status if error is not None else 201
    if request.htmx:
        return render(request, TEMPLATE, ctx, status=status)
    # A plain form's refusal: the whole page, with the message at the form.
    page = (
        page_context.task_context(request.user, task.pk)
        if task
        else page_context.thread_context(request.user, thread.pk)  # type: ignore[union-attr]
    )
    page.update(ctx)
    return render(request, "console/task.html" if task else "console/thread.html", page, status=status)


@form_text_checked  # a NUL byte in the body: refused by body_clean, next to the field
@require_POST
@console_login_required
@domain_errors
def task_comment(request: HtmxHttpRequest, task_id: UUID) -> HttpResponse:
    task = permissions.task_get_for(request.user, task_id)
    permissions.require_comment(request.user, task.graph)  # refuse before reading the form
    try:
        _post(request, task=task, thread=None)
    except InvalidInput as exc:
        return _respond(request, task=task, thread=None, error=exc)
    return _respond(request, task=task, thread=None)


@form_text_checked  # a NUL byte in the body: refused by body_clean, next to the field
@require_POST
@console_login_required
@domain_errors
def thread_comment(request: HtmxHttpRequest, thread_id: UUID) -> HttpResponse:
    thread = permissions.thread_get_for(request.user, thread_id)
    permissions.require_comment(request.user, thread.graph)
    try:
        _post(request, task=None, thread=thread)
    except InvalidInput as exc:
        return _respond(request, task=None, thread=thread, error=exc)
    return _respond(request, task=None, thread=thread)


@form_text_checked  # a NUL byte in the body: refused by body_clean, next to the field
@require_POST
@console_login_required
@domain_errors
def comment_version(request: HtmxHttpRequest, comment_id: UUID) -> HttpResponse:
    comment = comments.comment_get_for(request.user, comment_id)
    task, thread = (comment.task, None) if comment.task_id else (None, comment.thread)
    try:
        comments.comment_edit(actor=cast(User, request.user), comment=comment, body=request.POST.get("body", ""))
    except InvalidInput as exc:
        return _respond(request, task=task, thread=thread, error=exc)
    return _respond(request, task=task, thread=thread)
