"""Approval tasks, decisions, the audit trail, API tokens, graph assignments and SSO identities."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from django.conf import settings
from django.db import models
from django.db.models import Q, Value
from django.utils import timezone

from runtime.models import Run, Thread


class TaskStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DECIDED = "decided", "Decided"
    SUPERSEDED = "superseded", "Superseded"  # the thread moved on without this interrupt
    CANCELLED = "cancelled", "Cancelled"


class TaskKind(models.TextChoices):
    INTERRUPT = "interrupt", "Interrupt"
    BREAKPOINT = "breakpoint", "Static breakpoint"
    EXTERNAL = "external", "External engine"  # created by another engine's API call (approvals.external)


class ApprovalTask(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="tasks")
    run = models.ForeignKey(Run, null=True, on_delete=models.SET_NULL, related_name="tasks")
    graph = models.CharField(max_length=100)  # denormalised for indexed inbox filters
    node = models.CharField(max_length=200)
    kind = models.CharField(max_length=12, choices=TaskKind.choices, default=TaskKind.INTERRUPT)
    interrupt_id = models.CharField(max_length=200)
    checkpoint_id = models.CharField(max_length=64)
    checkpoint_ns = models.CharField(max_length=500, blank=True, default="")
    payload = models.JSONField(null=True)
    payload_digest = models.CharField(max_length=64)
    response_schema = models.JSONField(null=True, blank=True)
    title = models.CharField(max_length=300, blank=True, default="")
    status = models.CharField(max_length=12, choices=TaskStatus.choices, default=TaskStatus.PENDING)
    due_at = models.DateTimeField(null=True, blank=True)
    # Four-eyes: approvals from distinct approvers needed before the thread resumes.
    required_approvals = models.PositiveSmallIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    # Routing (hand-offs, escalation): a person and/or a group the task is assigned to. Empty means
    # everyone the policy lets decide the gate; an assignment narrows who is asked, never who may see.
    assigned_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    assigned_group = models.ForeignKey("auth.Group", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    assigned_at = models.DateTimeField(null=True, blank=True)
    # Deadlines (approvals.deadlines, docs/deadlines.md): when the one reminder is due and was sent,
    # and since when and why the task is escalated. Each is set once, by the sweep that won the row.
    remind_at = models.DateTimeField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    escalation_reason = models.CharField(max_length=500, blank=True, default="")
    # The group the escalation moved the task to, by name as it was then; empty when it moved nothing
    # (no escalate_to, no such group, or a group that could not finish it). Not the assignment now: a
    # refused escalation keeps the old group, and a lead may reassign later.
    escalated_to = models.CharField(max_length=150, blank=True, default="", db_default="")
    # The gate's correlation key (gate_policy), copied when the task opens so an inbound webhook finds
    # its task through an index instead of a scan of every pending payload (approvals.inbound.webhooks).
    correlation_key = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        constraints = [
            # Idempotent creation: one pending task per interrupt of a thread,
            # however often the run that raised it is redelivered.
            models.UniqueConstraint(
                fields=["thread", "interrupt_id"],
                condition=Q(status="pending"),
                name="one_pending_task_per_interrupt",
            )
        ]
        indexes = [
            models.Index(fields=["status", "graph", "-created_at"], name="task_inbox"),
            models.Index(fields=["thread", "status"], name="task_thread_status"),
            # The inbox without a graph filter (newest / due first) at 100k pending tasks: no sort.
            models.Index(fields=["status", "-created_at", "-id"], name="task_status_newest"),
            models.Index(fields=["status", "due_at", "id"], name="task_status_due"),
            # deadlines: the sweep's reminder scan
            models.Index(fields=["status", "remind_at"], name="task_status_remind"),
            # inbound webhooks: the task a callback's correlation key names
            models.Index(
                fields=["correlation_key", "status"], name="task_correlation", condition=~Q(correlation_key="")
            ),
        ]
        permissions = [
            ("decide_task", "Can decide approval tasks"),
            ("approve_final", "Can give the final approval of a quorum"),
            ("view_all_graphs", "Can see every graph's threads and tasks"),
            ("view_sensitive", "Can see sensitive state fields unmasked"),
            ("view_dashboard", "Can see the team dashboard"),  # team dashboard
        ]

    def __str__(self) -> str:
        return f"task {self.id} ({self.graph}/{self.node}, {self.status})"

    @property
    def is_open(self) -> bool:
        return self.status == TaskStatus.PENDING

    @property
    def is_external(self) -> bool:
        """Asked by another engine (``approvals.external``): no graph, state or checkpoints behind it."""
        return self.kind == TaskKind.EXTERNAL


class Outcome(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    EDIT = "edit", "Edit and approve"
    RESPOND = "respond", "Respond"


class SignatureMeaning(models.TextChoices):
    REVIEWED = "reviewed", "Reviewed"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"


_OUTCOME_DONE: dict[str, str] = {
    Outcome.APPROVE: "approved",
    Outcome.REJECT: "rejected",
    Outcome.EDIT: "edited and approved",
    Outcome.RESPOND: "answered",
}


class Decision(models.Model):
    """One principal's decision on a task; a quorum task collects several."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    task = models.ForeignKey(ApprovalTask, on_delete=models.PROTECT, related_name="decisions")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    reason = models.TextField(blank=True, default="")
    state_patch = models.JSONField(null=True, blank=True)
    resume_value = models.JSONField(null=True, blank=True)
    checkpoint_id = models.CharField(max_length=64)
    payload_digest = models.CharField(max_length=64)
    # Digest of exactly what the signer saw: payload, checkpoint and the redaction applied.
    evidence_digest = models.CharField(max_length=64, blank=True, default="")
    redacted_paths = models.JSONField(default=list, blank=True)
    # Electronic signature (21 CFR Part 11 spirit): who, what it means, when re-authenticated.
    signer_name = models.CharField(max_length=300, blank=True, default="")
    meaning = models.CharField(max_length=10, choices=SignatureMeaning.choices, blank=True, default="")
    reauthenticated_at = models.DateTimeField(null=True, blank=True)
    # "session", "token" (services.Signer.via) or "": a machine principal, or made before this was kept.
    signed_via = models.CharField(max_length=8, blank=True, default="", db_default="")
    # Signed intent: the action an approving signer signed (proposed action + their edits),
    # and the SHA-256 of everything signed (resume, state update, action; see services.signed_digest).
    # ``decisions_verify`` proves the effects that followed match them.
    signed_action = models.JSONField(null=True, blank=True)
    signed_digest = models.CharField(max_length=64, blank=True, default="")
    # The resume run that carried this decision; null while sibling
    # interrupts of the same super-step still wait for their decisions.
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.outcome} on {self.task_id} by {self.actor_id}"

    @property
    def outcome_shown(self) -> str:
        """The outcome as people read it: an edit that approved nothing (under separation of duties a proposal,
        signed "reviewed") is "Proposed an edit"; "Edit and approve" told an auditor the proposer approved."""
        if self.outcome == Outcome.EDIT and self.meaning == SignatureMeaning.REVIEWED:
            return "Proposed an edit"
        return str(self.get_outcome_display())

    @property
    def outcome_done(self) -> str:
        """The outcome as a finished act, for "approved by alice"."""
        if self.outcome == Outcome.EDIT and self.meaning == SignatureMeaning.REVIEWED:
            return "proposed an edit"
        return _OUTCOME_DONE.get(self.outcome, self.outcome)


class AuditAction(models.TextChoices):
    """What an audit event records; the stored value is the dotted string."""

    THREAD_STARTED = "thread.started"
    THREAD_CREATED = "thread.created"
    THREAD_RETRIED = "thread.retried"
    THREAD_STATE_UPDATED = "thread.state_updated"
    THREAD_METADATA_UPDATED = "thread.metadata_updated"
    THREAD_CANCELLED = "thread.cancelled"
    THREAD_COMPLETED = "thread.completed"
    RUN_QUEUED = "run.queued"
    RUN_CLAIMED = "run.claimed"
    RUN_INTERRUPTED = "run.interrupted"
    RUN_SUCCEEDED = "run.succeeded"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    # A zombie overtaken (docs/zombies.md): the sweeper re-sent a run whose lease lapsed; the worker that
    # held it found its claim taken over and stopped.
    RUN_LEASE_LAPSED = "run.lease_lapsed"
    RUN_LEASE_LOST = "run.lease_lost"
    TASK_OPENED = "task.opened"
    TASK_CLAIMED = "task.claimed"
    TASK_RELEASED = "task.released"
    TASK_SUPERSEDED = "task.superseded"
    DECISION_MADE = "decision.made"
    DECISION_RECORDED = "decision.recorded"
    DECISION_REFUSED = "decision.refused"
    EFFECT_EXECUTED = "effect.executed"
    SENSITIVE_REVEALED = "sensitive.revealed"
    EXTERNAL_DECIDED = "external.decided"
    AUDIT_ANCHOR = "audit.anchor"
    AUDIT_EXPORTED = "audit.exported"
    AUTH_LOGIN = "auth.login"
    AUTH_LOGOUT = "auth.logout"
    AUTH_LOGIN_FAILED = "auth.login_failed"
    AUTH_LOCKED_OUT = "auth.locked_out"
    AUTH_SSO_REFUSED = "auth.sso_refused"
    TOKEN_ISSUED = "token.issued"  # noqa: S105 - an audit action name
    TOKEN_REVOKED = "token.revoked"  # noqa: S105 - an audit action name
    USER_CREATED = "user.created"
    USER_ACCESS_CHANGED = "user.access_changed"
    USER_DEACTIVATED = "user.deactivated"
    USER_REACTIVATED = "user.reactivated"
    USER_PASSWORD_RESET = "user.password_reset"  # noqa: S105 - an audit action name
    USER_PASSWORD_SET = "user.password_set"  # noqa: S105 - an audit action name
    USER_OTP_RESET = "user.otp_reset"
    PERMISSION_ROLES_CHANGED = "permission.roles_changed"
    PERMISSION_GRANTS_CHANGED = "permission.grants_changed"
    PERMISSION_ASSIGNMENT_CHANGED = "permission.assignment_changed"
    WEBHOOK_REFUSED = "webhook.refused"
    WEBHOOK_GATE_REFUSED = "webhook.gate_refused"
    WEBHOOK_ENDPOINT_CREATED = "webhook.endpoint_created"
    WEBHOOK_ENDPOINT_ROTATED = "webhook.endpoint_rotated"
    WEBHOOK_ENDPOINT_GATES_CHANGED = "webhook.endpoint_gates_changed"
    WEBHOOK_ENDPOINT_DELETED = "webhook.endpoint_deleted"
    WEBHOOK_SUBSCRIPTION_CREATED = "webhook.subscription_created"
    WEBHOOK_SUBSCRIPTION_DEACTIVATED = "webhook.subscription_deactivated"
    WEBHOOK_DELIVERY_REFUSED = "webhook.delivery_refused"
    WEBHOOK_DELIVERY_RETRIED = "webhook.delivery_retried"
    # An outbound delivery's final outcome (one per delivery, not per attempt): sent and answered 2xx,
    # or given up after its last attempt (a refused destination is webhook.delivery_refused).
    WEBHOOK_DELIVERED = "webhook.delivered"
    WEBHOOK_DELIVERY_FAILED = "webhook.delivery_failed"
    # hand-offs (approvals/claims.py, approvals/assignment.py)
    TASK_REASSIGNED = "task.reassigned"
    TASK_DELEGATED = "task.delegated"
    USER_AWAY_SET = "user.away_set"
    USER_AWAY_CLEARED = "user.away_cleared"
    # deadlines and escalation (approvals.deadlines)
    DEADLINE_REMINDED = "deadline.reminded"
    DEADLINE_ESCALATED = "deadline.escalated"
    DEADLINE_TIMED_OUT = "deadline.timed_out"
    DEADLINE_TIMEOUT_REFUSED = "deadline.timeout_refused"
    # Conversation (comments)
    COMMENT_POSTED = "comment.posted"
    COMMENT_EDITED = "comment.edited"
    # time travel (approvals.time_travel)
    THREAD_FORKED = "thread.forked"
    THREAD_REPLAYED = "thread.replayed"
    THREAD_COPIED = "thread.copied"
    # Long-term memory store (approvals/store.py): every write, by a graph run or through /lg/.
    STORE_ITEM_PUT = "store.item_put"
    STORE_ITEM_DELETED = "store.item_deleted"
    # Bulk actions (issue 14): each task's decision is its own row; these frame the action.
    BULK_STARTED = "bulk.started"
    BULK_FINISHED = "bulk.finished"
    # Cancelling a running run (approvals.run_cancel): the thread rolled back, a task of the run withdrawn.
    RUN_ROLLED_BACK = "run.rolled_back"
    TASK_CANCELLED = "task.cancelled"
    # Crons (lgplatform/crons.py): made, changed, deleted; each firing's run, or why it was skipped.
    CRON_CREATED = "cron.created"
    CRON_UPDATED = "cron.updated"
    CRON_DELETED = "cron.deleted"
    CRON_FIRED = "cron.fired"
    CRON_SKIPPED = "cron.skipped"
    # Retention (runtime.retention): what a prune deleted — counts, cut-offs, the threads (docs/retention.md).
    CHECKPOINTS_PRUNED = "checkpoints.pruned"


class AuditEvent(models.Model):
    """Append-only, hash-chained record of everything that happened (approvals/audit.py).

    ``chain``: which of the trail's hash chains the event belongs to; 0 holds the
    events recorded before the trail was partitioned. No database default, so
    a process that does not know about chains fails to write rather than fork one.
    """

    id = models.BigAutoField(primary_key=True)
    chain = models.PositiveSmallIntegerField(default=0)
    at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor_label = models.CharField(max_length=150)  # kept even if the user is renamed
    action = models.CharField(max_length=64, db_index=True)
    subject_type = models.CharField(max_length=32)
    subject_id = models.CharField(max_length=64)
    thread_id = models.UUIDField(null=True, blank=True, db_index=True)
    graph = models.CharField(max_length=100, blank=True, default="")
    details = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        indexes = [
            models.Index(fields=["subject_type", "subject_id"], name="audit_subject"),
            # The audit page pages newest first within a filter: walk these instead of sorting the matches.
            models.Index(fields=["action", "-id"], name="audit_action_newest"),
            models.Index(fields=["graph", "-id"], name="audit_graph_newest"),
            models.Index(fields=["chain", "-id"], name="audit_chain_head"),  # each append reads its chain's head
            # The task page's "who released your claim" (approvals.claims.claim_release_last): one entry read.
            # Without it the planner walked audit_action_newest through every task's claims and releases.
            models.Index(
                fields=["subject_id", "-id"],
                name="audit_task_claim_newest",
                condition=models.Q(
                    subject_type="task", action__in=[AuditAction.TASK_CLAIMED, AuditAction.TASK_RELEASED]
                ),
            ),
        ]
        permissions = [("view_audit", "Can browse the audit trail")]

    def __str__(self) -> str:
        return f"#{self.id} {self.action} {self.subject_type}:{self.subject_id}"


class AuditAnchor(models.Model):
    """One chain's head at a moment: how many events it held and the newest one's hash.

    Append-only like the events (database triggers refuse UPDATE, DELETE and
    TRUNCATE on PostgreSQL). ``audit_verify`` checks the chain still reaches
    every anchor: a chain shorter than an anchor, or whose anchored event
    changed, lost or rewrote its tail.
    """

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField()
    chain = models.PositiveSmallIntegerField(default=0)  # 0: anchors from before partitioning
    head_id = models.BigIntegerField()  # the anchored event (the anchor's own audit.anchor event)
    head_hash = models.CharField(max_length=64)
    length = models.PositiveBigIntegerField()  # events in the chain up to and including head_id

    def __str__(self) -> str:
        return f"anchor #{self.id}: chain {self.chain}, {self.length} events, head #{self.head_id}"


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=12, db_index=True)
    digest = models.CharField(max_length=64, unique=True)  # sha256 of the secret; the secret is never stored
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Scope: empty lists mean "whatever the user may do" (graphs) / "all actions".
    graphs = models.JSONField(default=list, blank=True)
    actions = models.JSONField(default=list, blank=True)  # read, start, decide, retry, admin

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user_id})"


class GraphAssignment(models.Model):
    """Which graphs a reviewer or operator works on; graph "*" means all of them."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="graph_assignments")
    graph = models.CharField(max_length=100)
    gate = models.CharField(max_length=200, blank=True, default="")  # "" = every gate (node) of the graph

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "graph", "gate"], name="one_assignment_per_gate")]
        permissions = [("manage_users", "Can administer users: roles, graph and gate assignments, credentials")]

    def __str__(self) -> str:
        return f"{self.user_id} → {self.graph}"


class ExternalIdentity(models.Model):
    """A user who signs in through single sign-on (OpenID Connect).

    The provider's issuer and subject identify the person, never the email or
    username a claim carries: an e-mail address can be reassigned, a subject cannot.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identity")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_external_identity")]

    def __str__(self) -> str:
        return f"{self.issuer} {self.subject} → {self.user_id}"


# --- webhooks (inbound deliveries that decide tasks; outbound event notifications) ---------------


class WebhookEndpoint(models.Model):
    """A named inbound webhook: whose signatures it trusts and how a delivery becomes a decision."""

    name = models.SlugField(max_length=100, unique=True)
    graph = models.CharField(max_length=100)
    # Standard Webhooks secrets ("whsec_<base64>"), newest first; several at once while rotating.
    secrets = models.JSONField(default=list)
    # Dotted path into the JSON body whose value is matched against a gate payload's correlation_key.
    correlation_path = models.CharField(max_length=200, default="correlation_key")
    # {"field": "status", "approve": ["verified"], "reject": ["failed"]}; other values are acknowledged only.
    decision_map = models.JSONField(default=dict)
    reason_path = models.CharField(max_length=200, blank=True, default="reason")
    # Dotted path to the event's own time (ISO 8601 or epoch seconds); empty → the webhook-timestamp header.
    timestamp_path = models.CharField(max_length=200, blank=True, default="")
    principal = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # The gates (node names of ``graph``) this endpoint may decide; its principal decides nothing else.
    gates = models.JSONField(default=list)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        permissions = [("manage_webhooks", "Can create, rotate, scope and delete inbound webhook endpoints")]

    def __str__(self) -> str:
        return f"webhook {self.name} → {self.graph}"


class DeliveryStatus(models.TextChoices):
    ACCEPTED = "accepted", "Accepted"
    REFUSED = "refused", "Refused"
    DUPLICATE = "duplicate", "Duplicate"


class InboundDelivery(models.Model):
    """Every request to an inbound endpoint, accepted or not, with the response it got."""

    id = models.BigAutoField(primary_key=True)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    webhook_id = models.CharField(max_length=200, blank=True, default="")
    # Only signature-verified deliveries claim their webhook-id: an unsigned request
    # must not be able to burn an id the real sender will use later.
    verified = models.BooleanField(default=False)
    received_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices)
    http_status = models.PositiveSmallIntegerField()
    reason = models.TextField(blank=True, default="")
    body_digest = models.CharField(max_length=64)
    correlation_key = models.CharField(max_length=500, blank=True, default="")  # gate_policy.CORRELATION_KEY_MAX
    event_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=8, blank=True, default="")
    task = models.ForeignKey(ApprovalTask, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    decision = models.ForeignKey(Decision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    response = models.JSONField(default=dict)  # the body sent back; a repeated webhook-id gets it again

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "webhook_id"],
                # An accepted delivery claims its webhook-id; refusals are retried under it (docs/webhooks.md).
                condition=Q(verified=True, status="accepted"),
                name="one_acceptance_per_webhook_id",
            )
        ]
        indexes = [
            models.Index(fields=["endpoint", "-received_at"], name="inbound_endpoint_recent"),
            models.Index(fields=["endpoint", "correlation_key", "status"], name="inbound_correlation"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.webhook_id} to {self.endpoint_id}: {self.status} {self.http_status}"


class WebhookSubscription(models.Model):
    """An outbound webhook: events of a graph (or "*") POSTed, signed, to a URL."""

    url = models.URLField(max_length=500)
    graph = models.CharField(max_length=100, default="*")
    event_types = models.JSONField(default=list)
    secret = models.CharField(max_length=200)
    # Receives the events it names. False also for an external task's callback (approvals.external),
    # which receives no event, only its one result delivery: that is not what stops a delivery.
    active = models.BooleanField(default=True)
    # Deactivated (approvals.outbound.subscriptions.subscription_deactivate): nothing is sent to it any more.
    deactivated_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"subscription {self.pk} → {self.url}"

    @property
    def kind(self) -> Literal["events", "callback"]:
        """``events`` (it names the event types it receives; never none) or ``callback``: an external
        task's result delivery (``approvals.external``), which names none."""
        return "events" if self.event_types else "callback"


class OutboundStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"  # attempts exhausted; a manual retry sends it again


class OutboundDelivery(models.Model):
    id = models.BigAutoField(primary_key=True)
    subscription = models.ForeignKey(WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries")
    event_id = models.CharField(max_length=64)  # the webhook-id: stable across retries so receivers dedupe
    event_type = models.CharField(max_length=32)
    graph = models.CharField(max_length=100, blank=True, default="")
    payload = models.JSONField()
    # What the delivery is about, so a decision's deliveries can be found: the thread (none for a row
    # written before it was kept) and the audit event that queued it (none for thread.failed, a signal).
    thread_id = models.UUIDField(null=True, blank=True)
    audit_event_id = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=OutboundStatus.choices, default=OutboundStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["subscription", "event_id"], name="one_delivery_per_event")]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="outbound_due"),
            models.Index(fields=["thread_id", "id"], name="outbound_thread"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id} → {self.subscription_id} ({self.status})"


# --- external tasks (humans in the loop for other engines: Temporal, DBOS, ...) ---------------


class ExternalSource(models.Model):
    """An engine that creates tasks; its tasks live under the graph name ``external:<name>``.

    ``redaction_paths`` is the union of every one of its tasks' paths: audit
    details and exports know a graph, not a task, so they mask by this union
    (masking more, never less, than one task asked for).
    """

    name = models.SlugField(max_length=80, unique=True)
    redaction_paths = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"external source {self.name}"


class ExternalTask(models.Model):
    """The engine's side of an external approval task: its idempotency key, callback and result."""

    task = models.OneToOneField(ApprovalTask, primary_key=True, on_delete=models.CASCADE, related_name="external")
    source = models.ForeignKey(ExternalSource, on_delete=models.PROTECT, related_name="tasks")
    key = models.CharField(max_length=200)  # the engine's own idempotency key
    body_digest = models.CharField(max_length=64)  # same key + different body is refused
    redaction_paths = models.JSONField(default=list, blank=True)
    secret = models.CharField(max_length=200)  # signs the decision (callback and long-poll alike)
    callback_url = models.URLField(max_length=500, blank=True, default="")
    # The callback rides the outbound outbox: an inactive subscription of its own receives no events.
    subscription = models.ForeignKey(
        WebhookSubscription, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    result = models.JSONField(null=True, blank=True)  # the decision as delivered, fixed once written
    result_id = models.CharField(max_length=64, blank=True, default="")  # its webhook-id, stable for dedupe

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "key"], name="one_external_task_per_key")]

    def __str__(self) -> str:
        return f"external task {self.source_id}/{self.key}"


# --- hand-offs: claims, out-of-office (approvals/claims.py, approvals/assignment.py) -----------


class TaskClaim(models.Model):
    """A time-limited lock a reviewer takes on a task so two people do not review it at once.

    One row per task (the primary key is the task): a claim that expired is
    simply overwritten by the next claimant, so no sweeper is needed. The table
    keeps the name it had when claims lived in the console (``console_taskclaim``).
    """

    task = models.OneToOneField(ApprovalTask, primary_key=True, on_delete=models.CASCADE, related_name="claim")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    claimed_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "console_taskclaim"
        indexes = [models.Index(fields=["user", "expires_at"], name="claim_user_expires")]
        permissions = [
            ("release_any_claim", "Can release a task claimed by someone else"),
            ("reassign_task", "Can reassign approval tasks to a person or a group (leads)"),
        ]

    def __str__(self) -> str:
        return f"claim on {self.task_id} by {self.user_id} until {self.expires_at:%H:%M}"

    @property
    def is_active(self) -> bool:
        return self.expires_at > timezone.now()


class Away(models.Model):
    """A reviewer's out-of-office: while it lasts, new assignments naming them go to ``delegate``.

    ``starts_at`` / ``ends_at`` are optional: no start means "from now", no end "until cleared".
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="away"
    )
    delegate = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.user_id} away → {self.delegate_id}"

    def is_active_at(self, when: datetime) -> bool:
        return (self.starts_at is None or self.starts_at <= when) and (self.ends_at is None or when < self.ends_at)


# Conversation (comments) ------------------------------------------------------------------------
# Comments on a task or a thread (approvals.comments). Append-only like the audit trail: database
# triggers refuse UPDATE and DELETE on both tables (PostgreSQL); an edit is a new CommentVersion.


class CommentKind(models.TextChoices):
    COMMENT = "comment", "Comment"
    QUESTION = "question", "Question"  # the task shows "waiting for answer" until an answer replies to it
    ANSWER = "answer", "Answer"


class Comment(models.Model):
    """Who said what kind of thing, where; the text lives in its versions (the newest is shown)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.PROTECT, related_name="comments")
    task = models.ForeignKey(ApprovalTask, null=True, blank=True, on_delete=models.PROTECT, related_name="comments")
    graph = models.CharField(max_length=100)  # denormalised: the permission scope
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=10, choices=CommentKind.choices, default=CommentKind.COMMENT)
    reply_to = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="replies")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["thread", "created_at"], name="comment_thread"),
            models.Index(fields=["task", "kind"], name="comment_task_kind"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=~Q(kind="answer") | Q(reply_to__isnull=False), name="comment_answer_replies"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} on {self.task_id or self.thread_id}"


class CommentVersion(models.Model):
    """One version of a comment's text; never changed, never deleted."""

    id = models.BigAutoField(primary_key=True)
    comment = models.ForeignKey(Comment, on_delete=models.PROTECT, related_name="versions")
    version = models.PositiveIntegerField()
    body = models.TextField()
    mentions = models.JSONField(default=list, blank=True)  # ids of the users the text mentions (resolved)
    # Whether its author could see redacted values when writing it. Only such a text can quote one, so
    # only such a text is masked for a reader who may not see them: masking a masked author's own words
    # by value told them which of their guesses was the hidden value.
    author_saw_sensitive = models.BooleanField(default=True)
    # Other threads whose redacted values the text quotes (ids), found when it was written among the threads
    # whose values its author was shown (the reveal trail): masked with the comment's own thread's.
    quoted_threads = models.JSONField(default=list, blank=True, db_default=Value([], output_field=models.JSONField()))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["comment", "version"], name="one_comment_version")]

    def __str__(self) -> str:
        return f"comment {self.comment_id} v{self.version}"


# --- Bulk actions (issue 14): one reviewer approves or rejects many tasks, each decided on its own ---------


class BulkStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    FINISHED = "finished", "Finished"


class BulkAction(models.Model):
    """One bulk approve/reject: the selection fixed when it started, and its progress task by task.

    Each task of it gets its own ``Decision`` through ``services.task_decide``; this row only
    says which tasks were decided and which were skipped, and why.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    reason = models.TextField(blank=True, default="")
    task_ids = models.JSONField(default=list)  # in the order they are decided
    filter = models.JSONField(null=True, blank=True)  # the inbox filter the selection came from, if any
    status = models.CharField(max_length=10, choices=BulkStatus.choices, default=BulkStatus.QUEUED)
    done = models.PositiveIntegerField(default=0)
    # [{"task", "title", "decision", "run", "final", "meaning", "remaining"}]: every signature made; "final"
    # says whether it closed its task, "remaining" (when it did not) how many approvals it still waits for.
    decided = models.JSONField(default=list)
    skipped = models.JSONField(default=list)  # [{"task", "title", "code", "reason"}]
    # The signer's proof, checked once when the action started (the password itself is never stored).
    authenticated_at = models.DateTimeField(null=True, blank=True)
    reauthenticated_at = models.DateTimeField(null=True, blank=True)
    signed_via = models.CharField(max_length=8, blank=True, default="", db_default="")  # services.Signer.via
    # The API token's scope ([graphs, actions]) the action was started with: the worker decides each task
    # as the user narrowed by it, as the request would have (None: a console session, no narrowing).
    token_scope = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["actor", "-created_at"], name="bulk_actor_recent")]

    def __str__(self) -> str:
        return f"bulk {self.outcome} {self.id} ({self.done}/{len(self.task_ids)}, {self.status})"

    @property
    def total(self) -> int:
        return len(self.task_ids)

    @property
    def is_finished(self) -> bool:
        return self.status == BulkStatus.FINISHED

    @property
    def closed(self) -> list[dict[str, Any]]:
        """The signatures that decided their task (it no longer waits)."""
        return [item for item in self.decided if item.get("final")]

    @property
    def signed(self) -> list[dict[str, Any]]:
        """The signatures that did not close their task: it still waits for more approvals (or decisions)."""
        return [item for item in self.decided if not item.get("final")]
