"""Websocket consumers: authorise the subscription, then turn domain events into HTML fragments.

Each consumer joins only groups for objects its user may see (checked through
``approvals.permissions``), and on every event re-renders its fragment from the
database with that user's permissions — events themselves carry no data. It also
joins its reader's access groups (``live.access_groups``): a role, grant or graph
assignment changed since it connected re-decides at once which groups it watches. The
fragments carry ``hx-swap-oob`` so the htmx ws extension swaps them by id.
A fresh render is sent on connect, so a client that reconnects catches up (the dashboard instead
renders when its page asks, after a reconnect: ``LiveConsumer.render_on_connect``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.base import SessionBase
from django.contrib.sessions.backends.db import SessionStore as DbSessionStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.http import QueryDict
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from approvals import bulk, permissions
from approvals.errors import DomainError
from approvals.models import AuditAction
from console import live, page_context
from console.channel_layer import BUS_ERRORS, BUS_LOST
from runtime import rows
from runtime.registry import graph_names

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
# The browser's session belongs to another user than the one its page was drawn for (signed out and in as
# someone else in another tab): the page would show that user's view under the first one's name.
CLOSE_OTHER_USER = 4409
# The server lost its event bus (Redis, under the channel layer): this socket would hear nothing more. The page
# says live updates are paused and reconnects; its render on connect catches it up (console/channel_layer.py).
CLOSE_BUS_LOST = 4503
# A render after an event failed (the database away, a bug): the page's socket closes with "internal error",
# which the htmx ws extension answers by reconnecting with its backoff; the render on connect catches it up.
CLOSE_RENDER_FAILED = 1011
log = logging.getLogger(__name__)
READER_PARAM = "reader"  # the socket URL's user id the page was drawn for (console templatetag reader_url)
# Events of one change are published together (task opened, run interrupted) and arrive within a
# millisecond or two: wait this long after the first and render once. Events that arrive while a
# render is under way are never dropped: they cause one more render after it.
DEBOUNCE_SECONDS = 0.003
# The threads list: every run of every thread of the reader's graphs publishes a few commits (claimed,
# interrupted or succeeded, completed); a quarter of a second is too short for a reader to notice and
# renders a busy list at most about four times a second instead of once per commit of every run.
THREADS_DEBOUNCE_SECONDS = 0.25
# The dashboard: one render is about a dozen aggregate queries over up to 92 days of tasks and decisions
# (pending over time, percentiles per gate, counts per outcome and reviewer), per open dashboard. Its
# numbers are a team's overview, not a queue to act on: at most one render per this many seconds,
# however many tasks open and are decided meanwhile.
DASHBOARD_DEBOUNCE_SECONDS = 5.0
# Reads that audit themselves change nothing on screen (not even published: console.live).
QUIET_ACTIONS = live.QUIET_ACTIONS


class _BusConsumer(AsyncWebsocketConsumer):
    """A consumer that meets a channel layer without Redis refuses or closes its socket (4503), quietly."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except BUS_ERRORS:
            # Nothing can be subscribed (Redis is away): a socket not accepted yet is refused, and the page's
            # socket retries with its backoff; an open one is closed as for a lost subscription. It was an
            # ERROR with a traceback from daphne per attempt, and a refusal all the same.
            with contextlib.suppress(Exception):
                await send({"type": "websocket.close", "code": CLOSE_BUS_LOST})


class NoSuchSocket(_BusConsumer):
    """A websocket path no page opens: the handshake is refused (HTTP 403 from daphne), before any work."""

    async def connect(self) -> None:
        await self.close(code=CLOSE_NOT_FOUND)


class LiveConsumer(_BusConsumer):
    template = ""
    # Actions (or action prefixes, ending in ".") that cannot change this page: no render for them.
    unchanged_by: frozenset[str] = frozenset()
    # How long events accumulate before one render, and the least time between two renders under a
    # steady stream of events; None: ``DEBOUNCE_SECONDS`` (a commit's events, arriving together).
    debounce_seconds: float | None = None
    # A render on connect is how a reconnecting page catches up. A page whose render is costly (the
    # dashboard) opts out: its page load has just rendered it, and its page asks for a render over the
    # socket after a reconnect instead (``data-live-catch-up``, console.js).
    render_on_connect = True
    gone = False  # set by the render that found the view no longer available: the socket closes after it

    async def connect(self) -> None:
        self.joined: list[str] = []
        self._pending: asyncio.Task[None] | None = None
        self._dirty = False
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        drawn_for = QueryDict(self.scope.get("query_string", b"").decode()).get(READER_PARAM)
        if drawn_for is not None and drawn_for != str(user.pk):
            await self.close(code=CLOSE_OTHER_USER)
            return
        groups = await database_sync_to_async(self.groups_authorised)(user)
        if groups is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        groups = [*live.access_groups(user.pk), *groups]
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
        self.joined = groups
        await self.accept()
        if self.render_on_connect:
            await self.render_send()

    async def access_changed(self) -> None:
        """What the reader may see changed: join the groups it may watch now, leave the others, and
        render again; a reader who may no longer watch this page is shown so, then the socket closes."""
        groups = await database_sync_to_async(self._groups_now)()
        if groups is None:
            html = await database_sync_to_async(self._render)()
            if html is not None:  # None: signed out or deactivated as well, which says it all
                with contextlib.suppress(Exception):
                    await self.send(text_data=html)  # the page says access is gone
            await self.close(code=CLOSE_FORBIDDEN if html is not None else CLOSE_UNAUTHENTICATED)
            return
        await self._watch(groups)
        await self.render_send()

    async def _watch(self, groups: list[str]) -> None:
        """Join ``groups`` (and the reader's access groups) not joined yet; leave those no longer among them."""
        groups = [*live.access_groups(self.scope["user"].pk), *groups]
        for group in groups:
            if group not in self.joined:
                await self.channel_layer.group_add(group, self.channel_name)
        for group in self.joined:
            if group not in groups:
                await self.channel_layer.group_discard(group, self.channel_name)
        self.joined = groups

    def _groups_now(self) -> list[str] | None:
        user = self.scope["user"]
        permissions.access_forget(user)
        return self.groups_authorised(user)

    async def disconnect(self, code: int) -> None:
        if self._pending is not None:
            self._pending.cancel()
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # The only client message is "refresh" (sent by console.js after a reconnect or on demand).
        await self.render_send()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale database connections before every message, on the thread all
        # database work of this process shares: an event would wait for any render under way.
        # An event does no database work here (renders run in database_sync_to_async, which
        # closes its own), so it is handled at once.
        if message.get("type") == live.EVENT_TYPE:
            await self.live_event(message)
            return
        if message.get("type") == BUS_LOST:
            # Its subscription died with the layer's connection to Redis: it would stay open, and its page
            # "live", hearing nothing. Closed, the page says so and reconnects once Redis is back.
            await self.close(code=CLOSE_BUS_LOST)
            return
        await super().dispatch(message)

    async def live_event(self, event: dict[str, Any]) -> None:
        action = str(event.get("action") or "")
        if live.action_in(action, live.ACCESS_ACTIONS):  # heard on the access groups only
            await self.access_changed()
            return
        if action in QUIET_ACTIONS or live.action_in(action, self.unchanged_by):
            return
        if self.has_fragment(event):
            # Off the thread full renders share: a render under way must not hold the fragment up.
            html = await database_sync_to_async(self._fragment, thread_sensitive=False)(event)
            if html:
                with contextlib.suppress(Exception):  # the socket closed meanwhile
                    await self.send(text_data=html)
        self._dirty = True
        if self._pending is None or self._pending.done():
            self._pending = asyncio.ensure_future(self._render_later())

    async def _render_later(self) -> None:
        # A window before every render, not only the first: events that arrive during a render cause one
        # more after the next window, so a page with a long window (the dashboard) renders at most once
        # per window however steady the stream.
        while True:
            await asyncio.sleep(DEBOUNCE_SECONDS if self.debounce_seconds is None else self.debounce_seconds)
            if not self._dirty:
                return
            self._dirty = False
            try:
                await self.render_send()
            except Exception:
                # Nobody awaits this task: an error left in it was logged only when it was garbage-collected,
                # wherever that happened, and the page stayed "live" on a stale render. Said here, and the
                # page reconnects.
                user = getattr(self.scope.get("user"), "pk", None)
                log.exception("live render of %s for user %s failed", self.scope.get("path"), user)
                with contextlib.suppress(Exception):
                    await self.close(code=CLOSE_RENDER_FAILED)
                return

    async def render_send(self) -> None:
        html = await database_sync_to_async(self._render)()
        if html is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        with contextlib.suppress(Exception):  # the socket closed meanwhile
            await self.send(text_data=html)
        if self.gone:
            # The page says the view is gone; the socket closes as for a withdrawn watch (4403: the page's
            # indicator reads "no access"). It stayed open and "live" under the notice (an outside tester).
            await self.close(code=CLOSE_FORBIDDEN)

    def _reader(self) -> Any:
        """The socket's user, re-read; None once signed out, expired or deactivated, or once its password
        changed since the session signed in: push nothing more (``_session_verified``).

        What the user may see is read anew too (``permissions.access_forget``): the object outlives
        any request, and a role or assignment withdrawn since the last push must show at once.
        """
        user = self.scope["user"]
        permissions.access_forget(user)
        session = self.scope.get("session")
        # ``__class__``, not ``type()``: Channels hands both over as lazy objects, which report the class
        # of what they wrap (``type()`` would say LazyObject, and the fast path would never be taken).
        if session.__class__ is DbSessionStore and session.session_key and user.__class__ is User:
            return _reader_fresh(session, session.session_key, user)
        fresh = _session_reloaded(session)
        if fresh is None:
            return None
        user.refresh_from_db()
        return user if _session_verified(fresh, user) else None

    def _render(self) -> str | None:
        user = self._reader()
        if user is None:
            return None
        try:
            ctx = self.context(user)
        except DomainError as exc:  # access revoked or object gone since connecting
            self.gone = True
            return render_to_string("console/partials/live_gone.html", {"error": exc})
        ctx["live"] = True
        return render_to_string(self.template, ctx)

    def _params(self) -> QueryDict:
        """The socket URL's query: the page's own filters, sort and page, read as the page's view reads them."""
        params = QueryDict(self.scope.get("query_string", b"").decode(), mutable=True)
        params.pop(READER_PARAM, None)  # whom the page was drawn for: not one of its filters
        return params

    def _fragment(self, event: dict[str, Any]) -> str | None:
        user = self._reader()
        if user is None:
            return None  # the full render that follows closes the socket
        try:
            return self.fragment(user, event)
        except DomainError:
            return None

    # --- per page -----------------------------------------------------------------------

    def has_fragment(self, event: dict[str, Any]) -> bool:
        """Whether ``event`` gets a small fragment pushed at once, ahead of the full render."""
        return False

    def groups_authorised(self, user: Any) -> list[str] | None:
        raise NotImplementedError

    def context(self, user: Any) -> dict[str, Any]:
        raise NotImplementedError

    def fragment(self, user: Any, event: dict[str, Any]) -> str | None:
        return None


def _reader_fresh(session: DbSessionStore, session_key: str, user: User) -> User | None:
    """``LiveConsumer._reader`` for database sessions: the session row and the user row in one query.

    Exactly what the general path checks (the session exists, has not expired and is signed in as this
    user with its current password; the user is re-read and active), read by one statement without the
    ORM instead of two through it. The user object is refreshed only when its row changed (otherwise
    refreshing sets what it holds); the password hash is in that row, so a changed password is seen.
    """
    fields, sql = _reader_sql(connection.vendor)
    with rows.fixed_cursor() as cursor:
        # Adapted as the ORM stores it (SQLite compares the text of naive UTC times).
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        cursor.execute(sql, [session_key, now, user.pk])
        row = cursor.fetchone()
    if row is None or row[0] is None:
        return None  # user deleted; session gone or expired
    if any(getattr(user, field.attname) != value for field, value in zip(fields, row[1:], strict=True)):
        user.refresh_from_db()
    return user if _session_verified(session.decode(row[0]), user) else None


def _session_verified(data: Mapping[str, Any], user: User) -> bool:
    """Whether session ``data`` still signs ``user`` in, as ``django.contrib.auth.get_user`` decides for
    every HTTP request: signed in (as this user, through a configured backend), the user active, and
    the session's hash of the password it signed in with still the user's (``HASH_SESSION_KEY``; one
    made under a ``SECRET_KEY_FALLBACKS`` key counts, as it does there). A password changed since — by
    ``manage.py changepassword``, an admin, a set-password link — ends the session over HTTP; without
    this a socket opened before kept pushing. No query; the HMAC (some 30 µs) is made once per password.
    """
    if data.get(SESSION_KEY) != user._meta.pk.value_to_string(user) or not user.is_active:
        return False
    if data.get(BACKEND_SESSION_KEY) not in settings.AUTHENTICATION_BACKENDS:
        return False
    session_hash = data.get(HASH_SESSION_KEY)
    if not isinstance(session_hash, str) or not session_hash:
        return False
    if constant_time_compare(session_hash, _auth_hash(user)):
        return True
    return any(constant_time_compare(session_hash, other) for other in user.get_session_auth_fallback_hash())


def _auth_hash(user: User) -> str:
    """``user.get_session_auth_hash()``, kept on the socket's user object while its password (and the
    secret key) stay what they were: every push of the socket checks it."""
    key = (user.password, settings.SECRET_KEY)
    kept = user.__dict__.get("_live_auth_hash")
    if kept is None or kept[0] != key:
        kept = (key, user.get_session_auth_hash())
        user.__dict__["_live_auth_hash"] = kept
    return str(kept[1])


@functools.cache
def _reader_sql(vendor: str) -> tuple[list[Any], str]:
    fields = list(User._meta.concrete_fields)
    q = connection.ops.quote_name
    columns = ", ".join(f"u.{q(str(field.column))}" for field in fields)
    # Names from the models' metadata, values as parameters.
    sql = (
        f"SELECT s.{q('session_data')}, {columns} FROM {q(User._meta.db_table)} u "  # noqa: S608
        f"LEFT JOIN {q(Session._meta.db_table)} s ON s.{q('session_key')} = %s AND s.{q('expire_date')} > %s "
        f"WHERE u.{q(str(User._meta.pk.column))} = %s"
    )
    return fields, sql


def _session_reloaded(session: SessionBase | None) -> SessionBase | None:
    """The socket's session as stored now; None when it is gone, expired or signed out."""
    if session is None or not session.session_key:
        return None
    fresh = session.__class__(session_key=session.session_key)
    return fresh if fresh.get(SESSION_KEY) is not None else None


class InboxConsumer(LiveConsumer):
    template = "console/partials/inbox_results.html"
    # The list shows tasks: a thread starting or a run's progress changes none of its rows (and is not
    # even published to the graph groups).
    unchanged_by = live.INBOX_UNCHANGED_BY

    def groups_authorised(self, user: Any) -> list[str] | None:
        if not permissions.can(user, "approvals.view_approvaltask"):
            return None
        return _graph_groups(user)

    def context(self, user: Any) -> dict[str, Any]:
        return page_context.inbox_context(user, self._params())

    def has_fragment(self, event: dict[str, Any]) -> bool:
        # A task opened: its row goes out at once (one query, one row), the whole list after it.
        return event.get("action") == AuditAction.TASK_OPENED and event.get("subject_type") == "task"

    def fragment(self, user: Any, event: dict[str, Any]) -> str | None:
        ctx = page_context.inbox_row_context(user, self._params(), event.get("subject_id"))
        return render_to_string("console/partials/inbox_row_push.html", ctx) if ctx else None


def _graph_groups(user: Any, graph: str = "") -> list[str]:
    """The graph groups of the graphs ``user`` may see (every registered graph and external source when
    unrestricted), or of ``graph`` alone when a page is filtered to it (none when the user may not see it)."""
    if graph:
        return [live.graph_group(graph)] if permissions.graph_visible(user, graph) else []
    visible = permissions.graphs_visible(user)
    if visible is None:  # every graph: the registered ones, and every external source's (live.EXTERNAL_GROUP)
        return [*(live.graph_group(name) for name in graph_names()), live.EXTERNAL_GROUP]
    return [live.graph_group(name) for name in sorted(visible)]


class ThreadsConsumer(LiveConsumer):
    """The threads list: a thread started, a run's progress, a thread finished, on the reader's graphs."""

    template = "console/partials/threads_results.html"
    unchanged_by = live.THREADS_UNCHANGED_BY
    debounce_seconds = THREADS_DEBOUNCE_SECONDS

    def groups_authorised(self, user: Any) -> list[str] | None:
        if not permissions.can(user, "runtime.view_thread"):
            return None
        # A list filtered to one graph listens to that graph only (the same bound as the view's filter).
        return _graph_groups(user, self._params().get("graph", "")[: page_context.THREADS_GRAPH_MAX])

    def context(self, user: Any) -> dict[str, Any]:
        return page_context.threads_context(user, self._params())


class DashboardConsumer(LiveConsumer):
    """The team dashboard's numbers and charts: tasks opened and decided on the reader's graphs."""

    template = "console/partials/dashboard_live.html"
    unchanged_by = live.DASHBOARD_UNCHANGED_BY
    debounce_seconds = DASHBOARD_DEBOUNCE_SECONDS
    render_on_connect = False  # see LiveConsumer: its page load has just run the same dozen queries

    def groups_authorised(self, user: Any) -> list[str] | None:
        if not permissions.can(user, "approvals.view_dashboard"):
            return None
        return _graph_groups(user, self._params().get("graph", ""))

    def context(self, user: Any) -> dict[str, Any]:
        return page_context.dashboard_page_context(user, self._params())


class TaskConsumer(LiveConsumer):
    template = "console/partials/task_live.html"

    def groups_authorised(self, user: Any) -> list[str] | None:
        try:
            task = permissions.task_get_for(user, self.scope["url_route"]["kwargs"]["task_id"])
        except DomainError:
            return None
        return [live.thread_group(task.thread_id)]

    def context(self, user: Any) -> dict[str, Any]:
        # The header and timeline ride along out of band (live task page).
        return page_context.task_push_context(user, self.scope["url_route"]["kwargs"]["task_id"])


class ThreadConsumer(LiveConsumer):
    template = "console/partials/thread_live.html"
    travel_at: str | None = None  # the checkpoint this page's travel forms target, once pushed here

    def groups_authorised(self, user: Any) -> list[str] | None:
        try:
            thread = permissions.thread_get_for(user, self.scope["url_route"]["kwargs"]["thread_id"])
        except DomainError:
            return None
        return [live.thread_group(thread.pk)]

    def context(self, user: Any) -> dict[str, Any]:
        thread_id = self.scope["url_route"]["kwargs"]["thread_id"]
        ctx = page_context.thread_live_context(user, thread_id)
        params = self._params()
        if not params.get("checkpoint"):
            # A page showing the current state: its state card follows the thread (one past checkpoint
            # stays as it is). It said "No checkpoint yet" beside a timeline of four.
            ctx.update(page_context.thread_state_context(user, thread_id), state_pushed=True)
            shown = ctx["shown"]
            at = shown.checkpoint_id if shown else ""
            # ...and so do the forms that travel from it, once it is another checkpoint than the page's forms
            # target (``shown`` in the socket's URL, then the last one pushed): after a replay they still
            # targeted the old line's checkpoint under a state card showing the branch's head. Not on every
            # push: an error shown beside a field would go with them.
            page_at = self.travel_at if self.travel_at is not None else params.get("shown", "")[:64]
            if at != page_at:
                ctx.update(page_context.time_travel_context(user, ctx["thread"], shown), travel_forms_pushed=True)
                self.travel_at = at
                return ctx  # the card's live parts included
        # The time-travel card's branches and busy note: they said "a run is in progress (reload this page)"
        # beside a status card that had long moved on to "Waiting for a decision".
        ctx.update(page_context.time_travel_live_context(user, ctx["thread"], ctx.get("shown", True)))
        return ctx


# --- Bulk decisions (issue 14): the progress page -------------------------------------------------------


class BulkConsumer(LiveConsumer):
    template = "console/partials/bulk_progress.html"

    def groups_authorised(self, user: Any) -> list[str] | None:
        try:
            action = bulk.bulk_get_for(user, self.scope["url_route"]["kwargs"]["bulk_id"])
        except DomainError:
            return None
        # The Thread column shows each resume run's outcome: those are published to the threads' groups
        # (as the task and thread pages hear them), not to the bulk's. It said "resuming" until a reload.
        threads = bulk.bulk_resumed_threads(user=user, bulk=action)
        return [live.bulk_group(action.pk), *(live.thread_group(t) for t in threads)]

    async def live_event(self, event: dict[str, Any]) -> None:
        if event.get("subject_type") == "bulk" and not live.action_in(str(event.get("action")), live.ACCESS_ACTIONS):
            # A step decided another task: watch its thread too, before rendering (a run that finishes
            # meanwhile is then either heard or already in the render).
            groups = await database_sync_to_async(self.groups_authorised)(self.scope["user"])
            if groups is not None:
                await self._watch(groups)
        await super().live_event(event)

    def context(self, user: Any) -> dict[str, Any]:
        return page_context.bulk_context(user, self.scope["url_route"]["kwargs"]["bulk_id"])
