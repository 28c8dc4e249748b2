"""The effect ledger behind ``runtime.effects.perform_effect``: an intent recorded before the call, under
the run's fence; the result after it; a key recorded already answered from its row. The promises it keeps
are in runtime/effects.py's docstring; this module needs Django, which that one does not import.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Case, F, Subquery, Value, When
from django.utils import timezone
from langgraph.config import get_config

from runtime import rows, signals
from runtime.branches import scoped_effect_key
from runtime.effects import EffectArgsConflict, args_digest, canonical_json, effect_key, effect_outcome_unknown
from runtime.fencing import config_fence, stale
from runtime.models import Effect, EffectStatus, Run, RunCancelAction, RunKind, RunStatus, Thread

T = TypeVar("T")


def _cycle_scoped(key: str, run_id: str | None, configurable: dict[str, Any]) -> str:
    """The default key in a later input cycle of its thread: ``key~<the cycle's start run>``.

    A finished thread given new input (LangGraph's "invoke it again") runs its graph from the start: a
    new expense is a new payment. Under the thread's one key the second was skipped, answered with the
    first's result, or (other arguments) refused after its approval. The cycle is the thread's latest
    start run up to the run executing: its resumes and retries share its keys. The first cycle keeps the
    thread's key, as every effect recorded before this was so; and a key of this cycle recorded under the
    thread's key before it was so keeps answering.

    A start run rolled back (``runtime.cancel``) took its checkpoints with it, not what it did in the world:
    the thread's next start run continues its cycle. The LangGraph client's "a new message cancels the old
    run" (``multitask_strategy="rollback"``) paid a second time when the first run was cancelled mid-payment.
    """
    if not run_id:
        return key  # a graph driven directly, outside a claimed run: no cycles to tell apart
    # The thread's latest start runs up to this one, in one fixed statement (prepared on PostgreSQL):
    # composed by the ORM, its two subqueries' compilation cost more CPU than the rest of the ledger.
    with rows.fixed_cursor() as cursor:
        cursor.execute(
            _CYCLE_STARTS,
            [
                RunStatus.CANCELLED.value,
                RunCancelAction.ROLLBACK.value,
                Run._meta.pk.get_db_prep_value(run_id, connection),
                RunKind.START.value,
            ],
        )
        starts = [(Run._meta.pk.to_python(found), bool(rolled_back)) for found, rolled_back in cursor.fetchall()]
    cycle = 0
    while cycle + 1 < len(starts) and starts[cycle + 1][1]:
        cycle += 1  # the start before it was rolled back: this one continues that one's cycle
    if cycle + 1 >= len(starts):
        return key  # the thread's first cycle (or more rolled-back starts than are read: the oldest read)
    started_at = Subquery(Run.objects.filter(pk=starts[cycle][0]).values("created_at")[:1])
    if Effect.objects.filter(key=scoped_effect_key(key, configurable), run__created_at__gte=started_at).exists():
        return key
    return f"{key}~{starts[cycle][0].hex[:12]}"


# The run's thread's start runs up to the run, newest first (the run_thread_created index), each with
# whether it was rolled back.
_CYCLE_STARTS = (
    "SELECT s.id, (s.status = %s AND s.cancel_action = %s) FROM runtime_run s "
    "INNER JOIN runtime_run m ON m.thread_id = s.thread_id "
    "WHERE m.id = %s AND s.kind = %s AND s.created_at <= m.created_at ORDER BY s.created_at DESC LIMIT 32"
)


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


def ledger_perform(
    name: str, call: Callable[[str], T], *, key: str | None = None, args: dict[str, Any] | None = None
) -> T:
    """``runtime.effects.perform_effect`` under Gatehouse: the intent recorded (fenced) before the call,
    the result after it, a recorded result returned without calling (module docstring of runtime.effects)."""
    config = get_config()
    configurable = config.get("configurable", {})
    # The run executing this node (the executor's claimed run): named by id, not read.
    run_id = configurable.get("gatehouse_run_id") or None
    # The default key is the thread's input cycle's (a given key is the caller's to scope); on a branch
    # started by time travel either is scoped to the branch (runtime.branches): a forked payment is a new
    # payment, a retry within the branch is still the same one.
    key = scoped_effect_key(key or _cycle_scoped(effect_key(name), run_id, configurable), configurable)
    digest = args_digest(args) if args is not None else ""
    thread_id = str(configurable.get("thread_id"))
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
            # Recorded by a version that kept no arguments: record them now, if nobody has since the read.
            # The row count tells who recorded first: none written means another caller did, and the key
            # is bound to its arguments (and its status may have moved on): read them, then judge as below.
            if Effect.objects.filter(pk=effect.pk, args_digest="").update(args=args, args_digest=digest):
                effect.args, effect.args_digest = args, digest
            else:
                effect = Effect.objects.get(pk=effect.pk)
        if effect.args_digest != digest:
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
    """The thread's fence (None: no such thread, or an id no thread can have)."""
    try:
        key = rows.db_value(Thread, "pk", thread_id)
    except ValidationError:
        return None  # not a UUID: a graph driven directly under an id of its own (a unit test's "t1")
    with rows.fixed_cursor() as cursor:
        cursor.execute(_THREAD_FENCE, [key])
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
