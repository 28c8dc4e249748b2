"""A gate's policy, read once from its interrupt payload into a typed object.

Gate authors set these keys in the payload they interrupt with (the gatekeeper
helpers in ``runtime.gatekeeper`` write them); everything that enforces or shows
a rule reads ``gate_policy(...)`` instead of looking into the payload itself.
Values of the wrong type fall back to the default, as they always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from approvals.payloads import payload_kind
from runtime.deadlines import ALL_GATES, Deadline, payload_deadline
from runtime.registry import UnknownGraph, graph_get

MAX_APPROVALS = 10
CORRELATION_KEY_MAX = 500  # ApprovalTask.correlation_key's length (at most 2,000 bytes: a btree index entry fits)


@dataclass(frozen=True)
class GatePolicy:
    approvals_required: int = 1  # signatures that complete an approval (a quorum), 1..MAX_APPROVALS
    rejections_required: int = 1  # rejections that reject the task
    separation_of_duties: bool = False  # asked for by the gate (the global setting and quorums add to it)
    editable: tuple[str, ...] | None = None  # state fields a reviewer may edit (None: the state schema decides)
    sla_seconds: int | None = None  # the task is due this long after it opens
    correlation_key: Any = None  # echoed to outbound webhooks so a receiver can match its own records
    deadline: Deadline | None = None  # what the payload asks for (due, remind_before, ...); see gate_deadline

    @property
    def correlation_key_indexed(self) -> str:
        """What ``ApprovalTask.correlation_key`` stores: the key when it is a string an inbound webhook
        can match (webhook bodies' keys are strings, at most ``CORRELATION_KEY_MAX`` long), else ""."""
        key = self.correlation_key
        return key if isinstance(key, str) and 0 < len(key) <= CORRELATION_KEY_MAX else ""


def _editable(value: Any) -> tuple[str, ...] | None:
    """A gate's editable fields. An empty list is "none" (``request_review``'s default, and what the console
    offers): read as "no limit", it let an API client edit any state field the console did not show."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return (str(value),) if value != "" else ()


def _count(value: Any, *, maximum: int | None = None) -> int | None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return None
    return value if maximum is None or value <= maximum else None


def gate_policy(payload: Any, task_kind: str = "interrupt") -> GatePolicy:
    """The policy of a gate whose interrupt carried ``payload`` (any payload: unknown shapes get the defaults)."""
    if not isinstance(payload, dict):
        return GatePolicy()
    editable = payload.get("editable") if payload_kind(payload, task_kind) == "gatehouse" else None
    # The deadline is read whatever the task's kind (as when the task opens, before it has one).
    sla = payload.get("sla_seconds") if payload_kind(payload) == "gatehouse" else None
    return GatePolicy(
        approvals_required=_count(payload.get("required_approvals"), maximum=MAX_APPROVALS) or 1,
        rejections_required=_count(payload.get("rejections_required", 1)) or 1,
        separation_of_duties=bool(payload.get("separation_of_duties")),
        editable=_editable(editable),
        sla_seconds=sla if isinstance(sla, int) else None,
        correlation_key=payload.get("correlation_key"),
        deadline=payload_deadline(payload) if payload_kind(payload) == "gatehouse" else None,
    )


def gate_deadline(*, graph: str, node: str, payload: Any, task_kind: str = "interrupt") -> Deadline | None:
    """A gate's deadline: langgraph.json's policy for the gate (or the graph's "*"), with what it leaves
    unset taken from the payload. The operator's file wins; a payload can never add an automatic approval."""
    try:
        configured = graph_get(graph).deadlines
    except UnknownGraph:
        configured = {}
    config = configured.get(node) or configured.get(ALL_GATES)
    asked = gate_policy(payload, task_kind).deadline
    if config is None:
        return asked
    return config.merged_over(asked)
