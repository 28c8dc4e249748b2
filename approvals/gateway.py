"""The only way into the checkpoint store and other sensitive state: authorise, redact, audit.

Views, the API, websockets and exports read thread state, interrupt payloads
and audit details through these functions, never through ``runtime.state``,
a graph, or ``task.payload`` directly. Principals without the "view
sensitive" permission get the graph's sensitive paths masked; a principal
with it who is shown a sensitive value causes a ``sensitive.revealed`` audit
event.

Each function re-checks that ``user`` may see the thread or task it is given.
A row in hand is checked by the same rule in memory (``permissions.thread_visible``,
``task_visible``): its graph is what the visibility query would filter on, so
a second read of the row would answer the same.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from approvals import permissions
from approvals.audit import audit_record, canonical
from approvals.errors import NotFound
from approvals.models import ApprovalTask, AuditAction, AuditEvent, Decision, ExternalSource
from approvals.redaction import (
    EVERY_VALUE,
    MASK,
    holds_message,
    redact,
    redacted_values,
    state_redact,
    text_mask,
    values_masked,
)
from runtime.models import Effect, Run, Thread
from runtime.registry import EXTERNAL_GRAPH_PREFIX, UnknownGraph, graph_get, graph_is_external
from runtime.state import CheckpointView, SubgraphView, thread_history_read, thread_state_read, thread_subgraphs_read


def sensitive_paths(graph: str) -> list[str]:
    if graph_is_external(graph):  # an external source's tasks bring their own redaction paths
        source = ExternalSource.objects.filter(name=graph.removeprefix(EXTERNAL_GRAPH_PREFIX)).first()
        return list(source.redaction_paths) if source else []
    try:
        return graph_get(graph).sensitive_paths
    except UnknownGraph:
        # A graph this instance no longer registers (its threads stay readable): its redaction rules are
        # unknown here, so every value is masked for a reader without "view sensitive". Fail closed.
        return [EVERY_VALUE] if graph else []


def may_see_sensitive(user: permissions.Principal) -> bool:
    return permissions.can(user, "approvals.view_sensitive")


def paths_masked_for(user: permissions.Principal, graph: str) -> list[str]:
    """The sensitive paths ``user`` sees masked in ``graph`` (none for a principal who may see them)."""
    return [] if may_see_sensitive(user) else sensitive_paths(graph)


def guard(
    user: permissions.Principal,
    graph: str,
    value: Any,
    *,
    subject: str,
    thread_id: Any = None,
    quoted: Collection[str] | None = None,
    gathered: list[Reveal] | None = None,
) -> tuple[Any, list[str]]:
    """Mask ``value`` for ``user``; returns (value as shown, paths masked).

    With ``quoted`` (a value that carries state: the values the thread carried elsewhere, or none), the
    text of the messages in it is masked too (``redaction.state_redact``); without, paths only (an
    interrupt payload: its digest is computed over it masked by path). A permitted user sees the value
    unmasked and the reveal is audited (with ``gathered``, later: see ``reveals_record``).
    """
    paths = sensitive_paths(graph)
    if not paths:
        return value, []
    masked, applied = redact(value, paths) if quoted is None else state_redact(value, paths, quoted=quoted)
    if not applied:
        return value, []
    if not may_see_sensitive(user):
        return masked, applied
    _revealed(user, subject=subject, thread_id=thread_id, graph=graph, paths=applied, gathered=gathered)
    return value, []


@dataclasses.dataclass(frozen=True)
class Reveal:
    """One record's sensitive values shown to a reader who may see them."""

    subject: str
    thread_id: Any
    graph: str
    paths: tuple[str, ...]


# The reveals a reading of many records gathers (``reveals_gathered``), or None: each is recorded as it is made.
_GATHERED: ContextVar[list[Reveal] | None] = ContextVar("gatehouse_reveals_gathered", default=None)
REVEALED_SUBJECTS_MAX = 1000  # subjects a gathered reveal names; the rest are counted


def _revealed(
    user: permissions.Principal,
    *,
    subject: str,
    thread_id: Any,
    graph: str,
    paths: Sequence[str],
    gathered: list[Reveal] | None = None,
) -> None:
    """``user`` was shown the sensitive ``paths`` of ``subject``: audited now, or with the reading's others
    (``gathered`` given, or inside ``reveals_gathered``)."""
    if gathered is None:
        gathered = _GATHERED.get()
    if gathered is not None:
        gathered.append(Reveal(subject, thread_id, graph, tuple(paths)))
        return
    with transaction.atomic():
        audit_record(
            actor=user,
            action=AuditAction.SENSITIVE_REVEALED,
            subject_type=subject.split(":", 1)[0],
            subject_id=subject.split(":", 1)[-1],
            thread_id=thread_id,
            graph=graph,
            details={"paths": list(paths)},
        )


@contextlib.contextmanager
def reveals_gathered(user: permissions.Principal, *, reading: str) -> Iterator[None]:
    """Every sensitive value shown to ``user`` inside, audited as ONE ``sensitive.revealed`` event when the
    reading ends (``reading``: what was read, e.g. ``audit:page``), naming each record revealed and the paths.

    A page of the audit trail, or an export of it, masks record by record: each reveal was its own event, so an
    auditor reading 100 events wrote up to 100 more (960 of a trail's 2,400 came from a few page views), the
    trail's counts moved while it was read, and an export of a long trail wrote a row per row it exported.
    Nothing is recorded for a reading that raised (its values were not shown)."""
    gathered: list[Reveal] = []
    token = _GATHERED.set(gathered)
    try:
        yield
    finally:
        _GATHERED.reset(token)
    reveals_record(user, reading, gathered)


def reveals_record(
    user: permissions.Principal, reading: str, gathered: list[Reveal], *, actor_label: str | None = None
) -> None:
    """The ``gathered`` reveals of one reading (``reading``: what was read, e.g. ``audit:export``) as one
    ``sensitive.revealed`` event; nothing when none. What ``reveals_gathered`` does at its end, for a reading
    that spans calls a context manager cannot (an export streamed chunk by chunk, each maybe on its own thread)."""
    if not gathered:
        return
    threads = {r.thread_id for r in gathered}
    graphs = {r.graph for r in gathered}
    subjects = list(dict.fromkeys(r.subject for r in gathered))
    with transaction.atomic():
        audit_record(
            actor=user,
            actor_label=actor_label,
            action=AuditAction.SENSITIVE_REVEALED,
            subject_type=reading.split(":", 1)[0],
            subject_id=reading.split(":", 1)[-1],
            thread_id=threads.pop() if len(threads) == 1 else None,
            graph=graphs.pop() if len(graphs) == 1 else "",
            details={
                "paths": sorted({p for r in gathered for p in r.paths}),
                "subjects": subjects[:REVEALED_SUBJECTS_MAX],
                "count": len(subjects),
            },
        )


def effects_masked(
    user: permissions.Principal, thread: Thread, effects: list[Effect], *, args_kept: bool = True
) -> list[Effect]:
    """Effects with their results masked for ``user`` (copies: the rows themselves are never touched);
    without ``args_kept`` their arguments are dropped, for a surface that does not show them."""
    if not effects:
        return []
    results, _ = guard(
        user, thread.graph, [e.result for e in effects], subject=f"thread:{thread.pk}", thread_id=thread.pk, quoted=()
    )
    # Arguments and results carry redacted values under names of their own: masked by value too.
    values = threads_redacted_values([thread])[thread.pk] if paths_masked_for(user, thread.graph) else set()
    shown = []
    for effect, result in zip(effects, results, strict=True):
        masked = copy.copy(effect)
        masked.result = values_masked(result, values)
        masked.args = values_masked(effect.args, values) if args_kept else None
        shown.append(masked)
    return shown


def _guard_view(
    user: permissions.Principal, thread: Thread, view: CheckpointView, quoted: Collection[str]
) -> CheckpointView:
    paths = sensitive_paths(thread.graph)
    known = _view_values(view, paths, quoted)
    values, _ = guard(
        user,
        thread.graph,
        view.values,
        subject=f"checkpoint:{view.checkpoint_id}",
        thread_id=thread.id,
        quoted=known,
    )
    view = dataclasses.replace(view, values=values)
    return view if may_see_sensitive(user) else _masked_beside_values(view, paths, known)


def _view_values(view: CheckpointView, paths: Sequence[str], quoted: Collection[str]) -> set[str]:
    """The values a reader of ``view`` may not see: at its sensitive paths (values, writes, tasks' results)
    and ``quoted``. A message in any of the three may speak any of them."""
    return redacted_values([view.values, view.writes, [t.result for t in view.tasks]], paths) | set(quoted)


def _masked_beside_values(view: CheckpointView, paths: list[str], known: Collection[str]) -> CheckpointView:
    """What a view carries besides its values, masked: the writes, and what each finished task returned."""
    if not paths:
        return view
    tasks = tuple(dataclasses.replace(t, result=state_redact(t.result, paths, quoted=known)[0]) for t in view.tasks)
    return dataclasses.replace(view, writes=state_redact(view.writes, paths, quoted=known)[0], tasks=tasks)


def _quoted(thread: Thread, *views: CheckpointView) -> set[str]:
    """The values a state read of ``thread`` masks in message text besides its own (``_carried_if_spoken``)."""
    return _carried_if_spoken(thread, [[v.values, v.writes, [t.result for t in v.tasks]] for v in views])


def _carried_if_spoken(thread: Thread, value: Any, *, user: permissions.Principal | None = None) -> set[str]:
    """The values ``thread`` carried anywhere (``thread_redacted_values``), for masking the message text in
    ``value``: a message can quote a value the document no longer holds (a node that cleared the field after
    speaking of it, a text kept as stored). Read (three queries) only when ``value`` holds a message, and
    with ``user``, only when they see values masked: otherwise paths alone mask it."""
    if not holds_message(value) or (user is not None and not paths_masked_for(user, thread.graph)):
        return set()
    listed: set[str] | None = vars(thread).get(_CARRIED)
    return set(listed) if listed is not None else thread_redacted_values(thread)


# Where ``threads_carried_read`` keeps a listed row's ``thread_redacted_values`` (as Django keeps a prefetch
# on the instance): read by ``_carried_if_spoken`` instead of three queries for that row.
_CARRIED = "_gateway_carried_values"


def threads_carried_read(user: permissions.Principal, threads: Sequence[Thread]) -> None:
    """For a listing that shows each of ``threads``' values to ``user`` (``thread_values_for`` per row): what
    the threads carried (``thread_redacted_values``), for the rows ``_carried_if_spoken`` would read it for
    (values holding a message, ``user`` seeing them masked), read for the whole page at once
    (``threads_redacted_values``: three queries, none when there is no such row) and kept on each row.

    Only for rows just read for the listing: it is what each thread had carried when read here, and a row
    written to afterwards would be masked by what it carried before."""
    spoken = [t for t in threads if holds_message(t.values) and paths_masked_for(user, t.graph)]
    carried = threads_redacted_values(spoken)
    for thread in spoken:
        vars(thread)[_CARRIED] = carried[thread.pk]


def state_for(user: permissions.Principal, thread_id: Any, checkpoint_id: str | None = None) -> CheckpointView | None:
    return thread_state_for(user, permissions.thread_get_for(user, thread_id), checkpoint_id)


def thread_state_for(
    user: permissions.Principal, thread: Thread, checkpoint_id: str | None = None
) -> CheckpointView | None:
    """``state_for`` of a thread row already read (its visibility is checked again, without a query)."""
    permissions.thread_require_visible(user, thread)
    view = thread_state_read(thread, checkpoint_id)
    if checkpoint_id and view is None:
        raise NotFound(f"checkpoint {checkpoint_id} not found", field="checkpoint_id")
    return _guard_view(user, thread, view, _quoted(thread, view)) if view else None


def history_for(
    user: permissions.Principal,
    thread_id: Any,
    *,
    limit: int = 50,
    before: str | None = None,
    checkpoint_id: str | None = None,
) -> list[CheckpointView]:
    thread = permissions.thread_get_for(user, thread_id)
    views = thread_history_read(thread, limit=limit, before=before, checkpoint_id=checkpoint_id)
    paths = sensitive_paths(thread.graph)
    if not paths:
        return views
    # One set for the page: a message in one checkpoint may quote a value held in another.
    known = _quoted(thread, *views).union(*(_view_values(v, paths, ()) for v in views))
    if may_see_sensitive(user):
        values = [v.values for v in views]
        guard(user, thread.graph, values, subject=f"thread:{thread.id}", thread_id=thread.id, quoted=known)
        return views
    return [
        _masked_beside_values(
            dataclasses.replace(v, values=state_redact(v.values, paths, quoted=known)[0]), paths, known
        )
        for v in views
    ]


def task_state_for(user: permissions.Principal, task: ApprovalTask) -> CheckpointView | None:
    """The state the task's reviewer decides on: the checkpoint where it paused."""
    permissions.task_require_visible(user, task)
    view = thread_state_read(task.thread, task.checkpoint_id)
    return _guard_view(user, task.thread, view, _quoted(task.thread, view)) if view else None


def thread_values_for(user: permissions.Principal, thread: Thread) -> dict[str, Any]:
    """The thread's last known values (the listing snapshot), masked for ``user``.

    Its messages are masked like a state read's: by the values the thread carried anywhere, read only
    when the snapshot holds a message and ``user`` sees values masked (a listing of threads without
    messages reads no other row per thread). An update that replaced a value leaves the messages that
    quoted it, which only the run's input or the older state still holds.
    """
    permissions.thread_require_visible(user, thread)
    values: dict[str, Any]
    values, _ = guard(
        user,
        thread.graph,
        thread.values,
        subject=f"thread:{thread.id}",
        thread_id=thread.id,
        quoted=_carried_if_spoken(thread, thread.values, user=user),
    )
    return values


def payload_for(user: permissions.Principal, task: ApprovalTask) -> tuple[Any, list[str]]:
    """The interrupt payload as ``user`` may see it, and the paths masked (part of the evidence)."""
    permissions.task_require_visible(user, task)
    return guard(user, task.graph, task.payload, subject=f"task:{task.pk}", thread_id=task.thread_id)


class ThreadsCarried:
    """The threads an audit reading's rows name, and the values each carried anywhere
    (``threads_redacted_values``): read once for every row that masks by them (``audit_details_many``).
    Read per row, an audit page of 100 effect or comment rows of different threads took four queries for
    each, and a lead's export of a year's payments four for every payment."""

    def __init__(self) -> None:
        self._threads: dict[Any, Thread | None] = {}
        self._values: dict[Any, set[str]] = {}

    def read(self, thread_ids: Iterable[Any]) -> None:
        """Read the threads of ``thread_ids`` not read yet, and their values: four queries for them all."""
        missing = {pk for pk in thread_ids if pk not in self._threads}
        if not missing:
            return
        threads = list(Thread.objects.filter(pk__in=missing))
        self._values.update(threads_redacted_values(threads))
        self._threads.update(dict.fromkeys(missing))
        self._threads.update((t.pk, t) for t in threads)

    def threads(self, thread_ids: Sequence[Any]) -> list[Thread]:
        """The threads of ``thread_ids`` that exist, once each, in order."""
        self.read(thread_ids)
        return [t for pk in dict.fromkeys(thread_ids) if (t := self._threads[pk]) is not None]

    def values(self, thread_id: Any) -> set[str]:
        self.read([thread_id])
        return self._values.get(thread_id, set())


def audit_details_many(
    user: permissions.Principal, events: Sequence[AuditEvent], *, gathered: list[Reveal] | None = None
) -> list[dict[str, Any]]:
    """``audit_details_for`` of each of ``events``, the threads their rows mask by read once for them all."""
    carried = ThreadsCarried()
    carried.read(pk for event in events for pk in _threads_masked_by(user, event))
    withheld = audit_hashes_withheld(user)
    return [audit_details_for(user, event, gathered=gathered, carried=carried, withheld=withheld) for event in events]


def _threads_masked_by(user: permissions.Principal, event: AuditEvent) -> list[Any]:
    """The threads whose carried values ``audit_details_for`` may mask ``event``'s details by (a superset)."""
    details = event.details
    if not event.graph or event.thread_id is None or not isinstance(details, dict):
        return []
    if event.action in COMMENT_ACTIONS and details.get("author_saw_sensitive") is not False:
        return [event.thread_id, *_thread_ids(details.get("quoted_threads"))]
    if event.action.startswith("effect.") and paths_masked_for(user, event.graph):
        return [event.thread_id]
    return []


def audit_details_for(
    user: permissions.Principal,
    event: AuditEvent,
    *,
    gathered: list[Reveal] | None = None,
    carried: ThreadsCarried | None = None,
    withheld: bool | None = None,
) -> dict[str, Any]:
    """Audit details are stored whole (they are hashed); masking happens on the way out.

    Reading the reveal events themselves reveals nothing, so they are not re-audited. ``gathered``: a
    reading's reveals, recorded together at its end (``reveals_record``). ``carried``, ``withheld``: the
    threads' values and ``audit_hashes_withheld(user)``, read once for a reading's events
    (``audit_details_many``; a permission check per row was a fifth of an export's time).
    """
    carried = carried or ThreadsCarried()
    if withheld is None:
        withheld = audit_hashes_withheld(user)
    stored: dict[str, Any] = event.details
    if not event.graph or event.action == AuditAction.SENSITIVE_REVEALED:
        # An export's event names the head hash it reached (``audit.exported``): a chain hash like any other.
        return _digests_withheld(stored) if withheld else stored
    details: dict[str, Any]
    # Details quote state (an input, an update, edits): their messages are masked by the values they hold.
    details, _ = guard(
        user, event.graph, stored, subject=f"audit:{event.pk}", thread_id=event.thread_id, quoted=(), gathered=gathered
    )
    if event.action in COMMENT_ACTIONS:  # Conversation (comments): free text quoting redacted values
        details = _comment_details_masked(user, event, details, carried, gathered=gathered)
    if event.action.startswith("effect.") and event.thread_id is not None and paths_masked_for(user, event.graph):
        details = _effect_details_masked(event, details, carried)
    return _digests_withheld(details) if withheld else details


@dataclasses.dataclass(frozen=True)
class DecisionShown:
    """The state-carrying values of one decision, as a reader may see them."""

    state_patch: dict[str, Any] | None
    resume_value: Any


def decisions_shown(
    user: permissions.Principal, task: ApprovalTask, decisions: Sequence[Decision]
) -> list[DecisionShown]:
    """Each decision's state patch (edits or a proposal) and resume value (edited action arguments,
    responses, the exact resume), masked for ``user`` in one gateway call (one audited reveal)."""
    permissions.task_require_visible(user, task)
    if not decisions:
        return []
    values = [{"state_patch": d.state_patch, "resume_value": d.resume_value} for d in decisions]
    # A patch's messages may quote a value the patch does not hold (text kept as stored when a masked reader
    # sent it back as shown).
    shown, _ = guard(
        user,
        task.graph,
        values,
        subject=f"task:{task.pk}",
        thread_id=task.thread_id,
        quoted=_carried_if_spoken(task.thread, values, user=user),
    )
    return [DecisionShown(state_patch=s["state_patch"], resume_value=s["resume_value"]) for s in shown]


# --- digests and chain hashes: oracles for a masked value ---------------------------------------------
#
# A SHA-256 over content that holds a value the reader sees masked gives the value away when it has few
# possible values: a date of birth is found by hashing its ~36,600 candidates with the rest of the content,
# which the reader sees. Each digest a reader may see is over what they see, or withheld (``MASK``).

DIGEST_WITHHELD = MASK


def decision_digests_for(user: permissions.Principal, task: ApprovalTask, decision: Decision) -> tuple[str, str]:
    """A decision's ``evidence_digest`` and ``signed_digest`` as ``user`` may see them.

    The evidence digest is over the payload as its signer saw it: shown when every path the reader sees
    masked was masked for the signer too (``redacted_paths``). The signed digest is over what was signed,
    whose hidden values a masked signer's edits keep: withheld from every reader who sees values masked."""
    masked = set(paths_masked_for(user, task.graph))
    if not masked:
        return decision.evidence_digest, decision.signed_digest
    evidence = decision.evidence_digest if masked <= set(decision.redacted_paths or ()) else DIGEST_WITHHELD
    return evidence, (DIGEST_WITHHELD if decision.signed_digest else "")


def signers_digests_shown(user: permissions.Principal, task: ApprovalTask, result: Any) -> Any:
    """An external task's signed result (``approvals.external``) with each signer's evidence digest as
    ``decision_digests_for`` shows it to ``user``."""
    signers = result.get("signers") if isinstance(result, dict) else None
    if not isinstance(signers, list) or not paths_masked_for(user, task.graph):
        return result
    decisions = {d.actor.get_username(): d for d in task.decisions.select_related("actor")}
    shown = []
    for signer in signers:
        decision = decisions.get(str(signer.get("actor"))) if isinstance(signer, dict) else None
        if isinstance(signer, dict) and signer.get("evidence_digest"):
            digest = decision_digests_for(user, task, decision)[0] if decision is not None else DIGEST_WITHHELD
            signer = {**signer, "evidence_digest": digest}
        shown.append(signer)
    return {**result, "signers": shown}


def audit_hashes_withheld(user: permissions.Principal) -> bool:
    """Whether an audit reader gets the events' chain hashes and their details' digests withheld: one who sees
    sensitive values masked (the built-in ``lead`` role). Each event's hash covers its unmasked details, and
    the next event of its chain carries that hash as its ``prev_hash``; verifying the trail is for those who
    may read every value it covers (the auditor and admin roles), or ``audit_export --verify --against-db``."""
    return not may_see_sensitive(user)


_DIGEST_KEYS = ("_digest", "_hash")  # payload_digest, evidence_digest, signed_digest, args_digest; head_hash


def _digests_withheld(details: Any) -> Any:
    """``details`` with every digest or hash value (``*_digest``, ``*_hash``), at any depth, replaced by
    ``DIGEST_WITHHELD``."""
    if isinstance(details, dict):
        return {
            k: DIGEST_WITHHELD if k.endswith(_DIGEST_KEYS) and v else _digests_withheld(v) for k, v in details.items()
        }
    if isinstance(details, list):
        return [_digests_withheld(v) for v in details]
    return details


def payload_digest_for(user: permissions.Principal, task: ApprovalTask) -> str:
    """The payload digest a reader may see: of the payload as shown to them.

    A digest of the unmasked payload would be an oracle: a masked value with
    few possible values (a date of birth) is found by hashing candidates.
    """
    paths = paths_masked_for(user, task.graph)
    return task.payload_digest if not paths else masked_digest(task.payload, paths)


def masked_digest(value: Any, paths: Sequence[str]) -> str:
    return hashlib.sha256(canonical(redact(value, paths)[0]).encode()).hexdigest()


# --- Conversation (comments): free text is masked by the redacted values it quotes ----------------

COMMENT_ACTIONS = frozenset({AuditAction.COMMENT_POSTED, AuditAction.COMMENT_EDITED})


def thread_redacted_values(thread: Thread) -> set[str]:
    """The values at the graph's sensitive paths anywhere the thread carried them.

    The thread's last values, every run's input and command, every task's
    payload, every decision's edits, resume value and signed action: a value
    replaced by an edit is still found in the payload or decision that carried it.
    """
    return threads_redacted_values([thread])[thread.pk]


def threads_redacted_values(threads: Sequence[Thread]) -> dict[Any, set[str]]:
    """``thread_redacted_values`` of each of ``threads``, by id: three queries for them all, however many
    (none when no graph of theirs has sensitive paths)."""
    by_graph = {graph: sensitive_paths(graph) for graph in {t.graph for t in threads}}
    sources: dict[Any, list[Any]] = {t.pk: [t.values] for t in threads if by_graph[t.graph]}
    if sources:
        runs = Run.objects.filter(thread_id__in=list(sources)).values_list("thread_id", "input", "command")
        for thread_id, *parts in runs:
            sources[thread_id] += parts
        tasks = ApprovalTask.objects.filter(thread_id__in=list(sources)).values_list("thread_id", "payload")
        for thread_id, payload in tasks:
            sources[thread_id].append(payload)
        decisions = Decision.objects.filter(task__thread_id__in=list(sources)).values_list(
            "task__thread_id", "state_patch", "resume_value", "signed_action"
        )
        for thread_id, *parts in decisions:
            sources[thread_id] += parts
    return {t.pk: redacted_values(sources[t.pk], by_graph[t.graph]) if t.pk in sources else set() for t in threads}


# How far back a comment's author's reveals are read for the other threads a comment may quote: their
# newest reveal events, and the distinct threads among them.
QUOTED_REVEALS_READ = 5000
QUOTED_THREADS_READ = 500


def threads_quoted(author: permissions.Principal, text: str, thread: Thread) -> list[str]:
    """The other threads whose redacted values ``text`` (by ``author``, who may see such values) quotes.

    Only values its author was shown can be quoted, and every showing is audited (``sensitive.revealed``,
    with its thread): the threads of the author's newest reveals are searched, not every thread. An admin
    comparing two applicants quoted the other's date of birth, which the comment's own thread did not carry,
    and every reviewer of this thread read it. Ids, not the values, are kept with the text."""
    if not text or not isinstance(author, User):
        return []
    revealed = (
        AuditEvent.objects.filter(action=AuditAction.SENSITIVE_REVEALED, actor=author, thread_id__isnull=False)
        .exclude(thread_id=thread.pk)
        .order_by("-id")
        .values_list("thread_id", flat=True)[:QUOTED_REVEALS_READ]
    )
    ids = [pk for pk in dict.fromkeys(revealed) if pk is not None][:QUOTED_THREADS_READ]
    if not ids:
        return []
    found = threads_redacted_values(list(Thread.objects.filter(pk__in=ids)))
    return sorted(str(pk) for pk, values in found.items() if _quotes(text, values))


def text_shown(
    user: permissions.Principal, thread: Thread, texts: Sequence[tuple[str, bool, Sequence[str]]], *, subject: str
) -> list[str]:
    """``texts`` (comment bodies, each with whether its author could see redacted values, and the other threads
    whose values it quotes) as ``user`` may read them: redacted values quoted by an author who could see
    them are masked, this thread's and the quoted threads'.

    A text by an author who could not see them is shown as written: it cannot quote what its author
    never saw, and masking it by value would answer their guesses. A permitted reader shown a text
    that quotes one is audited like any other reveal, on each thread whose values it quotes.
    """
    written = [body for body, _, _ in texts]
    if not any(saw for _, saw, _ in texts):
        return written
    quoted = {str(t) for _, saw, threads in texts if saw for t in threads}
    others = {str(t.pk): t for t in Thread.objects.filter(pk__in=quoted)} if quoted else {}
    values = threads_redacted_values([thread, *others.values()])
    masked: list[str] = []
    shown_from: dict[Any, Thread] = {}  # the threads whose values the texts quote, for a reader who may see them
    for body, saw, threads in texts:
        sources = [thread, *(others[str(t)] for t in threads if str(t) in others)] if saw else []
        found = [t for t in sources if _quotes(body, values[t.pk])]
        shown_from.update((t.pk, t) for t in found)
        masked.append(text_mask(body, set().union(*(values[t.pk] for t in found))) if found else body)
    if not shown_from or not may_see_sensitive(user):
        return masked
    for shown in shown_from.values():
        _revealed(user, subject=subject, thread_id=shown.pk, graph=shown.graph, paths=["comment.body"])
    return written


def _quotes(text: str, values: Collection[str]) -> bool:
    """Whether ``text`` holds one of ``values`` in any letter case (what ``text_mask`` would replace)."""
    lowered = text.lower()
    return any(v.lower() in lowered for v in values)


def _effect_details_masked(event: AuditEvent, details: dict[str, Any], carried: ThreadsCarried) -> dict[str, Any]:
    """An effect event's arguments and result masked by the values of its thread's redacted paths: the graph
    passes them under names of its own (``args={"iban": ...}``), which no declared path names. An outside
    tester, as a lead, read an employee's IBAN in ``effect.executed`` while ``thread.started`` masked it."""
    if event.thread_id is None or not any(key in details for key in ("args", "result")):
        return details
    values = carried.values(event.thread_id)
    return {k: values_masked(v, values) if k in ("args", "result") else v for k, v in details.items()}


def _comment_details_masked(
    user: permissions.Principal,
    event: AuditEvent,
    details: dict[str, Any],
    carried: ThreadsCarried,
    *,
    gathered: list[Reveal] | None = None,
) -> dict[str, Any]:
    """A comment event's details with its body as ``text_shown`` shows it: masked for a reader who may not see
    the values it quotes, and for one who may, audited as a reveal on each thread whose values it quotes (an
    outside tester read a date of birth in a comment on the audit page and its exports, unaudited)."""
    body = details.get("body")
    if not isinstance(body, str) or event.thread_id is None:
        return details
    if details.get("author_saw_sensitive") is False:  # see text_shown; events before the flag: masked
        return details
    threads = carried.threads([event.thread_id, *_thread_ids(details.get("quoted_threads"))])
    found = [t for t in threads if _quotes(body, carried.values(t.pk))]
    if not found:
        return details
    if may_see_sensitive(user):
        for thread in found:
            _revealed(
                user, subject=f"audit:{event.pk}", thread_id=thread.pk, graph=thread.graph, paths=["comment.body"],
                gathered=gathered,
            )  # fmt: skip
        return details
    return {**details, "body": text_mask(body, set().union(*(carried.values(t.pk) for t in found)))}


def _thread_ids(listed: Any) -> list[uuid.UUID]:
    """The thread ids of a comment event's ``quoted_threads`` (absent before migration 0037: none)."""
    ids = []
    for item in listed if isinstance(listed, list) else []:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            ids.append(uuid.UUID(item))
    return ids


# --- subgraph states (approvals.time_travel) ---


def subgraph_states_for(
    user: permissions.Principal, thread_id: Any, checkpoint_id: str | None = None
) -> list[SubgraphView]:
    """The subgraphs in flight at the checkpoint, each state masked for ``user`` like the root's."""
    thread = permissions.thread_get_for(user, thread_id)
    subgraphs = thread_subgraphs_read(thread, checkpoint_id)

    def flat(items: list[SubgraphView]) -> list[CheckpointView]:
        return [view for s in items for view in (s.view, *flat(s.children))]

    quoted = _quoted(thread, *flat(subgraphs))

    def guarded(items: list[SubgraphView]) -> list[SubgraphView]:
        return [
            dataclasses.replace(s, view=_guard_view(user, thread, s.view, quoted), children=guarded(s.children))
            for s in items
        ]

    return guarded(subgraphs)
