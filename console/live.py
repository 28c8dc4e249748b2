"""Live updates: domain events → channel groups, published after commit.

What is published
    Every change in the domain already writes an ``AuditEvent`` in the same
    transaction (thread started, run claimed/queued/failed, task opened,
    claimed, released, decided or superseded, effect executed, thread
    completed or cancelled), and ``audit_record`` publishes it to the
    domain's event subscribers (``approvals.events``). This module subscribes
    after commit (from ``ConsoleConfig.ready``) and publishes a
    small event ``{"type": "live.event", "action", "graph", "thread", ...}``
    to two groups: ``graph.<graph>`` and ``thread.<thread id>`` (an external
    engine's, ``external:<source>``, to ``EXTERNAL_GROUP`` too). A rolled-back
    change publishes nothing.

    The graph groups carry every change of the graph's threads and tasks but
    effects (``GRAPH_UNCHANGED_BY``): the inbox, the threads list and the
    dashboard listen there, and each ignores, before any database work, the
    actions that cannot change it (``INBOX_UNCHANGED_BY``,
    ``THREADS_UNCHANGED_BY``, ``DASHBOARD_UNCHANGED_BY``). A thread's page
    listens on its thread's group.

    Events carry no state. Consumers re-read everything from the database
    with the subscriber's own permissions and send HTML fragments, so a lost
    or duplicated event costs at most a stale screen until the next one, and
    a reconnecting client catches up by re-rendering.

How it travels
    * ``REDIS_URL`` set (production, the test suite): the ``channels_redis``
      layer; any process (web, Celery worker, management command) calls
      ``group_send`` directly.
    * Embedded mode (no Redis): ``InMemoryChannelLayer`` exists only inside
      the web process, and the Celery worker is another process. The web
      process (it imports ``console.routing``, which calls
      ``local_delivery_enable``) sends in-process; every other process POSTs
      the event to ``settings.GATEHOUSE_LIVE_RELAY_URL`` — the web process's
      ``/internal/live/`` — signed ``t=<unix time>,v1=<hex>`` with an HMAC-SHA256
      (``salted_hmac`` keyed by ``SECRET_KEY``) over ``"<t>.<body>"``. The
      endpoint refuses bad signatures and timestamps more than
      ``RELAY_WINDOW_SECONDS`` away, then ``group_send``s in-process. A relay
      POST that fails is logged and dropped (see above: events are hints).
"""

from __future__ import annotations

import asyncio
import atexit
import hmac
import json
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import async_to_sync
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers, get_channel_layer
from django.conf import settings
from django.utils.crypto import salted_hmac

from approvals.models import AuditAction, AuditEvent
from runtime.registry import graph_is_external
from runtime.retry import exception_text

log = logging.getLogger(__name__)

EVENT_TYPE = "live.event"
RELAY_HEADER = "X-Gatehouse-Relay"
RELAY_WINDOW_SECONDS = 60
_RELAY_SALT = "gatehouse.console.live-relay"
_GROUP_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

_local_delivery = False


def local_delivery_enable() -> None:
    """Mark this process as the one whose consumers hold the in-memory layer's groups."""
    global _local_delivery
    _local_delivery = True


def graph_group(graph: str) -> str:
    # Channels group names allow [A-Za-z0-9_.-] under 100 chars. Two graphs
    # that sanitise alike would share a group; that leaks nothing, because
    # consumers re-read with the subscriber's permissions before sending.
    return "graph." + _GROUP_UNSAFE.sub("_", graph)[:80]


# Every external engine's changes (threads ``external:<source>``, approvals.external) also go to this group.
# No ``langgraph.json`` names those graphs, so a page whose reader sees every graph listens here for all of
# them, a source whose first task comes after the page opened included (consumers._graph_groups); a reader
# assigned to a source listens to its own graph group.
EXTERNAL_GROUP = "graphs.external"


def thread_group(thread_id: object) -> str:
    return f"thread.{thread_id}"


# Every open page joins these (``access_groups``): a change to what its reader may see reaches it at
# once, so it joins the groups of a graph granted since it connected, leaves those of one withdrawn,
# and re-renders (or closes) without waiting for the next event of the graphs it watches.
ACCESS_GROUP = "access"  # a role's own permissions changed: every reader holding it, so every socket
ACCESS_ACTIONS = frozenset(
    {
        "permission.",
        AuditAction.USER_ACCESS_CHANGED,
        AuditAction.USER_DEACTIVATED,
        AuditAction.USER_REACTIVATED,
        AuditAction.AUTH_LOGOUT,
        # A new password ends every session signed in with the old one (Django's session hash): its
        # sockets re-check at once and close, rather than at their next event.
        AuditAction.USER_PASSWORD_RESET,
        AuditAction.USER_PASSWORD_SET,
    }
)


def user_access_group(user_id: object) -> str:
    return f"access.user.{user_id}"


def access_groups(user_id: object) -> list[str]:
    """The groups a socket of ``user_id``'s joins to hear about changes to its reader's access."""
    return [ACCESS_GROUP, user_access_group(user_id)]


def event_from_audit(audit: AuditEvent) -> dict[str, Any]:
    return {
        "type": EVENT_TYPE,
        "id": audit.id,
        "action": audit.action,
        "graph": audit.graph,
        "thread": str(audit.thread_id) if audit.thread_id else None,
        "subject_type": audit.subject_type,
        "subject_id": audit.subject_id,
    }


# Actions no consumer renders anything for: reads that audit themselves. Re-rendering on them would
# loop (a render for a permitted viewer reveals sensitive fields, which writes ``sensitive.revealed``),
# so they are not published at all.
QUIET_ACTIONS = frozenset({AuditAction.SENSITIVE_REVEALED})
# Actions (or prefixes ending in ".") that change no list of a graph: an effect changes no thread's
# status and no task. They go to the thread's group only.
GRAPH_UNCHANGED_BY = frozenset({"effect."})
# The pages on the graph groups each hear every other action of their graphs and ignore, before any
# database work, those that cannot change them (``LiveConsumer.unchanged_by``):
# * the inbox lists tasks: a thread starting or a run's progress changes none of its rows;
INBOX_UNCHANGED_BY = frozenset({"run.", "effect.", AuditAction.THREAD_STARTED, AuditAction.THREAD_CREATED})
# * the threads list shows each thread's status, case and times: claims, hand-offs, comments and
#   reminders change none of them (a thread starting, a run's progress, a task opening or decided do);
THREADS_UNCHANGED_BY = frozenset(
    {
        "comment.",
        "effect.",
        "store.",
        AuditAction.TASK_CLAIMED,
        AuditAction.TASK_RELEASED,
        AuditAction.TASK_REASSIGNED,
        AuditAction.TASK_DELEGATED,
        AuditAction.DEADLINE_REMINDED,
    }
)
# * the dashboard counts tasks and decisions: a thread's or a run's progress, claims, hand-offs and
#   comments change none of its numbers (a task opened, decided, superseded, cancelled, escalated do).
DASHBOARD_UNCHANGED_BY = frozenset(
    {
        "run.",
        "effect.",
        "comment.",
        "store.",
        AuditAction.THREAD_STARTED,
        AuditAction.THREAD_CREATED,
        AuditAction.THREAD_STATE_UPDATED,
        AuditAction.THREAD_METADATA_UPDATED,
        AuditAction.THREAD_COMPLETED,
        AuditAction.TASK_CLAIMED,
        AuditAction.TASK_RELEASED,
        AuditAction.TASK_REASSIGNED,
        AuditAction.TASK_DELEGATED,
        AuditAction.DEADLINE_REMINDED,
    }
)


def action_in(action: str, actions: frozenset[str]) -> bool:
    """Whether ``action`` is one of ``actions``, or under one of its prefixes (``"run."``)."""
    return action in actions or f"{action.split('.', 1)[0]}." in actions


def groups_for(event: dict[str, Any]) -> list[str]:
    action = str(event.get("action") or "")
    if action in QUIET_ACTIONS:
        return []
    groups = []
    if action_in(action, ACCESS_ACTIONS):
        # About one user (an assignment, their roles, their account) or about a role (its members).
        user = event.get("subject_id") if event.get("subject_type") == "user" else None
        groups.append(user_access_group(user) if user else ACCESS_GROUP)
    if event.get("graph") and not action_in(action, GRAPH_UNCHANGED_BY):
        groups.append(graph_group(str(event["graph"])))
        if graph_is_external(str(event["graph"])):
            groups.append(EXTERNAL_GROUP)
    if event.get("thread"):
        groups.append(thread_group(event["thread"]))
    if event.get("subject_type") == "bulk":  # bulk decisions (issue 14): the progress page's group
        groups.append(bulk_group(event.get("subject_id")))
    return groups


def bulk_group(bulk_id: object) -> str:
    return f"bulk.{bulk_id}"


def on_audit_recorded(audit: AuditEvent) -> None:
    """Subscribed after commit (approvals.events, from ConsoleConfig.ready)."""
    if audit.action in QUIET_ACTIONS:
        return  # no page renders anything for it (see QUIET_ACTIONS)
    event_publish(event_from_audit(audit))


class _Losses:
    """How the publisher's events are being lost, logged once per episode rather than once per batch: a
    Redis outage was one WARNING with its exception per failed batch (and, with the queue full, one per
    dropped event) for as long as it lasted. The first loss is one WARNING, those after it DEBUG, and the
    first success after them one INFO that counts what was lost. Called from any thread."""

    def __init__(self, what: str, warning: str) -> None:
        self.what = what
        self.warning = warning
        self.lock = threading.Lock()
        self.since: float | None = None
        self.lost = 0

    def lose(self, count: int, reason: str = "") -> None:
        with self.lock:
            first = self.since is None
            if first:
                self.since = time.monotonic()
            self.lost += count
        if first:
            log.warning(self.warning, reason)
        else:
            log.debug("%s: %d more lost (%s)", self.what, count, reason)

    def recover(self) -> None:
        if self.since is None:  # unlocked fast path: the common case, nothing was lost
            return
        with self.lock:
            since, lost, self.since, self.lost = self.since, self.lost, None, 0
        if since is not None:
            elapsed = time.monotonic() - since
            log.info("%s again after %.1f s; %d live events were lost meanwhile", self.what, elapsed, lost)


class _Publisher:
    """Sends events to the Redis channel layer from one background thread.

    A group_send through ``async_to_sync`` builds an event loop per call
    (about 2-3 ms each, several per run); doing it on the committing thread
    made live updates the largest cost of a worker's run. One long-lived
    thread, fed by a queue, sends whatever accumulated (a commit's events,
    usually) at once.

    With the Redis pub/sub layer (``settings.CHANNEL_LAYERS``) a group_send is
    one ``PUBLISH`` of the serialised event to the group's Redis channel: the
    thread does exactly that, with a plain (blocking) Redis client, all of a
    batch's ``PUBLISH``es in one pipeline — one round trip, and none of an
    event loop's bookkeeping, which was most of the publisher's CPU. The
    channel names, shards and serialisation are the layer's own. Any other
    layer gets ``group_send`` on a long-lived event loop.

    At interpreter exit (``_publisher_drain``) it sends what is queued and ends: a management
    command's last events reach the open pages, and the thread is not torn down mid-``PUBLISH``.
    """

    def __init__(self, *, maxsize: int = 10_000, start: bool = True) -> None:
        # Events, and a flush's marker (``flush``): set once everything queued before it was sent.
        self.queue: queue.Queue[dict[str, Any] | threading.Event] = queue.Queue(maxsize=maxsize)
        self.undelivered = _Losses(
            "live events delivered",
            "live events not delivered (%s); open pages miss them until Redis answers (further failures at DEBUG)",
        )
        self.dropped = _Losses("live publisher queue accepting", "live publisher queue full (%s); dropping events")
        self.thread = threading.Thread(target=self._run, name="live-publisher", daemon=True)
        if start:  # unstarted: a test hands out the batches itself
            self.thread.start()

    def put(self, event: dict[str, Any]) -> None:
        try:
            self.queue.put_nowait(event)
        except queue.Full:
            self.dropped.lose(1, f"{self.queue.maxsize} waiting")
        else:
            self.dropped.recover()

    def flush(self, timeout: float) -> bool:
        """Wait until every event queued before this call has been sent; False if ``timeout`` passed first."""
        sent = threading.Event()
        try:
            self.queue.put(sent, timeout=timeout)
        except queue.Full:
            return False
        return sent.wait(timeout)

    def close(self, timeout: float) -> None:
        """Send what is queued, then end the thread (waiting at most ``timeout`` seconds)."""
        try:
            self.queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self.thread.join(timeout)

    def _batches(self) -> Iterator[list[dict[str, Any]]]:
        """What accumulated, up to 200 events at a time; a flush's marker ends a batch and is set when the
        caller asks for the next one, i.e. once the batch before it was sent."""
        while True:
            batch: list[dict[str, Any]] = []
            flushed: threading.Event | None = None
            stop = False
            item: dict[str, Any] | threading.Event = self.queue.get()
            while True:
                if isinstance(item, threading.Event):
                    flushed = item
                    break
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)
                if len(batch) >= 200:
                    break
                try:
                    item = self.queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                yield batch
            if flushed is not None:
                flushed.set()
            if stop:
                return

    def _run(self) -> None:
        layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        publish = _pubsub_publisher(layer)
        if publish is not None:
            for batch in self._batches():
                try:
                    publish([(group, event) for event in batch for group in groups_for(event)])
                except Exception as exc:  # noqa: BLE001 - events are hints: log and go on
                    self.undelivered.lose(len(batch), exception_text(exc))
                else:
                    self.undelivered.recover()
            return
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        # A layer instance of its own: channels_redis binds connections to the loop that uses them.
        for batch in self._batches():
            if layer is None:
                continue
            sends = [layer.group_send(group, event) for event in batch for group in groups_for(event)]
            results = loop.run_until_complete(asyncio.gather(*sends, return_exceptions=True))
            failed = [result for result in results if isinstance(result, Exception)]
            if failed:
                self.undelivered.lose(len(failed), exception_text(failed[0]))
            else:
                self.undelivered.recover()
        loop.close()


def _pubsub_publisher(layer: Any) -> Callable[[list[tuple[str, dict[str, Any]]]], None] | None:
    """A blocking sender for the Redis pub/sub layer ``layer`` (see ``_Publisher``), or None for any other."""
    try:
        import redis
        from channels_redis.pubsub import RedisPubSubChannelLayer, RedisPubSubLoopLayer
    except ImportError:
        return None
    if not isinstance(layer, RedisPubSubChannelLayer):
        return None
    # Built only to name and shard as the layer does; it opens no connection until used, and is not.
    naming = RedisPubSubLoopLayer(*layer._args, **layer._kwargs, channel_layer=layer)
    hosts = [shard.host for shard in naming._shards]
    if not all(set(host) == {"address"} for host in hosts):
        return None  # sentinels, connection options: the layer's own path
    # Bounded: a link that drops packets held the thread (and every event after) for the kernel's timeouts.
    clients = [
        redis.Redis.from_url(host["address"], socket_connect_timeout=PUBLISH_TIMEOUT, socket_timeout=PUBLISH_TIMEOUT)
        for host in hosts
    ]

    def publish(sends: list[tuple[str, dict[str, Any]]]) -> None:
        pipes = {}
        for group, event in sends:
            channel = naming._get_group_channel_name(group)
            index = naming._shards.index(naming._get_shard(channel))
            if index not in pipes:
                pipes[index] = clients[index].pipeline(transaction=False)
            pipes[index].publish(channel, layer.serialize(event))
        for pipe in pipes.values():
            pipe.execute()

    return publish


_STOP: dict[str, Any] = {}  # queued by ``_Publisher.close``: known by identity
# How long exit waits for queued events to be sent (Redis down: they are dropped after it).
DRAIN_SECONDS = 5.0
# A publish's connect and round trip at most (one PUBLISH pipeline takes well under a millisecond).
PUBLISH_TIMEOUT = 5.0
_publisher: _Publisher | None = None
_publisher_lock = threading.Lock()


def _publisher_get() -> _Publisher:
    global _publisher
    if _publisher is None:
        with _publisher_lock:
            if _publisher is None:
                _publisher = _Publisher()
    return _publisher


def _publisher_forget() -> None:
    global _publisher
    _publisher = None  # its thread did not survive fork()


os.register_at_fork(after_in_child=_publisher_forget)


def publisher_flush(timeout: float = DRAIN_SECONDS) -> bool:
    """Wait until the live events this process queued so far were sent (True at once if it queued none)."""
    publisher = _publisher
    return True if publisher is None else publisher.flush(timeout)


def _publisher_drain() -> None:
    """At exit: deliver what this process queued (a command that decided or started something)."""
    publisher = _publisher
    if publisher is not None:
        publisher.close(DRAIN_SECONDS)


atexit.register(_publisher_drain)


def event_publish(event: dict[str, Any]) -> None:
    """Deliver ``event`` to its groups by whichever route this process has (see module doc)."""
    try:
        if settings.REDIS_URL:
            _publisher_get().put(event)
        elif _local_delivery:
            deliver_local(event)
        elif settings.GATEHOUSE_LIVE_RELAY_URL:
            _relay_post(event)
    except Exception:
        log.warning("live event %s not delivered", event.get("action"), exc_info=True)


def deliver_local(event: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return

    def send() -> None:
        for group in groups_for(event):
            async_to_sync(layer.group_send)(group, event)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        send()
        return
    # A sync caller inside a running event loop (async_to_sync refuses that):
    # hand the send to a helper thread and wait for it briefly.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(send).result(timeout=10)


# --- the embedded-mode relay -------------------------------------------------------


def relay_sign(body: bytes, timestamp: int) -> str:
    digest = salted_hmac(_RELAY_SALT, f"{timestamp}.".encode() + body, algorithm="sha256").hexdigest()
    return f"t={timestamp},v1={digest}"


def relay_verify(body: bytes, header: str, *, now: float | None = None) -> bool:
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs((now if now is not None else time.time()) - timestamp) > RELAY_WINDOW_SECONDS:
        return False
    return hmac.compare_digest(relay_sign(body, timestamp), f"t={timestamp},v1={parts.get('v1', '')}")


def relay_event_parse(body: bytes) -> dict[str, Any] | None:
    """The relayed event, or None if it is not one this module sends."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("type") != EVENT_TYPE:
        return None
    allowed = {"type", "id", "action", "graph", "thread", "subject_type", "subject_id"}
    if set(data) - allowed:
        return None
    return data


_relay_client: Any = None
_relay_client_lock = threading.Lock()


def _relay_http() -> Any:
    """One HTTP client per process: a client per event built an SSL context each time (~0.1 s of CPU)."""
    global _relay_client
    import httpx

    with _relay_client_lock:
        if _relay_client is None:
            _relay_client = httpx.Client(timeout=2.0)
        return _relay_client


def _relay_post(event: dict[str, Any]) -> None:
    import httpx

    body = json.dumps(event, separators=(",", ":")).encode()
    try:
        _relay_http().post(
            settings.GATEHOUSE_LIVE_RELAY_URL,
            content=body,
            headers={"Content-Type": "application/json", RELAY_HEADER: relay_sign(body, int(time.time()))},
        )
    except httpx.HTTPError as exc:
        # The web process is not up (e.g. demo_setup runs before daphne): nothing is watching.
        log.debug("live relay unreachable: %s", exc)
