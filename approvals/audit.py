"""The audit trail: append-only events in hash chains, each event chained to the one before it in its chain.

The trail is partitioned into ``GATEHOUSE_AUDIT_CHAINS`` chains (1..N) by a
stable hash of the event's thread (or subject), each with its own head and its
own lock (a PostgreSQL advisory lock; SQLite serialises writers already), so
audited transactions in different chains never wait for each other. Within a
chain, appends are serialised and the chain has exactly one head. Chain 0
holds the events recorded before the trail was partitioned (one chain, as it
was); nothing is appended to it any more.

An event of chains 1..N also hashes its chain number and its id (from one
sequence for the whole trail, drawn under the chain's lock), so neither moving
it to another chain nor renumbering it to change the global order goes
unnoticed. Anchors (beat) pin every chain's head together; see
docs/security-audit.md.

Call ``audit_record`` inside the transaction that makes the change it describes.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, Field, Max
from django.db.models.signals import post_migrate, pre_migrate
from django.utils import timezone

from approvals.events import events_publish
from approvals.models import AuditAction, AuditAnchor, AuditEvent
from runtime import rows
from runtime.jsonable import canonical_dumps

log = logging.getLogger(__name__)

GENESIS = "0" * 64  # the prev_hash of every chain's first event
LEGACY_CHAIN = 0  # events recorded before partitioning: hashed without chain and id, never appended to
_LOCK_CLASS = 0x67617465  # "gate": pg_advisory_xact_lock(_LOCK_CLASS, chain), one lock per chain


def canonical(value: Any) -> str:
    """What every hash and digest covers: canonical JSON, numbers as jsonb returns them (``canonical_dumps``)."""
    return canonical_dumps(value, default=str)


def event_hash(fields: dict[str, Any], prev_hash: str) -> str:
    return hashlib.sha256(f"{prev_hash}|{canonical(fields)}".encode()).hexdigest()


def chain_fields(fields: dict[str, Any], *, chain: int, event_id: int | None) -> dict[str, Any]:
    """What an event's hash covers: its fields, plus its chain and id outside the legacy chain."""
    if chain == LEGACY_CHAIN:
        return fields
    return {**fields, "chain": chain, "id": event_id}


# The hashed key of the actor's user id (the row's ``actor_id``, null for the system): in the hash of every
# event written since migration 0032, and in none before (docs/security-audit.md, "Who acted").
ACTOR_ID = "actor_id"


def event_fields(event: AuditEvent) -> dict[str, Any]:
    """What an event's hash covers, in today's form: its actor's user id included (``ACTOR_ID``)."""
    return chain_fields(
        {
            "at": event.at.isoformat(),
            "actor": event.actor_label,
            ACTOR_ID: event.actor_id,
            "action": event.action,
            "subject": f"{event.subject_type}:{event.subject_id}",
            "thread": str(event.thread_id) if event.thread_id else None,
            "graph": event.graph,
            "details": event.details,
        },
        chain=event.chain,
        event_id=event.pk,
    )


def hash_form(fields: dict[str, Any], prev_hash: str, digest: str, *, before_cutover: bool) -> bool | None:
    """Which form of an event's ``fields`` (``event_fields``, or an exported row's) ``digest`` is the hash of.

    True: today's, covering the actor's user id. False: the form from before it was hashed (the same fields
    without ``ACTOR_ID``), accepted only ``before_cutover``: while the event's chain has no event in today's
    form before it. None: neither; the event was altered. Nothing stored says which form an event has, so
    nothing an attacker can flip does: the hash decides. The two forms hash different texts (only today's
    has the key), so a changed actor id matches neither, and making an event of today read as one from
    before means recomputing its hash, which breaks the link of the event after it and, at the chain's
    head, follows an event of today in its chain (``audit_chain_check``; the argument in the docs).
    """
    if ACTOR_ID in fields and event_hash(fields, prev_hash) == digest:
        return True
    if before_cutover and event_hash({k: v for k, v in fields.items() if k != ACTOR_ID}, prev_hash) == digest:
        return False
    return None


# --- chains: which one an event goes to, its lock and its head -----------------------------------


def chains_configured() -> int:
    return int(settings.GATEHOUSE_AUDIT_CHAINS)


def chain_for(key: str, *, chains: int) -> int:
    """The chain (1..chains) of a shard key: sha256, not hash(), so every process and restart agrees."""
    return 1 + int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % chains


# Ids drawn with the chain's head in a transaction's first statement: most audited transactions record two
# events (the change and the run it queues or ends). Unused ones are gaps, which nothing relies on: order
# within a chain is by id, and every event's hash covers its id.
_IDS_FIRST = 2
_IDS_MORE = 4  # drawn again, still under the lock, when one transaction records more


class _ChainHeld:
    """An on-commit no-op marking the chain the current transaction appends to, and what it knows of that chain.

    On PostgreSQL it only names the chain (``gatehouse_audit_append`` takes the
    lock, which is re-entrant, and reads the head on every call); the head and
    ids below are the SQLite path's. Registered right after the transaction took
    the chain's lock. Django drops
    a transaction's on-commit callbacks when it commits or rolls back (and
    those of a savepoint rolled back, which also releases the advisory lock
    taken inside it), so the marker lives exactly as long as the lock it
    stands for. While it lives nobody else appends to the chain, so:

    - the chain's head is the event this transaction appended last, as long as
      no savepoint has rolled back since (Django replaces the callback list on
      every savepoint rollback, so the list being the one seen at that append
      means the row is still there); otherwise the head is read again;
    - ids drawn under the lock are above every id in the chain, and handing
      them out in ascending order keeps ids growing in append order.
    """

    def __init__(self, chain: int, callbacks: list[Any]) -> None:
        self.chain = chain
        self.callbacks = callbacks  # the connection's list it was added to
        self.head = GENESIS  # hash of the event this transaction appended last to the chain ...
        self.head_seen: list[Any] | None = None  # ... and the connection's callback list just after (None: read it)
        self.ids: list[int] = []  # drawn under the lock, not used yet, ascending
        # PostgreSQL: the webhook subscriptions' generation as this transaction's last append saw it
        # (``subscriptions_generation``).
        self.generation: int | None = None

    def __call__(self) -> None:
        pass

    def held(self, conn: BaseDatabaseWrapper) -> bool:
        # Django only appends to that list in place; it drops callbacks by replacing the list.
        if conn.run_on_commit is self.callbacks:
            return True
        if any(entry[1] is self for entry in conn.run_on_commit):
            self.callbacks = conn.run_on_commit  # a savepoint rolled back, not this marker's
            return True
        return False

    def next(self, conn: BaseDatabaseWrapper, *, fresh: bool = False) -> tuple[str, int]:
        """The head to link to and the id of the event to append after it: no statement unless ids ran out
        or a savepoint rolled back since the last append.

        ``fresh``: an id drawn now, above every id drawn so far in any chain, and none kept for later (an
        anchor round: its events' ids follow the order it appends them in across chains, which the
        witnesses' check relies on, and the transaction's later events come after all of them).
        """
        if conn.run_on_commit is not self.head_seen:
            self.head, self.ids = _chain_next(self.chain, 1 if fresh else _IDS_FIRST)
        elif fresh or not self.ids:
            self.ids = _ids_draw(1 if fresh else _IDS_MORE)
        return self.head, self.ids.pop(0)

    def appended(self, event: AuditEvent, conn: BaseDatabaseWrapper) -> None:
        self.head, self.head_seen = event.hash, conn.run_on_commit


_NEXTVAL = f"nextval(pg_get_serial_sequence('{AuditEvent._meta.db_table}', 'id'))"
_held: weakref.WeakKeyDictionary[BaseDatabaseWrapper, _ChainHeld] = weakref.WeakKeyDictionary()


def _transaction_chain(key: str) -> int:
    """The chain this transaction appends to: its first event's, then the same one for every later event.

    One chain lock per transaction: two transactions each holding one chain's
    lock and waiting for the other's would deadlock.
    """
    conn = transaction.get_connection()
    marker = _held.get(conn)
    if marker is not None and marker.held(conn):
        return marker.chain
    return chain_for(key, chains=chains_configured())


def chain_lock(chain: int) -> None:
    """Serialise appends to ``chain`` until the transaction ends (re-entrant within one transaction)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_CLASS, chain])


def _chain_next(chain: int, count: int) -> tuple[str, list[int]]:
    """The chain's head hash and ids (ascending) for the events to append after it; call holding the chain's lock.

    The ids are drawn after the lock, so within a chain ids grow in append order.
    PostgreSQL draws ``count`` of them from the sequence; SQLite one (see ``_ids_draw``).
    """
    table = AuditEvent._meta.db_table
    head = f"(SELECT hash FROM {table} WHERE chain = %s ORDER BY id DESC LIMIT 1)"  # noqa: S608 - constant
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SELECT {_NEXTVAL}, {head} FROM generate_series(1, %s)", [chain, count])  # noqa: S608
            rows = cursor.fetchall()
            return rows[0][1] or GENESIS, sorted(int(row[0]) for row in rows)
        # SQLite: the IMMEDIATE transaction holds the database's write lock
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) + 1, {head} FROM {table}", [chain])  # noqa: S608
        event_id, prev = cursor.fetchone()
    return prev or GENESIS, [int(event_id)]


def _ids_draw(count: int) -> list[int]:
    """More ids (ascending) for the chain whose lock this transaction holds.

    PostgreSQL: ``count`` from the sequence, above every id drawn before. SQLite
    has no sequence: one id above every row, as the transaction may itself
    have appended to other chains since (an anchor round).
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SELECT {_NEXTVAL} FROM generate_series(1, %s)", [count])  # noqa: S608
            return sorted(int(row[0]) for row in cursor.fetchall())
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {AuditEvent._meta.db_table}")  # noqa: S608
        return [int(cursor.fetchone()[0])]


@functools.cache
def _insert_sql(vendor: str) -> tuple[str, tuple[Field[Any, Any], ...]]:
    """The INSERT of every column of an event, built once from the model (what ``save(force_insert=True)``
    sends, without compiling it per call)."""
    fields = tuple(AuditEvent._meta.concrete_fields)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column or f.name) for f in fields)
    values = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {quote(AuditEvent._meta.db_table)} ({columns}) VALUES ({values})", fields  # noqa: S608


def _insert(event: AuditEvent) -> None:
    sql, fields = _insert_sql(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [f.get_db_prep_save(getattr(event, f.attname), connection) for f in fields])
    event._state.adding = False
    event._state.db = connection.alias


def _marker_for(conn: BaseDatabaseWrapper, chain: int) -> _ChainHeld:
    """PostgreSQL: the marker of the transaction's chain, registered on its first append
    (``gatehouse_audit_append`` takes the chain's lock itself)."""
    marker = _held.get(conn)
    if marker is None or marker.chain != chain or not marker.held(conn):
        _held[conn] = marker = _ChainHeld(chain, conn.run_on_commit)
        transaction.on_commit(marker)
    return marker


def _append_to(chain: int, event: AuditEvent, *, transaction_chain: bool) -> None:
    """Link ``event`` to ``chain``'s head under the chain's lock, give it its id and hash, and insert it.

    PostgreSQL: one ``gatehouse_audit_append`` call per event (the marker only keeps the transaction
    on one chain). SQLite: the first event of a transaction's own chain takes the lock and reads the
    head; later ones know both (``_ChainHeld``). ``transaction_chain`` false:
    an anchor round, which holds every chain's lock already; it keeps no state
    for the chains other than the transaction's own, and draws each id when it
    appends.
    """
    conn = transaction.get_connection()
    marker = _held.get(conn)
    if transaction_chain and conn.vendor == "postgresql":
        _marker_for(conn, chain).generation = _append_in_database(event)
        return
    if marker is None or marker.chain != chain or not marker.held(conn):
        chain_lock(chain)
        if transaction_chain:
            marker = _ChainHeld(chain, conn.run_on_commit)
            transaction.on_commit(marker)
            _held[conn] = marker
        else:
            marker = None
    if marker is not None:
        event.prev_hash, event.id = marker.next(conn, fresh=not transaction_chain)
    else:
        event.prev_hash, ids = _chain_next(chain, 1)
        event.id = ids[0]
    event.hash = event_hash(event_fields(event), event.prev_hash)
    _insert(event)
    if marker is not None:
        marker.appended(event, conn)


# The columns ``gatehouse_audit_append`` (migration 0021) takes, in its order; it fills id, prev_hash and hash.
APPEND_COLUMNS = (
    "chain", "at", "actor_id", "actor_label", "action", "subject_type", "subject_id", "thread_id", "graph", "details",
)  # fmt: skip
_APPEND_CALL = (
    "FROM gatehouse_audit_append("
    "%s, %s::smallint, %s, %s, %s::timestamptz, %s::integer, %s, %s, %s, %s, %s::uuid, %s, %s::jsonb)"
)
# With the webhook subscriptions' generation (migration 0024) read in the same statement: the outbox, which
# every event reaches inside its transaction, knows from it whether the subscriptions it has are current.
_GENERATION = "(SELECT value FROM gatehouse_webhook_generation WHERE id = 1)"
_APPEND_SQL = f"SELECT event_id, event_prev_hash, event_hash, {_GENERATION} {_APPEND_CALL}"
_APPEND_SQL_MIGRATING = f"SELECT event_id, event_prev_hash, event_hash, NULL {_APPEND_CALL}"  # no 0024 yet


def hashed_parts(fields: dict[str, Any]) -> tuple[str, str]:
    """``canonical`` of an event's hashed fields split around its id's value, for an id not drawn yet:
    ``head + str(id) + tail == canonical({**fields, "id": id})`` (keys are sorted, so "id" has one place)."""
    before = {key: value for key, value in fields.items() if key < "id"}
    after = {key: value for key, value in fields.items() if key > "id"}
    head = canonical(before)[:-1] + ("," if before else "") + '"id":'
    tail = "," + canonical(after)[1:] if after else "}"
    return head, tail


@functools.cache
def _append_fields() -> tuple[Field[Any, Any], ...]:
    by_column = {f.column: f for f in AuditEvent._meta.concrete_fields}
    return tuple(by_column[column] for column in APPEND_COLUMNS)


def _append_arguments(event: AuditEvent) -> tuple[str, str, list[Any]]:
    """What ``gatehouse_audit_append`` takes for ``event``: the canonical fields hashed around its id (drawn
    by the function), and the values of ``APPEND_COLUMNS``."""
    fields = event_fields(event)
    del fields["id"]
    head, tail = hashed_parts(fields)
    return head, tail, [field.get_db_prep_save(getattr(event, field.attname), connection) for field in _append_fields()]


def _append_in_database(event: AuditEvent) -> int | None:
    """PostgreSQL: lock the event's chain, link, number, hash and insert it in one round trip.

    ``gatehouse_audit_append`` (migration 0021) draws the id, so the hash's input is sent as the canonical
    fields around it. Returns the webhook subscriptions' generation the statement saw (None while
    ``migrate`` runs: the table may not be there yet).
    """
    head, tail, values = _append_arguments(event)
    with rows.fixed_cursor() as cursor:
        sql = _APPEND_SQL_MIGRATING if _migrating else _APPEND_SQL
        cursor.execute(sql, [_LOCK_CLASS, values[0], head, tail, *values[1:]])
        event.id, event.prev_hash, event.hash, generation = cursor.fetchone()
    event._state.adding = False
    event._state.db = connection.alias
    return None if generation is None else int(generation)


def subscriptions_generation() -> int | None:
    """The webhook subscriptions' generation (migration 0024) as read by this transaction's last audit
    append, or None (no append yet in this transaction, SQLite, or ``migrate`` running).

    Read with the append, so an in-transaction subscriber of the event (the outbox) can tell without a
    statement of its own whether subscriptions it read earlier are still the table as this transaction
    sees it: every committed change to them moves the number, and numbers are never reused.
    """
    conn = transaction.get_connection()
    marker = _held.get(conn)
    if marker is None or not conn.in_atomic_block or not marker.held(conn):
        return None
    return marker.generation


def _event_new(
    *,
    chain: int,
    user: User | None,
    label: str,
    action: AuditAction | str,
    subject_type: str,
    subject_id: object,
    thread_id: Any,
    graph: str,
    details: dict[str, Any] | None,
) -> AuditEvent:
    """An event to append to ``chain``, stamped now; its id and hashes come with the append."""
    return AuditEvent(
        chain=chain,
        at=timezone.now(),
        actor=user,
        actor_label=label,
        action=str(action),  # the stored value, also what the hash covers
        subject_type=subject_type,
        subject_id=str(subject_id),
        thread_id=thread_id,
        graph=graph,
        details=json.loads(canonical(details or {})),  # stored as it is hashed
    )


def _append(event: AuditEvent, *, transaction_chain: bool = False) -> AuditEvent:
    """Append ``event`` (``_event_new``) to its chain and publish it."""
    if _chains_missing():  # ``migrate`` before the chains: the one chain there was
        event.chain = LEGACY_CHAIN
    if event.chain == LEGACY_CHAIN:
        _append_unpartitioned(event)
    else:
        _append_to(event.chain, event, transaction_chain=transaction_chain)
    events_publish(event)
    return event


# --- while ``migrate`` runs: data migrations from before the chains --------------------------------
# Data migrations before 0019 (the role definitions) change permissions, which approvals.security
# audits through this module and today's model; the table has no ``chain`` column yet then. Their
# events go to the one chain there was, written as the code of that time wrote them.

_LEGACY_LOCK_KEY = 0x6761746568  # the one chain's lock before partitioning
_migrating = False


def _migrate_running(**_: object) -> None:
    global _migrating
    _migrating = True


def _migrate_done(**_: object) -> None:
    global _migrating
    _migrating = False


pre_migrate.connect(_migrate_running, dispatch_uid="approvals.audit.migrate_running")
post_migrate.connect(_migrate_done, dispatch_uid="approvals.audit.migrate_done")


def _chains_missing() -> bool:
    if not _migrating:
        return False
    with connection.cursor() as cursor:
        columns = connection.introspection.get_table_description(cursor, AuditEvent._meta.db_table)
    return all(column.name != "chain" for column in columns)


def _append_unpartitioned(event: AuditEvent) -> None:
    """Append to chain 0 as before partitioning: one lock, the newest event overall as the head."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LEGACY_LOCK_KEY])
    event.prev_hash = AuditEvent.objects.order_by("-id").values_list("hash", flat=True).first() or GENESIS
    event.hash = event_hash(event_fields(event), event.prev_hash)
    fields = [f for f in AuditEvent._meta.concrete_fields if f.name not in ("id", "chain")]
    columns = ", ".join(connection.ops.quote_name(f.column or f.name) for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {AuditEvent._meta.db_table} ({columns}) "  # noqa: S608 - names from the model
            f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING id",
            [f.get_db_prep_save(getattr(event, f.attname), connection) for f in fields],
        )
        event.id = cursor.fetchone()[0]
    event._state.adding = False


def audit_record(
    *,
    actor: User | AnonymousUser | None,
    action: AuditAction | str,
    subject_type: str,
    subject_id: object,
    thread_id: Any = None,
    graph: str = "",
    details: dict[str, Any] | None = None,
    actor_label: str | None = None,
) -> AuditEvent:
    """Append one event to the chain of its thread (or subject), in the caller's transaction."""
    return AuditEntry(
        action=action,
        subject_type=subject_type,
        subject_id=subject_id,
        thread_id=thread_id,
        graph=graph,
        details=details,
        actor=actor,
        actor_label=actor_label,
    ).recorded()


def _principal(actor: User | AnonymousUser | None, actor_label: str | None) -> tuple[User | None, str]:
    """The stored user and the label of an event's actor. A principal that was never stored (``manage.py``
    acting as a superuser) is recorded by its name."""
    named = actor if isinstance(actor, User) else None
    user = named if named is not None and named.pk is not None else None
    return user, actor_label or (named.get_username() if named is not None else "system")


@dataclass(frozen=True)
class AuditEntry:
    """One event for ``audit_record_all``: what ``audit_record`` takes."""

    action: AuditAction | str
    subject_type: str
    subject_id: object
    thread_id: Any = None
    graph: str = ""
    details: dict[str, Any] | None = None
    actor: User | AnonymousUser | None = None
    actor_label: str | None = None

    @classmethod
    def about_task(
        cls,
        task: ApprovalTask,
        action: AuditAction | str,
        details: dict[str, Any] | None = None,
        *,
        actor: User | AnonymousUser | None = None,
        actor_label: str | None = None,
    ) -> AuditEntry:
        """An event about ``task``: subject ``task``/its id, in the task's thread and graph."""
        return cls(action, "task", task.id, task.thread_id, task.graph, details, actor, actor_label)

    @classmethod
    def about_thread(
        cls,
        thread: Thread,
        action: AuditAction | str,
        details: dict[str, Any] | None = None,
        *,
        actor: User | AnonymousUser | None = None,
        actor_label: str | None = None,
    ) -> AuditEntry:
        """An event about ``thread``: subject ``thread``/its id, in that thread and its graph."""
        return cls(action, "thread", thread.id, thread.id, thread.graph, details, actor, actor_label)

    def shard_key(self) -> str:
        """What picks the event's chain: its thread, else its subject."""
        return f"thread:{self.thread_id}" if self.thread_id else f"{self.subject_type}:{self.subject_id}"

    def event(self, chain: int) -> AuditEvent:
        """The event to append to ``chain``, stamped now."""
        user, label = _principal(self.actor, self.actor_label)
        return _event_new(
            chain=chain,
            user=user,
            label=label,
            action=self.action,
            subject_type=self.subject_type,
            subject_id=self.subject_id,
            thread_id=self.thread_id,
            graph=self.graph,
            details=self.details,
        )

    def recorded(self) -> AuditEvent:
        """Appended alone (what ``audit_record`` does)."""
        if not transaction.get_connection().in_atomic_block:
            raise RuntimeError("audit_record must run inside the transaction of the change it records")
        return _append(self.event(_transaction_chain(self.shard_key())), transaction_chain=True)


def audit_record_all(entries: list[AuditEntry]) -> list[AuditEvent]:
    """Append ``entries`` in order, in the caller's transaction: what as many ``audit_record`` calls append.

    On PostgreSQL several go in one statement (``gatehouse_audit_append_all``, migration 0025): each is
    locked, linked, numbered and hashed as ``gatehouse_audit_append`` does it alone, in the order given,
    to the transaction's chain (the first event's, as for consecutive calls). Each is published to the
    domain's subscribers once all are appended, in order.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit_record_all must run inside the transaction of the changes it records")
    if len(entries) < 2 or connection.vendor != "postgresql" or _migrating:
        return [entry.recorded() for entry in entries]
    chain = _transaction_chain(entries[0].shard_key())
    events = [entry.event(chain) for entry in entries]
    _marker_for(transaction.get_connection(), chain).generation = _append_all_in_database(events)
    for event in events:
        events_publish(event)
    return events


# The arrays go in binary (``%b``): psycopg's text format escapes every quote of every element with a
# regular expression, and the hashed parts are canonical JSON, mostly quotes (3× the CPU of binary).
_APPEND_ALL_SQL = (
    "SELECT r.event_id, r.event_prev_hash, r.event_hash, "  # noqa: S608 - constants
    f"{_GENERATION} FROM gatehouse_audit_append_all(%s, %s::smallint, %b::text[], %b::text[], "
    "%b::timestamptz[], %b::integer[], %b::varchar[], %b::varchar[], %b::varchar[], %b::varchar[], "
    "%b::uuid[], %b::varchar[], %b::jsonb[]) r"
)


def _append_all_in_database(events: list[AuditEvent]) -> int | None:
    """PostgreSQL: ``_append_in_database`` for several events of one chain, in one statement; returns the
    webhook subscriptions' generation it saw."""
    heads, tails, values = zip(*(_append_arguments(event) for event in events), strict=True)
    columns = [list(column) for column in zip(*values, strict=True)][1:]  # the chain is one for all
    with rows.fixed_cursor() as cursor:
        cursor.execute(_APPEND_ALL_SQL, [_LOCK_CLASS, events[0].chain, list(heads), list(tails), *columns])
        found = cursor.fetchall()
    if len(found) != len(events):  # the function returns one row per event, or raised
        raise RuntimeError(f"the audit append returned {len(found)} rows for {len(events)} events")
    for event, (event_id, prev_hash, event_hash_, _) in zip(events, found, strict=True):
        event.id, event.prev_hash, event.hash = event_id, prev_hash, event_hash_
        event._state.adding = False
        event._state.db = connection.alias
    generation = found[0][3]
    return None if generation is None else int(generation)


# --- anchors: every chain's head pinned together, so a cut-off tail is seen ----------------------


@dataclass(frozen=True)
class ChainHead:
    chain: int
    head_id: int | None  # None: the chain is empty
    head_hash: str
    length: int

    def witness(self) -> list[Any]:
        return [self.head_id, self.head_hash, self.length]


def chain_heads() -> dict[int, ChainHead]:
    """Every non-empty chain's newest event and length. Rows never change, so the two queries agree."""
    tops = {
        row["chain"]: (row["top"], row["n"])
        for row in AuditEvent.objects.order_by().values("chain").annotate(top=Max("id"), n=Count("id"))
    }
    hashes = dict(AuditEvent.objects.filter(id__in=[top for top, _ in tops.values()]).values_list("id", "hash"))
    return {chain: ChainHead(chain, top, hashes[top], n) for chain, (top, n) in tops.items()}


def audit_anchor() -> list[AuditAnchor]:
    """Pin every chain's head at one moment; returns the AuditAnchor rows, one per chain.

    Run periodically (Celery beat). Under every chain's lock (taken in
    ascending order: a writer holds one chain's lock only, so nothing
    deadlocks), the heads form one consistent cut of the trail. Each chain
    1..N gets an ``audit.anchor`` event whose details hold its own previous
    head and, under ``heads``, every locked chain's head (chain → [id, hash,
    length]): the chains witness each other, and ``audit_chain_check`` checks
    the witnesses. Each AuditAnchor row pins one chain: its new anchor event,
    or for a chain nothing appends to any more (0, or beyond a lowered
    ``GATEHOUSE_AUDIT_CHAINS``) its head as it is. With
    ``GATEHOUSE_AUDIT_ANCHOR_SINK`` set the rows are also appended, after
    commit, to a file outside the database.
    """
    active = range(1, chains_configured() + 1)
    with transaction.atomic():
        for chain in active:
            chain_lock(chain)
        heads = chain_heads()

        def head_of(chain: int) -> ChainHead:
            return heads.get(chain, ChainHead(chain, None, GENESIS, 0))

        witnessed = {str(chain): head_of(chain).witness() for chain in (LEGACY_CHAIN, *active)}
        at = timezone.now()
        anchors = []
        for chain in sorted({*heads, *active}):
            head = head_of(chain)
            if chain in active:
                event = _append(
                    _event_new(
                        chain=chain,
                        user=None,
                        label="system",
                        action=AuditAction.AUDIT_ANCHOR,
                        subject_type="audit",
                        subject_id=head.head_id or 0,
                        thread_id=None,
                        graph="",
                        details={
                            "chain": chain,
                            "head_id": head.head_id,
                            "head_hash": head.head_hash,
                            "length": head.length,
                            "heads": witnessed,
                        },
                    )
                )
                pinned = (event.pk, event.hash, head.length + 1)
            else:  # nothing appends to it any more; it is among ``heads``, so it has a head
                pinned = (cast(int, head.head_id), head.head_hash, head.length)
            anchors.append(
                AuditAnchor.objects.create(at=at, chain=chain, head_id=pinned[0], head_hash=pinned[1], length=pinned[2])
            )
        sink = anchor_sink_path()
        if sink is not None:
            transaction.on_commit(lambda: anchor_sink_catch_up(anchors, path=sink))
    return anchors


def anchor_sink_path() -> Path | None:
    value = settings.GATEHOUSE_AUDIT_ANCHOR_SINK
    return Path(value) if value else None


def anchor_line(anchor: AuditAnchor) -> dict[str, Any]:
    return {
        "anchor": anchor.pk,
        "at": anchor.at.isoformat(),
        "chain": anchor.chain,
        "head_id": anchor.head_id,
        "head_hash": anchor.head_hash,
        "length": anchor.length,
    }


def _sink_write(fd: int, anchors: Iterable[AuditAnchor]) -> None:
    """One JSON line per anchor in one write (the file is opened O_APPEND, 0600: nothing there is
    rewritten), flushed to disk. The file lives outside the database, so whoever can delete audit rows
    and anchors through SQL cannot make them agree again with this copy."""
    line = "".join(json.dumps(anchor_line(a), sort_keys=True, separators=(",", ":")) + "\n" for a in anchors).encode()
    if line:
        os.write(fd, line)
        os.fsync(fd)


class AnchorSinkError(Exception):
    """Anchors committed in the database could not be appended to ``GATEHOUSE_AUDIT_ANCHOR_SINK``."""


# How much of the sink's end is read to find the newest anchor it holds (a round is a line per chain).
SINK_TAIL_BYTES = 64 * 1024


def anchor_sink_catch_up(round_: list[AuditAnchor], *, path: Path) -> int:
    """Append to the sink every anchor newer than the newest it holds; an empty (new) sink starts with this
    ``round_``, since anchors from before it was configured were never meant for it. Returns how many
    were appended.

    A write that failed (the directory missing, the disk full, a mount gone) used to raise in an on-commit
    hook after the anchors committed, and nothing wrote them later: the sink silently lacked them. Each
    round now writes what the sink is behind by, so the next one after the fault is fixed catches up.
    The sink is locked while it is read and appended to, so two rounds at once do not both append the
    same anchors. Raises ``AnchorSinkError`` naming the setting, after logging it.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        raise _sink_failed(path, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        newest = _sink_newest_anchor(fd)
        anchors = round_ if newest is None else list(AuditAnchor.objects.filter(id__gt=newest).order_by("id"))
        _sink_write(fd, anchors)
        return len(anchors)
    except OSError as exc:
        raise _sink_failed(path, exc) from exc
    finally:
        os.close(fd)  # and the lock with it


def _sink_failed(path: Path, exc: OSError) -> AnchorSinkError:
    error = AnchorSinkError(
        f"GATEHOUSE_AUDIT_ANCHOR_SINK={path}: cannot append the audit anchors ({exc.strerror or exc}). They are "
        "committed in the database; the next anchoring round (GATEHOUSE_ANCHOR_SECONDS) appends every anchor the "
        "sink lacks once the file can be written, and `audit_verify --sink` reports them missing until then."
    )
    log.error("%s", error)
    return error


def _sink_newest_anchor(fd: int) -> int | None:
    """The largest anchor id among the sink's last lines (None for an empty sink)."""
    size = os.fstat(fd).st_size
    start = max(0, size - SINK_TAIL_BYTES)
    tail = os.pread(fd, size - start, start)
    lines = tail.splitlines()
    if start:
        lines = lines[1:]  # the first may be cut
    ids = []
    for line in lines:
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            ids.append(int(json.loads(line)["anchor"]))
    return max(ids, default=None)


@dataclass(frozen=True)
class AnchorRef:
    """An anchor to check a chain against: a row of AuditAnchor or a line of the sink."""

    source: str  # "anchor #12" or "sink line 3"
    anchor_id: int | None
    head_id: int
    head_hash: str
    length: int
    chain: int = LEGACY_CHAIN  # anchors from before partitioning pinned the one chain there was


def anchors_stored() -> list[AnchorRef]:
    return [
        AnchorRef(f"anchor #{a.pk}", a.pk, a.head_id, a.head_hash, a.length, a.chain)
        for a in AuditAnchor.objects.order_by("id")
    ]


class SinkUnreadable(Exception):
    pass


def anchors_from_sink(path: Path) -> list[AnchorRef]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SinkUnreadable(f"cannot read the anchor sink {path}: {exc}") from exc
    refs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            refs.append(
                AnchorRef(
                    f"sink line {number}",
                    int(row["anchor"]),
                    int(row["head_id"]),
                    str(row["head_hash"]),
                    int(row["length"]),
                    int(row.get("chain", LEGACY_CHAIN)),
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SinkUnreadable(f"{path}:{number}: not an anchor line ({exc})") from exc
    return refs


@dataclass
class ChainState:
    """One chain as the walk has seen it so far."""

    length: int = 0
    head_id: int | None = None
    head_hash: str = GENESIS
    before: tuple[int | None, str, int] = (None, GENESIS, 0)  # the head before this one: (id, hash, length)
    actor_from: int | None = None  # the chain's first event whose hash covers its actor's user id (the cut-over)

    @property
    def head(self) -> tuple[int | None, str, int]:
        return (self.head_id, self.head_hash, self.length)


@dataclass
class ChainReport:
    checked: int = 0  # events in the trail, all chains
    broken: AuditEvent | None = None  # the first event (by id) whose link or hash does not match
    verified: int = 0  # events before ``broken`` (all of them when nothing is broken)
    newest_id: int | None = None
    problems: list[str] = field(default_factory=list)  # anchors and witnesses the chains no longer agree with
    chains: dict[int, ChainState] = field(default_factory=dict)
    broken_in: dict[int, AuditEvent] = field(default_factory=dict)  # chain -> its first broken event
    actor_unhashed: int = 0  # events from before the actor's user id was hashed (their actor_id is not covered)

    @property
    def intact(self) -> bool:
        return self.broken is None and not self.problems


def _witnesses_check(event: AuditEvent, chains: dict[int, ChainState]) -> list[str]:
    """An anchor event's ``heads`` against the chains as the walk reached it.

    Its round held every witnessed chain's lock and appended the anchor events
    in ascending chain order: a chain below this one already has its own anchor
    event of the round on top of the head it witnessed; this chain and those
    above it (and chain 0, which nothing appends to) are still at it.
    """
    heads = event.details.get("heads") if isinstance(event.details, dict) else None
    if not isinstance(heads, dict):
        return []  # an anchor from before partitioning: pinned by its AuditAnchor row only
    problems = []
    own = (event.details.get("head_id"), event.details.get("head_hash"), event.details.get("length"))
    if own != chains.get(event.chain, ChainState()).head:
        problems.append(f"WITNESS: anchor event #{event.pk} (chain {event.chain}) names another head of its own chain")
    for key, claim in sorted(heads.items()):
        try:
            chain, claimed = int(key), (claim[0], str(claim[1]), int(claim[2]))
        except (ValueError, TypeError, IndexError):
            problems.append(f"WITNESS: anchor event #{event.pk} has an unreadable head for chain {key!r}")
            continue
        state = chains.get(chain, ChainState())
        seen = state.before if LEGACY_CHAIN < chain < event.chain else state.head
        if seen != claimed:
            problems.append(
                f"WITNESS: anchor event #{event.pk} (chain {event.chain}) saw chain {chain} at {claimed[2]} events "
                f"up to #{claimed[0]}; chain {chain} now disagrees (rewritten, cut or reordered before it)"
            )
    return problems


def audit_chain_check(*, anchors: Iterable[AnchorRef] = ()) -> ChainReport:
    """Walk the trail once in id order: every chain's links and hashes, the anchors' witnesses, every anchor's head.

    A hash chain alone cannot see its newest events go (what is left still
    links up), nor an emptied table: an anchor recorded that a chain had N
    events up to event #H with hash X, so a chain that is shorter, or whose
    event #H is gone, different or elsewhere, lost or rewrote its tail.
    """
    refs = list(anchors)
    wanted = {ref.head_id for ref in refs}
    report = ChainReport()
    seen: dict[int, tuple[int, int, str]] = {}  # anchored event id -> (chain, position, hash)
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        state = report.chains.setdefault(event.chain, ChainState())
        prev = state.head_hash
        form = None
        if event.prev_hash == prev:
            form = hash_form(event_fields(event), prev, event.hash, before_cutover=_before_cutover(event, state))
        if form is None:
            report.broken_in.setdefault(event.chain, event)
            if report.broken is None:
                report.broken = event
                report.verified = report.checked
            if event.prev_hash == prev and _downgraded(event, prev):
                report.problems.append(
                    f"DOWNGRADED: event #{event.pk} in chain {event.chain} is hashed without its actor's user id, "
                    f"after event #{state.actor_from}, from which on every event of the chain covers it"
                )
        else:
            if form and state.actor_from is None:
                state.actor_from = event.pk
            if not form:
                report.actor_unhashed += 1
            if event.action == AuditAction.AUDIT_ANCHOR and event.chain != LEGACY_CHAIN:
                report.problems += _witnesses_check(event, report.chains)
        state.before = state.head
        state.head_id, state.head_hash = event.pk, event.hash
        state.length += 1
        report.checked += 1
        report.newest_id = event.pk
        if event.pk in wanted:
            seen[event.pk] = (event.chain, state.length, event.hash)
    for ref in refs:
        report.problems += _anchor_check(ref, seen.get(ref.head_id), report.chains.get(ref.chain, ChainState()))
    if report.broken is None:
        report.verified = report.checked
    return report


def _downgraded(event: AuditEvent, prev_hash: str) -> bool:
    """Whether a broken ``event`` is one hashed without its actor's user id where its chain's events cover it."""
    return hash_form(event_fields(event), prev_hash, event.hash, before_cutover=True) is False


def _before_cutover(event: AuditEvent, state: ChainState) -> bool:
    """Whether ``event`` may be in the form from before the actor's user id was hashed: its chain has no event
    covering it before this one. Chain 0 is exempt: nothing appends to it, and its head is pinned by every
    anchor round, so its events are checked in either form wherever they are."""
    return state.actor_from is None or event.chain == LEGACY_CHAIN


def _anchor_check(ref: AnchorRef, found: tuple[int, int, str] | None, state: ChainState) -> list[str]:
    if found is None:
        if state.length < ref.length or state.head_id is None or state.head_id < ref.head_id:
            newest = f"newest #{state.head_id}" if state.head_id is not None else "empty"
            return [
                f"TAIL LOST: {ref.source} recorded {ref.length} events up to #{ref.head_id} in chain {ref.chain}; "
                f"the chain now has {state.length} ({newest})"
            ]
        return [f"event #{ref.head_id} pinned by {ref.source} is missing from chain {ref.chain}"]
    chain, position, digest = found
    if chain != ref.chain:
        return [f"event #{ref.head_id} pinned by {ref.source} in chain {ref.chain} is in chain {chain} now"]
    if digest != ref.head_hash:
        return [f"REWRITTEN: event #{ref.head_id} no longer has the hash {ref.source} recorded"]
    if position != ref.length:
        return [
            f"events before #{ref.head_id} in chain {ref.chain} were removed or added: {ref.source} counted "
            f"{ref.length}, the chain has {position}"
        ]
    return []


def anchors_compare(stored: list[AnchorRef], sink: list[AnchorRef]) -> list[str]:
    """Anchors in the sink that the database no longer holds, or holds with other values; and anchors the
    database holds that the sink lacks, from its first line on.

    The sink is the witness outside the database: an anchor it lacks is a round nobody outside could check
    (its write failed and was not caught up, or the line was removed), so it is a finding, not a count to
    read past. Anchors older than the sink's first line predate it (the sink was configured later) and are
    not (``anchors_predating_sink``)."""
    by_id = {ref.anchor_id: ref for ref in stored}
    problems = []
    for ref in sink:
        mine = by_id.get(ref.anchor_id)
        if mine is None:
            problems.append(f"anchor #{ref.anchor_id} ({ref.source}) is missing from the database")
        elif (mine.chain, mine.head_id, mine.head_hash, mine.length) != (
            ref.chain,
            ref.head_id,
            ref.head_hash,
            ref.length,
        ):
            problems.append(f"anchor #{ref.anchor_id} in the database differs from {ref.source}")
    in_sink = {ref.anchor_id for ref in sink}
    first = min((i for i in in_sink if i is not None), default=None)
    lacking = [
        ref.anchor_id
        for ref in stored
        if ref.anchor_id is not None and first is not None and ref.anchor_id > first and ref.anchor_id not in in_sink
    ]
    if lacking:
        more = f" and {len(lacking) - 10} more" if len(lacking) > 10 else ""
        shown = ", ".join(f"#{i}" for i in lacking[:10]) + more
        problems.append(
            f"MISSING FROM THE SINK: {len(lacking)} anchors the database holds were never written to the sink or "
            f"were removed from it ({shown}); nothing outside the database witnessed them"
        )
    return problems


def anchors_predating_sink(stored: list[AnchorRef], sink: list[AnchorRef]) -> int:
    """Stored anchors older than the sink's first line: made before the sink was configured."""
    first = min((ref.anchor_id for ref in sink if ref.anchor_id is not None), default=None)
    return sum(1 for ref in stored if ref.anchor_id is not None and (first is None or ref.anchor_id < first))


def audit_verify() -> tuple[int, AuditEvent | None]:
    """Walk the trail; return (events verified before the first broken one, that event or None).

    Links and hashes only; ``audit_chain_check`` also checks anchors and their witnesses.
    """
    report = audit_chain_check()
    return report.verified, report.broken


# --- shorthands for the two commonest subjects: what is recorded stays visible at the call ------------
# Each is exactly ``audit_record`` with the subject, thread and graph taken from the object, so a row
# written through one is the row the long form writes (tests/approvals/test_audit_subjects.py).

if TYPE_CHECKING:
    from approvals.models import ApprovalTask
    from runtime.models import Thread


def audit_task(
    *,
    task: ApprovalTask,
    actor: User | AnonymousUser | None,
    action: AuditAction | str,
    details: dict[str, Any] | None = None,
    actor_label: str | None = None,
) -> AuditEvent:
    """Record ``action`` about ``task``: subject ``task``/its id, in the task's thread and graph."""
    return AuditEntry.about_task(task, action, details, actor=actor, actor_label=actor_label).recorded()


def audit_thread(
    *,
    thread: Thread,
    actor: User | AnonymousUser | None,
    action: AuditAction | str,
    details: dict[str, Any] | None = None,
    actor_label: str | None = None,
) -> AuditEvent:
    """Record ``action`` about ``thread``: subject ``thread``/its id, in that thread and its graph."""
    return AuditEntry.about_thread(thread, action, details, actor=actor, actor_label=actor_label).recorded()
