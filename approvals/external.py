"""External tasks: humans in the loop for other durable engines (Temporal, DBOS, Restate, Inngest, ...).

An engine creates an approval task through ``/api/external-tasks`` and gets the
signed decision back by a callback webhook or a long-poll (docs/external-tasks.md).

Why an ApprovalTask on a lightweight thread rather than a model of its own:
``services.task_decide`` holds every decision rule (quorum, separation of
duties, re-authentication, reasons, evidence binding, claims (checked inline,
``approvals.claims``), audit). An external task is an ApprovalTask of kind
``external`` on a Thread whose graph is ``external:<source>`` (no LangGraph
graph, no checkpoints: ``runtime.state`` reads nothing for it), so the inbox,
task page, permissions (assignments to ``external:<source>``), redaction and
audit trail are the ones every task has. The one difference is what happens
when the decision is final: instead of resuming a graph, ``_external_complete``
(registered in ``services.task_completers``) fixes the result and, for a
callback, queues it in the outbound outbox in the decision's own transaction.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from approvals import gateway, permissions, services
from approvals.audit import audit_task, canonical
from approvals.errors import Conflict, Forbidden, InvalidInput, NotFound
from approvals.gate_policy import gate_policy
from approvals.inputs import text_problem
from approvals.json_schemas import schema_problem
from approvals.models import (
    ApprovalTask,
    AuditAction,
    Decision,
    ExternalSource,
    ExternalTask,
    OutboundDelivery,
    TaskKind,
    TaskStatus,
    WebhookSubscription,
)
from approvals.outbound.destinations import destination_check
from approvals.outbound.outbox import delivery_dispatch
from approvals.outbound.signing import secret_check, secret_generate, webhook_sign
from approvals.payloads import GENERIC_DECISIONS
from approvals.redaction import hidden_from, path_valid
from runtime.gatekeeper import GATE_MARKER
from runtime.models import Thread, ThreadStatus
from runtime.registry import EXTERNAL_GRAPH_PREFIX

RESULT_EVENT = "external.decided"


def source_graph(source: str) -> str:
    return EXTERNAL_GRAPH_PREFIX + source


@dataclass(frozen=True)
class ExternalTaskSpec:
    """What an engine asks for; validated by the API schema, checked again here."""

    source: str
    key: str
    title: str
    payload: dict[str, Any]
    summary: str = ""
    response_schema: dict[str, Any] | None = None
    decisions: tuple[str, ...] = ("approve", "reject")
    redaction_paths: tuple[str, ...] = ()
    due_at: datetime | None = None
    required_approvals: int = 1
    separation_of_duties: bool = False
    callback_url: str = ""
    secret: str = ""

    def digest(self) -> str:
        """What "the same body" means for idempotency: every field the engine sent, canonically."""
        body = {
            "source": self.source,
            "key": self.key,
            "title": self.title,
            "summary": self.summary,
            "payload": self.payload,
            "response_schema": self.response_schema,
            "decisions": list(self.decisions),
            "redaction_paths": list(self.redaction_paths),
            "due_at": self.due_at.isoformat() if self.due_at else None,
            "required_approvals": self.required_approvals,
            "separation_of_duties": self.separation_of_duties,
            "callback_url": self.callback_url,
            "secret": hashlib.sha256(self.secret.encode()).hexdigest() if self.secret else "",
        }
        return hashlib.sha256(canonical(body).encode()).hexdigest()


def _spec_check(spec: ExternalTaskSpec) -> None:
    if any(segment in ("", ".", "..") for segment in spec.key.split("/")):
        # GET /api/external-tasks/by-key/{source}/{key} carries the key as a path: clients rewrite dot
        # segments (RFC 3986: a/b/../c is sent as a/c) and proxies merge slashes, so it would never be found.
        raise InvalidInput(
            "key: '/' must separate non-empty segments, none of them '.' or '..' (a URL cannot carry them as "
            "they are, so the task could not be read by its key)",
            field="key",
        )
    unknown = [d for d in spec.decisions if d not in GENERIC_DECISIONS]
    if unknown or not spec.decisions:
        raise InvalidInput(f"decisions must be among {', '.join(GENERIC_DECISIONS)}", field="decisions")
    if len(set(spec.decisions)) != len(spec.decisions):
        raise InvalidInput("decisions: name each decision once", field="decisions")
    if "edit" in spec.decisions and not spec.response_schema:
        raise InvalidInput("an edit decision needs a response_schema for the edited response", field="decisions")
    if spec.response_schema is not None:
        # Refused now rather than when a reviewer's answer meets it: no answer could be checked.
        problem = schema_problem(spec.response_schema)
        if problem is not None:
            raise InvalidInput(problem, field="response_schema")
    for index, path in enumerate(spec.redaction_paths):
        if not path_valid(path):
            raise InvalidInput(
                "a redaction path is a dotted path such as applicant.ssn", field=f"redaction_paths[{index}]"
            )
    if spec.due_at is not None and timezone.is_naive(spec.due_at):
        raise InvalidInput("due_at: give a time zone, e.g. Z or +02:00", field="due_at")
    if spec.due_at is not None and spec.due_at <= timezone.now():
        raise InvalidInput("due_at must be in the future", field="due_at")
    if spec.secret:
        try:
            secret_check(spec.secret)
        except InvalidInput as exc:
            raise InvalidInput(exc.message, field="secret") from None
    if spec.callback_url:
        try:
            destination_check(spec.callback_url)  # same SSRF policy as every outbound webhook
        except InvalidInput as exc:
            raise InvalidInput(exc.message, field="callback_url") from None


def _gate_payload(spec: ExternalTaskSpec) -> dict[str, Any]:
    # The gate payload shape makes the console render the right decisions and response form.
    proposed = {"name": "response", "args": {}, "args_schema": spec.response_schema} if spec.response_schema else None
    return {
        "type": GATE_MARKER,
        "title": spec.title,
        "summary": spec.summary,
        "proposed_action": proposed,
        "editable": [],
        "allowed_decisions": list(spec.decisions),
        "required_approvals": spec.required_approvals,
        "rejections_required": 1,
        "separation_of_duties": spec.separation_of_duties,
        "sla_seconds": None,
        "correlation_key": None,
        "details": spec.payload,
        "external": {"source": spec.source, "key": spec.key},
    }


def external_task_create(*, actor: User, spec: ExternalTaskSpec) -> tuple[ExternalTask, bool]:
    """Open a task for an engine, idempotently on (source, key): (task, created).

    The same key with the same body returns the existing task (created False);
    with a different body it is refused with 409, writing nothing.
    """
    graph = source_graph(spec.source)
    permissions.require(actor, "runtime.start_thread", "create external tasks")
    if not permissions.graph_visible(actor, graph):
        raise Forbidden(f"you are not assigned to the external source {spec.source!r}", field="source")
    _spec_check(spec)
    with transaction.atomic():
        source, _ = ExternalSource.objects.get_or_create(name=spec.source)
        # Creates of one source queue here, so two concurrent requests with one key cannot both create.
        source = ExternalSource.objects.select_for_update().get(pk=source.pk)
        digest = spec.digest()
        # The thread too: secret_shown_to reads its creator, and a replay is a hot retry path.
        existing = ExternalTask.objects.select_related("task__thread").filter(source=source, key=spec.key).first()
        if existing is not None:
            if existing.body_digest != digest and not _differs_where_hidden(existing, spec, actor=actor, graph=graph):
                raise Conflict(
                    f"key {spec.key!r} was already used for a different task of {spec.source!r}", field="key"
                )
            return existing, False
        return _create(actor=actor, spec=spec, source=source, graph=graph, digest=digest), True


def _differs_where_hidden(existing: ExternalTask, spec: ExternalTaskSpec, *, actor: User, graph: str) -> bool:
    """Whether ``spec`` is the existing task's body but for values at paths ``actor`` sees masked, when
    ``actor`` did not create the task: the replay is answered as an identical one would be.

    An outside tester, as another principal of the source, replayed a key with guesses of its masked SSN: a
    wrong one was a 409 ("already used for a different task"), the right one a 200. The creator sent the
    body and is answered exactly; anyone else gets the same answer whatever they put where they cannot see.
    """
    if existing.task.thread.created_by_id == actor.pk:
        return False
    paths = gateway.paths_masked_for(actor, graph)
    stored = existing.task.payload.get("details") if isinstance(existing.task.payload, dict) else None
    if not paths or not isinstance(stored, dict):
        return False
    return replace(spec, payload=hidden_from(spec.payload, stored, paths)).digest() == existing.body_digest


def _create(*, actor: User, spec: ExternalTaskSpec, source: ExternalSource, graph: str, digest: str) -> ExternalTask:
    paths = list(dict.fromkeys(spec.redaction_paths))
    merged = list(dict.fromkeys([*source.redaction_paths, *paths]))
    if merged != source.redaction_paths:
        source.redaction_paths = merged
        source.save(update_fields=["redaction_paths"])
    checkpoint = f"external-{uuid.uuid4().hex}"  # what decisions bind to, like a graph's checkpoint id
    thread = Thread.objects.create(
        graph=graph,
        status=ThreadStatus.INTERRUPTED,
        checkpoint_id=checkpoint,
        metadata={"external_source": spec.source, "external_key": spec.key},
        created_by=actor,
    )
    payload = _gate_payload(spec)
    task = ApprovalTask.objects.create(
        thread=thread,
        graph=graph,
        node=spec.source,
        kind=TaskKind.EXTERNAL,
        interrupt_id=f"external:{spec.key}"[:200],
        checkpoint_id=checkpoint,
        payload=payload,
        payload_digest=services.payload_digest(payload),
        response_schema=spec.response_schema,
        title=spec.title[:300],
        due_at=spec.due_at,
        required_approvals=spec.required_approvals,
        correlation_key=gate_policy(payload, TaskKind.EXTERNAL).correlation_key_indexed,
    )
    secret = spec.secret or secret_generate()
    subscription = None
    if spec.callback_url:
        subscription = WebhookSubscription.objects.create(
            url=spec.callback_url, graph=graph, event_types=[], secret=secret, active=False, created_by=actor
        )
    external = ExternalTask.objects.create(
        task=task,
        source=source,
        key=spec.key,
        body_digest=digest,
        redaction_paths=paths,
        secret=secret,
        callback_url=spec.callback_url,
        subscription=subscription,
    )
    audit_task(
        task=task,
        actor=actor,
        action=AuditAction.TASK_OPENED,
        details={
            "kind": TaskKind.EXTERNAL,
            "source": spec.source,
            "key": spec.key,
            "checkpoint_id": checkpoint,
            "payload_digest": task.payload_digest,
            "redaction_paths": paths,
            "callback_url": spec.callback_url,
            "due_at": spec.due_at.isoformat() if spec.due_at else None,
        },
    )
    return external


def secret_shown_to(external: ExternalTask, actor: Any, *, spec: ExternalTaskSpec) -> bool:
    """Whether a create answer (201, or the idempotent 200 of a replay) carries the task's generated secret.

    Only to the user who created the task: an engine retrying after a lost response must learn it again,
    but another principal assigned to the source who replays the same body (the key and body are no
    secret: they are in the engine's logs, in the audit trail) must not, or it could sign forged
    decisions. Never when the caller sent the secret: it has it already. ``external.task.thread`` must be
    loaded with the row (``external_task_create`` does): no query here.
    """
    if spec.secret:
        return False
    return external.task.thread.created_by_id is not None and external.task.thread.created_by_id == actor.pk


def external_task_get_for(user: Any, task_id: Any) -> ExternalTask:
    task = permissions.task_get_for(user, task_id)
    external = ExternalTask.objects.select_related("task", "source").filter(task=task).first()
    if external is None:
        raise NotFound(f"external task {task_id} not found", field="task_id")
    return external


def external_task_get_by_key(user: Any, *, source: str, key: str) -> ExternalTask:
    if text_problem(source) or text_problem(key):  # no such row can exist, and the database would refuse the query
        raise NotFound(f"no external task with key {key!r} in {source!r}", field="key")
    external = ExternalTask.objects.select_related("task", "source").filter(source__name=source, key=key).first()
    if external is None or not permissions.tasks_visible(user).filter(pk=external.task_id).exists():
        raise NotFound(f"no external task with key {key!r} in {source!r}", field="key")
    return external


def result_headers(external: ExternalTask) -> dict[str, str]:
    """Standard Webhooks headers over the result body: the same signature a callback carries."""
    return webhook_sign(external.secret, result_body(external), msg_id=external.result_id)


def result_body(external: ExternalTask) -> bytes:
    return json.dumps(external.result, separators=(",", ":")).encode()


def answer_response(answer: Any) -> tuple[str | None, Any]:
    """(the decision it states, the response) of an answer: a gate's resume value
    ``{"decision": ..., "action_args": response}`` or the response itself."""
    if isinstance(answer, dict) and "decision" in answer:
        stated = answer["decision"]
        return (stated if isinstance(stated, str) else None), answer.get("action_args")
    return None, answer


def _external_complete(task: ApprovalTask, decision: Decision, actor: User) -> None:
    """The final decision: fix the result once and hand it to the engine (in the decision's transaction)."""
    external = ExternalTask.objects.select_for_update().get(task=task)
    if external.result is not None:  # cannot happen behind task_decide's row lock; refuse rather than resend
        raise Conflict("this task's decision was already delivered", field="task_id")
    signers = list(task.decisions.select_related("actor").order_by("created_at"))
    resume = decision.resume_value
    _, response = answer_response(resume)
    if response is None and decision.outcome in ("approve", "edit"):
        # Under separation of duties an edit is a proposal someone else approves: the approved
        # response is the latest proposed one.
        proposals = [d.resume_value.get("action_args") for d in signers if isinstance(d.resume_value, dict)]
        response = next((p for p in reversed(proposals) if p is not None), None)
    result_id = f"ext_{decision.id.hex}"
    external.result_id = result_id
    external.result = {
        "type": RESULT_EVENT,
        "id": result_id,
        "task_id": str(task.id),
        "source": external.source.name,
        "key": external.key,
        "decision": decision.outcome,
        "reason": decision.reason,
        "response": response,
        "message": resume.get("message") if isinstance(resume, dict) else None,
        "decided_at": timezone.now().isoformat(),
        "signers": [
            {
                "actor": d.actor.get_username(),
                "name": d.signer_name,
                "meaning": d.meaning,
                "outcome": d.outcome,
                "evidence_digest": d.evidence_digest,
                "at": d.created_at.isoformat(),
            }
            for d in signers
        ],
    }
    external.save(update_fields=["result", "result_id"])
    Thread.objects.filter(pk=task.thread_id).update(
        status=ThreadStatus.COMPLETED, values={"decision": decision.outcome}, updated_at=timezone.now()
    )
    delivery = None
    if external.subscription_id is not None:
        delivery = OutboundDelivery.objects.create(
            subscription_id=external.subscription_id,
            event_id=result_id,  # the webhook-id: stable across retries, so the engine dedupes
            event_type=RESULT_EVENT,
            graph=task.graph,
            payload=external.result,
            thread_id=task.thread_id,
            next_attempt_at=timezone.now(),
        )
        pk = delivery.pk
        transaction.on_commit(lambda: delivery_dispatch(delivery_id=pk))
    decided = audit_task(
        task=task,
        actor=actor,
        action=AuditAction.EXTERNAL_DECIDED,
        details={
            "source": external.source.name,
            "key": external.key,
            "result_id": result_id,
            "decision": decision.outcome,
            "callback_delivery": delivery.pk if delivery else None,
        },
    )
    if delivery is not None:  # each names the other: the delivery is listed with the event that queued it
        OutboundDelivery.objects.filter(pk=delivery.pk).update(audit_event_id=decided.pk)


def result_ready(external: ExternalTask) -> bool:
    return external.result is not None or external.task.status in (TaskStatus.CANCELLED, TaskStatus.SUPERSEDED)


services.task_completers[TaskKind.EXTERNAL] = _external_complete
