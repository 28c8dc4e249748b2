"""Conversation: comments on a task or a thread — services to post and edit, selectors to read.

- Plain text, bounded (``BODY_MAX_CHARS``); templates escape it like any text.
- ``@username`` mentions resolve to active users who may see the task or
  thread; any other ``@word`` stays text. Mentioned users see a "mentioned"
  badge in their inbox, live (the ``comment.posted`` event travels the one
  event path, ``audit_record`` → ``approvals.events`` → live groups).
- Append-only: a comment's text lives in versions; an edit adds one
  (database triggers refuse UPDATE and DELETE, like the audit trail's).
- Redaction: a reader who may not see the graph's sensitive values gets every
  exact quote of one masked (``approvals.gateway.text_shown``), on every
  surface, because every surface reads through ``comments_for``.
- Questions: a question on a task leaves it "waiting for answer" until a
  comment of kind ``answer`` replies to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, QuerySet

from approvals import gateway, permissions
from approvals.audit import audit_record
from approvals.errors import Conflict, Forbidden, InvalidInput, NotFound
from approvals.models import ApprovalTask, AuditAction, Comment, CommentKind, CommentVersion
from runtime.models import Thread

BODY_MAX_CHARS = 4000
MENTIONS_MAX = 20  # distinct @names resolved per version; further ones stay text
VERSIONS_MAX = 100  # edits per comment: bounded like everything a user can grow
_MENTION = re.compile(r"(?<![\w@])@([A-Za-z0-9_.+-]{1,150})")
# Control characters other than tab and newline: invisible in a page, confusing in an export.
# Control characters a person's free text never needs (tab and newline are kept; \r\n is normalised first).
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


# --- input -------------------------------------------------------------------------------------


def body_clean(body: Any) -> str:
    if not isinstance(body, str):
        raise InvalidInput("body: must be text", field="body")
    text = body.replace("\r\n", "\n").strip()
    if not text:
        raise InvalidInput("body: write something", field="body")
    if len(text) > BODY_MAX_CHARS:
        raise InvalidInput(f"body: at most {BODY_MAX_CHARS} characters (got {len(text)})", field="body")
    if CONTROL_CHARACTERS.search(text):
        raise InvalidInput("body: control characters are not allowed", field="body")
    return text


def mention_names(body: str) -> list[str]:
    """The ``@names`` in ``body``, in order, without duplicates; trailing punctuation is not part of a name."""
    names: list[str] = []
    for match in _MENTION.finditer(body):
        name = match.group(1).rstrip(".")
        if name and name not in names:
            names.append(name)
    return names[:MENTIONS_MAX]


def mentions_resolve(*, body: str, thread: Thread, task: ApprovalTask | None) -> list[User]:
    """Active users named in ``body`` who may see where the comment is; unknown or unpermitted names stay text."""
    names = mention_names(body)
    if not names:
        return []
    found = {u.get_username(): u for u in User.objects.filter(username__in=names, is_active=True)}
    out = []
    for name in names:
        user = found.get(name)
        if user is None:
            continue
        if task is not None:
            may_see = permissions.tasks_visible(user).filter(pk=task.pk).exists()
        else:
            may_see = permissions.threads_visible(user).filter(pk=thread.pk).exists()
        if may_see:
            out.append(user)
    return out


# --- services ----------------------------------------------------------------------------------


def comment_post(
    *,
    actor: User,
    body: str,
    task: ApprovalTask | None = None,
    thread: Thread | None = None,
    kind: CommentKind | str = CommentKind.COMMENT,
    reply_to: Comment | None = None,
) -> Comment:
    """Post a comment on ``task`` or on ``thread`` (exactly one); audited, published after commit."""
    if (task is None) == (thread is None):
        raise InvalidInput("comment on a task or on a thread (exactly one)", field="task")
    if kind not in CommentKind.values:
        raise InvalidInput(f"kind: one of {', '.join(CommentKind.values)}", field="kind")
    kind = CommentKind(kind)
    if task is not None:
        task = permissions.task_get_for(actor, task.pk)
        thread = task.thread
    elif thread is not None:
        thread = permissions.thread_get_for(actor, thread.pk)
    else:  # pragma: no cover - refused above
        raise InvalidInput("comment on a task or on a thread", field="task")
    permissions.require_comment(actor, thread.graph)
    text = body_clean(body)
    if kind == CommentKind.ANSWER and reply_to is None:
        raise InvalidInput("reply_to: an answer replies to a question", field="reply_to")
    if reply_to is not None:
        if reply_to.thread_id != thread.pk or reply_to.task_id != (task.pk if task else None):
            raise InvalidInput("reply_to: not a comment of this task or thread", field="reply_to")
        if kind == CommentKind.ANSWER and reply_to.kind != CommentKind.QUESTION:
            raise InvalidInput("reply_to: an answer replies to a question", field="reply_to")
    mentioned = mentions_resolve(body=text, thread=thread, task=task)
    with transaction.atomic():
        comment = Comment.objects.create(
            thread=thread, task=task, graph=thread.graph, author=actor, kind=kind, reply_to=reply_to
        )
        saw = gateway.may_see_sensitive(actor)
        quoted = gateway.threads_quoted(actor, text, thread) if saw else []
        CommentVersion.objects.create(
            comment=comment,
            version=1,
            body=text,
            mentions=[u.pk for u in mentioned],
            author_saw_sensitive=saw,
            quoted_threads=quoted,
        )
        audit_record(
            actor=actor,
            action=AuditAction.COMMENT_POSTED,
            subject_type="comment",
            subject_id=comment.pk,
            thread_id=thread.pk,
            graph=thread.graph,
            details={
                "comment": str(comment.pk),
                "version": 1,
                "kind": kind.value,
                "task": str(task.pk) if task else None,
                "reply_to": str(reply_to.pk) if reply_to else None,
                "body": text,
                "mentions": [u.get_username() for u in mentioned],
                "author_saw_sensitive": saw,
                **({"quoted_threads": quoted} if quoted else {}),
            },
        )
    return comment


def comment_edit(*, actor: User, comment: Comment, body: str) -> CommentVersion:
    """A new version of ``comment``'s text (its author only); the old versions stay."""
    comment = comment_get_for(actor, comment.pk)
    if comment.author_id != actor.pk:
        raise Forbidden("only the author may edit a comment")
    permissions.require_comment(actor, comment.graph)
    text = body_clean(body)
    mentioned = mentions_resolve(body=text, thread=comment.thread, task=comment.task)
    try:
        with transaction.atomic():
            # Edits of one comment queue on its row (FOR UPDATE fires no trigger): each reads the newest version.
            Comment.objects.select_for_update().filter(pk=comment.pk).first()
            latest = CommentVersion.objects.filter(comment=comment).order_by("-version").first()
            number = (latest.version if latest else 0) + 1
            if latest is not None and latest.body == text:
                raise InvalidInput("body: unchanged", field="body")
            if number > VERSIONS_MAX:
                raise InvalidInput(f"body: a comment keeps at most {VERSIONS_MAX} versions", field="body")
            saw = gateway.may_see_sensitive(actor)
            quoted = gateway.threads_quoted(actor, text, comment.thread) if saw else []
            version = CommentVersion.objects.create(
                comment=comment,
                version=number,
                body=text,
                mentions=[u.pk for u in mentioned],
                author_saw_sensitive=saw,
                quoted_threads=quoted,
            )
            audit_record(
                actor=actor,
                action=AuditAction.COMMENT_EDITED,
                subject_type="comment",
                subject_id=comment.pk,
                thread_id=comment.thread_id,
                graph=comment.graph,
                details={
                    "comment": str(comment.pk),
                    "version": number,
                    "kind": comment.kind,
                    "task": str(comment.task_id) if comment.task_id else None,
                    "body": text,
                    "mentions": [u.get_username() for u in mentioned],
                    "author_saw_sensitive": saw,
                    **({"quoted_threads": quoted} if quoted else {}),
                },
            )
    except IntegrityError:
        # Two edits at once took the same version number (SQLite has no row locks): the database let one win.
        raise Conflict("the comment was edited meanwhile; reload and edit again", field="body") from None
    return version


# --- selectors ---------------------------------------------------------------------------------


def comment_get_for(user: permissions.Principal, comment_id: Any) -> Comment:
    """The comment if ``user`` may see its task or thread; 404 otherwise (existence does not leak)."""
    comment = Comment.objects.select_related("thread", "task").filter(pk=comment_id).first()
    if comment is None:
        raise NotFound(f"comment {comment_id} not found", field="comment_id")
    try:
        if comment.task_id is not None:
            permissions.task_get_for(user, comment.task_id)
        else:
            permissions.thread_get_for(user, comment.thread_id)
    except NotFound:
        raise NotFound(f"comment {comment_id} not found", field="comment_id") from None
    return comment


@dataclass(frozen=True)
class VersionShown:
    version: int
    body: str
    created_at: datetime


@dataclass
class CommentShown:
    """One comment as a reader may see it: its newest text, masked, with every earlier version."""

    id: Any
    kind: str
    author: str
    author_id: int
    thread_id: Any
    task_id: Any
    reply_to_id: Any
    created_at: datetime
    edited_at: datetime | None
    version: int
    body: str
    mentions: list[str]
    history: list[VersionShown] = field(default_factory=list)  # oldest first, the newest included
    answered: bool = False  # questions: an answer replies to it

    @property
    def is_question(self) -> bool:
        return self.kind == CommentKind.QUESTION

    @property
    def waiting(self) -> bool:
        return self.is_question and not self.answered


def comments_for(
    *, user: permissions.Principal, task: ApprovalTask | None = None, thread: Thread | None = None
) -> list[CommentShown]:
    """The comments on ``task``, or on ``thread`` and its tasks, oldest first, as ``user`` may read them."""
    if task is not None:
        task = permissions.task_get_for(user, task.pk)
        thread = task.thread
        qs = Comment.objects.filter(task=task)
    elif thread is not None:
        thread = permissions.thread_get_for(user, thread.pk)
        visible_tasks = permissions.tasks_visible(user).filter(thread=thread).values("pk")
        qs = Comment.objects.filter(thread=thread).filter(task__isnull=True) | Comment.objects.filter(
            thread=thread, task__in=visible_tasks
        )
    else:
        raise InvalidInput("comments of a task or of a thread", field="task")
    comments = list(qs.select_related("author").order_by("created_at", "pk"))
    if not comments:
        return []
    versions: dict[Any, list[CommentVersion]] = {}
    for v in CommentVersion.objects.filter(comment__in=comments).order_by("comment_id", "version"):
        versions.setdefault(v.comment_id, []).append(v)
    texts = [(v.body, v.author_saw_sensitive, v.quoted_threads) for c in comments for v in versions.get(c.pk, [])]
    shown = iter(gateway.text_shown(user, thread, texts, subject=f"thread:{thread.pk}"))
    mention_ids = {pk for vs in versions.values() for pk in vs[-1].mentions}
    names = dict(User.objects.filter(pk__in=mention_ids).values_list("pk", "username")) if mention_ids else {}
    answered = {c.reply_to_id for c in comments if c.kind == CommentKind.ANSWER}
    out = []
    for c in comments:
        history = [VersionShown(v.version, next(shown), v.created_at) for v in versions.get(c.pk, [])]
        if not history:
            continue  # a comment row is written with its first version; none is a half-written one
        newest = versions[c.pk][-1]
        out.append(
            CommentShown(
                id=c.pk,
                kind=c.kind,
                author=c.author.get_username(),
                author_id=c.author_id,
                thread_id=c.thread_id,
                task_id=c.task_id,
                reply_to_id=c.reply_to_id,
                created_at=c.created_at,
                edited_at=newest.created_at if newest.version > 1 else None,
                version=newest.version,
                body=history[-1].body,
                mentions=[names[pk] for pk in newest.mentions if pk in names],
                history=history,
                answered=c.pk in answered,
            )
        )
    return out


def _waiting_questions() -> QuerySet[Comment]:
    answers = Comment.objects.filter(reply_to=OuterRef("pk"), kind=CommentKind.ANSWER)
    return Comment.objects.filter(kind=CommentKind.QUESTION).exclude(Exists(answers))


def tasks_waiting_for_answer(*, task_ids: list[Any]) -> set[Any]:
    """Of ``task_ids``, those with a question nobody answered yet (one query, for an inbox page)."""
    if not task_ids:
        return set()
    return set(_waiting_questions().filter(task_id__in=task_ids).values_list("task_id", flat=True))


def task_waiting_for_answer(*, task: ApprovalTask) -> bool:
    return _waiting_questions().filter(task=task).exists()


def tasks_mentioning(*, user: permissions.Principal, task_ids: list[Any]) -> set[Any]:
    """Of ``task_ids``, those whose conversation (the task's or its thread's) mentions ``user``, newest versions."""
    tasks = list(ApprovalTask.objects.filter(pk__in=task_ids).only("pk", "thread_id"))
    return inbox_conversation(user=user, tasks=tasks).mentioned


@dataclass(frozen=True)
class InboxConversation:
    waiting: set[Any]  # task ids with a question nobody answered
    mentioned: set[Any]  # task ids whose conversation (or their thread's) mentions the viewer


def inbox_conversation(*, user: permissions.Principal, tasks: list[ApprovalTask]) -> InboxConversation:
    """For an inbox page: which rows wait for an answer and which mention ``user`` — one query for the page.

    Mentions count in newest versions only (an edit can drop one); filtered here, as SQLite
    has no JSON "contains".
    """
    if not tasks:
        return InboxConversation(set(), set())
    threads = {t.thread_id for t in tasks}
    rows = CommentVersion.objects.filter(comment__thread_id__in=threads).values_list(
        "comment_id",
        "version",
        "comment__thread_id",
        "comment__task_id",
        "comment__kind",
        "comment__reply_to_id",
        "mentions",
    )
    newest: dict[Any, tuple[int, Any, Any, list[int]]] = {}
    questions: dict[Any, Any] = {}  # question id -> its task
    answered: set[Any] = set()
    for comment_id, version, thread, task, kind, reply_to, mentions in rows:
        if comment_id not in newest or newest[comment_id][0] < version:
            newest[comment_id] = (version, thread, task, mentions)
        if kind == CommentKind.QUESTION and task is not None:
            questions[comment_id] = task
        elif kind == CommentKind.ANSWER:
            answered.add(reply_to)
    waiting = {task for question, task in questions.items() if question not in answered}
    me = user.pk if user.is_authenticated else None
    hits = [
        (thread, task) for _, thread, task, mentions in newest.values() if me is not None and me in (mentions or [])
    ]
    by_thread = {thread for thread, task in hits if task is None}
    by_task = {task for _, task in hits if task is not None}
    return InboxConversation(
        waiting={t.pk for t in tasks if t.pk in waiting},
        mentioned={t.pk for t in tasks if t.pk in by_task or t.thread_id in by_thread},
    )
