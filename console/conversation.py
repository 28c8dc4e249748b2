"""Conversation (comments) on the task and thread pages: one context builder for views and consumers."""

from __future__ import annotations

from typing import Any

from approvals import comments, permissions
from approvals.models import ApprovalTask, CommentKind
from runtime.models import Thread


def conversation_context(
    user: Any, *, task: ApprovalTask | None = None, thread: Thread | None = None
) -> dict[str, Any]:
    """The comment list (masked for ``user``), whether they may post, and the questions still open."""
    shown = comments.comments_for(user=user, task=task, thread=None if task else thread)
    graph = task.graph if task is not None else (thread.graph if thread is not None else "")
    open_questions = [c for c in shown if c.waiting and (task is None or c.task_id == task.pk)]
    return {
        "comments": shown,
        "can_comment": permissions.can_comment(user, graph),
        "open_questions": open_questions,
        "waiting_for_answer": any(c.task_id is not None for c in open_questions) if task else False,
        "comment_kinds": [(CommentKind.COMMENT, "Comment"), (CommentKind.QUESTION, "Question")],
        "comment_max": comments.BODY_MAX_CHARS,
        "comment_target": "task" if task is not None else "thread",
    }
