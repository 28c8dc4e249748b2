"""Services and selectors behind the LangGraph Platform-compatible API (``lgplatform.api``).

The official ``langgraph_sdk`` speaks in assistants, threads, runs and
``Command(resume=...)``; Gatehouse speaks in threads, runs and approval tasks.
This module translates, and adds no second way to change anything:

- a run with ``input`` is a start run on an existing thread (``run_enqueue`` in
  one transaction with its audit event, like ``services.thread_start``);
- a run with ``command={"resume": ...}`` decides the thread's pending approval
  tasks through ``services.task_decide`` — same permission checks, same
  validation, same audit trail, same resume run as a decision in the console;
- a run with neither retries a failed thread (``services.thread_retry``) or
  continues past a static breakpoint (an approve decision on its task).

State is read only through ``approvals.gateway``; thread and run rows change only
through the runtime's services (``runtime.threads``, ``runtime.runs``), and what a
caller may see is ``approvals.permissions``' to say. The ``*_out`` builders return
the typed response schemas of ``lgplatform.responses``.
"""

from __future__ import annotations

import contextlib
import re
import sys
import tomllib
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import (
    Case,
    CharField,
    F,
    Func,
    Model,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.fields.json import KeyTransform, compile_json_path  # type: ignore[attr-defined]
from django.utils import timezone

from approvals import gateway, permissions, services, time_travel
from approvals.audit import audit_record, audit_thread
from approvals.errors import Conflict, DomainError, InvalidInput, NotFound
from approvals.inputs import metadata_check
from approvals.models import ApprovalTask, AuditAction, Decision, TaskKind, TaskStatus
from approvals.payloads import GENERIC_DECISIONS, NOT_GIVEN, REASON_MAX_CHARS, DecisionRequest, resume_outcome
from approvals.redaction import filter_split, redact
from approvals.run_cancel import run_cancel as run_cancel_service
from lgplatform.responses import (
    AssistantOut,
    AssistantVersionOut,
    CheckpointRefOut,
    InfoFlagsOut,
    InfoHostOut,
    InfoOut,
    InterruptOut,
    RunOut,
    StateTaskOut,
    SubgraphSchemasOut,
    ThreadOut,
    ThreadStateOut,
    ThreadUpdateStateOut,
)
from runtime import threads as runtime_threads
from runtime.models import ACTIVE_RUN_STATUSES, Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.registry import GraphRegistryError, UnknownGraph, graph_get, graph_names, registry_entries
from runtime.runs import RESERVED_METADATA_PREFIX, SignedCommandRefused, ThreadBusy, run_enqueue
from runtime.state import CheckpointView, StateUnreadable, StepTask, SubgraphView, thread_state_read
from runtime.state_schema import FieldError, has_validators, json_schema_for, values_validate
from runtime.store import StoreConfigError

# The namespace LangGraph Platform derives its per-graph assistant ids from, so
# a graph has the same assistant_id here as on the Platform.
M = TypeVar("M", bound=Model)
ASSISTANT_NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")

THREAD_STATUS_OUT: dict[str, str] = {
    ThreadStatus.IDLE: "idle",
    ThreadStatus.BUSY: "busy",
    ThreadStatus.INTERRUPTED: "interrupted",
    ThreadStatus.COMPLETED: "idle",
    ThreadStatus.FAILED: "error",
    ThreadStatus.CANCELLED: "idle",
}
THREAD_STATUS_IN = {
    "idle": [ThreadStatus.IDLE, ThreadStatus.COMPLETED, ThreadStatus.CANCELLED],
    "busy": [ThreadStatus.BUSY],
    "interrupted": [ThreadStatus.INTERRUPTED],
    "error": [ThreadStatus.FAILED],
}
RUN_STATUS_OUT: dict[str, str] = {
    RunStatus.QUEUED: "pending",
    RunStatus.RUNNING: "running",
    # A run that reached an ``interrupt()`` ended well: LangGraph Server says "success" and marks the
    # *thread* interrupted; a run's "interrupted" means it was cancelled.
    RunStatus.INTERRUPTED: "success",
    RunStatus.SUCCEEDED: "success",
    RunStatus.FAILED: "error",
    RunStatus.CANCELLED: "interrupted",  # as LangGraph Server shows a cancelled run; ``error`` says who and why
}
RUN_STATUSES_IN: dict[str, list[str]] = {
    out: [status for status, shown in RUN_STATUS_OUT.items() if shown == out] for out in set(RUN_STATUS_OUT.values())
} | {"timeout": []}  # a status of LangGraph Server's that no Gatehouse run is shown with
_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")
COPY_NODE = "__copy__"  # LangGraph's as_node for a copy of the checkpoint
END = "__end__"  # langgraph.graph.END, as_node that clears the pending tasks (the API's import does not load LangGraph)
# A failed run's error as the runtime stores it (``traceback.format_exception_only``): "<Type>: <message>",
# the type module-qualified unless builtin, then LangGraph's note on each task it came up through.
_ERROR_TYPED = re.compile(r"(?P<type>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:: (?P<message>.*))?", re.DOTALL)
_TASK_NOTE = re.compile(r"(?:\nDuring task with name '[^\n]*' and id '[^\n]*')+\Z")
# Gatehouse's own run limits, named as LangGraph Server names the same failure (runtime.controls).
_ERROR_TYPES_OUT = {"RecursionLimitReached": "GraphRecursionError", "RunTimeout": "TimeoutError"}
# Failures that are no exception of the graph's, shown as a ``RunError`` with the whole text: a graph not
# registered or that could not be built, a misconfigured store, a signed command LangGraph refused, and
# "" (no exception: the runtime gave up on the run, ``runtime.runs._gave_up``).
_RUN_ERROR_TYPES = frozenset(
    (
        "",
        UnknownGraph.__name__,
        GraphRegistryError.__name__,
        StoreConfigError.__name__,
        SignedCommandRefused.__name__,
        "UnknownInterruptError",  # langgraph.errors' (not imported here: the API's import does not load LangGraph)
    )
)


# --- assistants: one per registered graph ------------------------------------------------


def assistant_id_for(graph: str) -> str:
    return str(uuid.uuid5(ASSISTANT_NAMESPACE, graph))


def assistants_visible(user: permissions.Principal) -> list[str]:
    return permissions.graph_names_visible(user)


def assistants_found(
    user: permissions.Principal, *, graph_id: str | None, name: str | None, metadata: dict[str, Any] | None
) -> list[str]:
    """The graphs whose assistants ``assistants.search`` and ``assistants.count`` find: ``graph_id`` exactly,
    ``name`` as a case-insensitive part of it, ``metadata`` as equal to the only metadata an assistant has
    (its creator, ``system``)."""
    names = assistants_visible(user)
    if graph_id:
        names = [n for n in names if n == graph_id]
    if name:
        names = [n for n in names if name.lower() in n.lower()]
    return names if _assistant_metadata_matches(metadata) else []


def _assistant_metadata_matches(metadata: dict[str, Any] | None) -> bool:
    # An assistant here carries no metadata but its creator's (``created_by: system``).
    return not metadata or metadata == {"created_by": "system"}


def assistant_graph(user: permissions.Principal, assistant_id: str) -> str:
    """The graph an assistant id (or a graph name, as the SDK allows) stands for."""
    for name in assistants_visible(user):
        if assistant_id in (name, assistant_id_for(name)):
            return name
    raise NotFound(f"assistant {assistant_id} not found", field="assistant_id")


def xray_parse(value: str | None) -> bool | int:
    """``?xray=`` as LangGraph Server reads it: true/false, or how many levels of subgraphs to draw."""
    if value in (None, "", "false", "False"):
        return False
    if value in ("true", "True"):
        return True
    try:
        depth = int(str(value))
    except ValueError:
        raise InvalidInput("must be true, false or a positive number of levels", field="xray") from None
    if depth <= 0:
        raise InvalidInput("must be true, false or a positive number of levels", field="xray")
    return depth


def assistant_drawing(user: permissions.Principal, assistant_id: str, *, xray: bool | int = False) -> dict[str, Any]:
    """The assistant's graph as LangGraph Server draws it: LangGraph's drawable graph as JSON.

    Conditional edges come out marked ``conditional`` and subgraphs drawn to ``xray`` levels; each
    node's data keeps its name, not the class path of the runnable behind it.
    """
    compiled = graph_get(assistant_graph(user, assistant_id)).compiled()
    try:
        drawn: dict[str, Any] = compiled.get_graph(xray=xray).to_json()
    except NotImplementedError:
        raise InvalidInput("the graph does not support visualization", field="assistant_id") from None
    for node in drawn.get("nodes", []):
        if isinstance(node.get("data"), dict):
            node["data"].pop("id", None)
    return drawn


def gatehouse_version() -> str:
    """The installed distribution's version, else ``pyproject.toml``'s: the image copies the source without
    installing it as a package, where asking the distribution raised (``/info`` answered 500)."""
    try:
        return metadata.version("gatehouse")
    except metadata.PackageNotFoundError:
        pass
    try:
        with open(Path(settings.BASE_DIR) / "pyproject.toml", "rb") as file:
            return str(tomllib.load(file)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def assistant_subgraphs(
    user: permissions.Principal, assistant_id: str, *, namespace: str | None, recurse: bool
) -> dict[str, SubgraphSchemasOut]:
    """``assistants.get_subgraphs``: each subgraph's schemas by its namespace (node names joined by ``|``), as
    LangGraph lists them (``get_subgraphs``): the graph's own subgraphs, or those under ``namespace``, and with
    ``recurse`` theirs too. An unknown namespace lists none, as on LangGraph Server."""
    name = assistant_graph(user, assistant_id)
    compiled = graph_get(name).compiled()
    return {
        ns: subgraph_schemas(subgraph) for ns, subgraph in compiled.get_subgraphs(namespace=namespace, recurse=recurse)
    }


def subgraph_schemas(subgraph: Any) -> SubgraphSchemasOut:
    """A subgraph's schemas, built as ``/schemas`` builds its graph's (``json_schema_for``, free-form where a key
    has no JSON schema); LangGraph's own for a subgraph that is no ``StateGraph``."""
    builder = getattr(subgraph, "builder", None)
    state = getattr(builder, "state_schema", None)
    if state is None:
        return SubgraphSchemasOut(
            input_schema=subgraph.get_input_jsonschema(),
            output_schema=subgraph.get_output_jsonschema(),
            state_schema=subgraph.get_output_jsonschema(),
            config_schema={},
            context_schema=None,
        )
    return SubgraphSchemasOut(
        input_schema=json_schema_for(getattr(builder, "input_schema", None) or state),
        output_schema=json_schema_for(getattr(builder, "output_schema", None) or state),
        state_schema=json_schema_for(state),
        config_schema={},  # as /schemas: runs take no configurable values
        context_schema=None,
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def assistant_changed_at(graph: str) -> datetime:
    """When an assistant was last changed: the modification time of the file its graph is loaded from (a
    graph is registered, not created; the file is what a deploy changes). The epoch if it cannot be read."""
    module = sys.modules.get(f"gatehouse_graphs.{graph}")  # as runtime.registry imports a graph's file
    file = getattr(module, "__file__", None)
    if file is None:
        file = Path(settings.GATEHOUSE_GRAPHS).parent / graph_get(graph).spec.rpartition(":")[0]
    try:
        return datetime.fromtimestamp(Path(file).stat().st_mtime, tz=UTC)
    except OSError:
        return _EPOCH


def assistants_ordered(names: list[str], sort_by: str | None, sort_order: str | None) -> list[str]:
    """``assistants.search``'s order, as LangGraph Server's: by ``created_at`` unless ``sort_by`` says
    otherwise, newest first unless ``sort_order`` is ``asc``. Graphs of one file (one time) keep the order
    LangGraph Server creates their assistants in, ``langgraph.json``'s."""
    if sort_by == "assistant_id":
        names = sorted(names, key=assistant_id_for)
    elif sort_by in ("graph_id", "name"):
        names = sorted(names)
    else:  # created_at, updated_at (the same here)
        registered = {name: i for i, name in enumerate(registry_entries())}
        names = sorted(names, key=lambda n: (assistant_changed_at(n), registered.get(n, -1)))
    return names if sort_order == "asc" else names[::-1]


def server_info() -> InfoOut:
    """What this server offers, as LangGraph Server's ``/info`` says it: assistants are listed and read (not made),
    crons are served (lgplatform/crons.py), and nothing is traced to LangSmith."""
    return InfoOut(
        version=gatehouse_version(),
        langgraph_py_version=metadata.version("langgraph"),
        flags=InfoFlagsOut(assistants=True, crons=True, langsmith=False),
        host=InfoHostOut(kind="gatehouse"),
    )


def assistant_versions(
    user: permissions.Principal, assistant_id: str, *, metadata: dict[str, Any] | None, limit: int, offset: int
) -> list[AssistantVersionOut]:
    """``assistants.get_versions``: an assistant here is its registered graph, so it has one version (1), which a
    deploy replaces; ``metadata`` filters it as ``assistants/search`` does (only ``created_by: system`` matches)."""
    graph = assistant_graph(user, assistant_id)
    if not _assistant_metadata_matches(metadata):
        return []
    current = assistant_out(graph).model_dump(exclude={"updated_at"})
    return [AssistantVersionOut(**current)][offset : offset + limit]


def assistant_out(graph: str) -> AssistantOut:
    entry = graph_get(graph)
    changed = assistant_changed_at(graph).isoformat()
    return AssistantOut(
        assistant_id=assistant_id_for(graph),
        graph_id=graph,
        name=graph,
        description=entry.description or None,
        config={},
        context={},
        metadata={"created_by": "system"},
        version=1,
        created_at=changed,
        updated_at=changed,
    )


# --- threads ------------------------------------------------------------------------------


def thread_get_for(user: permissions.Principal, thread_id: Any, *, with_failure: bool = False) -> Thread:
    """``with_failure``: a failed thread read with its last failed run's error and class (``_thread_error_type``),
    in the same statement: a state read shows the failed task's error by them."""
    # A thread created here before its first run has no graph yet: its creator still sees it.
    threads = permissions.threads_visible_or_own_unbound(user)
    if with_failure:
        threads = threads.annotate(**_last_failure())
    thread = threads.filter(pk=thread_id).first()
    if thread is None:
        raise NotFound(f"thread {thread_id} not found", field="thread_id")
    return thread


def _uuid(value: Any, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidInput("must be a UUID", field=field) from None


class _JsonTypeSqlite(Func):
    """SQLite's ``JSON_TYPE(column, '$."key"')``: ``true``, ``false``, ``null``, ``text``, ``integer``…"""

    function = "JSON_TYPE"
    output_field = CharField()

    def __init__(self, column: str, key: str) -> None:
        super().__init__(F(column), Value(compile_json_path([key])))


# What JSON_TYPE must say of a key compared with a value of these types. Django's SQLite KeyTransform reads
# JSON true, false and null as the text 'true', 'false' and 'null', so each matched its string too
# ({"flag": true} found {"flag": "true"}); PostgreSQL's jsonb equality tells them apart already.
_SQLITE_JSON_TYPES: dict[Any, str] = {True: "true", False: "false", None: "null"}


def json_keys_equal(qs: QuerySet[M], column: str, wanted: dict[str, Any]) -> QuerySet[M]:
    """``qs`` where the JSON ``column`` has each key of ``wanted`` equal to its value (threads, crons)."""
    # KeyTransform takes the key literally (a "__" in it is not a path), and
    # per-key equality works on SQLite as well as PostgreSQL.
    for index, (key, value) in enumerate(wanted.items()):
        alias = f"_{column}_{index}"
        qs = qs.annotate(**{alias: KeyTransform(key, column)}).filter(**{alias: value})
        if connection.vendor == "sqlite" and (value is None or isinstance(value, bool | str)):
            kind = "text" if isinstance(value, str) else _SQLITE_JSON_TYPES[value]
            qs = qs.annotate(**{f"{alias}_type": _JsonTypeSqlite(column, key)}).filter(**{f"{alias}_type": kind})
    return qs


# Keys ``thread_out`` reports from the thread's graph when its metadata has none of its own.
GRAPH_METADATA_KEYS = ("graph_id", "assistant_id")


def _metadata_filter(qs: QuerySet[Thread], wanted: dict[str, Any]) -> QuerySet[Thread]:
    """Filter on metadata as ``threads.get`` reports it: a thread bound to a graph by its first run has the
    ``graph_id`` and ``assistant_id`` of its graph, which its stored metadata does not hold."""
    qs = json_keys_equal(qs, "metadata", {k: v for k, v in wanted.items() if k not in GRAPH_METADATA_KEYS})
    for key in GRAPH_METADATA_KEYS:
        if key not in wanted:
            continue
        value = wanted[key]
        alias = f"_metadata_{key}"
        graphs = [g for g in qs.values_list("graph", flat=True).distinct() if g and _graph_metadata(g)[key] == value]
        stored = Q(metadata__has_key=key) & Q(**{alias: value})
        qs = qs.annotate(**{alias: KeyTransform(key, "metadata")}).filter(
            stored | (~Q(metadata__has_key=key) & Q(graph__in=graphs))
        )
    return qs


def _graph_metadata(graph: str) -> dict[str, str]:
    return {"graph_id": graph, "assistant_id": assistant_id_for(graph)}


def _values_filter(user: permissions.Principal, qs: QuerySet[Thread], wanted: dict[str, Any]) -> QuerySet[Thread]:
    """Filter on state values as the reader sees them: a redacted location compares as the mask.

    Comparing with the real values would be an oracle (0 results or 1 tells a
    masked date of birth). Per graph with sensitive paths the reader may not
    see: a filter naming a redacted location with a real value matches
    nothing; one naming it with the mask is checked against the masked values;
    one that reaches no redacted location compares in the database as before
    (equal real values are equal masked values, and vice versa).
    """
    masked_graphs = {g: p for g in graph_names() if (p := gateway.paths_masked_for(user, g))}
    if not masked_graphs:
        return json_keys_equal(qs, "values", wanted)
    plain_graphs = ~Q(graph__in=list(masked_graphs))
    matches = Q(pk__in=json_keys_equal(qs.filter(plain_graphs), "values", wanted).values("pk"))
    for graph, paths in masked_graphs.items():
        split = filter_split(wanted, paths)
        if split is None:
            continue  # it names a redacted location with a real value: nothing can match
        plain, masked = split
        candidates = json_keys_equal(qs.filter(graph=graph), "values", plain)
        if not masked:
            matches |= Q(pk__in=candidates.values("pk"))
            continue
        found = [
            pk
            for pk, values in candidates.values_list("pk", "values").iterator(chunk_size=500)
            if isinstance(values, dict) and _masked_equal(values, masked, paths)
        ]
        matches |= Q(pk__in=found)
    return qs.filter(matches)


def _masked_equal(values: dict[str, Any], wanted: dict[str, Any], paths: list[str]) -> bool:
    shown = redact({k: values[k] for k in wanted if k in values}, paths)[0]
    return all(k in shown and shown[k] == v for k, v in wanted.items())


def _threads_matching(
    user: permissions.Principal,
    *,
    status: str | None,
    metadata: dict[str, Any] | None,
    values: dict[str, Any] | None,
    ids: list[str] | None = None,
) -> QuerySet[Thread]:
    """The threads ``user`` may see that match a search's filters (values compared as the user sees them)."""
    qs = permissions.threads_visible_or_own_unbound(user)
    if status:
        qs = qs.filter(status__in=THREAD_STATUS_IN[status])
    if ids:
        qs = qs.filter(pk__in=[_uuid(i, f"ids[{n}]") for n, i in enumerate(ids)])
    if metadata:
        qs = _metadata_filter(qs, metadata)
    if values:
        qs = _values_filter(user, qs, values)
    return qs


def threads_count(
    *,
    user: permissions.Principal,
    status: str | None = None,
    metadata: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
) -> int:
    """``threads.count``: how many threads ``threads_search`` would find for ``user`` with these filters."""
    return _threads_matching(user, status=status, metadata=metadata, values=values).count()


def threads_search(
    *,
    user: permissions.Principal,
    status: str | None = None,
    metadata: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
    ids: list[str] | None = None,
    limit: int = 10,
    offset: int = 0,
    sort_by: str | None = None,
    sort_order: str | None = None,
) -> list[Thread]:
    """The page of threads ``user`` finds, each to be shown whole (``thread_out``): what showing them reads per
    thread is read here for the page at once, not per row. Their pending interrupts (``thread_interrupts``),
    and, for a reader who sees values masked, what each chat thread carried (``gateway.threads_carried_read``)."""
    qs = _threads_matching(user, status=status, metadata=metadata, values=values, ids=ids)
    column = {"thread_id": "id", None: "created_at"}.get(sort_by, sort_by or "created_at")
    order = column if sort_order == "asc" else f"-{column}"
    waiting = permissions.tasks_visible(user).filter(status=TaskStatus.PENDING, kind=TaskKind.INTERRUPT)
    interrupts = Prefetch("tasks", queryset=waiting.order_by("created_at"), to_attr=PENDING_INTERRUPTS)
    found = list(qs.order_by(order, "-id").prefetch_related(interrupts)[offset : offset + limit])
    gateway.threads_carried_read(user, found)
    return found


@transaction.atomic
def thread_create(
    *, actor: User, thread_id: str | None, metadata: dict[str, Any], if_exists: str | None
) -> tuple[Thread, bool]:
    """Create a thread with no run yet; ``metadata.graph_id`` binds it to a graph now, else the first run does."""
    permissions.require(actor, "runtime.start_thread", "create threads")
    graph = ""
    if "graph_id" in metadata:  # null, "" or false would be stored as the graph_id of a thread with none
        named = metadata["graph_id"]
        if not isinstance(named, str) or not named:
            raise InvalidInput("must be a graph name", field="metadata.graph_id")
        try:
            graph = assistant_graph(actor, named)
        except NotFound:
            # Named as the client sent it; the same answer for a graph that exists and is hidden from the caller.
            raise InvalidInput(f"no graph {named!r} you may start", field="metadata.graph_id") from None
        permissions.require_start(actor, graph)
    pk = _uuid(thread_id, "thread_id") if thread_id else uuid.uuid4()
    if Thread.objects.filter(pk=pk).exists():
        # An id names one thread: whether it is taken cannot be hidden from whoever tries to create it.
        # All else is: a thread the actor may not see is refused with the very answer a visible one gets
        # under "raise" (nothing of its graph, status or owner), and "do_nothing" returns only a thread
        # the actor may see; for any other it is the same 409, never a 404 that would tell the two apart.
        if if_exists == "do_nothing":
            with contextlib.suppress(NotFound):
                return thread_get_for(actor, pk), False
        raise Conflict(f"thread {pk} already exists", field="thread_id")
    try:
        with transaction.atomic():
            thread = runtime_threads.thread_create(thread_id=pk, graph=graph, metadata=metadata, created_by=actor)
    except IntegrityError:  # created by a concurrent request since the check above
        raise Conflict(f"thread {pk} already exists", field="thread_id") from None
    details = {"metadata": metadata, "via": "platform-api"}
    audit_thread(thread=thread, actor=actor, action=AuditAction.THREAD_CREATED, details=details)
    return thread, True


@transaction.atomic
def thread_metadata_update(*, actor: User, thread_id: Any, metadata: dict[str, Any]) -> Thread:
    """``threads.update``: merge ``metadata`` into the thread's, as LangGraph Server does (key by key; a key
    sent as null is kept, as null). The start-threads permission, on a thread the actor may see. What
    ``threads.get`` derives from the thread's graph (``graph_id``, ``assistant_id``: clients list an
    assistant's threads by them) may only be repeated, not changed: the graph is bound by the thread's
    creation or first run. The merged metadata is bounded as a new thread's is. Audited
    (``thread.metadata_updated``: the keys sent, and the values they replaced)."""
    permissions.require(actor, "runtime.start_thread", "update threads")
    thread = thread_get_for(actor, thread_id)
    thread = Thread.objects.select_for_update().get(pk=thread.pk)  # two updates merge in turn
    reported = thread_metadata_out(thread)
    for key in ("graph_id", "assistant_id"):
        if key in metadata and metadata[key] != reported.get(key):
            bound = f"{reported[key]!r}" if key in reported else "none until its first run binds one"
            raise InvalidInput(f"a thread's graph cannot be changed: its {key} is {bound}", field=f"metadata.{key}")
    own = dict(thread.metadata or {})
    merged = metadata_check({**own, **metadata})
    Thread.objects.filter(pk=thread.pk).update(metadata=merged)  # not updated_at: its state's time
    thread.metadata = merged
    previous = {key: own[key] for key in metadata if key in own}
    details = {"metadata": metadata, "previous": previous, "via": "platform-api"}
    audit_thread(thread=thread, actor=actor, action=AuditAction.THREAD_METADATA_UPDATED, details=details)
    return thread


def pending_tasks(thread: Thread) -> list[ApprovalTask]:
    return list(ApprovalTask.objects.filter(thread=thread, status=TaskStatus.PENDING).order_by("created_at"))


def _payload_for(user: permissions.Principal, task: ApprovalTask) -> Any:
    # Payloads and value snapshots go out masked like everywhere else (gateway).
    return gateway.payload_for(user, task)[0]


def _values_for(user: permissions.Principal, thread: Thread) -> dict[str, Any] | None:
    if not thread.checkpoint_id and not thread.values:
        return None  # no run has given it a state yet: LangGraph Server sends null, not {}
    return gateway.thread_values_for(user, thread) if thread.graph else (thread.values or {})


def _interrupt_out(user: permissions.Principal, task: ApprovalTask) -> InterruptOut:
    return InterruptOut(
        value=_payload_for(user, task), id=task.interrupt_id, response_schema=task.response_schema or None
    )


# Where ``threads_search`` keeps each listed thread's pending interrupt tasks for ``thread_interrupts``.
PENDING_INTERRUPTS = "pending_interrupts"


def thread_interrupts(user: permissions.Principal, thread: Thread) -> dict[str, list[InterruptOut]]:
    """Pending interrupts by task id (the approval task's id: usable in the native API too)."""
    tasks = getattr(thread, PENDING_INTERRUPTS, None)  # read for a whole page by ``threads_search``
    if tasks is None:
        visible = permissions.tasks_visible(user)
        tasks = visible.filter(thread=thread, status=TaskStatus.PENDING, kind=TaskKind.INTERRUPT).order_by("created_at")
    return {str(t.id): [_interrupt_out(user, t)] for t in tasks}


def thread_metadata_out(thread: Thread, graph: str | None = None) -> dict[str, Any]:
    """A thread's metadata as ``threads.get`` reports it: its own, with its graph's ``graph_id`` and
    ``assistant_id`` where it has none (``graph``: the one a run is binding it to, else its own)."""
    metadata = dict(thread.metadata or {})
    graph = graph or thread.graph
    if graph:
        for key, value in _graph_metadata(graph).items():
            metadata.setdefault(key, value)
    return metadata


def thread_out(user: permissions.Principal, thread: Thread) -> ThreadOut:
    metadata = thread_metadata_out(thread)
    return ThreadOut(
        thread_id=str(thread.id),
        created_at=thread.created_at,
        updated_at=thread.updated_at,
        state_updated_at=thread.updated_at,
        metadata=metadata,
        status=THREAD_STATUS_OUT.get(thread.status, thread.status),
        values=_values_for(user, thread),
        interrupts=thread_interrupts(user, thread),
        error=thread.error or None,
        # LangGraph Server's: {} until a run sets the thread's config (no configurable values here). A claimed
        # run moved the fence; a copy (threads.copy) has checkpoints but no run of its own yet.
        config={"configurable": {}} if thread.fence else {},
    )


# --- state --------------------------------------------------------------------------------


def checkpoint_ref(
    thread_id: Any, checkpoint_id: str | None, checkpoint_ns: str = "", checkpoint_map: dict[str, str] | None = None
) -> CheckpointRefOut:
    return CheckpointRefOut(
        thread_id=str(thread_id),
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        checkpoint_map=checkpoint_map or None,
    )


def state_out(
    user: permissions.Principal,
    thread: Thread,
    view: CheckpointView | None,
    subgraphs: Sequence[SubgraphView] = (),
    *,
    raised: dict[str, dict[tuple[str, str], list[InterruptOut]]] | None = None,
) -> ThreadStateOut:
    """A ThreadState: values, next, tasks with their interrupts, checkpoint, metadata; with ``subgraphs``
    (``get_state(..., subgraphs=True)``) each in-flight subgraph's state nested in its task's ``state``.
    ``raised``: the interrupts of several checkpoints read at once (``_interrupts_raised``; a history)."""
    if view is None:
        return ThreadStateOut(
            values={},
            next=[],
            tasks=[],
            checkpoint=checkpoint_ref(thread.id, None),
            metadata={},
            created_at=None,
            parent_checkpoint=None,
            interrupts=[],
        )
    if raised is None:  # read (and its reveals audited) once
        raised = _interrupts_raised(user, thread, [view.checkpoint_id])
    pending = raised.get(view.checkpoint_id, {})
    error = (
        task_error_out(thread.error, _thread_error_type(thread))
        if view.checkpoint_id == thread.checkpoint_id and thread.status == ThreadStatus.FAILED
        else None
    )
    placed: set[str] = set()
    tasks = _tasks_out(thread.id, view, pending, subgraphs, error=error, placed=placed)
    for (namespace, node), interrupts in pending.items():  # pending, yet held by no task of the checkpoint
        unheld = [i for i in interrupts if i.id not in placed]
        if unheld:
            task_id = str(uuid.uuid5(ASSISTANT_NAMESPACE, f"{view.checkpoint_id}:{namespace}:{node}"))
            tasks.append(task_out(task_id, node, unheld))
    return ThreadStateOut(
        values=view.values,
        next=view.next,
        tasks=tasks,
        checkpoint=checkpoint_ref(thread.id, view.checkpoint_id),
        metadata={
            "step": view.step,
            "source": view.source,
            "writes": view.writes,
            "thread_id": str(thread.id),
            "graph_id": thread.graph,
        },
        created_at=view.created_at,
        parent_checkpoint=checkpoint_ref(thread.id, view.parent_id) if view.parent_id else None,
        interrupts=[i for t in tasks for i in t.interrupts],
        state_unreadable=view.unreadable,
    )


def _tasks_out(
    thread_id: Any,
    view: CheckpointView,
    pending: dict[tuple[str, str], list[InterruptOut]],
    subgraphs: Sequence[SubgraphView],
    *,
    inside: str = "",
    error: str | None = None,
    placed: set[str] | None = None,
) -> list[StateTaskOut]:
    """The step's tasks as LangGraph lists them, under its task ids and paths, in the graph at namespace
    ``inside``.

    A paused task holds its interrupts (a subgraph's come up on every task on the way down to the one
    that raised it, as LangGraph Server shows them); a finished one what it returned (masked like the
    values); the others the run's ``error`` when it failed. A subgraph's task carries its state when it
    is among ``subgraphs``, else where its checkpoints are.
    """
    nested = {s.task_id: s for s in subgraphs}
    # Interrupts LangGraph places on a task are that task's alone, whatever other tasks share its node.
    claimed = {i for t in view.tasks for i in t.interrupt_ids or ()}
    tasks: list[StateTaskOut] = []
    for step_task in view.tasks:
        interrupts = _interrupts_held(pending, step_task, claimed, inside=inside)
        if placed is not None:
            placed.update(i.id for i in interrupts)
        failed = error if step_task.result is None and not interrupts else None
        task = task_out(step_task.id, step_task.name, interrupts, failed, result=step_task.result, path=step_task.path)
        sub = nested.get(step_task.id)
        if sub is not None:
            task.state = _subgraph_state_out(thread_id, sub, pending)
        elif step_task.checkpoint_ns:
            task.checkpoint = {"thread_id": str(thread_id), "checkpoint_ns": step_task.checkpoint_ns}
        tasks.append(task)
    return tasks


def _subgraph_state_out(
    thread_id: Any, sub: SubgraphView, pending: dict[tuple[str, str], list[InterruptOut]]
) -> ThreadStateOut:
    view = sub.view
    tasks = _tasks_out(thread_id, view, pending, sub.children, inside=sub.checkpoint_ns)
    # as LangGraph keeps it in a subgraph checkpoint's metadata: the enclosing graphs' checkpoints
    enclosing = {ns: checkpoint for ns, checkpoint in sub.checkpoint_map.items() if ns != sub.checkpoint_ns}
    return ThreadStateOut(
        values=view.values,
        next=view.next,
        tasks=tasks,
        checkpoint=checkpoint_ref(thread_id, view.checkpoint_id, sub.checkpoint_ns, sub.checkpoint_map),
        metadata={
            "step": view.step,
            "source": view.source,
            "writes": view.writes,
            "thread_id": str(thread_id),
            "checkpoint_ns": sub.checkpoint_ns,
            **({"checkpoint_map": enclosing} if enclosing else {}),
        },
        created_at=view.created_at,
        parent_checkpoint=checkpoint_ref(thread_id, view.parent_id, sub.checkpoint_ns, sub.parent_checkpoint_map)
        if view.parent_id
        else None,
        interrupts=[i for t in tasks for i in t.interrupts],
    )


def _interrupts_raised(
    user: permissions.Principal, thread: Thread, checkpoint_ids: Sequence[str]
) -> dict[str, dict[tuple[str, str], list[InterruptOut]]]:
    """The interrupts raised at each checkpoint that ``user`` may see, masked, by where they were raised:
    (namespace of the graph that raised it, "" for the root; node). A checkpoint keeps its interrupts once
    they are answered, as LangGraph's history shows them (they are its pending writes): every interrupt task
    opened at it counts, the newest for an interrupt opened again (a retried run). One query for them all."""
    if not checkpoint_ids:
        return {}
    visible = permissions.tasks_visible(user).filter(
        thread=thread, kind=TaskKind.INTERRUPT, checkpoint_id__in=list(checkpoint_ids)
    )
    newest: dict[tuple[str, str], ApprovalTask] = {}
    for task in visible.order_by("created_at"):
        newest[(task.checkpoint_id, task.interrupt_id)] = task  # a later one replaces an earlier one
    found: dict[str, dict[tuple[str, str], list[InterruptOut]]] = {}
    for task in sorted(newest.values(), key=lambda t: t.created_at):
        at = found.setdefault(task.checkpoint_id, {})
        at.setdefault((task.checkpoint_ns, task.node), []).append(_interrupt_out(user, task))
    return found


def _interrupts_held(
    pending: dict[tuple[str, str], list[InterruptOut]], step_task: StepTask, claimed: set[str], *, inside: str = ""
) -> list[InterruptOut]:
    """The interrupts of ``pending`` a task holds: those LangGraph lists on it, raised at its node (in the
    graph at ``inside``); or anywhere in the subgraph it runs (its namespace, and the subgraphs below it).
    A task read without LangGraph's list holds those at its node that no other task of the step claims."""
    if step_task.checkpoint_ns:
        namespace = step_task.checkpoint_ns
        return [i for place, found in pending.items() if _within(place[0], namespace) for i in found]
    at_node = pending.get((inside, step_task.name), [])
    if step_task.interrupt_ids is None:
        return [i for i in at_node if i.id not in claimed]
    return [i for i in at_node if i.id in step_task.interrupt_ids]


def _within(namespace: str, subgraph: str) -> bool:
    return namespace == subgraph or namespace.startswith(subgraph + "|")


def task_out(
    task_id: str,
    name: str,
    interrupts: list[InterruptOut],
    error: str | None = None,
    *,
    result: Any = None,
    path: Sequence[Any] = (),
) -> StateTaskOut:
    return StateTaskOut(
        id=task_id,
        name=name,
        path=list(path) or ["__pregel_pull", name],  # LangGraph's, when the checkpoint gave it
        error=error,
        interrupts=interrupts,
        checkpoint=None,
        state=None,
        result=result,
    )


def thread_state(
    user: permissions.Principal, thread_id: Any, checkpoint_id: str | None = None, *, subgraphs: bool = False
) -> ThreadStateOut:
    thread = thread_get_for(user, thread_id, with_failure=True)
    view = gateway.state_for(user, thread.id, checkpoint_id) if thread.graph else None
    if checkpoint_id and view is None:
        raise NotFound(f"checkpoint {checkpoint_id} not found", field="checkpoint_id")
    # The subgraphs in flight at the checkpoint, each state redacted like the root's (approvals.gateway).
    nested = time_travel.subgraph_states_for(user, thread.id, view.checkpoint_id) if subgraphs and view else []
    return state_out(user, thread, view, nested)


def checkpoint_id_read(value: Any, *, field: str, named: bool = False) -> str | None:
    """The checkpoint id a request names, in the forms LangGraph Server takes: the id, a checkpoint
    ``{"checkpoint_id": ...}`` or a config ``{"configurable": {"checkpoint_id": ...}}``; any form
    ``uuid.UUID()`` reads, as the saver stores it. Anything else is a 422 naming ``field``; so is an object
    naming no checkpoint when it must (``named``: a ``before`` that names none was read as no cursor, the
    whole history)."""
    if isinstance(value, dict):
        holder, at = value, field
        if "configurable" in value:
            holder, at = value["configurable"], f"{field}.configurable"
        value = holder.get("checkpoint_id") if isinstance(holder, dict) else None
        if not isinstance(holder, dict) or (named and value in (None, "")):
            raise InvalidInput(
                f'{field}: names no checkpoint; send its id, {{"checkpoint_id": id}} or '
                f'{{"configurable": {{"checkpoint_id": id}}}}',
                field=field,
            )
        field = f"{at}.checkpoint_id"
    if value is None or value == "":
        return None
    try:
        return str(uuid.UUID(value))
    except (TypeError, ValueError, AttributeError):  # not a string, or not a UUID
        raise InvalidInput(f"{field}: not a checkpoint id", field=field) from None


def thread_history(
    user: permissions.Principal,
    thread_id: Any,
    *,
    limit: int,
    before: str | None,
    checkpoint_id: str | None = None,
) -> list[ThreadStateOut]:
    """The thread's states newest first; ``before`` a checkpoint it does not have: none, as LangGraph Server
    answers; ``checkpoint_id``: only that checkpoint (``runtime.state.thread_history_read``)."""
    thread = thread_get_for(user, thread_id, with_failure=True)
    if not thread.graph:
        return []
    views = gateway.history_for(user, thread.id, limit=limit, before=before, checkpoint_id=checkpoint_id)
    raised = _interrupts_raised(user, thread, [v.checkpoint_id for v in views])
    return [state_out(user, thread, v, raised=raised) for v in views]


def run_error_out(text: str | None, error_type: str | None) -> dict[str, str]:
    """A failed run's error as LangGraph Server sends it (``runs.wait``'s ``__error__``, the ``error``
    stream event): ``error`` the exception's class name, so a client can branch on it (a
    ``GraphRecursionError``), and ``message`` its own words without LangGraph's "During task ..." note.
    ``error_type`` is that class name as the runtime recorded it (``Run.error_type``); a failure that is
    no exception of the graph's (a graph that could not be built) is a ``RunError``, whole."""
    text = text or "the run failed"
    if error_type is None:
        # Failed before runs recorded their exception's class (runtime migration 0016): the type is read
        # back out of the text, which goes wrong where the class's qualified name is no dotted identifier
        # (a graph named "pay-flow", a class defined in a function) or its line is not first (SyntaxError).
        return _error_out_parsed(text)
    if error_type in _RUN_ERROR_TYPES:
        return {"error": "RunError", "message": text}
    return {"error": _ERROR_TYPES_OUT.get(error_type, error_type), "message": _error_message(text, error_type)}


def _error_message(text: str, error_type: str) -> str:
    """The exception's own words in its stored text, found by its known class name: after the line that
    names the class, module-qualified or not ("<module>.<Type>: <message>": first, or last for a
    ``SyntaxError``), without LangGraph's task notes. The whole text if no line names it."""
    text = _TASK_NOTE.sub("", text)
    named = re.search(rf"(?:\A|\n)(?:[^\s:]*\.)?{re.escape(error_type)}(?:: (?P<message>.*)|\n|\Z)", text, re.DOTALL)
    if named is None:
        return text
    return named["message"] or ""


def _error_out_parsed(text: str) -> dict[str, str]:
    """``run_error_out`` for a run failed before its exception's class was recorded: read from ``text``."""
    typed = _ERROR_TYPED.fullmatch(_TASK_NOTE.sub("", text))
    if typed is None or (typed["message"] is None and not typed["type"].rsplit(".", 1)[-1][:1].isupper()):
        return {"error": "RunError", "message": text}
    name = typed["type"].rsplit(".", 1)[-1]
    return {"error": _ERROR_TYPES_OUT.get(name, name), "message": typed["message"] or ""}


def task_error_out(text: str | None, error_type: str | None) -> str | None:
    """A failed task's ``error`` in a state as LangGraph Server shows it: the exception's repr
    (``error_type`` as for ``run_error_out``)."""
    if text is None:
        return None
    error = run_error_out(text, error_type)
    if error["error"] == "RunError":
        return text
    return f"{error['error']}({error['message']!r})" if error["message"] else f"{error['error']}()"


# Where ``thread_get_for(..., with_failure=True)`` puts the thread's last failed run's error and class.
_FAILED_ERROR, _FAILED_ERROR_TYPE = "last_failed_error", "last_failed_error_type"


def _last_failure() -> dict[str, Case]:
    """A failed thread's last failed run's ``error`` and ``error_type`` as annotations (null for a thread that
    has not failed: the subqueries run for a failed one only)."""
    last = Run.objects.filter(thread_id=OuterRef("pk"), status=RunStatus.FAILED).order_by("-created_at")
    return {
        name: Case(When(status=ThreadStatus.FAILED, then=Subquery(last.values(column)[:1])), default=None)
        for name, column in ((_FAILED_ERROR, "error"), (_FAILED_ERROR_TYPE, "error_type"))
    }


def _thread_error_type(thread: Thread) -> str | None:
    """The class name of the exception that failed ``thread``: its last failed run's, whose error the thread
    carries; read with the thread (``thread_get_for(..., with_failure=True)``), else one query, made only
    when a failed thread's current state is read. None (the text is read) when no run of the thread says so:
    it failed before the class was recorded, or it is a copy."""
    if hasattr(thread, _FAILED_ERROR):
        error, error_type = getattr(thread, _FAILED_ERROR), getattr(thread, _FAILED_ERROR_TYPE)
        return error_type if error is not None and error == thread.error else None
    last = thread.runs.filter(status=RunStatus.FAILED).order_by("-created_at").values_list("error", "error_type")
    found = last.first()
    if found is None or found[0] != thread.error:
        return None
    return found[1]


def wait_output(user: permissions.Principal, thread: Thread, run: Run) -> dict[str, Any]:
    """What ``runs.wait``/``join`` return: the final values, with ``__interrupt__`` when paused,
    or ``__error__`` when the run failed (the SDK raises it).

    Paused at several interrupts at once (parallel branches, a Send fan-out), only
    ``{"__interrupt__": [...]}``, as LangGraph Server answers: it merges the interrupts its stream sent one
    chunk each, and the values go with none of them."""
    if run.status == RunStatus.FAILED:
        return {"__error__": run_error_out(run.error, run.error_type)}
    return thread_output(user, thread)


def thread_output(user: permissions.Principal, thread: Thread) -> dict[str, Any]:
    """The thread's values as ``runs.wait`` returns them, with its interrupts (see ``wait_output``)."""
    state = thread_state(user, thread.id)
    if len(state.interrupts) > 1:
        return {"__interrupt__": [i.as_streamed() for i in state.interrupts]}
    values = dict(state.values) if isinstance(state.values, dict) else {}
    if state.interrupts:
        values["__interrupt__"] = [i.as_streamed() for i in state.interrupts]
    return values


def _state_update_shape(values: dict[str, Any] | None, as_node: str | None) -> dict[str, Any] | None:
    """The values of an ``update_state`` as LangGraph 1.2 takes them: none (or ``{}``) with an ``as_node``
    writes as that node with no writes, and as ``END`` clears the pending tasks; ``__copy__`` is not served."""
    if as_node == COPY_NODE:
        # LangGraph's copy is a fork of the checkpoint, which Gatehouse records as a branch.
        raise InvalidInput(
            "as_node '__copy__' is not served: copy the thread with threads.copy, or fork a checkpoint "
            "with update_state(..., checkpoint_id=...)",
            field="as_node",
        )
    if not values and as_node is None:
        raise InvalidInput("values to update are required, or an as_node to write as with none", field="values")
    if values and as_node == END:
        raise InvalidInput(f"as_node {END!r} takes no values: it clears the pending tasks", field="as_node")
    return values or None


@transaction.atomic
def thread_state_update(
    *, actor: User, thread_id: Any, values: dict[str, Any] | None, as_node: str | None
) -> ThreadUpdateStateOut:
    """``update_state`` for operators, on threads with no run active and no decision pending.

    Refused while the thread is interrupted: LangGraph's ``update_state`` writes a
    new checkpoint in which the pending interrupt is no longer pending and its id
    changes, so the approval task would silently lose its thread. Edits that go
    with a decision travel in ``command={"resume": ..., "update": {...}}``.
    """
    values = _state_update_shape(values, as_node)
    thread = thread_get_for(actor, thread_id)
    permissions.require(actor, "runtime.retry_thread", "update thread state")
    thread = Thread.objects.select_for_update().get(pk=thread.pk)
    if not thread.graph or not thread.checkpoint_id:
        raise Conflict("this thread has no state yet; start a run first", field="thread_id")
    if thread.status == ThreadStatus.INTERRUPTED:
        raise Conflict(
            "the thread waits for a decision: an update_state now would orphan its pending interrupt; "
            "send the edits with the resume, as command={'resume': ..., 'update': {...}}",
            field="values",
        )
    if (
        thread.status in (ThreadStatus.BUSY, ThreadStatus.CANCELLED)
        or thread.runs.filter(status__in=ACTIVE_RUN_STATUSES).exists()
    ):
        why = (
            "the thread's run was cancelled"
            if thread.status == ThreadStatus.CANCELLED
            else "the thread is busy (a run is pending or running)"
        )
        raise Conflict(f"{why}; its state cannot be updated now", field="thread_id")
    entry = graph_get(thread.graph)
    if as_node not in (None, END, *entry.builder.nodes):
        raise InvalidInput(f"unknown node (the graph has: {', '.join(entry.builder.nodes)})", field="as_node")
    if values is not None:
        # A Pydantic state's validators that read fields not written see them as stored (read only then).
        current = None
        if has_validators(entry.state_schema):
            view = thread_state_read(thread, None)
            current = view.values if view is not None else None
        try:
            values_validate(entry.state_schema, values, prefix="values", current=current)
        except FieldError as exc:
            raise InvalidInput(exc.message, field=exc.field) from None
        values = services.state_write_guard(actor=actor, thread=thread, values=values, field="values")
    from langgraph.errors import InvalidUpdateError  # loaded by the write anyway

    previous = thread.checkpoint_id
    try:
        checkpoint_id = runtime_threads.thread_state_write(thread=thread, values=values, as_node=as_node)
    except InvalidUpdateError as exc:  # e.g. an update with no as_node after a step of several nodes
        raise InvalidInput(f"LangGraph refused the update: {exc}", field="as_node") from None
    except StateUnreadable as exc:
        raise Conflict(
            f"{exc.reason}; LangGraph cannot update a state it cannot load: fork the thread from an earlier "
            "checkpoint, or cancel it",
            field="thread_id",
        ) from None
    audit_thread(
        thread=thread,
        actor=actor,
        action=AuditAction.THREAD_STATE_UPDATED,
        details={"values": values, "as_node": as_node, "checkpoint_id": checkpoint_id, "previous": previous},
    )
    return ThreadUpdateStateOut(checkpoint=checkpoint_ref(thread.id, checkpoint_id))


# --- runs ---------------------------------------------------------------------------------


RECURSION_LIMIT_MAX = 2**31 - 1  # what ``Run.recursion_limit`` stores


def run_config_check(config: dict[str, Any] | None) -> None:
    """A run's ``config`` keys in the types LangGraph Server's schema takes (a 422 naming the key where it
    refuses them): ``tags`` a list of strings, ``run_name`` a string, ``metadata`` and ``configurable``
    objects. A client that sends ill-typed ones is told so, not ignored silently."""
    config = config or {}
    tags = config.get("tags", [])
    if not isinstance(tags, list):
        raise InvalidInput("config.tags: must be a list of strings", field="config.tags")
    for i, tag in enumerate(tags):
        if not isinstance(tag, str):
            raise InvalidInput(f"config.tags[{i}]: must be a string", field=f"config.tags[{i}]")
    if "run_name" in config and not isinstance(config["run_name"], str):
        raise InvalidInput("config.run_name: must be a string", field="config.run_name")
    for key in ("metadata", "configurable"):
        if key in config and not isinstance(config[key], dict):
            raise InvalidInput(f"config.{key}: must be an object", field=f"config.{key}")


# The keys of a run's ``config`` its graph runs with as sent (``Run.config``; runtime.executor.run_config).
RUN_CONFIG_KEPT = ("tags", "run_name")


def run_config_read(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """What of a run's ``config`` (checked by ``run_config_check``) the graph runs with, as LangGraph Server
    passes it into the graph's RunnableConfig: ``tags`` and ``run_name``. None when it has neither."""
    kept = {key: (config or {})[key] for key in RUN_CONFIG_KEPT if key in (config or {})}
    return kept or None


def recursion_limit_read(config: dict[str, Any] | None, graph: str) -> int | None:
    """A run's ``config.recursion_limit``, as LangGraph Server honours it, but never past the limit the
    graph's operator set in ``langgraph.json`` (``docs/runtime-controls.md``): a run may lower it only."""
    value = (config or {}).get("recursion_limit")
    if value is None:
        return None
    field = "config.recursion_limit"
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"{field}: must be a whole number of steps, at least 1", field=field)
    cap = graph_get(graph).controls.recursion_limit
    if cap is not None and value > cap:
        raise InvalidInput(
            f"{field}: at most {cap}, the limit set for graph {graph!r} (gatehouse.runtime.{graph}.recursion_limit)",
            field=field,
        )
    if value > RECURSION_LIMIT_MAX:
        raise InvalidInput(f"{field}: at most {RECURSION_LIMIT_MAX}", field=field)
    return value


def run_metadata_read(config: dict[str, Any] | None, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The metadata a client sent with a run, merged as LangGraph Server merges it: ``config.metadata`` (an
    object: ``run_config_check``), then ``metadata`` over it. Read before anything is written: a
    ``config.metadata`` past the size of a thread's metadata, or a key of Gatehouse's own checkpoint
    metadata (``gatehouse_...``: the graph could not be given it), is a 422 naming it."""
    from_config = (config or {}).get("metadata") or {}
    metadata_check(from_config, field="config.metadata")
    for field, sent in (("metadata", metadata or {}), ("config.metadata", from_config)):
        for key in sent:
            if key.startswith(RESERVED_METADATA_PREFIX):
                raise InvalidInput(
                    f"{field}.{key}: keys starting with {RESERVED_METADATA_PREFIX!r} are Gatehouse's own "
                    "checkpoint metadata",
                    field=f"{field}.{key}",
                )
    return {**from_config, **(metadata or {})}


def run_metadata_for(thread: Thread, graph: str, sent: dict[str, Any]) -> dict[str, Any]:
    """A run's metadata as LangGraph Server keeps it (``Run.metadata``) and passes it to the graph: its
    assistant's (``created_by``), its thread's (as ``threads.get`` reports it), what the client sent
    (``run_metadata_read``), and its assistant's id, which no client value replaces."""
    return {
        "created_by": "system",
        **thread_metadata_out(thread, graph),
        **sent,
        "assistant_id": assistant_id_for(graph),
    }


def run_out(run: Run, thread: Thread) -> RunOut:
    graph = thread.graph
    return RunOut(
        run_id=str(run.id),
        thread_id=str(run.thread_id),
        assistant_id=assistant_id_for(graph) if graph else None,
        created_at=run.created_at,
        updated_at=run.finished_at or run.started_at or run.created_at,
        status=RUN_STATUS_OUT.get(run.status, run.status),
        # Gatehouse's own facts of the run after the kept metadata: a client's "kind" cannot pass for them.
        metadata={**_run_metadata(run, thread), "kind": run.kind, "attempts": run.attempts},
        kwargs=run_kwargs_out(run, thread),
        multitask_strategy=run.multitask_strategy or "reject",
        error=run.error or None,
    )


def _run_metadata(run: Run, thread: Thread) -> dict[str, Any]:
    """The run's kept metadata; a run made elsewhere (the console, the native API) kept none: its thread's
    and its assistant's, as LangGraph Server would have given a run sent none."""
    if run.metadata is not None:
        return dict(run.metadata)
    return run_metadata_for(thread, thread.graph, {}) if thread.graph else thread_metadata_out(thread)


def run_kwargs_out(run: Run, thread: Thread) -> dict[str, Any]:
    """A run's ``kwargs`` as LangGraph Server reports them, of what Gatehouse keeps: ``config``, always, with
    the keys of the client's config the graph ran with, as sent (``tags``, ``run_name``, ``recursion_limit``),
    the ids LangGraph Server puts in its ``configurable``, and the run's ``metadata``. Never its input or
    command: they would repeat state a reader may see only masked."""
    config = dict(run.config or {})
    if run.recursion_limit is not None:
        config["recursion_limit"] = run.recursion_limit
    ids = {"run_id": str(run.id), "thread_id": str(run.thread_id)}
    if thread.graph:
        ids |= _graph_metadata(thread.graph)
    config["configurable"] = ids
    config["metadata"] = _run_metadata(run, thread)
    return {"config": config}


def runs_list(
    user: permissions.Principal, thread_id: Any, *, limit: int, offset: int, status: str | None
) -> tuple[Thread, list[Run]]:
    thread = thread_get_for(user, thread_id)
    qs = thread.runs.order_by("-created_at")
    if status:
        qs = qs.filter(status__in=RUN_STATUSES_IN[status])
    return thread, list(qs[offset : offset + limit])


def run_get_for(user: permissions.Principal, thread_id: Any, run_id: Any) -> tuple[Thread, Run]:
    thread = thread_get_for(user, thread_id)
    run = thread.runs.filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"run {run_id} not found on thread {thread_id}", field="run_id")
    return thread, run


def run_create(
    *,
    actor: User,
    thread_id: Any,
    assistant_id: str,
    input: dict[str, Any] | None,
    resume: Any = NOT_GIVEN,
    update: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    multitask_strategy: str | None = None,
    if_not_exists: str | None = None,
    thread_metadata: dict[str, Any] | None = None,
) -> Run:
    """Start, resume, retry or continue a thread, as the request's shape says.

    ``multitask_strategy`` ``interrupt`` / ``rollback``: a start (``input``) first
    cancels the thread's active run with that action, as LangGraph Server does.
    ``if_not_exists="create"``: a thread id that names no thread is created first (``_thread_for_run``), with
    ``thread_metadata`` (the run's: ``run_metadata_read``) as its metadata.
    """
    thread = _thread_for_run(actor, thread_id, if_not_exists, thread_metadata or {})
    graph = assistant_graph(actor, assistant_id)
    if thread.graph and thread.graph != graph:
        raise Conflict(f"thread {thread.id} runs graph {thread.graph!r}, not {graph!r}", field="assistant_id")
    metadata = metadata or {}
    if multitask_strategy in ("interrupt", "rollback") and input is not None:
        _run_creates_serialize(thread.pk)
        active = thread.runs.filter(status__in=ACTIVE_RUN_STATUSES).first()
        if active is not None:
            run_cancel_service(
                actor=actor,
                thread_id=thread.pk,
                run_id=active.pk,
                action=multitask_strategy,
                reason=f"multitask_strategy={multitask_strategy}: a new run was created on the thread",
                via="platform-api",
            )
    if resume is not NOT_GIVEN or update:
        if input is not None:
            raise InvalidInput("send either input or a command, not both", field="input")
        return _run_resume(actor, thread, resume, update, metadata)
    if input is not None:
        return _run_start(actor, thread.pk, graph, input, metadata)
    return _run_continue(actor, thread)


def stateless_run_check(
    *, on_completion: str | None, input: dict[str, Any] | None, command: Any, checkpoint: Any, checkpoint_id: Any
) -> None:
    """Refuse what a stateless run (``/runs``, ``/runs/wait``, ``/runs/stream``, ``/runs/batch``) cannot do.

    A stateless run is a run on a thread made for it, as on LangGraph Server, which then deletes that thread
    (``on_completion="delete"``, its default). Gatehouse keeps it: the thread is what its approval tasks,
    decisions and audit trail name, and a run that pauses at a gate waits there for a reviewer. So a client
    that leaves ``on_completion`` out gets the thread kept (named by the response's ``Content-Location``);
    one that asks for the deletion is refused rather than told it happened. A new thread has nothing to
    resume and no checkpoint to run from, so it needs an input.
    """
    if on_completion == "delete":
        raise InvalidInput(
            "Gatehouse keeps every thread, with its decisions and audit trail: send on_completion 'keep' or leave "
            "it out",
            field="on_completion",
        )
    if command is not None:
        # LangGraph Server: "You must provide a thread_id when resuming."
        raise InvalidInput(
            "a stateless run starts a new thread, which has nothing to resume: send a command to the thread's "
            "runs (/threads/{thread_id}/runs)",
            field="command",
        )
    for name, value in (("checkpoint", checkpoint), ("checkpoint_id", checkpoint_id)):
        if value is not None:
            raise InvalidInput("a stateless run starts a new thread, which has no checkpoint yet", field=name)
    if input is None:
        raise InvalidInput("a stateless run starts a new thread: send its input", field="input")


# pg_advisory_xact_lock's class for run creates that cancel the thread's active run ("gmtk").
_MULTITASK_LOCK_CLASS = 0x676D746B


def _run_creates_serialize(thread_pk: Any) -> None:
    """Hold the thread's multitask lock to the end of the caller's transaction (PostgreSQL).

    Two creates with ``interrupt``/``rollback`` sent at once (a chat UI that sends twice) both read the
    same active run: the second's cancel then found it cancelled by the first and answered 409 about a run
    its client never named. LangGraph Server takes each in turn, each interrupting the one before; so
    does this. An advisory lock, not the thread row: a claim and a cancel lock the run before the thread,
    and this transaction goes on to lock runs. SQLite writes one transaction at a time anyway.
    """
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_MULTITASK_LOCK_CLASS, str(thread_pk)])


def _thread_for_run(actor: User, thread_id: Any, if_not_exists: str | None, run_metadata: dict[str, Any]) -> Thread:
    """The run's thread. With ``if_not_exists="create"`` an id that names none is created, as LangGraph Server
    does, through ``thread_create``: its permission and audit, and a taken id the caller may not see is its
    409. The caller's transaction holds the creation: a run refused after it leaves no thread behind.

    The new thread's metadata is the run's, as LangGraph Server gives it (``threads.search`` by a run's
    metadata finds the thread a stateless run made), but for ``graph_id`` and ``assistant_id``: the run binds
    the thread to its graph, which reports them."""
    try:
        return thread_get_for(actor, thread_id)
    except NotFound:
        if if_not_exists != "create":
            raise
    metadata = {k: v for k, v in run_metadata.items() if k not in ("graph_id", "assistant_id")}
    metadata_check(metadata)  # config.metadata and metadata are bounded each; a thread's metadata is bounded whole
    thread, _ = thread_create(actor=actor, thread_id=str(thread_id), metadata=metadata, if_exists="do_nothing")
    return thread


def run_start_check(actor: User, graph: str, graph_input: dict[str, Any]) -> None:
    """Whether ``actor`` may start ``graph`` with ``graph_input``: the permission, and the input against the
    graph's input schema (a cron checks its input so when it is created, not first at each firing)."""
    permissions.require_start(actor, graph)
    try:
        entry = graph_get(graph)
        values_validate(entry.input_schema, graph_input, prefix="input", complete=entry.input_declared)
    except (FieldError, UnknownGraph) as exc:
        if isinstance(exc, UnknownGraph):
            raise NotFound(f"graph {graph!r} is not registered", field="assistant_id") from None
        raise InvalidInput(exc.message, field=exc.field) from None


@transaction.atomic
def _run_start(actor: User, thread_pk: Any, graph: str, graph_input: dict[str, Any], metadata: dict[str, Any]) -> Run:
    run_start_check(actor, graph, graph_input)
    thread = Thread.objects.select_for_update().get(pk=thread_pk)
    refusals = {
        ThreadStatus.BUSY: "a run is already active on this thread (multitask_strategy=reject)",
        ThreadStatus.INTERRUPTED: "the thread waits for a decision: resume it with command={'resume': ...}",
        ThreadStatus.FAILED: "the thread failed: retry it with a run that has neither input nor command",
        ThreadStatus.CANCELLED: "the thread was cancelled; start a new thread",
    }
    if thread.status in refusals:
        raise Conflict(refusals[ThreadStatus(thread.status)], field="thread_id")
    if thread.checkpoint_id and thread.graph == graph:  # the input lands on the state the thread holds
        graph_input = services.state_write_guard(actor=actor, thread=thread, values=graph_input, field="input")
    first = not thread.runs.exists()
    runtime_threads.thread_graph_bind(thread=thread, graph=graph)
    try:
        # The checkpoint the input applies to: a redelivered run compares it with
        # the thread's checkpoint to tell whether its input was already applied.
        run = run_enqueue(
            thread=thread,
            kind=RunKind.START,
            input=graph_input,
            command={"checkpoint_id": thread.checkpoint_id},
            created_by=actor,
        )
    except ThreadBusy:
        raise Conflict(
            "a run is already active on this thread (multitask_strategy=reject)", field="thread_id"
        ) from None
    audit_record(
        actor=actor,
        action=AuditAction.THREAD_STARTED if first else AuditAction.RUN_QUEUED,
        subject_type="thread" if first else "run",
        subject_id=thread.id if first else run.id,
        thread_id=thread.id,
        graph=graph,
        details={
            "run": str(run.id),
            "kind": "start",
            "input": graph_input,
            "metadata": metadata,
            "via": "platform-api",
        },
    )
    return run


def _is_resume_map(resume: Any) -> bool:
    # LangGraph's own rule (pregel/_loop.py): a dict whose keys are all interrupt
    # ids is an id → value map; any other value answers the single interrupt.
    return (
        isinstance(resume, dict)
        and bool(resume)
        and all(isinstance(k, str) and _INTERRUPT_ID.fullmatch(k) for k in resume)
    )


def _resumed_by(actor: User, thread: Thread) -> str:
    """When ``actor``'s own decision queued the thread's latest run, a word saying so: a client that lost the
    answer to its resume and sent it again learns it went through (as the native decision's 409 says)."""
    own = (
        Decision.objects.filter(task__thread_id=thread.pk, actor_id=actor.pk, run__isnull=False)
        .order_by("-created_at")
        .first()
    )
    latest = thread.runs.order_by("-created_at").values_list("pk", flat=True).first()
    if own is None or own.run_id != latest:
        return ""
    return f" (your decision {own.pk}, {own.outcome}, resumed it: run {own.run_id})"


@transaction.atomic
def _run_resume(
    actor: User, thread: Thread, resume: Any, update: dict[str, Any] | None, metadata: dict[str, Any]
) -> Run:
    # No lock on the thread here: task_decide locks task then thread, and taking
    # them in the other order would deadlock against a console decision.
    if thread.status != ThreadStatus.INTERRUPTED:
        status = THREAD_STATUS_OUT.get(thread.status)
        raise Conflict(
            f"the thread is {status}; there is nothing to resume{_resumed_by(actor, thread)}", field="command"
        )
    pending = [t for t in pending_tasks(thread) if t.kind == TaskKind.INTERRUPT]
    by_id = {t.interrupt_id: t for t in pending}
    if resume is NOT_GIVEN:
        raise InvalidInput("a command needs a resume value to answer the pending interrupt", field="command.resume")
    if _is_resume_map(resume):
        unknown = sorted(set(resume) - set(by_id))
        if unknown:
            raise InvalidInput(
                f"interrupt(s) {', '.join(unknown)} are not pending on this thread "
                f"(pending: {', '.join(sorted(by_id)) or 'none'})",
                field="command.resume",
            )
        missing = sorted(set(by_id) - set(resume))
        if missing:
            raise InvalidInput(
                f"interrupts raised together are resumed together; also answer {', '.join(missing)}",
                field="command.resume",
            )
        answers = [(by_id[i], resume[i]) for i in by_id]
    else:
        if len(pending) != 1:
            raise InvalidInput(
                f"{len(pending)} interrupts are pending; resume with a map {{interrupt_id: value}}",
                field="command.resume",
            )
        answers = [(pending[0], resume)]
    where = [f"command.resume.{t.interrupt_id}" if _is_resume_map(resume) else "command.resume" for t, _ in answers]
    outcomes = [_outcome_of(value, at=at) for (_, value), at in zip(answers, where, strict=True)]  # all, first
    decision = None
    for index, ((task, value), at, outcome) in enumerate(zip(answers, where, outcomes, strict=True)):
        reason, reason_at = _reason_of(value, metadata, at=at)
        request = DecisionRequest(
            outcome=outcome,
            reason=reason,
            checkpoint_id=task.checkpoint_id,
            state_patch=update if index == 0 else None,
            action_args=value.get("action_args") if isinstance(value, dict) else None,
            decisions=value.get("decisions") if isinstance(value, dict) else None,
            resume=value,
        )
        with _fields_as_sent(value, at=at, reason_at=reason_at):
            decision = services.task_decide(actor=actor, task_id=task.id, request=request, signer=_token_signer())
    assert decision is not None  # noqa: S101 - task_decide returns a decision or raises; narrows the type
    # The run with its thread, one read: its metadata is made from the thread's (``run_metadata_for``).
    run = Decision.objects.select_related("run__thread").get(pk=decision.pk).run
    if run is None:
        # The task needs more approvers (a quorum): the SDK expects a run back and
        # there is none yet, so refuse (rolling the decision back) rather than
        # answer with a run that does not exist.
        raise Conflict(
            "this interrupt needs further approvers before the thread resumes; sign it in the console "
            "or with POST /api/tasks/{id}/decision",
            field="command",
        )
    return run


def _token_signer() -> services.Signer:
    # Every request here authenticates with an API token, which the native API
    # also counts as a fresh sign-in for the electronic-signature window.
    return services.Signer(authenticated_at=timezone.now(), via="token")


def _outcome_of(value: Any, *, at: str) -> str:
    """The decision a resume value expresses, for the Decision row and its policies: approve when it
    names none (a generic answer). Agent Inbox's list of one response states it in its item: Inbox's
    ``type``, else the item's own ``decision``/``type``/``decisions`` as a dict value states them."""
    _decision_words_check(value, at=at)
    stated = resume_outcome(value)
    if stated is None and isinstance(value, list) and len(value) == 1:
        stated = resume_outcome(value[0])
    return stated or "approve"


# The response types of Agent Inbox's list form (``[{"type": ..., "args": ...}]``), as ``resume_outcome`` reads them.
INBOX_RESPONSE_TYPES = ("accept", "edit", "response", "ignore")


def _decision_words_check(value: Any, *, at: str) -> None:
    """A value that names its decision (``decision``, a tool call's ``type``, a per-call ``decisions[i].type``)
    names one of the native API's words, case and all: read as an approval, ``{"decision": "Reject"}`` went
    to the graph as written while the audit recorded an approval and no reason policy for a reject applied.

    A list (Agent Inbox's form) is checked item by item: an item's ``type`` is one of Inbox's response types,
    its ``decision``/``decisions`` the native words; ``[{"type": "bogus"}]`` was signed as an approval. Only a
    list of one response states a decision, so several that name one are refused rather than read as none.
    """
    if isinstance(value, list):
        naming = [i for i, item in enumerate(value) if isinstance(item, dict) and _names_decision(item)]
        for index in naming:
            item = value[index]
            word = item.get("type", NOT_GIVEN)
            if word is not NOT_GIVEN and not (isinstance(word, str) and word in INBOX_RESPONSE_TYPES):
                raise InvalidInput(
                    f"{word!r} is not a response type Gatehouse knows; an Agent Inbox response's type is one of "
                    f"{', '.join(INBOX_RESPONSE_TYPES)}",
                    field=f"{at}[{index}].type",
                )
            _decision_words_check({k: item[k] for k in ("decision", "decisions") if k in item}, at=f"{at}[{index}]")
        if len(naming) > 1:
            raise InvalidInput(
                "an Agent Inbox answer is a list of one response; send one, or a map {interrupt_id: value}",
                field=f"{at}[{naming[1]}]",
            )
        return
    if not isinstance(value, dict):
        return
    named = [(key, value[key]) for key in ("decision", "type") if key in value]
    if isinstance(value.get("decisions"), list):
        named += [
            (f"decisions[{index}].type", item["type"])
            for index, item in enumerate(value["decisions"])
            if isinstance(item, dict) and "type" in item
        ]
    for key, word in named:
        if not isinstance(word, str) or word not in GENERIC_DECISIONS:
            raise InvalidInput(
                f"{word!r} is not a decision Gatehouse knows; send one of {', '.join(GENERIC_DECISIONS)}",
                field=f"{at}.{key}",
            )


def _names_decision(item: dict[str, Any]) -> bool:
    return any(key in item for key in ("type", "decision", "decisions"))


def metadata_reason(metadata: dict[str, Any] | None) -> str | None:
    """A run's ``metadata.reason``: text, or absent (None); anything else is refused, not ignored."""
    reason = (metadata or {}).get("reason")
    if reason is not None and not isinstance(reason, str):
        raise InvalidInput("metadata.reason: must be text", field="metadata.reason")
    return reason


def _reason_of(value: Any, metadata: dict[str, Any], *, at: str) -> tuple[str, str]:
    """The decision's reason and where it was sent: the resume value's ``reason`` or ``message`` (a tool
    call's message), else the run's ``metadata.reason``; none is ``""``, to be sent at ``{at}.reason``. One
    too long is refused, as on the native API, not cut short."""
    from_metadata = metadata_reason(metadata)  # refused when it is not text, even if the value gives one
    found: tuple[str, str] | None = None
    if isinstance(value, dict):
        for key in ("reason", "message"):
            if isinstance(value.get(key), str) and value[key].strip():
                found = (value[key], f"{at}.{key}")
                break
        if found is None:
            for index, item in enumerate(value.get("decisions") or []):
                if isinstance(item, dict) and isinstance(item.get("message"), str) and item["message"].strip():
                    found = (item["message"], f"{at}.decisions[{index}].message")
                    break
    if found is None and from_metadata is not None:
        found = (from_metadata, "metadata.reason")
    if found is None:
        return "", f"{at}.reason"
    text, field = found
    if len(text) > REASON_MAX_CHARS:
        raise InvalidInput(f"a reason is at most {REASON_MAX_CHARS} characters (got {len(text)})", field=field)
    return text, field


def _outcome_at(value: Any, at: str) -> str:
    """Where a resume value states its decision (as ``resume_outcome`` reads it); a gate's ``decision`` if
    it states none (it was read as an approval)."""
    if isinstance(value, list):  # Agent Inbox: [{"type": ...}], or an item stating it as a dict value does
        item = value[0] if len(value) == 1 and isinstance(value[0], dict) else {}
        return f"{at}[0].{next((key for key in ('type', 'decision', 'decisions') if key in item), 'type')}"
    stated = [key for key in ("decision", "type", "decisions") if isinstance(value, dict) and key in value]
    return f"{at}.{(stated or ['decision'])[0]}"


@contextlib.contextmanager
def _fields_as_sent(value: Any, *, at: str, reason_at: str) -> Iterator[None]:
    """Refusals of the decision service name the native decision's fields (``approvals.schemas.DecisionIn``:
    ``edits``, ``resume``, ``action_args``...); a run sent them in its command, so name them there: the
    edits are ``command.update``, the resume value and what is read from it are at ``at``."""
    try:
        yield
    except DomainError as exc:
        field = exc.field or ""
        native = re.split(r"[.\[]", field, maxsplit=1)[0]
        sent = {
            "edits": "command.update",
            "resume": at,
            "action_args": f"{at}.action_args",
            "decisions": f"{at}.decisions",
            "message": f"{at}.message",
            "decision": _outcome_at(value, at),
            "reason": reason_at,
            "checkpoint_id": "thread_id",  # the thread moved on since its tasks were read; the run named none
        }.get(native)
        if sent is not None:
            exc.field = sent + field[len(native) :]
        raise


@transaction.atomic
def _run_continue(actor: User, thread: Thread) -> Run:
    """No input, no command: LangGraph's ``invoke(None)`` — retry a failed node, or pass a breakpoint."""
    if thread.status == ThreadStatus.FAILED:
        return services.thread_retry(actor=actor, thread_id=thread.pk)
    breakpoints = [t for t in pending_tasks(thread) if t.kind == TaskKind.BREAKPOINT]
    if thread.status == ThreadStatus.INTERRUPTED and breakpoints:
        decision = None
        for task in breakpoints:
            request = DecisionRequest(outcome="approve", checkpoint_id=task.checkpoint_id)
            decision = services.task_decide(actor=actor, task_id=task.id, request=request, signer=_token_signer())
        assert decision is not None  # noqa: S101 - task_decide returns a decision or raises; narrows the type
        run = Decision.objects.select_related("run__thread").get(pk=decision.pk).run
        if run is not None:
            return run
        raise Conflict("the breakpoint was passed but interrupts still wait for decisions", field="command")
    if thread.status == ThreadStatus.INTERRUPTED:
        raise InvalidInput("the thread waits for a decision: send command={'resume': ...}", field="command")
    if thread.status == ThreadStatus.IDLE and thread.checkpoint_id:  # time travel: continue a fork or a copy
        return time_travel.thread_continue(actor=actor, thread_id=thread.pk)
    if thread.status == ThreadStatus.COMPLETED and thread.graph:
        permissions.require_start(actor, thread.graph)
        raise NothingToRun(thread)
    raise InvalidInput("send input to start the thread", field="input")


class NothingToRun(InvalidInput):
    """No input and no command on a finished thread: LangGraph's ``invoke(None)`` would run nothing.

    ``runs.wait`` answers with the thread's final values, as LangGraph Server does (its run does nothing
    and writes no checkpoint), without a run; ``runs.create`` and ``runs.stream``, which must name a
    run, are refused (422, ``input``)."""

    def __init__(self, thread: Thread) -> None:
        super().__init__("the thread has finished: send input to start it again", field="input")
        self.thread = thread


def run_cancel(*, actor: User, thread_id: Any, run_id: Any, action: str) -> Run:
    """``POST /threads/{id}/runs/{run_id}/cancel``: the runtime's cancel (``approvals.run_cancel``).

    A refusal about the run's status is said in the statuses this API shows (``RUN_STATUS_OUT``): the
    client never saw Gatehouse's (a run paused at a gate is ``success`` here, a queued one ``pending``).
    """
    try:
        return run_cancel_service(
            actor=actor, thread_id=thread_id, run_id=run_id, action=action, reason="", via="platform-api"
        )
    except Conflict as exc:
        run = Run.objects.filter(pk=run_id, thread_id=thread_id).first() if exc.field == "run_id" else None
        if run is None or (why := _not_cancellable(run)) is None:
            raise
        if run.status not in ACTIVE_RUN_STATUSES:
            why += "; only a pending or running run can be cancelled"
        raise Conflict(why, field="run_id") from None


def _not_cancellable(run: Run) -> str | None:
    """Why ``run`` cannot be cancelled, in the statuses this API shows; None if it can."""
    if run.status not in ACTIVE_RUN_STATUSES:
        return f"run {run.id} has already ended (status {RUN_STATUS_OUT.get(run.status, run.status)!r})"
    if run.kind == RunKind.RESUME and run.status == RunStatus.QUEUED:
        return (
            f"run {run.id} is a pending resume: it carries decisions already recorded and cannot be cancelled "
            "before it runs"
        )
    return None


# ``runs.cancel_many`` by status cancels at most this many runs at once (each its own transaction and audit event).
CANCEL_MANY_MAX = 1000
_CANCEL_MANY_STATUSES = {
    "pending": (RunStatus.QUEUED,),
    "running": (RunStatus.RUNNING,),
    "all": ACTIVE_RUN_STATUSES,
}


def runs_cancel_many(
    *, actor: User, thread_id: Any, run_ids: list[Any] | None, status: str | None, action: str
) -> list[Run]:
    """``runs.cancel_many`` (``POST /runs/cancel``): the runs of ``thread_id`` named by ``run_ids``, or every
    run with ``status`` (``pending``, ``running``, ``all``) on the threads the actor may see, cancelled with
    ``action`` as ``run_cancel`` cancels one. The runs named are all checked before any is cancelled (a run
    not on the thread, ended, or a pending resume refuses the call and cancels nothing); a run that ends
    between the check and its cancel is left as it ended, as it no longer runs. Each cancel commits and is
    audited on its own (``approvals.run_cancel``: a rollback needs its cancel committed first). Returns the
    runs cancelled."""
    permissions.require(actor, "runtime.retry_thread", "cancel runs")
    if status is not None:
        if thread_id is not None or run_ids is not None:
            raise InvalidInput(
                "send either status (every run with it) or thread_id and run_ids, not both", field="status"
            )
        runs = _runs_with_status(actor, _CANCEL_MANY_STATUSES[status])
    else:
        if thread_id is None:
            raise InvalidInput("send thread_id and run_ids, or a status", field="thread_id")
        if not run_ids:
            raise InvalidInput("name the runs to cancel", field="run_ids")
        runs = _runs_named(actor, thread_id, run_ids)
    cancelled = []
    for run in runs:
        try:
            cancelled.append(run_cancel(actor=actor, thread_id=run.thread_id, run_id=run.pk, action=action))
        except Conflict:
            if Run.objects.filter(pk=run.pk, status__in=ACTIVE_RUN_STATUSES).exists():
                raise
    return cancelled


def _runs_with_status(actor: User, statuses: Sequence[str]) -> list[Run]:
    # A pending resume carries decisions already recorded and is not cancelled (``run_cancel``); nor is a run
    # of a graph the actor may not cancel on (``permissions.require_run_cancel``): neither is "with the status".
    runs = Run.objects.filter(status__in=statuses, thread__in=permissions.threads_visible(actor))
    runs = runs.exclude(kind=RunKind.RESUME, status=RunStatus.QUEUED).order_by("created_at")
    found = list(runs[: CANCEL_MANY_MAX + 1])
    if len(found) > CANCEL_MANY_MAX:
        raise InvalidInput(
            f"more than {CANCEL_MANY_MAX} runs have this status: cancel them by thread (thread_id and run_ids)",
            field="status",
        )
    return found


def _runs_named(actor: User, thread_id: Any, run_ids: list[Any]) -> list[Run]:
    thread = thread_get_for(actor, thread_id)
    permissions.require_run_cancel(actor, thread)
    found = {run.pk: run for run in thread.runs.filter(pk__in=run_ids)}
    for index, run_id in enumerate(run_ids):
        run = found.get(run_id)
        field = f"run_ids[{index}]"
        if run is None:
            raise NotFound(f"run {run_id} not found on thread {thread.pk}", field=field)
        why = _not_cancellable(run)
        if why is not None:
            raise Conflict(f"{why}; nothing was cancelled", field=field)
    return [found[run_id] for run_id in dict.fromkeys(run_ids)]


def run_progress(user: permissions.Principal, thread_id: Any, run_id: Any) -> tuple[Thread, Run]:
    """One poll of a run for wait/join/stream: the thread and run rows as they are now."""
    return run_get_for(user, thread_id, run_id)
