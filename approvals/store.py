"""Long-term memory (LangGraph Store) as the domain serves it: permission, redaction, audit.

Every surface — ``/lg/store/...`` (lgplatform/store_api.py), the console's store
pages, the audit of a graph run's writes — goes through these functions:

- reads check ``permissions.store_require`` and mask the namespace's sensitive
  paths (``gatehouse.store.namespaces.<first label>.sensitive_paths``, the same
  path syntax as a graph's ``sensitive_paths``, applied to the item's value) for
  principals without "view sensitive";
- a filter that would compare a masked field with a real value matches nothing,
  and a filter key that is a path (``a.b``) is refused, so a filter cannot probe
  what the mask hides;
- nobody changes what they cannot see: a person or token who sees the
  namespace's sensitive paths masked keeps them by leaving them out (or sending
  the mask back), cannot set, overwrite or drop them (422 ``value.<path>``), and
  cannot delete an item holding them (403) — ``store_value_guard`` and
  ``store_delete_guard``, the same rule as a thread's state edits
  (``redaction.hidden_kept``). A graph run's own writes are the graph's, not a
  person's: they are not held to it;
- every write (put or delete, by a person, a token or a graph run) is audited in
  the transaction that performs it; the audit row holds the value with the
  namespace's sensitive paths masked for everyone. A refused write audits nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection, transaction

from approvals.audit import audit_record
from approvals.errors import Forbidden, InvalidInput
from approvals.models import AuditAction
from approvals.permissions import (
    can,
    graphs_visible,
    store_namespace_visible,
    store_redaction,
    store_require,
)
from approvals.redaction import MASK, HiddenEdited, filter_split, hidden_kept, hidden_removed, redact
from runtime.models import StoreOperation, Thread
from runtime.store import namespace_label, store_config, store_get

if TYPE_CHECKING:
    from langgraph.store.base import Item, SearchItem

Principal = User | AnonymousUser
AUDIT_VALUE_MAX_CHARS = 8000
TTL_MAX_MINUTES = 100 * 366 * 24 * 60  # a century: beyond it a datetime overflows
_SEARCH_SCAN_MAX = 1000  # items read to answer one filter on masked fields
# Labels in a namespace: what an applicant's or a user's memory needs, with room; a deeper one is no
# organisation but an abuse (each label is stored in every item's key and listed back whole).
NAMESPACE_DEPTH_MAX = 20


@contextmanager
def _store_refusals(field: str) -> Iterator[None]:
    """The library's refusals of an input (an unsupported filter operator, an unsafe filter key) are 422s."""
    try:
        yield
    except ValueError as exc:  # InvalidNamespaceError included
        raise InvalidInput(f"the store refused it: {exc}", field=field) from None


def store_namespace_check(namespace: Any, *, field: str = "namespace", allow_empty: bool = False) -> tuple[str, ...]:
    """A namespace as LangGraph's store accepts it, or a 422 naming the label."""
    if not isinstance(namespace, (list, tuple)):
        raise InvalidInput("a namespace is a list of labels", field=field)
    if not namespace and not allow_empty:
        raise InvalidInput("a namespace needs at least one label", field=field)
    if len(namespace) > NAMESPACE_DEPTH_MAX:
        raise InvalidInput(
            f"a namespace is at most {NAMESPACE_DEPTH_MAX} labels deep (got {len(namespace)})", field=field
        )
    for i, label in enumerate(namespace):
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidInput("a namespace label is a non-empty string without '.' or NUL", field=f"{field}[{i}]")
        if len(label) > 200:
            raise InvalidInput("a namespace label is at most 200 characters", field=f"{field}[{i}]")
    if namespace and namespace[0] == "langgraph":
        raise InvalidInput('the root label "langgraph" is reserved by LangGraph', field=f"{field}[0]")
    return tuple(namespace)


def _key_check(key: Any) -> str:
    if not isinstance(key, str) or not key or "\x00" in key or len(key) > 512:
        raise InvalidInput("a key is a non-empty string of at most 512 characters without NUL", field="key")
    return key


def _graph_of(namespace: tuple[str, ...]) -> str:
    rule = store_config().rule(namespace)
    return rule.graphs[0] if rule and len(rule.graphs) == 1 else ""


def _audit_value(namespace: tuple[str, ...], value: dict[str, Any] | None) -> dict[str, Any]:
    if value is None:
        return {}
    rule = store_config().rule(namespace)
    shown, applied = redact(value, list(rule.sensitive_paths) if rule else [])
    text = json.dumps(shown, sort_keys=True, default=str)
    if len(text) > AUDIT_VALUE_MAX_CHARS:
        return {"value_fields": sorted(str(k) for k in value), "value_chars": len(text), "redacted_paths": applied}
    return {"value": shown, "redacted_paths": applied}


def store_write_audit(
    *,
    actor: User | None,
    actor_label: str | None,
    namespace: tuple[str, ...],
    key: str,
    value: dict[str, Any] | None,
    thread_id: Any = None,
    run_id: Any = None,
) -> None:
    """The audit row of one store write; must run inside the write's transaction."""
    label = namespace_label(namespace)
    details: dict[str, Any] = {"namespace": list(namespace), "key": key, **_audit_value(namespace, value)}
    if run_id is not None:
        details["run_id"] = str(run_id)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action=AuditAction.STORE_ITEM_DELETED if value is None else AuditAction.STORE_ITEM_PUT,
        subject_type="store_item",
        subject_id=f"{label}/{key}"[:64],
        thread_id=thread_id,
        graph=_graph_of(namespace),
        details=details,
    )


# --- writes ------------------------------------------------------------------------------------------

_ITEM_LOCK_CLASS = 0x67737469  # "gsti": pg_advisory_xact_lock(class, hashtext(item)), one person's write at a time


def _item_lock(namespace: tuple[str, ...], key: str) -> None:
    """Serialise people's writes to one item until the transaction ends, so a write judged against the
    stored value (a masked writer's) is not judged against a value another writer is replacing.

    SQLite (embedded, one process) serialises writers already.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                [_ITEM_LOCK_CLASS, json.dumps([list(namespace), key])],
            )


def _stored_value(namespace: tuple[str, ...], key: str) -> dict[str, Any] | None:
    with _store_refusals("namespace"):
        item = store_get().get(namespace, key, refresh_ttl=False)
    return None if item is None else item.value


def store_value_guard(*, actor: User, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> dict[str, Any]:
    """The value ``actor`` writes at ``namespace``/``key``, held to "nobody changes what they cannot see".

    For a writer who sees some of the namespace's sensitive paths masked (``store_redaction``), the
    stored value is read and the rule of a thread's state edits applies (``redaction.hidden_kept``):
    a hidden field left out, or sent back as the mask, keeps its stored value; any other value at a
    hidden location (the stored value included: it would be a guess the answer tells right from
    wrong), a hidden field where none was stored, or a put that drops one (a parent replaced, a list
    cut) is a 422 naming it (``value.income``). The mask anywhere else is a 422 ``value``, for every
    writer. Call holding ``_item_lock``.
    """
    paths = store_redaction(actor, namespace)
    if paths:
        try:
            value = hidden_kept(value, _stored_value(namespace, key) or {}, paths, whole=True)
        except HiddenEdited as exc:
            raise InvalidInput(
                "this field is redacted for you, so you cannot change it: leave it out to keep it",
                field=f"value.{exc.location}",
            ) from None
    if MASK in json.dumps(hidden_removed(value, paths), ensure_ascii=False):
        # A value read back masked must never overwrite the real one it hides.
        raise InvalidInput("the value holds a redacted placeholder; send the real values", field="value")
    return value


def store_delete_guard(*, actor: User, namespace: tuple[str, ...], key: str) -> None:
    """Refuse (403) to delete an item holding values ``actor`` sees masked: deleting them is changing
    what they cannot see. Call holding ``_item_lock``."""
    paths = store_redaction(actor, namespace)
    if not paths:
        return
    stored = _stored_value(namespace, key)
    hidden = redact(stored, paths)[1] if stored is not None else []
    if hidden:
        raise Forbidden(
            f"this item holds fields redacted for you ({', '.join(hidden)}); someone who may see them must delete it",
            field="key",
        )


def store_item_put(
    *,
    actor: User,
    namespace: Any,
    key: Any,
    value: Any,
    index: Any = None,
    ttl: float | None = None,
) -> None:
    namespace = store_namespace_check(namespace)
    key = _key_check(key)
    store_require(actor, namespace, write=True)
    if not isinstance(value, dict):
        raise InvalidInput("a store value is a JSON object", field="value")
    if (
        index is not None
        and index is not False
        and not (isinstance(index, list) and all(isinstance(p, str) and p for p in index))
    ):
        raise InvalidInput("index is false or a list of field paths", field="index")
    if ttl is not None and not 0 < ttl <= TTL_MAX_MINUTES:
        raise InvalidInput(f"ttl is a number of minutes in (0, {TTL_MAX_MINUTES}]", field="ttl")
    with transaction.atomic():
        _item_lock(namespace, key)
        # A refusal here rolls back before anything is audited or written.
        value = store_value_guard(actor=actor, namespace=namespace, key=key, value=value)
        # Audit first: if the store write fails, the audit row rolls back with it.
        store_write_audit(actor=actor, actor_label=None, namespace=namespace, key=key, value=value)
        with _store_refusals("value"):
            store_get().put(namespace, key, value, index=index, ttl=ttl)


def store_item_delete(*, actor: User, namespace: Any, key: Any) -> None:
    namespace = store_namespace_check(namespace)
    key = _key_check(key)
    store_require(actor, namespace, write=True)
    with transaction.atomic():
        _item_lock(namespace, key)
        store_delete_guard(actor=actor, namespace=namespace, key=key)
        store_write_audit(actor=actor, actor_label=None, namespace=namespace, key=key, value=None)
        store_get().delete(namespace, key)


# --- reads ---------------------------------------------------------------------------------------------


def item_out(item: Item, paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = item.dict()
    if paths:
        out["value"] = redact(item.value, paths)[0]
    return out


def store_item_get(
    *, user: Principal, namespace: Any, key: Any, refresh_ttl: bool | None = None
) -> dict[str, Any] | None:
    namespace = store_namespace_check(namespace)
    key = _key_check(key)
    store_require(user, namespace)
    with _store_refusals("namespace"):
        item = store_get().get(namespace, key, refresh_ttl=refresh_ttl)
    return None if item is None else item_out(item, store_redaction(user, namespace))


def _readable_prefixes(user: Principal, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The prefixes ``user`` may search under ``prefix`` (an empty prefix: one per permitted first label)."""
    store_require(user, prefix)
    if prefix or graphs_visible(user) is None:
        return [prefix]
    return [(label,) for label in sorted(store_config().namespaces) if _label_visible(user, label)]


def _label_visible(user: Principal, label: str) -> bool:
    return store_namespace_visible(user, (label,))


# A page of the store: what one search or listing may ask for (the API's schemas say the same).
STORE_LIMIT_MAX = 1000
STORE_OFFSET_MAX = 100_000


def _page_check(limit: int, offset: int) -> None:
    """Refuse a page the store cannot be asked for: the database's LIMIT takes ``limit + offset``."""
    if not 1 <= limit <= STORE_LIMIT_MAX:
        raise InvalidInput(f"limit must be from 1 to {STORE_LIMIT_MAX}", field="limit")
    if not 0 <= offset <= STORE_OFFSET_MAX:
        raise InvalidInput(f"offset must be from 0 to {STORE_OFFSET_MAX}", field="offset")


def store_items_search(
    *,
    user: Principal,
    namespace_prefix: Any,
    filter: dict[str, Any] | None = None,
    limit: int = 10,
    offset: int = 0,
    query: str | None = None,
    refresh_ttl: bool | None = None,
) -> list[dict[str, Any]]:
    prefix = store_namespace_check(namespace_prefix, field="namespace_prefix", allow_empty=True)
    _page_check(limit, offset)
    if not isinstance(filter or {}, dict):
        raise InvalidInput("filter is an object of field → value", field="filter")
    prefixes = _readable_prefixes(user, prefix)
    found: list[tuple[SearchItem, list[str]]] = []
    for each in prefixes:
        with _store_refusals("filter"):
            found += _search_one(user, each, filter or {}, limit + offset, query, refresh_ttl)
    if len(prefixes) > 1:  # one store answer per prefix: merge them as one store would order them
        found.sort(key=lambda pair: (pair[0].score or 0.0, pair[0].updated_at), reverse=True)
    return [item_out(item, paths) for item, paths in found[offset : offset + limit]]


def _search_one(
    user: Principal,
    prefix: tuple[str, ...],
    wanted: dict[str, Any],
    count: int,
    query: str | None,
    refresh_ttl: bool | None,
) -> list[tuple[SearchItem, list[str]]]:
    store = store_get()
    paths = store_redaction(user, prefix) if prefix else _any_redaction(user)
    if not paths:
        items = store.search(prefix, filter=wanted or None, limit=count, query=query, refresh_ttl=refresh_ttl)
        return [(item, store_redaction(user, item.namespace)) for item in items]
    if query and store_config().index:
        raise Forbidden("a semantic query over a namespace with sensitive fields needs 'view sensitive'", field="query")
    for name in wanted:
        if "." in name or "[" in name:
            raise InvalidInput("filter keys are top-level field names here", field=f"filter.{name}")
    split = filter_split(wanted, paths)
    if split is None:
        return []  # a real value at a masked field: the masked values can never equal it
    plain, masked = split
    if not masked:
        items = store.search(prefix, filter=plain or None, limit=count, refresh_ttl=refresh_ttl)
        return [(item, store_redaction(user, item.namespace)) for item in items]
    out: list[tuple[SearchItem, list[str]]] = []
    for item in store.search(prefix, filter=plain or None, limit=_SEARCH_SCAN_MAX, refresh_ttl=refresh_ttl):
        item_paths = store_redaction(user, item.namespace)
        shown = redact(item.value, item_paths)[0]
        if all(shown.get(k) == v for k, v in masked.items()):
            out.append((item, item_paths))
            if len(out) >= count:
                break
    return out


def _any_redaction(user: Principal) -> list[str]:
    """Every sensitive path a reader may meet across namespaces (an empty prefix for an all-graphs reader)."""
    paths: set[str] = set()
    for label in store_config().namespaces:
        paths.update(store_redaction(user, (label,)))
    return sorted(paths)


def store_namespaces_list(
    *,
    user: Principal,
    prefix: Any = None,
    suffix: Any = None,
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[list[str]]:
    wanted_prefix = store_namespace_check(prefix or [], field="prefix", allow_empty=True)
    _page_check(limit, offset)
    wanted_suffix = store_namespace_check(suffix, field="suffix") if suffix else None
    found: list[tuple[str, ...]] = []
    for each in _readable_prefixes(user, wanted_prefix):
        with _store_refusals("prefix"):
            found += store_get().list_namespaces(
                prefix=each or None, suffix=wanted_suffix, max_depth=max_depth, limit=limit + offset
            )
    found = sorted(set(found))
    return [list(ns) for ns in found[offset : offset + limit]]


# --- what runs did (the thread page) ---------------------------------------------------------------------


def store_operations_visible(*, user: Principal, thread: Thread, limit: int = 200) -> list[StoreOperation]:
    """A thread's store reads and writes, newest first, in the namespaces ``user`` may read.

    The thread was already permission-checked; rows name namespaces and keys, never values.
    """
    if not can(user, "runtime.view_store"):
        return []
    rows = StoreOperation.objects.filter(thread=thread).select_related("run").order_by("-id")[:limit]
    return [row for row in rows if store_namespace_visible(user, tuple(row.namespace.split(".")))]
