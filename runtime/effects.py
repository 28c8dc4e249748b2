"""The effect ledger: side effects in action nodes that happen once, however often the node runs.

Usage in an action node::

    def open_account(state):
        args = {"applicant": state["applicant"]["name"], "tier": state["tier"]}
        account = perform_effect(
            "open_account",
            lambda key: bank.open_account(**args, idempotency_key=key),
            args=args,
        )
        return {"account": account}

``args`` is what the effect is executed with. The ledger records it (canonical
JSON and its SHA-256) so ``decisions_verify`` can prove the effect is what the
decision before it signed, and refuses a replay of the same key with different
arguments (as a payment provider refuses an idempotency key reused with another
body): a key can never stand for two different effects.

The intent is recorded before the call and the result after it. A run that
lost its lease (another worker took the thread over) is refused before it
records the intent or calls out (``LeaseLost``); a call already under way when
the lease was lost is absorbed by the idempotency key. A node that
runs again (a retry, a redelivered run) gets the recorded result back without
calling the outside world. If the process dies between the call and the
record, the next attempt calls again *with the same key*, so a provider that
honours idempotency keys (Stripe, Adyen, most banking APIs) answers with the
first result instead of acting twice.

A call that raises is recorded as one of two statuses, because they ask an operator different things:

- ``failed``: the provider did not act. It answered with a refusal (a 4xx, a "not done, retry" 503),
  or the call failed before its request left (the code raised, the connection was refused).
- ``unknown`` (outcome unknown): the request may have reached the provider and no answer came back
  (a timeout, a connection cut mid-request). The payment may have been made. Recording it as
  ``failed`` told an operator the money had not moved when it had.

``effect_outcome_unknown`` decides, walking the exception and its causes (outermost first) as
``runtime.retry`` does; the first that says something decides:

1. the call's own word: ``EffectNotPerformed`` (failed) or ``EffectOutcomeUnknown`` (unknown), for a
   client that knows its provider better than the ledger can;
2. errors raised before a request left: ``ConnectionRefusedError``, a DNS failure, httpx's
   ``ConnectError``, ``ConnectTimeout``, ``PoolTimeout``, ``UnsupportedProtocol``, ``ProxyError``,
   ``LocalProtocolError``: failed;
3. errors that leave open whether the request arrived: ``TimeoutError`` (``socket.timeout``), the
   rest of ``ConnectionError`` (reset, aborted, broken pipe), and the rest of httpx's
   ``RequestError`` (``ReadTimeout``, ``WriteTimeout``, ``ReadError``, ``RemoteProtocolError``…):
   unknown.

Anything else (a refusal the client raised as its own error, a bug in the node) is ``failed``: a
client that can lose an answer some other way says so with ``EffectOutcomeUnknown``. An ``unknown``
effect stays ``unknown`` when a later attempt fails without reaching the provider: that attempt says
nothing of the first. Either way the error is re-raised, and a retry calls again under the same key:
the provider does it, or answers with what it did, and that result is recorded as ``done``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import connection, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone
from langgraph.config import get_config

from runtime import rows, signals
from runtime.branches import scoped_effect_key
from runtime.fencing import config_fence, stale
from runtime.jsonable import canonical_dumps
from runtime.models import Effect, EffectStatus, Run, Thread
from runtime.retry import class_names, exception_chain

T = TypeVar("T")


def effect_key(name: str, *parts: object) -> str:
    """The default idempotency key: stable per thread and effect name (plus any parts you add)."""
    thread_id = get_config()["configurable"]["thread_id"]
    return ":".join(["gh", str(thread_id), name, *(str(p) for p in parts)])


class EffectArgsConflict(RuntimeError):
    """The idempotency key was already used for an effect with other arguments."""


class EffectNotPerformed(Exception):
    """Raised (or subclassed) by an effect's call: the provider certainly did not act. Recorded ``failed``."""


class EffectOutcomeUnknown(Exception):
    """Raised (or subclassed) by an effect's call: the request may have reached the provider, and no
    answer came back. Recorded ``unknown``."""


# Matched by (module, name) along the MRO, not imported: the runtime does not depend on httpx, and
# subclasses (a client's own wrappers) count too. httpx sets ``__module__ = "httpx"`` on its public names.
_NOT_SENT = {
    ("builtins", "ConnectionRefusedError"),
    ("socket", "gaierror"),
    ("httpx", "ConnectError"),
    ("httpx", "ConnectTimeout"),
    ("httpx", "PoolTimeout"),
    ("httpx", "UnsupportedProtocol"),
    ("httpx", "ProxyError"),
    ("httpx", "LocalProtocolError"),
}
_MAYBE_SENT = {
    ("builtins", "TimeoutError"),
    ("builtins", "ConnectionError"),
    ("httpx", "RequestError"),
}


def effect_outcome_unknown(exc: BaseException) -> bool:
    """True when ``exc``, raised by an effect's call, leaves open whether the provider acted (module docstring)."""
    for link in exception_chain(exc):
        if isinstance(link, EffectNotPerformed | EffectOutcomeUnknown):
            return isinstance(link, EffectOutcomeUnknown)
        names = class_names(link)
        if names & _NOT_SENT:
            return False
        if names & _MAYBE_SENT:
            return True
    return False


def _failure_status(exc: BaseException) -> Value | Case:
    """The status a call that raised ``exc`` leaves, as an expression over the row's current one."""
    if effect_outcome_unknown(exc):
        return Value(EffectStatus.UNKNOWN.value)
    # An attempt that never reached the provider says nothing of an earlier one that may have: a
    # payment that timed out, then a retry refused at connect, may still have been made.
    return Case(
        When(status=EffectStatus.UNKNOWN, then=Value(EffectStatus.UNKNOWN.value)),
        default=Value(EffectStatus.FAILED.value),
    )


def canonical_json(value: Any) -> str:
    return canonical_dumps(value)


def args_digest(args: Any) -> str:
    return hashlib.sha256(canonical_json(args).encode()).hexdigest()


def perform_effect(
    name: str, call: Callable[[str], T], *, key: str | None = None, args: dict[str, Any] | None = None
) -> T:
    """Run ``call(idempotency_key)`` at most once per key and return its (recorded) result.

    ``args`` (JSON) are the arguments the effect is executed with; recorded
    with the intent. The result must be JSON-serialisable: it is what a replay returns.
    """
    config = get_config()
    configurable = config.get("configurable", {})
    # On a branch started by time travel the key is scoped to the branch (runtime.branches):
    # a forked payment is a new payment, a retry within the branch is still the same one.
    key = scoped_effect_key(key or effect_key(name), configurable)
    digest = args_digest(args) if args is not None else ""
    thread_id = str(configurable.get("thread_id"))
    # The run executing this node (the executor's claimed run): named by id, not read.
    run_id = configurable.get("gatehouse_run_id") or None
    effect = Effect(
        key=key,
        name=name,
        run_id=Run._meta.pk.to_python(run_id) if run_id else None,
        args=args,
        args_digest=digest,
        calls=1,  # recorded with the intent: the call follows it (as the separate bump did)
    )
    fenced = config_fence(config)
    if fenced is not None:
        # A run under a fence (every run the executor claims): the intent is written only while
        # the thread's fence is still the run's, by the insert itself. Nothing written means the
        # key is recorded already or another worker claimed the thread since (it performs the
        # effect): one read tells which.
        effect.thread_id = Thread._meta.pk.to_python(thread_id)  # a UUID, as receivers key their caches
        inserted = _intent_insert(effect, fence=fenced[1])
        if not inserted and (fence := _thread_fence(thread_id)) != fenced[1]:
            raise stale(fenced[0], fenced[1], fence)
    else:
        # Outside a claimed run (a graph driven directly): the thread's row, if it has one, is named.
        known = _thread_fence(thread_id) is not None
        effect.thread_id = Thread._meta.pk.to_python(thread_id) if known else None
        inserted = _intent_insert(effect)
    if not inserted:
        effect = Effect.objects.get(key=key)
        if not effect.args_digest and digest:
            # Recorded by a version that kept no arguments: record them now.
            Effect.objects.filter(pk=effect.pk, args_digest="").update(args=args, args_digest=digest)
        elif effect.args_digest != digest:
            raise EffectArgsConflict(
                f"effect {key!r} was recorded with arguments {canonical_json(effect.args)}; "
                f"refusing to perform it with {canonical_json(args)}"
            )
        if effect.status == EffectStatus.DONE:
            return effect.result  # type: ignore[return-value]
        Effect.objects.filter(pk=effect.pk).update(calls=F("calls") + 1, run=run_id)
    try:
        result = call(key)
    except Exception as exc:
        # Never over a recorded result: a worker whose call failed after it lost its lease (a zombie
        # woken with its connection cut) must not undo the payment the worker that took over recorded.
        Effect.objects.filter(pk=effect.pk).exclude(status=EffectStatus.DONE).update(
            status=_failure_status(exc), error=repr(exc)[:2000]
        )
        raise
    with transaction.atomic():
        # The first to record the result wins: a worker whose call was already
        # under way when it lost its lease got the same (replayed) answer.
        if _result_record(effect, result):
            signals.effect_executed.send(sender=Effect, effect=effect)
    return result


# The ledger's two hot statements, written out (PostgreSQL; SQLite 3.35+ has ON CONFLICT and RETURNING too).
# The insert's columns, in its order.
_INTENT_COLUMNS = (
    "key",
    "name",
    "thread_id",
    "run_id",
    "status",
    "result",
    "args",
    "args_digest",
    "error",
    "calls",
    "created_at",
    "completed_at",
)
_INTENT_INSERT = (
    'INSERT INTO runtime_effect ("key", name, thread_id, run_id, status, result, args, args_digest, error, calls, '
    "created_at, completed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    'ON CONFLICT ("key") DO NOTHING RETURNING id'
)
_RESULT_UPDATE = (
    "UPDATE runtime_effect SET status = %s, result = %s, error = '', completed_at = %s "
    "WHERE id = %s AND status <> %s RETURNING calls, run_id"
)


@functools.cache
def _intent_insert_fenced(vendor: str) -> str:
    """The intent's insert, made only while the thread's fence has the value given last.

    ``INSERT … SELECT`` does not type its values by the columns as ``VALUES`` does: on PostgreSQL
    each is cast to its column's type. (SQLite needs the ``WHERE`` before ``ON CONFLICT`` anyway.)
    """
    by_column = {f.column: f for f in Effect._meta.concrete_fields}
    if vendor == "postgresql":
        values = ", ".join(_typed(by_column[column]) for column in _INTENT_COLUMNS)
    else:
        values = ", ".join(["%s"] * len(_INTENT_COLUMNS))
    columns = ", ".join(connection.ops.quote_name(column) for column in _INTENT_COLUMNS)
    return (
        f"INSERT INTO runtime_effect ({columns}) SELECT {values} FROM runtime_thread "  # noqa: S608 - our names
        'WHERE id = %s AND fence = %s ON CONFLICT ("key") DO NOTHING RETURNING id'
    )


def _typed(field: Any) -> str:
    """A value typed as ``field``'s column. Strings go as text: an explicit cast to ``varchar(n)``
    would cut a longer key silently, where storing text refuses it, as the plain insert does."""
    kind = str(field.db_type(connection))
    return "%s::text" if kind.startswith(("varchar", "char")) else f"%s::{kind}"


_THREAD_FENCE = "SELECT fence FROM runtime_thread WHERE id = %s"


def _thread_fence(thread_id: str) -> int | None:
    """The thread's fence (None: no such thread)."""
    with rows.fixed_cursor() as cursor:
        cursor.execute(_THREAD_FENCE, [rows.db_value(Thread, "pk", thread_id)])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def _intent_insert(effect: Effect, *, fence: int | None = None) -> bool:
    """Insert the effect's row unless its key is recorded already, in one statement; True if inserted.

    The read before, and the savepoint around the insert, that a get-or-create sends are not needed:
    a key recorded already (a retry, a redelivered run, another worker) inserts nothing. With
    ``fence``, nothing is inserted either unless the effect's thread still has that fence.
    """
    by_column = {f.column: f for f in Effect._meta.concrete_fields}
    fields = [by_column[column] for column in _INTENT_COLUMNS]
    values = [f.get_db_prep_save(f.pre_save(effect, True), connection) for f in fields]
    sql = _INTENT_INSERT
    if fence is not None:
        sql = _intent_insert_fenced(connection.vendor)
        values += [rows.db_value(Thread, "pk", effect.thread_id), fence]
    with rows.fixed_cursor() as cursor:
        cursor.execute(sql, values)
        row = cursor.fetchone()
    if row is None:
        return False
    effect.pk = row[0]
    effect._state.adding, effect._state.db = False, connection.alias
    return True


def _result_record(effect: Effect, result: Any) -> bool:
    """Record the result unless one is recorded already; True if this call recorded it.

    ``effect`` then holds the row as written: ``RETURNING`` gives what this process does not
    know (the calls of every attempt, the run of the last one) instead of a read back.
    """
    now = timezone.now()
    params = [
        EffectStatus.DONE.value,
        Effect._meta.get_field("result").get_db_prep_save(result, connection),
        Effect._meta.get_field("completed_at").get_db_prep_save(now, connection),
        effect.pk,
        EffectStatus.DONE.value,
    ]
    with rows.fixed_cursor() as cursor:
        cursor.execute(_RESULT_UPDATE, params)
        row = cursor.fetchone()
    if row is None:
        return False
    effect.status, effect.result, effect.error, effect.completed_at = EffectStatus.DONE, _stored(result), "", now
    effect.calls, effect.run_id = row[0], Effect._meta.get_field("run").to_python(row[1])
    return True


def _stored(value: Any) -> Any:
    """``value`` as the JSON column gives it back (``Effect.result`` has the default encoder)."""
    return json.loads(json.dumps(value))
