"""What the console says about runtime records: checkpoints, runs, effects, errors, audit actors, threads.

LangGraph's and the runtime's own vocabulary (checkpoint ``source`` values, ``__start__``, idempotency
keys, worker lease labels, Python tracebacks) is what operators debug with, not what a reviewer reads.
Each function here turns one of them into words; the identifier stays available to the page (a
``title`` or a collapsed ``<details>``), never as the text itself.
"""

from __future__ import annotations

import builtins
import json
import re
from typing import Any

from approvals.time_travel import EffectLine
from runtime.models import BranchKind, EffectStatus, RunKind, RunStatus, ThreadStatus
from runtime.registry import UnknownGraph, graph_get
from runtime.state import CheckpointView

# LangGraph checkpoint metadata "source" (langgraph.pregel: input | loop | update | fork).
SOURCE_INPUT = "input"
SOURCE_LOOP = "loop"
SOURCE_UPDATE = "update"
SOURCE_FORK = "fork"


def _nodes(names: Any) -> list[str]:
    """Graph nodes by their names, without LangGraph's own (``__start__``, ``__interrupt__``...)."""
    if not isinstance(names, dict | list | tuple):
        return []
    return sorted(str(n) for n in names if not str(n).startswith("__"))


def checkpoint_summary(view: CheckpointView, *, ran: Any = None, forked: bool = False) -> str:
    """What happened at a checkpoint, in words: "Input received", "Ran score_risk", "Replayed from ...".

    ``ran``: the nodes that produced it when the view does not say (the parent checkpoint's ``next``);
    ``forked``: an operator's state change at a past checkpoint (the thread branched there).
    """
    if view.source == SOURCE_INPUT:
        return "Input received"
    if view.source == SOURCE_UPDATE:
        return "State changed by an operator (fork)" if forked else "State changed by an operator"
    if view.source == SOURCE_FORK:
        return "Replayed from an earlier checkpoint"
    writes = view.writes if isinstance(view.writes, dict) and view.writes else ran
    nodes = _nodes(writes)
    if nodes:
        return f"Ran {', '.join(nodes)}"
    if (isinstance(writes, dict | list | tuple) and "__start__" in writes) or view.step == 0:
        return "Started"
    return "Ran a step"


def checkpoint_next(view: CheckpointView, *, waiting: bool = False) -> str:
    """Where the thread goes from a checkpoint: "Waiting at human_review", "Next: disburse", "Finished"."""
    nodes = _nodes(view.next)
    if nodes:
        return f"{'Waiting at' if waiting else 'Next:'} {', '.join(nodes)}"
    if view.next:  # only LangGraph's own (``__start__`` of an input checkpoint)
        return "Next: start"
    return "Finished" if view.source == SOURCE_LOOP else ""


# --- runs --------------------------------------------------------------------------------

_RUN_STATUS_WORDS = {
    RunStatus.QUEUED: "waiting for a worker",
    RunStatus.RUNNING: "running",
    RunStatus.INTERRUPTED: "paused for a decision",
    RunStatus.SUCCEEDED: "succeeded",
    RunStatus.FAILED: "failed",
    RunStatus.CANCELLED: "cancelled",
}


def run_kind(run: Any) -> str:
    """ "Start run", "Resume run", "Retry run", "Replay run"."""
    try:
        return f"{RunKind(run.kind).label} run"
    except ValueError:
        return f"{run.kind} run"


def run_outcome(run: Any, *, with_error: bool = True) -> str:
    """The run's status, said once: "paused for a decision", "failed: bank is down"."""
    words = _RUN_STATUS_WORDS.get(run.status, str(run.status))
    if with_error and run.status == RunStatus.FAILED and run.error:
        return f"{words}: {error_summary(run.error, limit=120)}"
    return words


def run_summary(run: Any, *, with_error: bool = True) -> str:
    """ "Start run — paused for a decision"; ``with_error=False`` where the error is shown beside it."""
    return f"{run_kind(run)} — {run_outcome(run, with_error=with_error)}"


# --- time travel -------------------------------------------------------------------------

_BRANCH_KIND_WORDS = {BranchKind.FORK: "Fork", BranchKind.REPLAY: "Replay"}

# Where a line of the thread stands (the thread's status, said of its current line).
_LINE_STATE_WORDS = {
    ThreadStatus.IDLE: "idle",
    ThreadStatus.BUSY: "running",
    ThreadStatus.INTERRUPTED: "waiting for a decision",
    ThreadStatus.COMPLETED: "completed",
    ThreadStatus.FAILED: "failed",
    ThreadStatus.CANCELLED: "cancelled",
}

CHECKPOINT_SHORT = 8


def branch_kind(branch: Any) -> str:
    """ "Replay" or "Fork" (the kind's label explains itself at length: "Replay (re-run from a past …)")."""
    try:
        return _BRANCH_KIND_WORDS[BranchKind(branch.kind)]
    except ValueError:
        return str(branch.kind).capitalize()


def checkpoint_short(checkpoint_id: Any) -> str:
    """A checkpoint id short enough for a list: its end ("…6569b936"). LangGraph's ids are UUIDv6, time
    first, so a thread's checkpoints share their first dozen characters; their ends tell them apart."""
    text = str(checkpoint_id or "")
    return f"…{text[-CHECKPOINT_SHORT:]}" if len(text) > CHECKPOINT_SHORT else text


def line_state(thread: Any) -> str:
    """Where the thread's current line stands: "waiting for a decision", "running", "completed"…

    A line the thread has left (a fork or replay moves it to the new branch) is not described: its run's
    last status ("interrupted") said nothing true of it once its pending tasks were superseded."""
    return _LINE_STATE_WORDS.get(thread.status, str(thread.status))


# --- effects -----------------------------------------------------------------------------

_EFFECT_STATUS_WORDS = {
    EffectStatus.STARTED: "started, no result yet",
    EffectStatus.DONE: "done",
    EffectStatus.FAILED: "failed",
    EffectStatus.UNKNOWN: "outcome unknown",
}

# What is true of an action whose status alone would mislead, and what to do about it.
_EFFECT_STATUS_HINTS = {
    EffectStatus.UNKNOWN: (
        "The request may have reached the provider and no answer came back: it may have acted (a payment "
        "may have been made). Retrying the thread asks the provider again under the same idempotency key: "
        "it acts at most once and answers with what it did, which is recorded here."
    ),
}


# A call whose run ended before its outcome was recorded (``Effect.abandoned``).
_EFFECT_ABANDONED_WORDS = "outcome unknown: its run stopped mid-call"
_EFFECT_ABANDONED_HINT = (
    "The run that made this call ended before an answer was recorded (its worker died for good or it was "
    "cancelled): the provider may have acted. Retrying or continuing the thread asks the provider again "
    "under the same idempotency key: it acts at most once and answers with what it did, which is recorded here."
)


def effect_status(effect: Any) -> str:
    if getattr(effect, "abandoned", False):
        return _EFFECT_ABANDONED_WORDS
    return _EFFECT_STATUS_WORDS.get(effect.status, str(effect.status))


def effect_hint(effect: Any) -> str:
    """What an operator should know beside an action's status ("" when its status says it all)."""
    if getattr(effect, "abandoned", False):
        return _EFFECT_ABANDONED_HINT
    return _EFFECT_STATUS_HINTS.get(effect.status, "")


def effect_line(effect: Any) -> str:
    """One action as a sentence's item: "disburse done: {"paid": 20000, …}" (its result as already masked)."""
    text = f"{effect.name} {effect_status(effect)}"
    if effect.result is not None:
        result = effect.result if isinstance(effect.result, str) else json.dumps(effect.result, default=str)
        text += f": {result if len(result) <= 120 else result[:119] + '…'}"
    return text


_EFFECT_LINE_WORDS = {
    EffectLine.THIS_LINE: "",
    EffectLine.BEFORE_BRANCH: "before this branch",
    EffectLine.ORIGINAL_LINE: "on the original line",
    EffectLine.OTHER_BRANCH: "on another branch",
}


def effect_where(line: EffectLine | None) -> str:
    """Where an action was recorded, beside it on a branched thread ("on the original line"); "" for the
    line the thread is on (``approvals.time_travel.effects_lines``)."""
    return _EFFECT_LINE_WORDS.get(line, "") if line is not None else ""


def travel_confirmation(effects: list[Any], *, kind: str) -> str:
    """What "Replay from here" (``kind="replay"``) or a fork that runs (``"fork"``) asks first: the actions
    recorded after the checkpoint, which run again as new actions (``approvals.time_travel.effects_redone_for``)."""
    ask = "Replay from this checkpoint?" if kind == "replay" else "Fork from this checkpoint and run the branch?"
    if not effects:
        return f"{ask} The steps after it run again on a new branch."
    items = "\n".join(f"• {effect_line(e)}" for e in effects)
    return (
        f"{ask} The steps after it run again on a new branch, and these actions recorded after it on the "
        f"original line will be performed again, as new actions (a provider will not refuse them as repeats):"
        f"\n{items}"
    )


# --- deadlines ---------------------------------------------------------------------------


def escalation_words(task: Any) -> str:
    """What a deadline's escalation did, for its badge: "escalated → leads" when it moved the task to a
    group; else "escalated, not reassigned" (the gate names no ``escalate_to``, or no such group exists:
    ``approvals.deadlines.task_escalate`` flags the task and e-mails whom it waits for, and that is all).
    A bare "escalated" beside "Assigned to —" read as a hand-off nobody made. The group is the one the
    escalation moved the task to (``escalated_to``), not today's assignment: a refused escalation keeps
    the group the task had, which "escalated → it" would pass off as the escalation's doing."""
    return f"escalated → {task.escalated_to}" if task.escalated_to else "escalated, not reassigned"


# --- errors ------------------------------------------------------------------------------

# LangGraph adds a note to an exception raised in a node: "During task with name 'x' and id '...'".
_TASK_NOTE = re.compile(r"^During task with name .*$", re.MULTILINE)
# "demo.bank_client.BankUnavailable: message": a dotted module path before the exception's name.
_REPR = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\((['\"])(.*)\2\)$")
_QUALIFIED = re.compile(r"^(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)(?::\s*(.*))?$")


def error_summary(text: str, *, limit: int = 200) -> str:
    """One line of an error for people: the exception's message, without module paths or LangGraph's
    task note. A builtin exception keeps its name ("KeyError: 'amount'"): its message alone says little.
    """
    lines = [line.strip() for line in _TASK_NOTE.sub("", text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    as_repr = _REPR.match(first)  # an effect's error is stored as repr(exc): "BankUnavailable('…')"
    if as_repr:  # a builtin keeps its name, as in a traceback's last line; another says its message
        name, message = as_repr.group(1), as_repr.group(3)
        first = f"{name}: {message}" if hasattr(builtins, name) else message
    qualified = _QUALIFIED.match(first)
    if qualified:
        name, message = qualified.group(1), (qualified.group(2) or "").strip()
        first = message or name
    if len(lines) > 1 and len(first) < limit:
        first += " …"
    return first if len(first) <= limit else first[: limit - 1] + "…"


def error_is_summarised(text: str) -> bool:
    """Whether the summary leaves something out (then the page offers the full text)."""
    return error_summary(text) != (text or "").strip()


# --- audit actors ------------------------------------------------------------------------

_ACTOR_PREFIXES = {
    "worker": "worker",
    "webhook": "webhook",
    "sso": "single sign-on",
    "anonymous": "sign-in attempt",
}


def actor_short(label: str) -> str:
    """An audit actor label as people read it: "worker:vm:14448:1404..." → "worker (vm)"."""
    kind, sep, rest = (label or "").partition(":")
    if not sep or kind not in _ACTOR_PREFIXES:
        return label
    if kind == "worker":
        host = rest.split(":", 1)[0]
        return f"worker ({host})" if host else "worker"
    if kind == "sso":
        return f"{rest} (single sign-on)"
    return f"{_ACTOR_PREFIXES[kind]} ({rest})" if rest else _ACTOR_PREFIXES[kind]


# --- threads -----------------------------------------------------------------------------

METADATA_LABELS = {
    "case": "Case",
    "applicant": "Applicant",
    "external_source": "Source",
    "external_key": "Key",
}


def metadata_label(key: Any) -> str:
    """A thread metadata key as a label: "external_source" → "Source", "due_date" → "Due date"."""
    text = str(key)
    return METADATA_LABELS.get(text) or text.replace("_", " ").strip().capitalize() or text


DEFAULT_CASE_KEYS = ("case", "applicant")


def case_keys(graph: str) -> tuple[str, ...]:
    """The metadata keys that name a thread of ``graph``: the ones its ``search_metadata`` names (what
    people search it by: an order, a customer), else the demo's case and applicant."""
    try:
        keys = tuple(graph_get(graph).options.get("search_metadata", ()))
    except UnknownGraph:  # retired, or an external engine's thread
        keys = ()
    return keys or DEFAULT_CASE_KEYS


def case_of(graph: str, metadata: Any) -> tuple[str, str]:
    """A thread's case and who it is about, from its first two naming keys ("" where a key is unset)."""
    values = metadata if isinstance(metadata, dict) else {}
    keys = case_keys(graph)
    first = values.get(keys[0]) if keys else None
    second = values.get(keys[1]) if len(keys) > 1 else None
    return (str(first) if first not in (None, "") else "", str(second) if second not in (None, "") else "")


# How much of a case or an applicant a thread's name and the lists show: thread metadata may hold 16 KiB,
# and one long value (a 300-character case id) made the inbox 3,640 px wide and a heading 10 lines tall.
NAME_PART_MAX = 60


def clipped(text: str, length: int) -> str:
    """At most ``length`` characters, the last an ellipsis if cut (the template's ``|truncatechars``)."""
    return text if len(text) <= length else text[: length - 1] + "…"


def case_shown(graph: str, metadata: Any) -> tuple[str, str]:
    """``case_of``, each part clipped to ``NAME_PART_MAX``: what names a thread in a heading or a list row
    (the whole values are in the thread's metadata, on its page)."""
    case, applicant = case_of(graph, metadata)
    return clipped(case, NAME_PART_MAX), clipped(applicant, NAME_PART_MAX)


GRAPH_LABEL_MAX = 40


def graph_label(graph: str) -> str:
    """A graph as people call it: the head of its langgraph.json description ("KYC onboarding: documents,
    screening, …" → "KYC onboarding"), else its name (no description, a long one, retired or external)."""
    try:
        description = graph_get(graph).description
    except UnknownGraph:
        description = ""
    head = description.split(":", 1)[0].strip()
    return head if head and len(head) <= GRAPH_LABEL_MAX else graph


def thread_name(thread: Any) -> str:
    """What to call a thread: its case ("C-1042 · Ada Lovelace"), an external task's source and key,
    else its graph's label and a short id ("KYC onboarding · 9e10d524")."""
    metadata = thread.metadata if isinstance(thread.metadata, dict) else {}
    case, applicant = case_shown(thread.graph or "", metadata)
    if case:
        return f"{case} · {applicant}" if applicant else case
    source, key = metadata.get("external_source"), metadata.get("external_key")
    if source and key:
        return f"{source} {key}"
    return f"{graph_label(thread.graph) if thread.graph else 'Thread'} · {str(thread.pk)[:8]}"


# --- bulk decisions ----------------------------------------------------------------------


def approvals_waiting(remaining: int | None) -> str:
    """What a task signed but not decided still waits for: "waits for 1 more approval" (``remaining``:
    approvals still needed; None where decisions of another kind are, e.g. a second rejection)."""
    if not remaining:
        return "waits for more decisions"
    return f"waits for {remaining} more approval{'' if remaining == 1 else 's'}"


def bulk_signed_heading(bulk: Any) -> str:
    """The heading of a bulk's signatures that did not decide their task."""
    return "Signed, waiting for more approvals" if bulk.outcome == "approve" else "Signed, waiting for more decisions"


def bulk_tally(bulk: Any) -> str:
    """A finished bulk in one line: "4 decided, 1 signed — waits for 1 more approval, 0 skipped". A signature
    that left its task pending is not counted as decided (``BulkAction.closed`` / ``signed``)."""
    closed, signed, skipped = len(bulk.closed), bulk.signed, len(bulk.skipped)
    parts = [f"{closed} decided"]
    if signed:
        waits = {item.get("remaining") for item in signed}
        if len(signed) == 1:
            parts.append(f"1 signed — {approvals_waiting(signed[0].get('remaining'))}")
        elif len(waits) == 1:
            parts.append(f"{len(signed)} signed — each {approvals_waiting(waits.pop())}")
        else:
            parts.append(f"{len(signed)} signed — waiting for more approvals")
    parts.append(f"{skipped} skipped")
    return ", ".join(parts)
