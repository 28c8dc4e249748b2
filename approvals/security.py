"""Authentication events: audited, and each session's proof time kept for electronic signatures.

The re-authentication window is per session: a session is fresh when *this session*
proved who it is (signed in, or re-entered its password / a one-time code to sign)
within ``GATEHOUSE_REAUTH_SECONDS``. Signing in from a second browser, or re-
authenticating there, refreshes only that browser. An API token is fresh only when
it authenticated the request in hand (the token auth classes mark the request); any
other ``Authorization`` header proves nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from axes.signals import user_locked_out
from django.contrib.auth.models import Group, Permission, User
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from approvals.audit import audit_record
from approvals.models import AuditAction, GraphAssignment

SESSION_AUTH_AT = "gatehouse_authenticated_at"  # this session's last proof (sign-in or re-authentication)
REQUEST_TOKEN_AUTH = "gatehouse_token_authenticated"  # noqa: S105 - set by the API's token auth classes on success


def request_token_mark(request: HttpRequest) -> None:
    """Called by a token auth class once the token has authenticated this request."""
    setattr(request, REQUEST_TOKEN_AUTH, True)


def request_proof_at(request: HttpRequest) -> datetime | None:
    """When the caller of this request last proved who they are.

    Now, for a request a valid API token authenticated (each request re-presents the
    secret); otherwise the time recorded in this session; otherwise never.
    """
    if getattr(request, REQUEST_TOKEN_AUTH, False):
        return timezone.now()
    session = getattr(request, "session", None)
    raw = session.get(SESSION_AUTH_AT) if session is not None else None
    parsed = parse_datetime(raw) if isinstance(raw, str) else None
    if parsed is None or timezone.is_naive(parsed):
        return None
    return parsed


def signed_via(request: HttpRequest) -> str:
    """What proves the caller of ``request`` (``services.Signer.via``): an API token, else the session."""
    return "token" if getattr(request, REQUEST_TOKEN_AUTH, False) else "session"


def session_proof_record(request: HttpRequest, at: datetime | None) -> None:
    """A successful re-authentication (password or one-time code) refreshes this session only."""
    session = getattr(request, "session", None)
    if at is None or session is None or getattr(request, REQUEST_TOKEN_AUTH, False):
        return
    session[SESSION_AUTH_AT] = at.isoformat()


# A failed sign-in is audited whatever the username typed, truncated to what the audit
# columns hold (AuditEvent.subject_id, actor_label): a longer one must not lose the row.
USERNAME_MAX = 150  # User.username
SUBJECT_ID_MAX = 64  # AuditEvent.subject_id
ANONYMOUS = "anonymous:"


def _anonymous_label(username: str) -> str:
    return ANONYMOUS + username[: 150 - len(ANONYMOUS)]  # AuditEvent.actor_label


def _client(request: HttpRequest | None) -> dict[str, Any]:
    if request is None:
        return {}
    return {"ip": request.META.get("REMOTE_ADDR", ""), "user_agent": request.META.get("HTTP_USER_AGENT", "")[:200]}


@receiver(user_logged_in)
def on_logged_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if request is not None and hasattr(request, "session"):
        request.session[SESSION_AUTH_AT] = timezone.now().isoformat()
    with transaction.atomic():
        audit_record(
            actor=user, action=AuditAction.AUTH_LOGIN, subject_type="user", subject_id=user.pk, details=_client(request)
        )


@receiver(user_logged_out)
def on_logged_out(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is None:
        return
    # The session ends before the sign-out is announced. Django sends this signal first and flushes
    # the session after it, but the event below reaches the reader's open pages at once, and each
    # page re-checks its session when it hears of it (console/consumers.py): heard first, the session
    # still looked alive, the page was pushed once more and stayed open. ``delete`` removes the stored
    # session and keeps its key on the request, so other receivers of this signal still see it.
    session = getattr(request, "session", None)
    if session is not None and session.session_key:
        session.delete()
    with transaction.atomic():
        audit_record(
            actor=user,
            action=AuditAction.AUTH_LOGOUT,
            subject_type="user",
            subject_id=user.pk,
            details=_client(request),
        )


@receiver(user_locked_out)
def on_locked_out(sender: Any, request: HttpRequest | None, username: str | None = None, **kwargs: Any) -> None:
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label=_anonymous_label(username or ""),
            action=AuditAction.AUTH_LOCKED_OUT,
            subject_type="user",
            subject_id=(username or "")[:SUBJECT_ID_MAX],
            details=_client(request),
        )


@receiver(user_login_failed)
def on_login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    username = str(credentials.get("username", ""))[:USERNAME_MAX]
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label=_anonymous_label(username),
            action=AuditAction.AUTH_LOGIN_FAILED,
            subject_type="user",
            subject_id=username[:SUBJECT_ID_MAX],
            details=_client(request),
        )


# --- permission changes ------------------------------------------------------------------
# Role memberships, direct permissions, role definitions and graph assignments, from any
# surface (admin, shell, commands). The signal does not know who made the change, so the
# event records what changed; surfaces that know their actor audit it themselves too.


def _permission_changed(action: AuditAction, subject_type: str, subject_id: object, details: dict[str, Any]) -> None:
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label="system",
            action=action,
            subject_type=subject_type,
            subject_id=subject_id,
            details=details,
        )


@receiver(m2m_changed, sender=User.groups.through)
def on_user_groups_changed(sender: Any, instance: Any, action: str, pk_set: set[int] | None, **kwargs: Any) -> None:
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if isinstance(instance, User):
        names = sorted(Group.objects.filter(pk__in=pk_set or []).values_list("name", flat=True))
        details = {"user": instance.get_username(), "change": action.removeprefix("post_"), "groups": names}
        _permission_changed(AuditAction.PERMISSION_ROLES_CHANGED, "user", instance.pk, details)
    else:  # changed from the group's side
        users = sorted(User.objects.filter(pk__in=pk_set or []).values_list("username", flat=True))
        details = {"group": instance.name, "change": action.removeprefix("post_"), "users": users}
        _permission_changed(AuditAction.PERMISSION_ROLES_CHANGED, "group", instance.pk, details)


@receiver(m2m_changed, sender=User.user_permissions.through)
@receiver(m2m_changed, sender=Group.permissions.through)
def on_permissions_changed(sender: Any, instance: Any, action: str, pk_set: set[int] | None, **kwargs: Any) -> None:
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    codenames = sorted(Permission.objects.filter(pk__in=pk_set or []).values_list("codename", flat=True))
    holder = instance.get_username() if isinstance(instance, User) else getattr(instance, "name", str(instance))
    details = {"holder": holder, "change": action.removeprefix("post_"), "permissions": codenames}
    _permission_changed(
        AuditAction.PERMISSION_GRANTS_CHANGED, "user" if isinstance(instance, User) else "group", instance.pk, details
    )


@receiver(post_save, sender=GraphAssignment)
@receiver(post_delete, sender=GraphAssignment)
def on_assignment_changed(sender: Any, instance: GraphAssignment, **kwargs: Any) -> None:
    change = "removed" if kwargs.get("signal") is post_delete else "added"
    details = {"user_id": instance.user_id, "graph": instance.graph, "gate": instance.gate, "change": change}
    _permission_changed(AuditAction.PERMISSION_ASSIGNMENT_CHANGED, "user", instance.user_id, details)
