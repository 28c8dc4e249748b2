"""Conversation over the native API: comments on tasks and threads, and new versions (edits)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from django.contrib.auth.models import User
from ninja import Router, Schema, Status
from pydantic import Field

from approvals import comments, permissions
from approvals.api_common import AuthedRequest
from approvals.comments import CommentShown
from approvals.errors import NotFound
from approvals.models import Comment
from approvals.permissions import token_needs
from approvals.schemas import BodyIn

router = Router(tags=["comments"])


class CommentIn(BodyIn):
    body: str = Field(description=f"Plain text, at most {comments.BODY_MAX_CHARS} characters; `@username` mentions.")
    kind: Literal["comment", "question", "answer"] = "comment"
    reply_to: UUID | None = Field(default=None, description="The comment this replies to; an answer needs a question.")


class CommentVersionIn(BodyIn):
    body: str = Field(description="The new text; the earlier versions stay.")


class CommentVersionOut(Schema):
    version: int
    body: str
    created_at: datetime


class CommentOut(Schema):
    id: UUID
    kind: str
    author: str
    thread_id: UUID
    task_id: UUID | None
    reply_to: UUID | None
    created_at: datetime
    edited_at: datetime | None
    version: int
    body: str = Field(description="The newest text; values redacted for you are masked (•••).")
    mentions: list[str]
    waiting_for_answer: bool = Field(description="A question nobody has answered yet.")
    history: list[CommentVersionOut]


def _out(shown: CommentShown) -> CommentOut:
    return CommentOut(
        id=shown.id,
        kind=shown.kind,
        author=shown.author,
        thread_id=shown.thread_id,
        task_id=shown.task_id,
        reply_to=shown.reply_to_id,
        created_at=shown.created_at,
        edited_at=shown.edited_at,
        version=shown.version,
        body=shown.body,
        mentions=shown.mentions,
        waiting_for_answer=shown.waiting,
        history=[CommentVersionOut(version=v.version, body=v.body, created_at=v.created_at) for v in shown.history],
    )


def _user(request: AuthedRequest) -> User:
    return request.auth


def _shown(user: Any, comment: Comment) -> CommentOut:
    listing = comments.comments_for(user=user, task=comment.task) if comment.task_id else None
    if listing is None:
        listing = comments.comments_for(user=user, thread=comment.thread)
    return _out(next(c for c in listing if c.id == comment.pk))


def _reply_to(user: Any, reply_to: UUID | None) -> Comment | None:
    if reply_to is None:
        return None
    try:
        return comments.comment_get_for(user, reply_to)
    except NotFound:
        raise NotFound(f"reply_to: comment {reply_to} not found", field="reply_to") from None


@router.get("/tasks/{task_id}/comments", response=list[CommentOut])
def task_comments(request: AuthedRequest, task_id: UUID) -> list[CommentOut]:
    """The task's comments, oldest first, each with its versions."""
    user = _user(request)
    task = permissions.task_get_for(user, task_id)
    return [_out(c) for c in comments.comments_for(user=user, task=task)]


@router.post("/tasks/{task_id}/comments", response={201: CommentOut})
@token_needs(*permissions.COMMENT_POST_PERMS)
def task_comment_post(request: AuthedRequest, task_id: UUID, body: CommentIn) -> Status[CommentOut]:
    """Comment on a task (reviewers, operators and leads of its graph)."""
    user = _user(request)
    task = permissions.task_get_for(user, task_id)
    comment = comments.comment_post(
        actor=user, task=task, body=body.body, kind=body.kind, reply_to=_reply_to(user, body.reply_to)
    )
    return Status(201, _shown(user, comment))


@router.get("/threads/{thread_id}/comments", response=list[CommentOut])
def thread_comments(request: AuthedRequest, thread_id: UUID) -> list[CommentOut]:
    """The thread's comments and those of its tasks you may see, oldest first."""
    user = _user(request)
    thread = permissions.thread_get_for(user, thread_id)
    return [_out(c) for c in comments.comments_for(user=user, thread=thread)]


@router.post("/threads/{thread_id}/comments", response={201: CommentOut})
@token_needs(*permissions.COMMENT_POST_PERMS)
def thread_comment_post(request: AuthedRequest, thread_id: UUID, body: CommentIn) -> Status[CommentOut]:
    """Comment on a thread."""
    user = _user(request)
    thread = permissions.thread_get_for(user, thread_id)
    comment = comments.comment_post(
        actor=user, thread=thread, body=body.body, kind=body.kind, reply_to=_reply_to(user, body.reply_to)
    )
    return Status(201, _shown(user, comment))


@router.post("/comments/{comment_id}/versions", response={201: CommentOut})
@token_needs(*permissions.COMMENT_POST_PERMS)
def comment_version_post(request: AuthedRequest, comment_id: UUID, body: CommentVersionIn) -> Status[CommentOut]:
    """Edit your comment: a new version; the earlier ones stay (append-only)."""
    user = _user(request)
    comment = comments.comment_get_for(user, comment_id)
    comments.comment_edit(actor=user, comment=comment, body=body.body)
    return Status(201, _shown(user, comment))
